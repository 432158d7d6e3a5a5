"""Transformer Engine's side of gemmscope's start-up hook (sitecustomize.py beside this file): each
te.autocast region with its recipe, and each GEMM call of TE's Python with the module that made it,
its pass, the operand types TE was handed and its shape, as a range on the launching thread."""

import inspect
import os
import sys
import threading

from gemmscope_megatron import module_recipe
from gemmscope_modules import await_backward_node, calling_module
from gemmscope_protocol import (
    BACKWARD_OVERRIDE,
    BACKWARD_OVERRIDE_ENV,
    GEMM_PREFIX,
    MEMBERS_FIELD,
    PASS_BY_LAYOUT,
    UNKNOWN,
    format_autocast,
    format_members,
    format_record,
)
from gemmscope_records import (
    argument,
    bound,
    mark_process,
    mark_software_once,
    patch,
    pop,
    push,
    recording,
    te_base_class,
    thread,
)

QUANTIZATION_MODULE = "transformer_engine.pytorch.quantization"
GEMM_MODULE = "transformer_engine.pytorch.cpp_extensions.gemm"
# Where te.autocast enters and leaves a region (the recipe is read at the enter).
AUTOCAST_ENTRY_POINTS = ("FP8GlobalStateManager.autocast_enter", "FP8GlobalStateManager.autocast_exit")
# TE's Python GEMM entry points (transformer_engine/pytorch/cpp_extensions/gemm.py); the grouped
# ones may call general_gemm per group, which then records nothing of its own.
_GEMM_ENTRY_POINTS = ("general_gemm", "general_grouped_gemm", "general_grouped_gemm_for_grouped_tensor")


def patch_quantization(quantization_module) -> None:
    import torch

    if not bound():  # torch's patches could not bind: no record can be written
        return

    def autocast_enter(original):
        def enter(cls, *args, **kwargs):
            original(cls, *args, **kwargs)
            recipe = cls.get_fp8_recipe() if cls.is_fp8_enabled() else None
            name = (te_base_class(type(recipe)) or type(recipe).__name__) if recipe is not None else "disabled"
            override = getattr(recipe, BACKWARD_OVERRIDE, None)
            push(torch, format_autocast(name, override, override is not None
                                        and os.environ.get(BACKWARD_OVERRIDE_ENV) == override,
                                        module_recipe(sys._getframe(1))))
            thread.autocast_regions = thread.__dict__.get("autocast_regions", 0) + 1
        return enter

    def autocast_exit(original):
        def exit_(cls, *args, **kwargs):
            # only a region whose enter pushed its range: either patch may have been skipped
            regions = thread.__dict__.get("autocast_regions", 0)
            if regions:
                thread.autocast_regions = regions - 1
                pop(torch)
            original(cls, *args, **kwargs)
        return exit_

    for path, wrap in zip(AUTOCAST_ENTRY_POINTS, (autocast_enter, autocast_exit)):
        patch(quantization_module, path, wrap, "te.autocast regions and their recipes")
    mark_process(torch)


# --- what TE was handed -----------------------------------------------------------------------

_BY_QUANTIZER = {
    "Float8Quantizer": "fp8-delayed",
    "Float8CurrentScalingQuantizer": "fp8-current",
    "Float8BlockQuantizer": "fp8-block",
    "MXFP8Quantizer": "mxfp8",
    "NVFP4Quantizer": "nvfp4",
}
_BY_STORAGE = {
    "Float8TensorStorage": "fp8",
    "Float8BlockwiseQTensorStorage": "fp8-block",
    "MXFP8TensorStorage": "mxfp8",
    "NVFP4TensorStorage": "nvfp4",
}
_BY_DTYPE = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


def operand_type(operand) -> str:
    """One of gemmscope_protocol.OPERAND_TYPES, or the class / dtype as found when TE hands over
    something else. A list (grouped GEMM) is typed by its first member."""
    if isinstance(operand, (list, tuple)):
        operand = operand[0] if operand else None
    if operand is None:
        return UNKNOWN
    quantizer = getattr(operand, "_quantizer", None) or getattr(operand, "quantizer", None)
    if quantizer is not None and type(quantizer).__name__ in _BY_QUANTIZER:
        return _BY_QUANTIZER[type(quantizer).__name__]
    for cls in type(operand).__mro__:
        if cls.__name__ in _BY_STORAGE:
            return _BY_STORAGE[cls.__name__]
    # an identity storage is dequantized to the dtype it holds
    dtype = str(getattr(operand, "_dtype" if type(operand).__name__ == _IDENTITY_TENSOR else "dtype", ""))
    return _BY_DTYPE.get(dtype, dtype or type(operand).__name__)


_DEBUG_TENSOR = "DebugQuantizedTensor"
# CustomRecipe's storages (TE 2.20): a hybrid holds one sub-storage per use (rowwise, columnwise),
# and an identity storage a high-precision tensor that general_gemm dequantizes to its dtype.
_HYBRID_TENSOR = "HybridQuantizedTensorStorage"
_IDENTITY_TENSOR = "IdentityTensorStorage"


