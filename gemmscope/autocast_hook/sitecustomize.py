"""Records, inside a profiled program, what Transformer Engine was asked to run.

`gemmscope verify` puts this folder first on PYTHONPATH of the command it profiles, so Python
imports this file at start-up in every process of the command (a launcher's too). It waits for
TE's modules to be imported, then patches them so that the trace holds (labels in
gemmscope_protocol.py beside this file):

- every ``te.autocast`` region, with its recipe (what the run asked for);
- every GEMM call of TE's Python (``general_gemm`` and the grouped entry points): the TE module
  or operation that made it, its name and place in the model, the pass and the operand types TE
  was handed, as a range on the thread that launches the kernels;
- every GEMM PyTorch runs outside TE (``F.linear``, ``matmul`` and its kin, ``torch._scaled_mm``),
  forward and backward, with the module and place that called it and what it was asked
  (operand types, float8 scaling), once torch is imported;
- the process's rank, once.

While torch.profiler records, each of these is also a ``record_function`` range, so that a PyTorch
profiler (Kineto) trace, which holds no NVTX, carries the same records.

Where gemmscope captures with torch.profiler instead of nsys (TORCH_TRACE_FOLDER set), the hook
starts the profiler as torch is imported and writes the trace when the process exits, if it used
CUDA (a launcher such as torchrun's writes none).

Modules are recognised by what they are, not by their class name: a subclass of a TE module
(Megatron-Core's TELayerNormColumnParallelLinear ...) is that TE module, and a subclass of a TE
recipe (Megatron-Core's TEDelayedScaling) is recorded as the TE recipe it derives from.

It never changes what TE computes. On a TE that lacks an entry point it says so once on stderr
and the trace falls back to TE's own NVTX ranges. The interpreter's own sitecustomize, if any, is
still run afterwards.
"""

import atexit
import functools
import gzip
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import itertools
import math
import os
import shutil
import sys
import threading

from gemmscope_protocol import (
    AUTOCAST_PREFIX,
    BACKWARD,
    GEMM_PREFIX,
    PASS_BY_LAYOUT,
    PROCESS_PREFIX,
    SOFTWARE_PREFIX,
    TORCH_GEMM_PREFIX,
    TORCH_TRACE_FOLDER,
    UNKNOWN,
    format_record,
    torch_trace_name,
)

_QUANTIZATION = "transformer_engine.pytorch.quantization"
_GEMM = "transformer_engine.pytorch.cpp_extensions.gemm"
# TE's Python GEMM entry points (transformer_engine/pytorch/cpp_extensions/gemm.py); the grouped
# ones may call general_gemm per group, which then records nothing of its own.
_GEMM_ENTRY_POINTS = ("general_gemm", "general_grouped_gemm", "general_grouped_gemm_for_grouped_tensor")
# Attributes through which wrappers hold the module they wrap, and wrapper classes (DDP holds it
# as `module`): left out of layer paths.
_WRAPPER_ATTRIBUTES = {"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"}
_BASIC_OPS = "basic_ops"  # te.ops FusedOperation's list of the basic operations it fuses
_WRAPPER_CLASSES = {"FullyShardedDataParallel", "DistributedDataParallel", "CheckpointWrapper",
                    "OptimizedModule", "FSDPModule", "Float16Module"}
_TE_PACKAGE = "transformer_engine"


def _note(message: str) -> None:
    print(f"gemmscope hook: {message}", file=sys.stderr, flush=True)


def te_base_class(cls: type) -> str | None:
    """The name of the first class in `cls`'s MRO that TE defines (None when none is): what a
    framework's subclass of a TE module or recipe is."""
    return _te_class(cls)[0]


# Per Python class: (its TE base class or None, whether a GEMM's record may name it straight from
# the running modules). te_base_class walks an MRO; GEMM calls and module calls are a hot path.
_TE_CLASSES: dict = {}
# te.ops: the fuser runs its operations without calling them as modules, so the running modules
# show only what holds them; which operation made a GEMM is read from the calling TE frames.
_TE_OPS_PACKAGE = _TE_PACKAGE + ".pytorch.ops"


