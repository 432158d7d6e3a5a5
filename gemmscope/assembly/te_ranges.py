"""The grammar of the NVTX ranges Transformer Engine and gemmscope's hook push, in one place.

`classify` reads each distinct range name once and says what it is; a name that starts with none
of the forms' prefixes (PREFIXES: a profiler's operator ranges, the program's own) is told apart
without being parsed. The forms, from TE 2.x's source (transformer_engine/pytorch/module/*.py,
module/base.py, attention/, common/):

- ``transformer_engine.<_Fn>.<forward|backward>[.<name>].<step>``, pushed by _Linear and
  _LayerNormLinear with ``NVTE_NVTX_ENABLED=1``. ``<name>`` is the module's userbuffers name
  (TransformerLayer sets qkv/proj/fc1/fc2 even without userbuffers); ``<step>`` is a GEMM (`gemm`,
  `dgrad_gemm`, `wgrad_gemm`) or another step of the pass (STEPS).
- ``<Class> forward`` (module/base.py, every TE module's forward), ``_<Class>_backward`` and
  ``_<Class>_wgrad`` (module-level only: the only ranges LayerNormMLP and GroupedLinear push).
- ``transformer_engine.<AttnFn>.<forward|backward>`` and ``<AttnFn>.backward``: attention.
- ``nvte_<api>``: TE's C library, around every API call whatever NVTE_NVTX_ENABLED says
  (common/common.h NVTE_API_CALL); the GEMM ones (C_GEMM_CALLS) say a GEMM was launched by TE.
- gemmscope's own hook records (autocast_hook/gemmscope_protocol.py): of TE GEMM calls and of
  GEMMs PyTorch runs outside TE (`torch_gemm`).
te.ops fusible operations push no ranges of their own: only the hook's record names them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from gemmscope.autocast_hook.gemmscope_protocol import (
    AUTOCAST_PREFIX,
    BACKWARD_OVERRIDE,
    EMULATED,
    EVALUATION_PHASE,
    FIELD_SEPARATOR,
    GEMM_PREFIX,
    MEMBERS_FIELD,
    OVERRIDE_FROM,
    PROCESS_PREFIX,
    SOFTWARE_PREFIX,
    TORCH_GEMM_PREFIX,
    UNKNOWN,
    UNPATCHED_PREFIX,
    parse_record,
)
from gemmscope.traces.model import Trace, object_column, starting_with

# Every record gemmscope's hook leaves.
HOOK_PREFIXES = (AUTOCAST_PREFIX, GEMM_PREFIX, PROCESS_PREFIX, SOFTWARE_PREFIX, UNPATCHED_PREFIX)

# Kinds of range, from the most to the least specific about a GEMM.
HOOK_GEMM = "hook-gemm"  # gemmscope's record of one TE GEMM call
TORCH_GEMM = "torch-gemm"  # gemmscope's record of a GEMM outside TE (or of a backward node around some)
RECORD_KINDS = (HOOK_GEMM, TORCH_GEMM)  # what gemmscope's hook says a GEMM was asked
TE_GEMM = "te-gemm"  # TE's range around one GEMM of _Linear / _LayerNormLinear
TE_STEP = "te-step"  # another step of a TE pass (cast, norm, communication, ...)
TE_MODULE = "te-module"  # a TE module's whole forward, backward or wgrad
TE_ATTENTION = "te-attention"
TE_C_GEMM = "te-c-gemm"  # TE's C library launching a GEMM
TE_C_API = "te-c-api"  # any other TE C library call (quantize, norm, ...)
AUTOCAST = "autocast"
PROCESS = "process"

# TE's per-GEMM range suffixes and the pass each is (module/linear.py, layernorm_linear.py).
GEMM_STEPS = {"gemm": "fprop", "dgrad_gemm": "dgrad", "wgrad_gemm": "wgrad"}
# The other steps those modules push (same files): quantization, norm, communication, FSDP.
STEPS = frozenset({
    "input_cast_comm", "norm_input_cast", "norm", "gemm_input_cast_comm", "row_parallel_comm",
    "fsdp_scatter", "fsdp_gather", "grad_output_preprocess", "column_parallel_comm_input",
    "column_parallel_comm_dgrad", "reduce_and_update_fp8_tensors",
})
# TE modules whose forward goes through TransformerEngineBaseModule (module/base.py).
TE_MODULE_CLASSES = ("Linear", "LayerNormLinear", "LayerNormMLP", "GroupedLinear")
# TE's C API calls that launch GEMMs (common/gemm/*.cpp, comm_gemm/*.cpp, NVTE_API_CALL).
C_GEMM_CALLS = frozenset({
    "nvte_cublas_gemm", "nvte_cublas_gemm_v2", "nvte_cublas_atomic_gemm",
    "nvte_multi_stream_cublas_gemm", "nvte_multi_tensor_gemm", "nvte_grouped_gemm",
    "nvte_grouped_gemm_with_discrete_out", "nvte_all_gather_gemm", "nvte_gemm_reduce_scatter",
    "nvte_gemm_all_reduce",
})

# Every form above starts with one of these: a name that starts with none is none of TE's or ours.
PREFIXES = ("gemmscope.", "transformer_engine.", "nvte_", "FusedAttnFunc", "AttnFuncWithCP",
            *(f"{cls} forward" for cls in TE_MODULE_CLASSES), *(f"_{cls}_" for cls in TE_MODULE_CLASSES))

_CLASSES = "|".join(TE_MODULE_CLASSES)
_TE_PASS_RANGE = re.compile(r"^transformer_engine\.(?P<fn>_\w+)\.(?P<direction>forward|backward)\.(?P<rest>.+)$")
_TE_MODULE_RANGE = re.compile(
    rf"^(?:(?P<fwd>{_CLASSES}) forward|_(?P<bwd>{_CLASSES})_backward|_(?P<wgrad>{_CLASSES})_wgrad)$")
_TE_ATTENTION_RANGE = re.compile(
    r"^(?:transformer_engine\.)?(?P<fn>(?:FusedAttnFunc|AttnFuncWithCP\w*))\.(?P<direction>forward|backward)$")
_AUTOCAST_RANGE = re.compile(r"^" + re.escape(AUTOCAST_PREFIX) + r"(?P<cls>\w+)(?P<fields>(?:\|\w+=[^|]*){0,8})\)$")

# Operand types the hook records -> the kernel precision (kernels.PRECISIONS) that runs them.
PRECISION_OF_OPERAND = {
    "bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8-delayed": "fp8", "fp8-current": "fp8",
    "fp8": "fp8", "fp8-block": "fp8-block", "mxfp8": "mxfp8", "nvfp4": "nvfp4",
}
# What a torch._scaled_mm asked of float8 operands by its scaling (gemmscope_protocol.SCALINGS):
# the precision as `kernels` names it. A row-wise request torchao runs as a tensor-wise GEMM and a
# rescale is still a row-wise request (verify judges the tensor-wise kernel it runs).
PRECISION_OF_FP8_SCALING = {"tensorwise": "fp8", "rowwise": "fp8-rowwise", "rowwise-rescaled": "fp8-rowwise",
                            "blockwise": "fp8-block", "mx": "mxfp8"}
PRECISION_OF_FP4_SCALING = {"mx": "mxfp4"}

COLUMNS = ("kind", "module", "name", "layer", "pass", "direction", "step", "operand_a", "operand_b",
           "requested", "scale", "m", "n", "k", "flops", "members", "recipe_class", "rank")
_INTEGER_COLUMNS = ("m", "n", "k", "flops", "rank")


def _integer(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def requested_precision(a: str | None, b: str | None) -> str | None:
    """The precision TE was asked to run a GEMM at, from its two operands' types: the one both
    share, or "a×b" when they differ (TE does not run such a mix natively)."""
    if a is None or b is None:
        return None
    pa, pb = PRECISION_OF_OPERAND.get(a, a), PRECISION_OF_OPERAND.get(b, b)
    return pa if pa == pb else f"{pa}×{pb}"


def scaled_precision(a: str | None, b: str | None, scale: str | None) -> str | None:
    """What a torch GEMM asked: its operands' shared type, refined for float8 / float4 operands
    by how _scaled_mm was asked to scale them."""
    requested = requested_precision(a, b)
    if requested == "fp8" and scale is not None:  # an emulated GEMM asked what it stands for
        return PRECISION_OF_FP8_SCALING.get(scale.removeprefix(EMULATED), requested)
    if requested == "fp4":
        return PRECISION_OF_FP4_SCALING.get(scale or "", "nvfp4")
    return requested


def _module_label(cls: str) -> str:
    """TE's own convention for module labels (its ranges name the autograd function `_Linear`)."""
    return cls if cls.startswith("_") or cls == UNKNOWN else "_" + cls


