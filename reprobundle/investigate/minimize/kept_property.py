"""Which property minimize keeps, and what it says when the whole bundle does not show it.

Named on the command line, it is kept as named. Not named, where the two contenders are the last good and first bad
release of the bundle's latest stored bisection, it is that bisection's criterion (stored_property): a change in the
last bits is kept as bits (the tolerance's outputs would not show it), an error as error, time as slower; a change
the bisection found in JAX's lowering alone is said at once, since the frozen module minimize reduces does not hold
it. Otherwise minimize.choose_property runs the whole bundle and takes the first it shows (error, outputs, slower).

A property the whole bundle does not show is one error (PropertyNotShown): where the bundle can be retraced and
the contenders are two releases, it says whether JAX's lowering changed between them (lowering_change), unless the
stored bisection already found the lowering the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ...bundle.registry import Bundle, Registry
from ...errors import UsageError
from ...logs import Status
from ...run.contenders import FROZEN, ContenderSpec
from ...run.replay import replay
from ...run.replay_options import ReplayOptions
from ..answers import latest_bisection
from ..search.bisection import BITS as BY_BITS
from ..search.bisection import ERROR as BY_ERROR
from ..search.bisection import TIME as BY_TIME

if TYPE_CHECKING:
    from ...envs.manager import EnvironmentManager

OUTPUTS = "outputs"
ERROR = "error"
SLOWER = "slower"
PROPERTIES = (OUTPUTS, ERROR, SLOWER)


class PropertyNotShown(UsageError):
    """The whole bundle does not have the property between the two contenders: nothing to reduce."""


@dataclass(frozen=True)
class Stated:
    """The property the bundle's latest stored bisection calls for between the two contenders (its last good and
    first bad release): its criterion, where the layer at its boundary is the compiler's (the frozen module holds
    the change)."""

    prop: str
    bits: bool
    layer: str | None  # the layer at the bisection's boundary: compiler, both, neither, or None (undecided)
    why: str


def stored_property(registry: Registry, bundle: Bundle, specs: Sequence[ContenderSpec]) -> Stated | None:
    """What the bundle's latest stored bisection says minimize should keep between `specs`, when they are its last
    good then its first bad release, plain (no settings): bits -> outputs in any bit, error -> error, time ->
    slower, else outputs beyond the tolerance. PropertyNotShown when the bisection found the change in JAX's
    lowering alone (no property of the frozen module minimize reduces). None without such an answer."""
    found = _answer_of(registry, bundle, specs)
    if found is None:
        return None
    answer = found["answer"]
    criterion = str(answer.get("criterion") or "")
    layer_record: dict = answer["layer"] if isinstance(answer.get("layer"), dict) else {}
    layer = layer_record.get("layer")
    good, bad = specs[0].jax, specs[1].jax
    said = f"the stored bisection ({found.get('answer_id')}) found {criterion or 'a change'} from {good} to {bad}"
    if layer == "lowering":
        lowering = next((str(s.get("command")) for s in layer_record.get("next") or []
                         if isinstance(s, dict) and s.get("what") == "lowering diff"), None)
        raise PropertyNotShown(f"{said} in JAX's lowering (the frozen module does not show it): it is no property "
                               "of the frozen module minimize reduces",
                               hint=f"the lowering diff names the ops and their source lines: "
                                    f"{lowering or 'reprobundle replay ... --retrace'}")
    prop = {BY_BITS: OUTPUTS, BY_ERROR: ERROR, BY_TIME: SLOWER}.get(criterion, OUTPUTS)
    where = f"the layer at its boundary: {layer}" if layer else "the layer at its boundary undecided"
    return Stated(prop, criterion == BY_BITS, layer, f"{said} ({where})")


def told_property(prop: str | None, bits: bool, registry: Registry, bundle: Bundle,
                  specs: Sequence[ContenderSpec]) -> tuple[str | None, bool, Stated | None]:
    """(property, bits, what the stored bisection stated): the named property as named; not named, the stored
    bisection's where it speaks of these contenders (stored_property); else (None, bits, None): chosen later."""
    stated = stored_property(registry, bundle, specs) if prop is None else None
    return (stated.prop, stated.bits or bits, stated) if stated is not None else (prop, bits, None)


def whole_not_shown(error: PropertyNotShown, stated: Stated | None, registry: Registry, bundle: Bundle,
                    specs: tuple[ContenderSpec, ContenderSpec], env_manager: EnvironmentManager | None,
                    progress: Callable[[str], None] | None) -> PropertyNotShown:
    """The error for a whole bundle without the property: contradicted where the stored bisection found the change
    in the compiler (its lowering known the same), else lowering_change (which may retrace the program)."""
    if stated is not None and stated.layer in ("compiler", "both"):
        return contradicted(error, stated, bundle, specs)
    return lowering_change(error, registry, bundle, specs, env_manager, progress)