def _te_class(cls: type) -> tuple[str | None, bool]:
    known = _TE_CLASSES.get(cls)
    if known is None:
        base = next((b for b in cls.__mro__ if b.__module__.startswith(_TE_PACKAGE)), None)
        known = _TE_CLASSES[cls] = ((base.__name__, not base.__module__.startswith(_TE_OPS_PACKAGE))
                                    if base is not None else (None, False))
    return known


# --- writing records --------------------------------------------------------------------------

# Every record goes into the trace as an NVTX range or mark (what nsys collects) and, while
# torch.profiler records, as a record_function range too: a Kineto trace holds no NVTX.
_profiler_enabled = None  # torch.autograd's "is a profiler recording", once torch is imported


def _push(torch, label: str) -> None:
    torch.cuda.nvtx.range_push(label)
    handles = _thread.__dict__.get("profiled")
    if handles is None:
        handles = _thread.profiled = []
    handles.append(torch.ops.profiler._record_function_enter_new(label, None) if _profiler_enabled() else None)


def _pop(torch) -> None:
    handles = _thread.__dict__.get("profiled")
    handle = handles.pop() if handles else None
    if handle is not None:
        torch.ops.profiler._record_function_exit._RecordFunction(handle)
    torch.cuda.nvtx.range_pop()


def _mark(torch, label: str) -> None:
    torch.cuda.nvtx.mark(label)
    if _profiler_enabled():
        torch.ops.profiler._record_function_exit._RecordFunction(
            torch.ops.profiler._record_function_enter_new(label, None))


# --- te.autocast ------------------------------------------------------------------------------

def _patch_quantization(quantization_module) -> None:
    import torch

    manager = quantization_module.FP8GlobalStateManager
    original_enter = manager.autocast_enter.__func__
    original_exit = manager.autocast_exit.__func__

    def autocast_enter(cls, *args, **kwargs):
        original_enter(cls, *args, **kwargs)
        recipe = cls.get_fp8_recipe() if cls.is_fp8_enabled() else None
        name = (te_base_class(type(recipe)) or type(recipe).__name__) if recipe is not None else "disabled"
        _push(torch, f"{AUTOCAST_PREFIX}{name})")

    def autocast_exit(cls, *args, **kwargs):
        _pop(torch)
        original_exit(cls, *args, **kwargs)

    manager.autocast_enter = classmethod(autocast_enter)
    manager.autocast_exit = classmethod(autocast_exit)
    _mark_process(torch)


def _rank() -> str:
    """The process's rank as its launcher (torchrun, mpirun, SLURM) set it, or UNKNOWN."""
    env = os.environ
    return env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", env.get("SLURM_PROCID", UNKNOWN)))


def _mark_process(torch) -> None:
    env = os.environ
    rank = _rank()
    local_rank = env.get("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", env.get("SLURM_LOCALID", UNKNOWN)))
    world_size = env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", env.get("SLURM_NTASKS", UNKNOWN)))
    _mark(torch, format_record(PROCESS_PREFIX, {
        "rank": rank, "local_rank": local_rank, "world_size": world_size, "pid": os.getpid()}))


def _mark_software(torch) -> None:
    """The versions of what runs the GEMMs, once per process, at its first TE GEMM call (TE is
    wholly imported by then)."""
    te = sys.modules.get("transformer_engine")
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda or UNKNOWN,
                "transformer_engine": getattr(te, "__version__", UNKNOWN), "cublaslt": UNKNOWN}
    try:
        import transformer_engine_torch

        # cublasLtGetVersion: major·10000 + minor·100 + patch
        number = int(transformer_engine_torch.get_cublasLt_version())
        versions["cublaslt"] = f"{number // 10000}.{number // 100 % 100}.{number % 100}"
    except Exception:  # an older TE without it: the version stays unknown
        pass
    _mark(torch, format_record(SOFTWARE_PREFIX, versions))


