"""The comparison of a bundle's stored runs, with what it needs loaded from the registry: the optimized HLO of each
run, the outputs, and the StableHLO a retraced run compiled. Behind every replay report, `compare` and a sweep's
summaries (analysis/comparison.build_comparison does the comparing; this module only loads)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..bundle.model import run_label
from ..bundle.registry import Bundle, Registry
from .retrace import program_file_names


def stablehlo_texts(registry: Registry, bundle: Bundle, runs: Sequence[dict]) -> dict[str, str]:
    """The StableHLO each run compiled, by label: the bundle's for the reference and frozen runs, a retraced run's
    own (its `stablehlo_retraced` artifact); loaded only when some run retraced."""
    from ..analysis.comparison import REFERENCE

    retraced = {run_label(r): r["artifacts"]["stablehlo_retraced"] for r in runs
                if "stablehlo_retraced" in (r.get("artifacts") or {})}
    packed = bundle.manifest["function"].get("stablehlo_text")
    if not retraced or not packed:
        return {}
    text = registry.get_blob(packed).decode("utf-8", "replace")
    texts = {REFERENCE: text, **{run_label(r): text for r in runs}}
    texts.update({label: registry.get_blob(art["blob"]).decode("utf-8", "replace") for label, art in retraced.items()})
    return texts



def compare_runs(registry: Registry, bundle: Bundle, runs: Sequence[dict], baseline: str | None = None) -> dict:
    """The multi-version comparison of stored `runs` (analysis/comparison.build_comparison) with the optimized HLO
    and outputs it needs loaded from the registry. Raises ValueError for a baseline none of the runs requested."""
    from ..analysis.comparison import REFERENCE, build_comparison
    from .replay import leaf_array, reference_arrays

    def hlo_text(artifacts: dict) -> str | None:
        art = artifacts.get("hlo_after")
        return registry.get_blob(art["blob"]).decode("utf-8", "replace") if art else None

    def arrays(leaves: list[dict]) -> list[np.ndarray]:
        return [leaf_array(registry.get_blob(leaf["blob"]), leaf) for leaf in leaves]

    hlo_texts: dict[str, Any] = {REFERENCE: hlo_text(bundle.manifest["artifacts"])}
    outputs = {REFERENCE: reference_arrays(registry, bundle)}
    for run in runs:
        hlo_texts[run_label(run)] = hlo_text(run["artifacts"])
        outputs[run_label(run)] = arrays(run["outputs"])
    texts = stablehlo_texts(registry, bundle, runs)
    return build_comparison(bundle.manifest, list(runs), baseline, hlo_texts=hlo_texts, outputs=outputs,
                            stablehlo_texts=texts, program_files=program_file_names(bundle.manifest))




def comparison_of(registry: Registry, bundle: Bundle, runs: Sequence[dict], baseline: str | None = None, *,
                  origin: tuple[Registry, Bundle] | None = None, replay_args: Sequence[str] = (),
                  reproduce: bool = True) -> dict:
    """The multi-version comparison of `runs` (see comparison.build_comparison), loading their HLO and outputs;
    with `reproduce`, its "reproduce" block (bundle/sharing.reproduce_info) names the bundle where `origin`
    (registry, bundle; default: these) holds it."""
    from ..errors import UsageError
    from .contenders import concrete_versions, mode_of, variant_args

    try:
        comparison = compare_runs(registry, bundle, runs, baseline)
    except ValueError as e:
        raise UsageError(str(e), hint="--baseline names one of the replayed versions, or 'reference'") from None
    if reproduce:
        from ..bundle.sharing import reproduce_info

        source, there = origin or (registry, bundle)
        mode = mode_of(runs)
        extra = [*variant_args(runs, concrete_versions), *replay_args] + (["--mode", mode] if mode != "frozen" else [])
        comparison["reproduce"] = reproduce_info(source, there, concrete_versions(runs), extra_args=extra)
    return comparison


def pair_side(registry: Registry, bundle: Bundle):
    """One side of `compare A B`: the bundle's ref, manifest, StableHLO text, stored runs and program files."""
    from ..analysis.bundle_pair import Side

    digest = (bundle.manifest.get("function") or {}).get("stablehlo_text")
    text = registry.get_blob(digest).decode("utf-8", "replace") if digest else None
    return Side(str(bundle.ref), bundle.manifest, text, registry.runs(bundle.ref.bundle_id),
                program_file_names(bundle.manifest))