def _answer_of(registry: Registry, bundle: Bundle, specs: Sequence[ContenderSpec]) -> dict | None:
    """The bundle's latest stored bisection where `specs` are its last good then first bad release, plain."""
    found = latest_bisection(registry.answers(bundle.ref.bundle_id)) or {}
    answer = found.get("answer")
    if not isinstance(answer, dict) or any(s.settings or s.mode != FROZEN for s in specs) or \
            [s.jax for s in specs] != [answer.get("last_good"), answer.get("first_bad")]:
        return None
    return found


def contradicted(error: PropertyNotShown, stated: Stated, bundle: Bundle,
                 specs: Sequence[ContenderSpec]) -> PropertyNotShown:
    """`error`, saying that the stored bisection saw the change (the lowering known the same: no retrace)."""
    versions = " ".join(f"--jax {spec.jax}" for spec in specs)
    return PropertyNotShown(f"{error.message}, though {stated.why}", hint=(
        f"a replay of both shows whether the change shows again: reprobundle replay {bundle.ref} {versions}; or "
        "name another property (--outputs, --bits, --error, --slower)"))


def not_shown(prop: Any, judged: Any, ref: str, specs: tuple[ContenderSpec, ContenderSpec],
              bundle: Bundle) -> PropertyNotShown:
    """The error for a property the whole bundle does not have; where the bundle can be retraced and the contenders
    are releases, the hint says the change may be in JAX's lowering and gives the command that shows it."""
    from ...run.retrace import retrace_refusal

    what = {OUTPUTS: "B's outputs do not differ from A's" + (" in any bit" if prop.bits else
                                                             " beyond the tolerance a replay uses"),
            ERROR: "B does not fail where A runs it", SLOWER: "B is not slower than A by a settled verdict"}[prop.name]
    detail = judged.detail
    if detail.get("a_error"):
        what = f"A fails on it ({detail['a_error']})"
    elif detail.get("b_error"):
        what = f"B fails on it ({detail['b_error']}): try --error"
    elif prop.name == SLOWER and detail.get("verdict"):
        v = detail["verdict"]
        what += f" (verdict {v.get('verdict')}, ratio {v.get('ratio', 0):.3f}x{'' if v.get('settled') else ', not settled'})"
    versions = " ".join(f"--jax {s.jax}" for s in specs)
    if retrace_refusal(bundle.manifest) is None:
        hint = (f"the frozen module is what minimize reduces; if the difference comes from JAX's lowering (the "
                f"program retraced by each release), it is not in this module: reprobundle replay {ref} {versions} "
                "--mode both shows the lowering diff with its source lines")
    else:
        hint = "check the contenders, or name another property (--outputs, --error, --slower)"
    return PropertyNotShown(f"the whole bundle does not have the property {prop.name}: {what}", hint=hint)


def lowering_change(error: PropertyNotShown, registry: Registry, bundle: Bundle,
                    specs: tuple[ContenderSpec, ContenderSpec], env_manager: EnvironmentManager | None,
                    progress: Callable[[str], None] | None) -> PropertyNotShown:
    """`error`, or where the bundle can be retraced and the contenders are two releases, what a retraced replay of
    both (one round, not stored) shows: when JAX's lowering changed, the difference is not in the frozen module,
    and the error says so, with the lowering diff and the command that shows it."""
    from ...analysis.lowering_diff import lowering_diff
    from ...run.contenders import RETRACE
    from ...run.retrace import program_file_names, retrace_refusal

    a_spec, b_spec = specs
    if retrace_refusal(bundle.manifest) is not None or a_spec.jax == b_spec.jax:
        return error
    if progress is not None:
        progress(Status("the frozen module does not show it: retracing the program on both releases", "minimize"))
    retraced = [ContenderSpec(s.jax, RETRACE, s.settings) for s in specs]
    try:
        runs = replay(registry, bundle, retraced, ReplayOptions(warmup=1, repeat=2, rounds=1, dump=False,
                                                                profile=False), env_manager=env_manager,
                      store_runs=False)
    except UsageError:
        return error
    texts = [(r.get("artifacts") or {}).get("stablehlo_retraced") or {} for r in runs]
    if not all(t.get("blob") for t in texts):
        return error
    before, after = (registry.get_blob(t["blob"]).decode("utf-8", "replace") for t in texts)
    diff = lowering_diff(before, after, program_file_names(bundle.manifest))
    if not diff["changed"]:
        return error
    versions = " ".join(f"--jax {s.jax}" for s in specs)
    return PropertyNotShown(
        f"{error.message}; but JAX's lowering of the program changed between {a_spec.jax} and {b_spec.jax} "
        f"({diff['text']}): the change is in the lowering, not in the frozen module minimize reduces",
        hint=f"the lowering diff names the ops and their source lines: reprobundle replay {bundle.ref} {versions} "
             "--mode both")