# --- which module: layer paths ----------------------------------------------------------------

# Per thread: `node`, the backward nodes running (_watch_backward); `pending`, per
# autograd.Function.apply running, [the record of a GEMM awaiting the Function's node
# (_await_backward_node), the TE module record that node is to keep]; `profiled`, per record range
# open, its torch.profiler handle (_push).
_thread = threading.local()
_CALL_IMPL = None  # nn.Module._call_impl's code, once torch is imported


def _running_module(frame):
    """The innermost module whose forward runs on this thread, read from the frames that call a
    GEMM (None outside every module): every module call runs nn.Module._call_impl, whose `self` is
    the module. Read at the GEMM call, not kept by module hooks: global module hooks would put every
    module call of the program on nn.Module's slow path. The model's modules are named (_name_tree)
    from the outermost running module the first time one without a path makes a GEMM."""
    innermost = None
    while frame is not None:
        if frame.f_code is _CALL_IMPL:
            module = frame.f_locals["self"]
            if innermost is None:
                innermost = module
                if "_gemmscope_path" in module.__dict__:
                    return innermost
            outermost = module
        frame = frame.f_back
    if innermost is not None:
        _name_tree(outermost)
        if "_gemmscope_path" not in innermost.__dict__:  # run by a module that does not hold it
            _name_tree(innermost)
    return innermost


def _compiling() -> bool:
    return _is_compiling is not None and _is_compiling()


_is_compiling = None  # torch.compiler.is_compiling, once torch is imported


def _name_tree(module) -> None:
    """`module` is the outermost one running: every module under it gets its attribute path
    (wrappers left out), once. Walks `_modules` itself, since containers such as ModuleList are
    iterated, never called. The basic operations a te.ops operation is made of share its path."""
    module.__dict__["_gemmscope_path"] = ""
    stack = [(module, "", False)]
    while stack:
        parent, path, transparent = stack.pop()
        wrapper = transparent or type(parent).__name__ in _WRAPPER_CLASSES
        for attribute, child in parent._modules.items():
            if child is None or "_gemmscope_path" in child.__dict__:
                continue
            if wrapper or attribute in _WRAPPER_ATTRIBUTES or attribute == _BASIC_OPS:
                child_path = path
            else:
                child_path = f"{path}.{attribute}" if path else attribute
            child.__dict__["_gemmscope_path"] = child_path
            stack.append((child, child_path, attribute == _BASIC_OPS))


# --- which module: at the GEMM call -----------------------------------------------------------

_TE_FILES = os.sep + "transformer_engine" + os.sep
_MAX_FRAMES = 40


def _is_te_module(obj, torch) -> bool:
    return isinstance(obj, torch.nn.Module) and te_base_class(type(obj)) is not None


def _module_record(module) -> dict:
    """What a GEMM's record says of its module: the TE class it is (a framework's subclass
    included), its name, its path; made once per module (its name and path are set before its
    first forward) and kept on it: GEMM calls are a hot path."""
    state = module.__dict__
    record = state.get("_gemmscope_record")
    if record is not None:
        return record
    name = state.get("name") or state.get("ub_name") or ""
    path = state.get("_gemmscope_path")
    if path is None:  # a te.ops fused operation, made by the fuser: where its basic ops are
        parts = [op.__dict__.get("_gemmscope_path") for op in getattr(module, "basic_ops", ())]
        path = "+".join(dict.fromkeys(p for p in parts if p))
    record = {"module": te_base_class(type(module)) or type(module).__name__, "name": name, "layer": path}
    state["_gemmscope_record"] = record
    return record


def _owner_record(module) -> dict:
    """The innermost module of any kind around a GEMM call (`module`, _running_module): in a
    backward pass, with no module's forward running inside it (activation checkpointing's
    recompute), the module of the forward call whose backward node runs now (_watch_backward)."""
    if module is not None:
        return {"owner": type(module).__name__, "layer": module.__dict__.get("_gemmscope_path", "")}
    running = _thread.__dict__.get("node")
    if running:
        return {"owner": running[-1]["module"], "layer": running[-1]["layer"]}
    return {"owner": UNKNOWN, "layer": ""}