def _used(operand, columnwise: bool):
    """The tensor general_gemm takes from `operand` for one use (cpp_extensions/gemm.py
    _unwrap_tensor): a debug wrapper's tensor for that use, a hybrid's sub-storage for it, each
    unwrapped in turn (a debug wrapper may hold a hybrid)."""
    for _ in range(4):  # wrappers nest a level or two; never loop on a foreign object
        name = type(operand).__name__
        if name == _DEBUG_TENSOR:
            operand = operand.get_tensor(columnwise)
        elif name == _HYBRID_TENSOR:
            operand = operand.columnwise_sub_storage if columnwise else operand.rowwise_sub_storage
        else:
            break
    return operand


def gemm_operands(a, b, layout: str) -> tuple:
    """A and B as the GEMM takes them: general_gemm uses A columnwise for `not transa` and B
    columnwise for `transb`. An operand of TE's debug API (nvdlfw_inspect) is a
    DebugQuantizedTensor holding one tensor per use, high precision where the API disables
    quantization; CustomRecipe's hybrid storage holds one quantized sub-storage per use."""
    return _used(a, layout[:1] != "T"), _used(b, layout[1:2] == "T")


_in_gemm_call = threading.local()


def _matrix(operand) -> tuple[int, int] | None:
    """An operand as the 2-D matrix the GEMM sees: leading dimensions folded into rows."""
    shape = getattr(operand, "shape", None)
    if shape is None and callable(getattr(operand, "size", None)):
        shape = operand.size()
    if shape is None or len(shape) < 2:
        return None
    rows = 1
    for dim in shape[:-1]:
        rows *= int(dim)
    return rows, int(shape[-1])


def gemm_shape(a, b, layout: str) -> tuple[int, int, int] | None:
    """(M, N, K) of one TE GEMM from its operands and layout: TE contracts A's second dimension
    when A is transposed ("T"), else its first, and B's second when B is not ("N") -- fprop
    (weight, input, TN), dgrad (weight, grad_output, NN), wgrad (input, grad_output, NT)."""
    ma, mb = _matrix(a), _matrix(b)
    if ma is None or mb is None or len(layout) != 2:
        return None
    ka = 1 if layout[0] == "T" else 0
    kb = 1 if layout[1] == "N" else 0
    return mb[1 - kb], ma[1 - ka], ma[ka]


def member_shapes(a, b, layout: str) -> list[tuple[int, int, int]] | None:
    """(M, N, K) of each member of a grouped GEMM handed over as lists of operands (one GEMM
    alone: a list of one), None when a shape cannot be read."""
    pairs = list(zip(a, b)) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else [(a, b)]
    shapes = [gemm_shape(x, y, layout) for x, y in pairs]
    return shapes if shapes and None not in shapes else None


def gemm_flops(shapes: list[tuple[int, int, int]]) -> int:
    """2·M·N·K summed over a grouped GEMM's members (member_shapes)."""
    return sum(2 * m * n * k for m, n, k in shapes)


def _recording(entry: str, original, torch):
    parameters = list(inspect.signature(original).parameters.values())
    position = {p.name: i for i, p in enumerate(parameters)}
    layout_default = parameters[position["layout"]].default
    function_ctx_type = torch.autograd.function.FunctionCtx

    def recorded(*args, **kwargs):
        # outside a --steps window nothing collects; a grouped entry point's own general_gemm calls are its record
        if not recording[0] or getattr(_in_gemm_call, "inside", False):
            return original(*args, **kwargs)
        mark_software_once(torch)
        try:
            layout = argument(args, kwargs, "layout", position["layout"], layout_default)
            a, b = gemm_operands(argument(args, kwargs, "A", position["A"]), argument(args, kwargs, "B", position["B"]),
                                 layout)
            record = {"entry": entry, **calling_module(torch, function_ctx_type),
                      "pass": PASS_BY_LAYOUT.get(layout, UNKNOWN),
                      "a": operand_type(a), "b": operand_type(b)}
            # A GroupedTensor operand's shape is not its members' (grouped_tensor entry point): its
            # members' first dims are a device tensor (GroupedTensorStorage.first_dims), which only a
            # host-device sync could read, and a CUDA graph's capture forbids. Its FLOPs stay unknown.
            members = member_shapes(a, b, layout) if entry != "general_grouped_gemm_for_grouped_tensor" else None
            if entry == "general_gemm" and members is not None:
                record.update(zip(("m", "n", "k"), members[0]))
            record["flops"] = (gemm_flops(members) if members else None) or UNKNOWN
            if entry == "general_grouped_gemm" and members:
                record[MEMBERS_FIELD] = format_members(members)
            label = format_record(GEMM_PREFIX, record)
            if record["module"] == UNKNOWN:  # no TE module's autograd context will say whose backward it is
                await_backward_node({"module": record["owner"], "layer": record["layer"],
                                      "a": record["a"], "b": record["b"]})
        except Exception as exc:  # never break the program being checked
            label = format_record(GEMM_PREFIX, {"entry": entry, "error": type(exc).__name__})
        push(torch, label)
        _in_gemm_call.inside = True
        try:
            return original(*args, **kwargs)
        finally:
            _in_gemm_call.inside = False
            pop(torch)

    recorded.__wrapped__ = original
    return recorded


def patch_gemm(gemm_module) -> None:
    import torch

    if not bound():  # torch's patches could not bind: no record can be written
        return
    for entry in _GEMM_ENTRY_POINTS:
        # the grouped entry points are later additions: a TE without them makes no such call
        patch(gemm_module, entry, lambda original, entry=entry: _recording(entry, original, torch),
              f"TE's {entry} calls (module, pass, operand types; TE's own NVTX ranges only)",
              optional=entry != "general_gemm")