def parse(label: str) -> dict:
    """What one range name says (keys of COLUMNS; `kind` None when it is none of TE's or ours)."""
    out: dict = dict.fromkeys(COLUMNS)
    if (record := parse_record(GEMM_PREFIX, label)) is not None:
        a, b = record.get("a"), record.get("b")
        out.update(kind=HOOK_GEMM, module=_module_label(record.get("module", UNKNOWN)),
                   name=record.get("name") or None, layer=record.get("layer") or None,
                   operand_a=a, operand_b=b, requested=requested_precision(a, b),
                   members=record.get(MEMBERS_FIELD) or None,  # as written: parse_members reads it
                   **{key: _integer(record.get(key)) for key in ("m", "n", "k", "flops")})
        out["pass"] = None if record.get("pass", UNKNOWN) == UNKNOWN else record["pass"]
        if out["module"] == UNKNOWN:  # a GEMM handed to TE from a module of the program's own
            owner = record.get("owner", UNKNOWN)
            out["module"] = None if owner == UNKNOWN else owner
        return out
    if (record := parse_record(TORCH_GEMM_PREFIX, label)) is not None:
        a, b, scale = record.get("a"), record.get("b"), record.get("scale")
        module = record.get("module", UNKNOWN)
        out.update(kind=TORCH_GEMM, module=None if module == UNKNOWN else module, layer=record.get("layer") or None, operand_a=a, operand_b=b, scale=scale,
                   requested=scaled_precision(a, b, scale),
                   **{key: _integer(record.get(key)) for key in ("m", "n", "k", "flops")})
        out["pass"] = None if record.get("pass", UNKNOWN) == UNKNOWN else record["pass"]
        return out
    if (record := parse_record(PROCESS_PREFIX, label)) is not None:
        out.update(kind=PROCESS, rank=_integer(record.get("rank")))
        return out
    if m := _AUTOCAST_RANGE.match(label):
        out.update(kind=AUTOCAST, recipe_class=m["cls"])
        return out
    if m := _TE_PASS_RANGE.match(label):
        *name, step = m["rest"].split(".")
        if step in GEMM_STEPS or step in STEPS:
            out.update(kind=TE_GEMM if step in GEMM_STEPS else TE_STEP, module=m["fn"],
                       name=".".join(name) or None, direction=m["direction"], step=step)
            out["pass"] = GEMM_STEPS.get(step)
            return out
    if m := _TE_MODULE_RANGE.match(label):
        cls = m["fwd"] or m["bwd"] or m["wgrad"]
        direction = "forward" if m["fwd"] else "backward"
        out.update(kind=TE_MODULE, module=_module_label(cls), direction=direction,
                   step="wgrad" if m["wgrad"] else None)
        return out
    if m := _TE_ATTENTION_RANGE.match(label):
        out.update(kind=TE_ATTENTION, module=m["fn"], direction=m["direction"])
        return out
    if label.startswith("nvte_"):
        out.update(kind=TE_C_GEMM if label in C_GEMM_CALLS else TE_C_API, step=label)
    return out