def _calling_module(torch, function_ctx_type) -> dict:
    """The TE module or fusible operation that called this GEMM. In a forward pass it is the
    innermost module running on this thread (_running_module) when that is a TE module; the
    autograd.Function it applies is stamped with it (_recording_apply), and in the backward pass
    that Function's node, the one running, says whose GEMM this is. Otherwise (te.ops, whose fuser calls its operations
    without calling them as modules; a node nothing stamped) TE's calling frames are read
    (_calling_frames). A GEMM a framework hands TE from a module of its own (Megatron's MoE
    router) has none: its owner says where it is."""
    module = _running_module(sys._getframe(2))
    if module is not None:
        if _te_class(type(module))[1]:
            record = _module_record(module)
            pending = _thread.__dict__.get("pending")
            if pending:
                pending[-1][1] = record
            return record
    else:
        node = _current_autograd_node()
        record = getattr(node, "_gemmscope_module", None) if node is not None else None
        if record is not None:
            return record
    return _calling_frames(torch, function_ctx_type, module)


_current_autograd_node = None  # torch._C._current_autograd_node, once torch is imported


def _calling_frames(torch, function_ctx_type, module) -> dict:
    """The innermost TE module or fusible operation among the TE frames calling this GEMM. In a
    forward pass it is the `self` of a frame; an autograd context met on the way is stamped
    with it, and in the backward pass (autograd's thread, where no module frame is on the
    stack) the same context says which module's GEMM this is."""
    frame = sys._getframe(3)
    contexts = []
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        code = frame.f_code
        # f_locals copies a frame's locals: read it only where `self` or `ctx` is one of them
        if _TE_FILES in code.co_filename and ("self" in code.co_varnames or "ctx" in code.co_varnames):
            local = frame.f_locals
            owner = local.get("self")
            if owner is not None and _is_te_module(owner, torch):
                record = _module_record(owner)
                for ctx in contexts:
                    ctx._gemmscope_module = record
                return record
            ctx = local.get("ctx")
            if isinstance(ctx, function_ctx_type):
                stamped = getattr(ctx, "_gemmscope_module", None)
                if stamped is not None:
                    return stamped
                contexts.append(ctx)
        frame = frame.f_back
    return {"module": UNKNOWN, "name": "", **_owner_record(module)}


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
    dtype = str(getattr(operand, "dtype", ""))
    return _BY_DTYPE.get(dtype, dtype or type(operand).__name__)


_in_gemm_call = threading.local()
_software_marked: list = []  # non-empty once this process has recorded its software versions


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


def gemm_flops(a, b, layout: str) -> int | None:
    """2·M·N·K summed over a grouped GEMM's members (None when a shape cannot be read)."""
    pairs = zip(a, b) if isinstance(a, (list, tuple)) else [(a, b)]
    total = 0
    for x, y in pairs:
        shape = gemm_shape(x, y, layout)
        if shape is None:
            return None
        m, n, k = shape
        total += 2 * m * n * k
    return total


def _argument(args: tuple, kwargs: dict, name: str, position: int, default=None):
    """An argument of a call by name or position (signature.bind costs more than the GEMM call's
    whole record)."""
    if name in kwargs:
        return kwargs[name]
    return args[position] if position < len(args) else default


def _mark_software_once(torch) -> None:
    if not _software_marked:
        _software_marked.append(True)
        try:
            _mark_software(torch)
        except Exception as exc:  # never break the program being checked
            _note(f"software versions not recorded: {type(exc).__name__}")


