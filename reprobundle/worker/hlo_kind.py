"""The kind of an HLO instruction: the one definition behind the worker's per-op table and the host's HLO analysis.

The worker names each profiled instruction by kind (``trace.parse_hlo_instructions``); the host's analysis
(``reprobundle.analysis.hlo_parse``) labels the same instructions to match fusions across versions, and imports
this module as ``reprobundle.worker.hlo_kind``. Standard library only, Python 3.9 syntax: it runs in every replay
environment.

Vocabulary:
  op key            the opcode; a custom call with its target: ``custom-call(__onednn$matmul)``
  fusion kind       ``kLoop``, ``kInput``, ``kOutput``, ``kCustom``...; a kCustom fusion carries its backend kind:
                    ``kCustom:__ynn_fusion`` (CPU ``"fusion_config"``), ``kCustom:__triton_gemm`` (GPU
                    ``"fusion_backend_config"``)
  instruction kind  what a per-op row's "kind" holds: the op key, or for a fusion ``fusion(<fusion kind>)``
                    (``fusion(kLoop)``, ``fusion(kCustom:__ynn_fusion)``; ``fusion(?)`` without a kind), and for an
                    async fusion ``fusion-start(<fusion kind>)``
"""
from __future__ import annotations

import re

# Opcodes of fusion instructions: a fusion, and an async fusion's start (whose `calls` is the fused computation).
FUSION_OPCODES = ("fusion", "fusion-start")

# The backend kind inside a kCustom fusion's backend_config: CPU `"fusion_config":{"kind":"__ynn_fusion"}`, GPU
# `"fusion_backend_config":{"kind":"__triton_gemm",...}`.
_CUSTOM_KIND = re.compile(r'"fusion_(?:backend_)?config"\s*:\s*\{[^{}]*?"kind"\s*:\s*"([^"]+)"')


def fusion_kind(kind, backend_config=""):
    """The fusion kind from the `kind=` attribute and the text of `backend_config=` ("" when there is no kind).

    `backend_config` may be any text that holds the backend config, e.g. the whole instruction line."""
    kind = kind or ""
    if kind == "kCustom":
        custom = _CUSTOM_KIND.search(backend_config or "")
        if custom:
            return "%s:%s" % (kind, custom.group(1))
    return kind


def op_key(opcode, custom_call_target=""):
    """The opcode, with the target for custom calls: `custom-call(__onednn$matmul)`. The target may be quoted."""
    target = (custom_call_target or "").strip('"')
    if opcode == "custom-call" and target:
        return "custom-call(%s)" % target
    return opcode


def instruction_kind(opcode, kind="", backend_config="", custom_call_target=""):
    """The kind of one instruction, as per-op rows carry it: `dot`, `custom-call(target)`, `fusion(kLoop)`."""
    if opcode in FUSION_OPCODES:
        return "%s(%s)" % (opcode, fusion_kind(kind, backend_config) or "?")
    return op_key(opcode, custom_call_target)
