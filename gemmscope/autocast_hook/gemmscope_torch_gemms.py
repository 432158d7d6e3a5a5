"""The GEMMs PyTorch runs outside Transformer Engine, for gemmscope's start-up hook
(sitecustomize.py beside this file): calls of F.linear, torch.matmul and its kin and
torch._scaled_mm, forward and backward, each recorded as a range on the launching thread with the
module and place that made it and what it was asked (operand types, float8 scaling)."""

import functools
import itertools
import math
import sys

import gemmscope_modules as modules
import gemmscope_records as records
from gemmscope_modules import await_backward_node, compiling, owner_record, running_module
from gemmscope_protocol import BACKWARD, EMULATED, TORCH_GEMM_PREFIX, format_record
from gemmscope_records import argument, mark_software_once, note, pop, push, recording, te_base_class, thread

# The torch calls that run one GEMM, patched where Python code looks them up (F.linear,
# torch.matmul, x.matmul(w), x @ w ...): (the path under torch, the op as records name it, the
# positions of its two matrix operands).
# Megatron-Core's own linear layers (its output layer) use torch.matmul and Tensor.matmul,
# torch.nn.Linear uses F.linear, torchao's float8 training torch._scaled_mm.
_TORCH_GEMM_CALLS = (
    ("nn.functional.linear", "linear", 0, 1),
    ("matmul", "matmul", 0, 1), ("mm", "mm", 0, 1), ("bmm", "bmm", 0, 1),
    ("addmm", "addmm", 1, 2), ("baddbmm", "baddbmm", 1, 2),
    ("_scaled_mm", "_scaled_mm", 0, 1),
    ("Tensor.matmul", "matmul", 0, 1), ("Tensor.__matmul__", "matmul", 0, 1),
    ("Tensor.mm", "mm", 0, 1), ("Tensor.bmm", "bmm", 0, 1),
    ("Tensor.addmm", "addmm", 1, 2), ("Tensor.baddbmm", "baddbmm", 1, 2),
)
# The autograd Function entry point whose patch follows GEMMs into custom Functions' backward.
FUNCTION_APPLY = "autograd.Function.apply"
# The names of each op's two matrix operands, for a call that passes them by keyword
# (torch.matmul(x, other=w), F.linear(input=x, weight=w)); the Tensor methods name them alike.
_OPERAND_NAMES = {"linear": ("input", "weight"), "matmul": ("input", "other"), "mm": ("input", "mat2"),
                  "bmm": ("input", "mat2"), "addmm": ("mat1", "mat2"), "baddbmm": ("batch1", "batch2"),
                  "_scaled_mm": ("input", "mat2")}
_TORCH_DTYPES = {
    "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32", "torch.float64": "fp64",
    "torch.float8_e4m3fn": "fp8", "torch.float8_e5m2": "fp8", "torch.float8_e4m3fnuz": "fp8",
    "torch.float8_e5m2fnuz": "fp8", "torch.float4_e2m1fn_x2": "fp4",
}
# Autograd nodes a GEMM's output may pass through before the GEMM's own node (F.linear of a 3-D
# input is an addmm on a view, torch.matmul folds leading dimensions with views).
_VIEW_NODES = frozenset({"ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0", "TBackward0",
                         "TransposeBackward0", "ExpandBackward0", "SqueezeBackward1", "UnsqueezeBackward0"})
_MAX_VIEW_NODES = 3


def _rows_cols(shape) -> tuple[int, int]:
    """A shape as the matrix a GEMM sees: leading dimensions folded into rows (a vector is a row)."""
    if len(shape) < 2:
        return 1, int(shape[0]) if len(shape) else 1
    rows = 1
    for dim in shape[:-1]:
        rows *= int(dim)
    return rows, int(shape[-1])