def _recording(entry: str, original, torch):
    parameters = list(inspect.signature(original).parameters.values())
    position = {p.name: i for i, p in enumerate(parameters)}
    layout_default = parameters[position["layout"]].default
    function_ctx_type = torch.autograd.function.FunctionCtx

    def recorded(*args, **kwargs):
        if getattr(_in_gemm_call, "inside", False):  # a grouped entry point calling general_gemm
            return original(*args, **kwargs)
        _mark_software_once(torch)
        try:
            layout = _argument(args, kwargs, "layout", position["layout"], layout_default)
            a = _argument(args, kwargs, "A", position["A"])
            b = _argument(args, kwargs, "B", position["B"])
            record = {"entry": entry, **_calling_module(torch, function_ctx_type),
                      "pass": PASS_BY_LAYOUT.get(layout, UNKNOWN),
                      "a": operand_type(a), "b": operand_type(b)}
            # A GroupedTensor operand's shape is not its members' (grouped_tensor entry point).
            shape = gemm_shape(a, b, layout) if entry == "general_gemm" else None
            if shape is not None:
                record.update(zip(("m", "n", "k"), shape))
            flops = gemm_flops(a, b, layout) if entry != "general_grouped_gemm_for_grouped_tensor" else None
            record["flops"] = flops or UNKNOWN
            label = format_record(GEMM_PREFIX, record)
            if record["module"] == UNKNOWN:  # no TE module's autograd context will say whose backward it is
                _await_backward_node({"module": record["owner"], "layer": record["layer"],
                                      "a": record["a"], "b": record["b"]})
        except Exception as exc:  # never break the program being checked
            label = format_record(GEMM_PREFIX, {"entry": entry, "error": type(exc).__name__})
        _push(torch, label)
        _in_gemm_call.inside = True
        try:
            return original(*args, **kwargs)
        finally:
            _in_gemm_call.inside = False
            _pop(torch)

    recorded.__wrapped__ = original
    return recorded


def _patch_gemm(gemm_module) -> None:
    import torch

    missing = [entry for entry in _GEMM_ENTRY_POINTS if not callable(getattr(gemm_module, entry, None))]
    if "general_gemm" in missing:
        _note(f"{_GEMM}.general_gemm not found: GEMM records off, TE's own NVTX ranges only")
        return
    for entry in _GEMM_ENTRY_POINTS:
        if entry not in missing:
            setattr(gemm_module, entry, _recording(entry, getattr(gemm_module, entry), torch))


# --- GEMMs outside TE -------------------------------------------------------------------------

# The torch calls that run one GEMM, patched where Python code looks them up (F.linear,
# torch.matmul, x.matmul(w), x @ w ...): (where, attribute, the op as records name it, the
# positions of its two matrix operands).
# Megatron-Core's own linear layers (its output layer) use torch.matmul and Tensor.matmul,
# torch.nn.Linear uses F.linear, torchao's float8 training torch._scaled_mm.
_TORCH_GEMM_CALLS = (
    ("torch.nn.functional", "linear", "linear", 0, 1),
    ("torch", "matmul", "matmul", 0, 1), ("torch", "mm", "mm", 0, 1), ("torch", "bmm", "bmm", 0, 1),
    ("torch", "addmm", "addmm", 1, 2), ("torch", "baddbmm", "baddbmm", 1, 2),
    ("torch", "_scaled_mm", "_scaled_mm", 0, 1),
    ("torch.Tensor", "matmul", "matmul", 0, 1), ("torch.Tensor", "__matmul__", "matmul", 0, 1),
    ("torch.Tensor", "mm", "mm", 0, 1), ("torch.Tensor", "bmm", "bmm", 0, 1),
    ("torch.Tensor", "addmm", "addmm", 1, 2), ("torch.Tensor", "baddbmm", "baddbmm", 1, 2),
)
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


def _backward_pass(node: dict, m: int, n: int) -> str:
    """dgrad or wgrad of a GEMM a custom autograd Function's backward runs, by its output's
    shape: the forward's activation operand (dgrad) or its weight operand, either way round
    (wgrad); "backward" when the shapes do not tell."""
    dgrad = (m, n) == node["activation"]
    wgrad = (m, n) in (node["weight"], node["weight"][::-1])
    return "dgrad" if dgrad and not wgrad else "wgrad" if wgrad and not dgrad else BACKWARD


