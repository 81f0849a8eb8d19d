"""An Exported rebuilt from its fields (``describe.exported_fields``) and a StableHLO portable artifact: the worker's
rebuild and stablehlo-text routes, and the host's wrapping of a raw StableHLO module."""
from __future__ import annotations

from .describe import shape_builder
from .dtypes import np_dtype
from .environment import lowering_platform
from .protocol import exc_msg


class RebuildError(ValueError):
    """The fields cannot make an Exported on this jax; the message says which field and why."""


def rebuild_exported(export_module, fields, module_bytes):
    """``(Exported, notes)`` for ``fields`` and the portable artifact ``module_bytes``, on this jax.

    ``export_module`` is ``jax._src.export._export`` (the worker imports it with its absl stand-in). ``fields``
    needs ``in_avals`` and ``out_avals``; any other field left out is what an unsharded, effect-free function has,
    lowered for this process's default backend at this jax's newest calling convention. The pytrees are flat:
    ``(args, {})`` in, a tuple out. ``notes`` say what was adjusted for this jax (shardings dropped on one device,
    calling convention 10 read as 9). RebuildError: what cannot be rebuilt without the serialized Exported.
    """
    import jax
    from jax._src import core

    in_avals, out_avals = _avals(core, fields)
    nr_devices = int(fields.get("nr_devices", 1))
    notes = _unsharded_notes(fields, nr_devices)
    unsharded_in, unsharded_out = (None,) * len(in_avals), (None,) * len(out_avals)
    convention, note = _calling_convention(
        export_module, int(fields.get("calling_convention_version",
                                      export_module.maximum_supported_calling_convention_version)))
    if note:
        notes.append(note)
    values = {
        "fun_name": str(fields.get("fun_name", "fun")),
        "in_tree": jax.tree_util.tree_structure((tuple(range(len(in_avals))), {})),
        "in_avals": in_avals,
        "out_tree": jax.tree_util.tree_structure(tuple(range(len(out_avals)))),
        "out_avals": out_avals,
        "_has_named_shardings": True,  # as jax.export records an unsharded function: every named sharding None
        "_in_named_shardings": unsharded_in,
        "_out_named_shardings": unsharded_out,
        "in_shardings_hlo": unsharded_in,
        "out_shardings_hlo": unsharded_out,
        "nr_devices": nr_devices,
        "platforms": tuple(str(p).lower() for p in (fields.get("platforms") or [lowering_platform()])),
        "ordered_effects": (),
        "unordered_effects": (),
        "disabled_safety_checks": tuple(_safety_check(export_module, c)
                                        for c in fields.get("disabled_safety_checks") or []),
        "mlir_module_serialized": bytes(module_bytes),
        "calling_convention_version": convention,
        "module_kept_var_idx": tuple(int(i) for i in fields.get("module_kept_var_idx", range(len(in_avals)))),
        "uses_global_constants": bool(fields.get("uses_global_constants", False)),
        "_get_vjp": None,
    }
    kwargs = _exported_kwargs(export_module, values)
    try:
        return export_module.Exported(**kwargs), notes
    except Exception as e:
        raise RebuildError("cannot construct Exported: %s" % exc_msg(e))


def _avals(core, fields):
    """(in_avals, out_avals) as ShapedArrays; RebuildError when the fields cannot make them."""
    try:
        shape_of = shape_builder(fields["in_avals"] + fields["out_avals"])
        in_avals = tuple(core.ShapedArray(shape_of(a["shape"]), np_dtype(a["dtype"])) for a in fields["in_avals"])
        out_avals = tuple(core.ShapedArray(shape_of(a["shape"]), np_dtype(a["dtype"])) for a in fields["out_avals"])
    except Exception as e:
        raise RebuildError("cannot build avals from fields: %s" % exc_msg(e))
    return in_avals, out_avals


def _unsharded_notes(fields, nr_devices):
    """The notes of a function rebuilt without effects and shardings; RebuildError when it has effects, or
    shardings over several devices, which only the serialized Exported holds."""
    notes = []
    for kind in ("ordered_effects", "unordered_effects"):
        if fields.get(kind):
            raise RebuildError("the function has %s %s, which cannot be reconstructed from text fields (needs the "
                               "deserialize route)" % (kind, fields[kind]))
    shardings = [s for s in list(fields.get("in_shardings_hlo") or []) + list(fields.get("out_shardings_hlo") or [])
                 if s is not None]
    if shardings:
        if nr_devices > 1:
            raise RebuildError("multi-device shardings %s cannot be rebuilt from text fields (needs the deserialize "
                               "route)" % shardings[:3])
        notes.append("ignored shardings %s (nr_devices=1, so they are trivial)" % sorted(set(shardings))[:3])
    return notes


def _exported_kwargs(export_module, values):
    """The keyword arguments of this jax's Exported from ``values``: its fields differ between jax releases."""
    import dataclasses

    import jax

    kwargs = {}
    for field in dataclasses.fields(export_module.Exported):
        if field.name in values:
            kwargs[field.name] = values[field.name]
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise RebuildError("jax %s's Exported has a field %r this worker cannot fill"
                               % (jax.__version__, field.name))
    return kwargs


def _safety_check(export_module, recorded):
    """A disabled safety check from its string in the fields (``describe.exported_fields``)."""
    text = str(recorded)
    if "custom_call:" in text:
        return export_module.DisabledSafetyCheck.custom_call(text.split("custom_call:", 1)[1].rstrip(")'\" "))
    if "shape_assertions" in text:
        return export_module.DisabledSafetyCheck.shape_assertions()
    if "platform" in text:
        return export_module.DisabledSafetyCheck.platform()
    raise RebuildError("unknown disabled safety check %r" % text)


def _calling_convention(export_module, version):
    """The calling convention this jax can take for ``version``, and a note when it is not ``version`` itself or
    is outside this jax's range."""
    low = export_module.minimum_supported_calling_convention_version
    high = export_module.maximum_supported_calling_convention_version
    if low <= version <= high:
        return version, None
    if version == 10 and high == 9:
        # Version 10 only adds propagation of jax_use_shardy_partitioner to tf.XlaCallModule; the module and the
        # JAX-native calling convention are those of version 9.
        return 9, ("calling_convention_version 10 is above this jax's supported range [%d..%d]; used 9 (10 "
                   "differs only by propagating use_shardy_partitioner to tf.XlaCallModule, the module calling "
                   "convention is the same)" % (low, high))
    return version, ("calling_convention_version %d is outside this jax's supported range [%d..%d]; kept it "
                     "unchanged (no known-sound adjustment)" % (version, low, high))