def torch_gemm_shape(op: str, a, b) -> tuple[int, int, int]:
    """(M, N, K) of a torch GEMM call, batches folded into M: F.linear(x, W) is x·Wᵀ, the others
    a·b."""
    m, k = _rows_cols(a.shape)
    if op == "linear":
        return m, int(b.shape[0]), k
    if len(b.shape) > 2:  # batched: a's and b's batch dimensions broadcast (a 2-D a is b's every batch)
        rows = int(a.shape[-2]) if len(a.shape) > 1 else 1
        batches = math.prod(max(int(x), int(y)) for x, y in
                            itertools.zip_longest(reversed(a.shape[:-2]), reversed(b.shape[:-2]), fillvalue=1))
        return rows * batches, int(b.shape[-1]), k
    return m, int(b.shape[-1]) if len(b.shape) == 2 else 1, k


def tensor_type(tensor) -> str:
    return _TORCH_DTYPES.get(str(tensor.dtype), str(tensor.dtype))


# What torch.autocast casts the operands of every GEMM call here but _scaled_mm to (its
# "lower precision" ops: matmul, mm, bmm, addmm, baddbmm, linear), before the kernel runs.
_AUTOCAST_CAST = frozenset({"torch.float32", "torch.float16", "torch.bfloat16"})


def asked_type(torch, op: str, tensor) -> str:
    """The type a GEMM call asks for an operand: under torch.autocast, the autocast type its
    floating operands are cast to (a float32 weight in a BF16 autocast asks for BF16), else the
    tensor's own."""
    if op != "_scaled_mm" and str(tensor.dtype) in _AUTOCAST_CAST:
        device = tensor.device.type
        if torch.is_autocast_enabled(device):
            return _TORCH_DTYPES[str(torch.get_autocast_dtype(device))]
    return tensor_type(tensor)


def scaled_mm_scaling(a, b, scale_a, scale_b, caller) -> str:
    """How torch._scaled_mm was asked to scale (gemmscope_protocol.SCALINGS), from its scales:
    e8m0 scales are MX blocks; one scale each is tensor-wise, unless `caller` (the calling
    frame) is torchao's addmm_float8_unwrapped turning a row-wise request into a tensor-wise
    GEMM plus its own rescale; a scale per row of A and per column of B is row-wise; anything
    else is per block."""
    if "e8m0" in str(scale_a.dtype):
        return "mx"
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        if caller is not None and caller.f_code.co_name == "addmm_float8_unwrapped":
            local = caller.f_locals
            if local.get("is_rowwise_scaling") and local.get("post_inverse_scale") is not None:
                return "rowwise-rescaled"
        return "tensorwise"
    if tuple(scale_a.shape) == (int(a.shape[0]), 1) and tuple(scale_b.shape) == (1, int(b.shape[1])):
        return "rowwise"
    return "blockwise"


# torchao's float8 matmuls (float8_ops.float8_mm, float8_addmm): where their config emulates,
# they run torch.mm on the float8 operands dequantized to FP32, the operands as `a` and `b`.
_TORCHAO_FLOAT8_MATMULS = frozenset({"float8_mm", "float8_addmm"})


def emulated_float8(caller) -> tuple | None:
    """The float8 operands (torchao's Float8TrainingTensor) of a GEMM torchao emulates, where
    `caller` (the calling frame) is its float8 matmul with `emulate` on; else None."""
    if caller is None or caller.f_code.co_name not in _TORCHAO_FLOAT8_MATMULS or "torchao" not in caller.f_code.co_filename:
        return None
    local = caller.f_locals
    if not getattr(local.get("scaled_mm_config"), "emulate", False):
        return None
    return local.get("a"), local.get("b")


def _backward_pass(node: dict, m: int, n: int) -> str:
    """dgrad or wgrad of a GEMM a custom autograd Function's backward runs, by its output's
    shape: the forward's activation operand (dgrad) or its weight operand, either way round
    (wgrad); "backward" when the shapes do not tell."""
    dgrad = (m, n) == node["activation"]
    wgrad = (m, n) in (node["weight"], node["weight"][::-1])
    return "dgrad" if dgrad and not wgrad else "wgrad" if wgrad and not dgrad else BACKWARD