def _torch_record(torch, op: str, a, b, args: tuple, kwargs: dict) -> tuple[dict, tuple[int, int, int]]:
    m, n, k = torch_gemm_shape(op, a, b)
    module = _running_module(sys._getframe(2))
    running = _thread.__dict__.get("node")
    if running and module is None:  # a backward, not a forward recomputed inside one
        node = running[-1]
        record = {"op": op, "module": node["module"], "layer": node["layer"], "pass": _backward_pass(node, m, n)}
    else:
        owner = _owner_record(module)
        record = {"op": op, "module": owner["owner"], "layer": owner["layer"], "pass": "fprop"}
    record.update(a=tensor_type(a), b=tensor_type(b))
    if op == "_scaled_mm":
        scale_a = _argument(args, kwargs, "scale_a", 2)
        scale_b = _argument(args, kwargs, "scale_b", 3)
        record["scale"] = scaled_mm_scaling(a, b, scale_a, scale_b, sys._getframe(2))
    record.update(m=m, n=n, k=k, flops=2 * m * n * k)
    return record, (m, n, k)


def _launches_kernel(tensor) -> bool:
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


def _torch_recording(torch, op: str, original, position_a: int, position_b: int):
    name_a, name_b = _OPERAND_NAMES[op]

    @functools.wraps(original)
    def recorded(*args, **kwargs):
        a = _argument(args, kwargs, name_a, position_a)
        b = _argument(args, kwargs, name_b, position_b)
        if (b is None or _compiling()
                or sys._getframe(1).f_globals.get("__name__", "").startswith(_INDUCTOR_CODE)):
            return original(*args, **kwargs)
        if not _launches_kernel(a):
            return original(*args, **kwargs)
        _mark_software_once(torch)
        try:
            record, (m, n, k) = _torch_record(torch, op, a, b, args, kwargs)
            label = format_record(TORCH_GEMM_PREFIX, record)
        except Exception as exc:  # never break the program being checked
            record, label = None, format_record(TORCH_GEMM_PREFIX, {"op": op, "error": type(exc).__name__})
        _push(torch, label)
        try:
            result = original(*args, **kwargs)
        finally:
            _pop(torch)
        if record is not None and record["pass"] == "fprop" and not _dispatching(a, torch):
            k_b = (n, k) if op == "linear" else (k, n)
            node = {"module": record["module"], "layer": record["layer"], "a": record["a"], "b": record["b"],
                    "activation": (m, k), "weight": k_b}
            if torch.is_grad_enabled():
                grad_fn = getattr(result, "grad_fn", None)
                if grad_fn is not None:
                    _watch_backward(torch, _gemm_node(grad_fn), node)
            else:
                _await_backward_node(node)
        return result

    return recorded