def classify(names: pd.Series) -> pd.DataFrame:
    """`parse` of every name, index aligned with `names`; each distinct name is parsed once."""
    distinct = pd.unique(names.dropna())
    table = parse_distinct(distinct).set_axis(distinct)
    return table.reindex(names.to_numpy()).set_index(names.index)


def parse_distinct(names: np.ndarray) -> pd.DataFrame:
    """`parse` of each of `names` (distinct; None for a range without one), a row per name in
    their order (RangeIndex). Only names that start with one of PREFIXES are parsed: a trace of
    torch's emit_nvtx holds a range name per operator call, none of them TE's."""
    ours = starting_with(names, PREFIXES)
    parsed = [parse(names[i]) for i in ours]
    index = pd.RangeIndex(len(names))
    columns: dict = {}
    for column in COLUMNS:
        found = [row[column] for row in parsed]
        if column in _INTEGER_COLUMNS:  # made from the parsed names alone: the others are NA
            known = np.array([value is not None for value in found], dtype=bool)
            numbers, missing = np.zeros(len(names), dtype="int64"), np.ones(len(names), dtype=bool)
            numbers[ours[known]] = [value for value in found if value is not None]
            missing[ours[known]] = False
            columns[column] = pd.arrays.IntegerArray(numbers, missing)
            continue
        values = np.full(len(names), None, dtype=object)
        values[ours] = found
        # text stays Python objects: pandas would check every one of a long trace's names to make them its string type
        columns[column] = object_column(values, index)
    return pd.DataFrame(columns, index=index, copy=False)