def _torch_record(torch, op: str, a, b, args: tuple, kwargs: dict) -> tuple[dict, tuple[int, int, int]]:
    m, n, k = torch_gemm_shape(op, a, b)
    module = running_module(sys._getframe(2))
    running = thread.__dict__.get("node")
    if running and module is None:  # a backward, not a forward recomputed inside one
        node = running[-1]
        record = {"op": op, "module": node["module"], "layer": node["layer"], "pass": _backward_pass(node, m, n)}
    else:
        owner = owner_record(module)
        record = {"op": op, "module": owner["owner"], "layer": owner["layer"], "pass": "fprop"}
    record.update(a=asked_type(torch, op, a), b=asked_type(torch, op, b))
    if op == "_scaled_mm":
        scale_a = argument(args, kwargs, "scale_a", 2)
        scale_b = argument(args, kwargs, "scale_b", 3)
        record["scale"] = scaled_mm_scaling(a, b, scale_a, scale_b, sys._getframe(2))
    elif (emulated := emulated_float8(sys._getframe(2))) is not None:
        fp8_a, fp8_b = emulated  # asked: the float8 GEMM the FP32 one stands for
        record.update(a=tensor_type(fp8_a._data), b=tensor_type(fp8_b._data), scale=EMULATED + scaled_mm_scaling(
            fp8_a._data, fp8_b._data, fp8_a._scale, fp8_b._scale, None))
    record.update(m=m, n=n, k=k, flops=2 * m * n * k)
    return record, (m, n, k)


def launches_kernel(tensor) -> bool:
    """A CPU product launches no kernel, so it is not recorded. Looked up at each call: the hook's
    tests replace it to run the recording on CPU tensors."""
    return getattr(tensor, "is_cuda", False)


def _dispatching(tensor, torch) -> bool:
    """A tensor subclass with its own __torch_dispatch__ (torchao's Float8TrainingTensor, DTensor):
    the GEMM it runs is recorded where it runs, if through one of the patched calls."""
    return type(tensor).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__


# TorchInductor's generated code calls these functions as its extern kernels (it names each after
# the function's __name__, hence functools.wraps); what a compiled graph runs is not recorded, nor
# any call from Inductor's own modules. Told by the calling module's name: Inductor names the
# modules it generates torch._inductor.… wherever its cache lies (TORCHINDUCTOR_CACHE_DIR).
_INDUCTOR_CODE = "torch._inductor."
# What torch.compile runs calls on while it traces and compiles a graph, outside what
# torch.compiler.is_compiling says on some releases (2.11: dynamo's run_node, fx's interpreter,
# the decompositions): stand-ins of tensors, no GEMM of the program's.
_COMPILE_TIME_TENSORS = frozenset({"FakeTensor", "FunctionalTensor"})


def _torch_recording(torch, op: str, original, position_a: int, position_b: int):
    name_a, name_b = _OPERAND_NAMES[op]

    @functools.wraps(original)
    def recorded(*args, **kwargs):
        if not recording[0]:
            return original(*args, **kwargs)
        a = argument(args, kwargs, name_a, position_a)
        b = argument(args, kwargs, name_b, position_b)
        if (b is None or compiling()
                or sys._getframe(1).f_globals.get("__name__", "").startswith(_INDUCTOR_CODE)):
            return original(*args, **kwargs)
        if not launches_kernel(a) or type(a).__name__ in _COMPILE_TIME_TENSORS:
            return original(*args, **kwargs)
        mark_software_once(torch)
        try:
            record, (m, n, k) = _torch_record(torch, op, a, b, args, kwargs)
            label = format_record(TORCH_GEMM_PREFIX, record)
        except Exception as exc:  # never break the program being checked
            record, label = None, format_record(TORCH_GEMM_PREFIX, {"op": op, "error": type(exc).__name__})
        push(torch, label)
        try:
            result = original(*args, **kwargs)
        finally:
            pop(torch)
        if record is not None and record["pass"] == "fprop" and not _dispatching(a, torch):
            k_b = (n, k) if op == "linear" else (k, n)
            node = {"module": record["module"], "layer": record["layer"], "a": record["a"], "b": record["b"],
                    "activation": (m, k), "weight": k_b}
            if torch.is_grad_enabled():
                grad_fn = getattr(result, "grad_fn", None)
                if grad_fn is not None:
                    _watch_backward(torch, _gemm_node(grad_fn), node)
            else:
                await_backward_node(node)
        return result

    return recorded