def _await_backward_node(node: dict) -> None:
    """A GEMM inside a custom autograd.Function's forward (grad mode is off there): its node
    exists only once the Function's apply returns (_recording_apply)."""
    pending = _thread.__dict__.get("pending")
    if pending:
        pending[-1][0] = node


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
        _thread.__dict__.setdefault("node", []).append(record)
        _push(torch, label)

    def after(_grad_inputs, _grad_outputs):
        _pop(torch)
        running = _thread.__dict__.get("node")
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
    module (_calling_module), whose record its node keeps for the backward GEMMs; one no TE
    module covers (_await_backward_node), whose node gets _watch_backward."""
    @functools.wraps(original)
    def apply(cls, *args, **kwargs):
        if _compiling():
            return original(cls, *args, **kwargs)
        pending = _thread.__dict__.setdefault("pending", [])
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
                    _note(f"backward of {cls.__name__} not recorded: {type(exc).__name__}")
        return output

    return apply


def _patch_torch(torch) -> None:
    global _is_compiling, _current_autograd_node, _profiler_enabled, _CALL_IMPL
    _is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    _CALL_IMPL = torch.nn.Module._call_impl.__code__
    _current_autograd_node = getattr(torch._C, "_current_autograd_node", lambda: None)
    _profiler_enabled = torch._C._autograd._profiler_enabled
    for owner_name, attribute, op, position_a, position_b in _TORCH_GEMM_CALLS:
        owner = torch.Tensor if owner_name == "torch.Tensor" else sys.modules[owner_name]
        original = getattr(owner, attribute, None)
        if original is not None:
            setattr(owner, attribute, _torch_recording(torch, op, original, position_a, position_b))
    function = torch.autograd.Function
    function.apply = classmethod(_recording_apply(torch, function.apply.__func__))


# --- capturing with torch.profiler -------------------------------------------------------------

def _start_profiler(torch) -> None:
    """Where gemmscope captures with torch.profiler (TORCH_TRACE_FOLDER names the folder): record
    CPU and CUDA activity with operator shapes from now on, as a user's own torch.profiler run
    does, and write the trace at exit (_write_trace). A failure costs the trace, never the program."""
    folder = os.environ.get(TORCH_TRACE_FOLDER)
    if not folder:
        return
    try:
        from torch.profiler import ProfilerActivity, profile, supported_activities

        # CUDA where this torch can trace it: asking for it elsewhere only warns
        activities = [a for a in (ProfilerActivity.CPU, ProfilerActivity.CUDA) if a in supported_activities()]
        profiler = profile(activities=activities, record_shapes=True)
        profiler.start()
    except Exception as exc:
        _note(f"torch.profiler could not start ({type(exc).__name__}: {exc}): this process is not captured")
        return
    atexit.register(_write_trace, torch, profiler, folder)


def _used_cuda(torch) -> bool:
    """Looked up at exit: the tests stand a CPU process for one that used CUDA by replacing it."""
    return torch.cuda.is_initialized()


def _write_trace(torch, profiler, folder: str) -> None:
    """At exit: stop the profiler and, in a process that used CUDA, write its trace, gzipped,
    through a name gemmscope does not read, so that a trace appears whole or not at all."""
    path = os.path.join(folder, torch_trace_name(os.getpid(), _rank()))
    plain, partial = f"{path}.plain.partial", f"{path}.partial"
    try:
        used_cuda = _used_cuda(torch)
        if not _profiler_enabled():
            # a profiler the program starts itself ends this one: its own traces are the ones to read
            if used_cuda:
                _note("torch.profiler was stopped by the program (does it run torch.profiler itself? Then check "
                      "its traces with gemmscope verify --trace): no trace written")
            return
        if used_cuda:
            try:
                torch.cuda.synchronize()  # kernels still running are in the trace too
            except Exception:  # a CUDA error ended the program: what finished is still written
                pass
        profiler.stop()
        if not used_cuda:
            return
        profiler.export_chrome_trace(plain)
        # level 1: a trace is read once; a long run's is hundreds of MB
        with open(plain, "rb") as source, gzip.open(partial, "wb", compresslevel=1) as target:
            shutil.copyfileobj(source, target, 1 << 20)
        os.replace(partial, path)
    except Exception as exc:  # never break the program being checked, nor its exit
        _note(f"torch.profiler trace not written ({type(exc).__name__}: {exc})")
    finally:
        for leftover in (plain, partial):
            if os.path.exists(leftover):
                os.remove(leftover)


def _patch_and_profile_torch(torch) -> None:
    _patch_torch(torch)
    _start_profiler(torch)


# --- installing the patches on import ---------------------------------------------------------

_PATCHES = {"torch": _patch_and_profile_torch, _QUANTIZATION: _patch_quantization, _GEMM: _patch_gemm}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        patch = _PATCHES.pop(fullname, None)
        if patch is None:
            return None
        sys.meta_path.remove(self)  # no recursion into ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            if _PATCHES:
                sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


sys.meta_path.insert(0, _Finder())

# Run the sitecustomize this one shadows, as Python would have.
_here = os.path.dirname(os.path.abspath(__file__))
_shadowed = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here]
)
if _shadowed is not None and _shadowed.loader is not None:
    _shadowed.loader.exec_module(importlib.util.module_from_spec(_shadowed))