def recorded_software(names: Iterable[str]) -> dict[str, str | None] | None:
    """The software versions gemmscope's hook recorded among these NVTX names (a trace's
    range_names: torch, cuda, transformer_engine, cublaslt; None for one it could not read), or
    None without its record. A trace of several processes records them once per process; the
    first is said."""
    mark = next((name for name in names if name.startswith(SOFTWARE_PREFIX)), None)
    if mark is None:
        return None
    record = parse_record(SOFTWARE_PREFIX, mark)
    assert record is not None  # the mark starts with its prefix
    return {key: None if value == UNKNOWN else value for key, value in record.items()}


# What an unpatched record says (gemmscope_protocol: UNPATCHED_PREFIX), in the order reports say it.
UNPATCHED_FIELDS = ("what", "version", "why", "misses")


def recorded_unpatched(names: Iterable[str]) -> list[dict[str, str | None]]:
    """The entry points gemmscope's hook could not patch, as it marked them among these NVTX names
    (what, version, why, misses; None for a field a mark lacks): each once, however many processes
    or marks say it, in the order met."""
    found: dict = {}
    for name in names:
        record = parse_record(UNPATCHED_PREFIX, name)
        if record is not None:
            found.setdefault(record.get("what"), {key: record.get(key) for key in UNPATCHED_FIELDS})
    return list(found.values())


def _autocast_fields(name: str) -> dict[str, str]:
    """The fields after the recipe of a te.autocast range the hook wrote (none for any other name)."""
    m = _AUTOCAST_RANGE.match(name)
    if not m or not m["fields"]:
        return {}
    return dict(field.partition("=")[::2] for field in m["fields"].split(FIELD_SEPARATOR)[1:])


def recorded_backward_overrides(names: Iterable[str]) -> list[str]:
    """The backward_override of every te.autocast region's recipe the hook recorded among these
    NVTX names, as the run said it ("backward_override=high_precision (NVTE_BACKWARD_OVERRIDE)"
    where that variable set it), each once, in the order met: the backward GEMMs of such a recipe
    run on high-precision or dequantized operands, as asked."""
    found: dict[str, None] = {}
    for fields in map(_autocast_fields, names):
        if BACKWARD_OVERRIDE in fields:
            source = fields.get(OVERRIDE_FROM)
            found[f"{BACKWARD_OVERRIDE}={fields[BACKWARD_OVERRIDE]}" + (f" ({source})" if source else "")] = None
    return list(found)


def recorded_module_recipes(names: Iterable[str]) -> dict[str, str]:
    """Per layer path, the per-module recipe that asked its GEMMs' precision (Megatron-Core's
    quant_recipe, gemmscope_protocol.MODULE_RECIPE_FIELDS), as reports say it: 'quant_recipe
    config "bf16" (matcher "*linear_proj*")', its evaluation recipe said apart; a layer whose
    regions said several, all of them."""
    found: dict[str, dict[str, None]] = {}
    for fields in map(_autocast_fields, names):
        if fields.get("quant_config") and fields.get("layer"):
            why = f'quant_recipe config "{fields["quant_config"]}"'
            if fields.get("matcher"):
                why += f' (matcher "{fields["matcher"]}")'
            if fields.get("phase") == EVALUATION_PHASE:
                why += ", its evaluation recipe"
            found.setdefault(fields["layer"], {})[why] = None
    return {layer: "; ".join(whys) for layer, whys in found.items()}


def backward_overrides_in(traces: Iterable[Trace]) -> list[str]:
    """recorded_backward_overrides over every trace of a run."""
    return recorded_backward_overrides(name for trace in traces for name in trace.range_names_starting(AUTOCAST_PREFIX))


def module_recipes_in(traces: Iterable[Trace]) -> dict[str, str]:
    """recorded_module_recipes over every trace of a run."""
    return recorded_module_recipes(name for trace in traces for name in trace.range_names_starting(AUTOCAST_PREFIX))


def unpatched_in(traces: Iterable[Trace]) -> list[dict[str, str | None]]:
    """recorded_unpatched over every trace of a run: what the hook could not patch in any of its processes."""
    return recorded_unpatched(name for trace in traces for name in trace.range_names_starting(UNPATCHED_PREFIX))