def _gemm_node(grad_fn):
    node = grad_fn
    for _ in range(_MAX_VIEW_NODES):
        if node.name() not in _VIEW_NODES or not node.next_functions or node.next_functions[0][0] is None:
            break
        node = node.next_functions[0][0]
    return node


def _watch_backward(torch, node, record: dict) -> None:
    """Brackets a backward node with a torch_gemm range: kernels it launches in C++ (MmBackward0
    runs the dgrad and wgrad GEMMs) fall inside; GEMM calls a Python backward makes find the
    module and forward shapes of their record here."""
    label = format_record(TORCH_GEMM_PREFIX, {"op": node.name(), "module": record["module"],
                                              "layer": record["layer"], "pass": BACKWARD,
                                              "a": record["a"], "b": record["b"]})

    def before(_grad_outputs):
        thread.__dict__.setdefault("node", []).append(record)
        push(torch, label)

    def after(_grad_inputs, _grad_outputs):
        pop(torch)
        running = thread.__dict__.get("node")
        if running:
            running.pop()

    node.register_prehook(before)
    node.register_hook(after)


def _first_grad_fn(output):
    for item in output if isinstance(output, (tuple, list)) else (output,):
        grad_fn = getattr(item, "grad_fn", None)
        if grad_fn is not None:
            return grad_fn
    return None


def _recording_apply(torch, original):
    """autograd.Function.apply, noting whether its forward made a recorded GEMM: one of a TE
    module (calling_module), whose record its node keeps for the backward GEMMs; one no TE
    module covers (await_backward_node), whose node gets _watch_backward. `original(cls, ...)`
    applies as torch's own does (records.patch: a classmethod up to torch 2.13, a built-in from 2.14)."""
    @functools.wraps(original)
    def apply(cls, *args, **kwargs):
        if not recording[0] or compiling():
            return original(cls, *args, **kwargs)
        pending = thread.__dict__.setdefault("pending", [])
        pending.append([None, None])
        try:
            output = original(cls, *args, **kwargs)
        finally:
            node, te_record = pending.pop()
        if node is not None or te_record is not None:
            grad_fn = _first_grad_fn(output)
            if grad_fn is not None:
                try:
                    # TE's own Functions only: an activation checkpoint's Function runs TE's
                    # forward too, without a Function of TE's in between
                    if te_record is not None and te_base_class(cls) is not None:
                        grad_fn._gemmscope_module = te_record
                    if node is not None:
                        _watch_backward(torch, grad_fn, node)
                except Exception as exc:  # never break the program being checked
                    note(f"backward of {cls.__name__} not recorded: {type(exc).__name__}")
        return output

    return apply


def patch_torch(torch) -> None:
    """Every torch GEMM call and autograd.Function.apply, each patched on its own (records.patch):
    one this torch moved or changed is said and its records go missing, never the program."""
    if not records.guarded("torch._C._autograd._profiler_enabled", torch, "every record",
                           lambda: records.bind(torch)):
        return  # without it no record can be written: nothing is patched
    records.guarded("torch.nn.Module._call_impl", torch, "the module and layer of each GEMM",
                    lambda: modules.bind(torch))
    records.note_untested_torch(torch)
    for path, op, position_a, position_b in _TORCH_GEMM_CALLS:
        records.patch(torch, path, lambda original, op=op, a=position_a, b=position_b:
                      _torch_recording(torch, op, original, a, b), f"GEMMs through torch.{path}")
    records.patch(torch, FUNCTION_APPLY, lambda original: _recording_apply(torch, original),
                  "the module and pass of GEMMs in custom autograd Functions' backward")
