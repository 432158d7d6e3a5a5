"""Records, inside a profiled program, what Transformer Engine was asked to run.

`gemmscope verify` puts this folder first on PYTHONPATH of the command it profiles, so Python
imports this file at start-up in every process of the command (a launcher's too). It waits for
TE's modules to be imported, then patches them so that the trace holds (labels in
gemmscope_protocol.py beside this file):

- every ``te.autocast`` region, with its recipe (what the run asked for);
- every GEMM call of TE's Python (``general_gemm`` and the grouped entry points): the TE module
  or operation that made it, its name and place in the model, the pass and the operand types TE
  was handed, as a range on the thread that launches the kernels;
- the process's rank, once.

It never changes what TE computes. On a TE that lacks an entry point it says so once on stderr
and the trace falls back to TE's own NVTX ranges. The interpreter's own sitecustomize, if any, is
still run afterwards.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import threading

from gemmscope_protocol import (
    AUTOCAST_PREFIX,
    GEMM_PREFIX,
    PASS_BY_LAYOUT,
    PROCESS_PREFIX,
    SOFTWARE_PREFIX,
    UNKNOWN,
    format_record,
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
                    "OptimizedModule", "FSDPModule"}


def _note(message: str) -> None:
    print(f"gemmscope hook: {message}", file=sys.stderr, flush=True)


# --- te.autocast ------------------------------------------------------------------------------

def _patch_quantization(quantization_module) -> None:
    import torch

    manager = quantization_module.FP8GlobalStateManager
    original_enter = manager.autocast_enter.__func__
    original_exit = manager.autocast_exit.__func__

    def autocast_enter(cls, *args, **kwargs):
        original_enter(cls, *args, **kwargs)
        recipe = cls.get_fp8_recipe() if cls.is_fp8_enabled() else None
        name = type(recipe).__name__ if recipe is not None else "disabled"
        torch.cuda.nvtx.range_push(f"{AUTOCAST_PREFIX}{name})")

    def autocast_exit(cls, *args, **kwargs):
        torch.cuda.nvtx.range_pop()
        original_exit(cls, *args, **kwargs)

    manager.autocast_enter = classmethod(autocast_enter)
    manager.autocast_exit = classmethod(autocast_exit)
    _mark_process(torch)


def _mark_process(torch) -> None:
    env = os.environ
    rank = env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", env.get("SLURM_PROCID", UNKNOWN)))
    local_rank = env.get("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", env.get("SLURM_LOCALID", UNKNOWN)))
    world_size = env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", env.get("SLURM_NTASKS", UNKNOWN)))
    torch.cuda.nvtx.mark(format_record(PROCESS_PREFIX, {
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
    torch.cuda.nvtx.mark(format_record(SOFTWARE_PREFIX, versions))


# --- which module: layer paths ----------------------------------------------------------------

def _name_tree(module, _args) -> None:
    """Global forward pre-hook: the first module whose forward runs without a path is the
    outermost one; every module under it gets its attribute path (wrappers left out), once.
    Later calls cost one dict lookup. Walks `_modules` itself, since containers such as
    ModuleList are iterated, never called, and so never reach this hook. The basic operations
    a te.ops operation is made of share its path."""
    if "_gemmscope_path" in module.__dict__:
        return
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
    return isinstance(obj, torch.nn.Module) and type(obj).__module__.startswith("transformer_engine")


def _module_record(module) -> dict:
    """What a GEMM's record says of its module; made once per module (its name and path are
    set before its first forward) and kept on it: GEMM calls are a hot path."""
    state = module.__dict__
    record = state.get("_gemmscope_record")
    if record is not None:
        return record
    name = state.get("name") or state.get("ub_name") or ""
    path = state.get("_gemmscope_path")
    if path is None:  # a te.ops fused operation, made by the fuser: where its basic ops are
        parts = [op.__dict__.get("_gemmscope_path") for op in getattr(module, "basic_ops", ())]
        path = "+".join(dict.fromkeys(p for p in parts if p))
    record = {"module": type(module).__name__, "name": name, "layer": path}
    state["_gemmscope_record"] = record
    return record


def _calling_module(torch, function_ctx_type) -> dict:
    """The innermost TE module or fusible operation among the TE frames calling this GEMM. In a
    forward pass it is the `self` of a frame; an autograd context met on the way is stamped
    with it, and in the backward pass (autograd's thread, where no module frame is on the
    stack) the same context says which module's GEMM this is."""
    frame = sys._getframe(2)
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
    return {"module": UNKNOWN, "name": "", "layer": ""}


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


def _recording(entry: str, original, torch):
    parameters = list(inspect.signature(original).parameters.values())
    position = {p.name: i for i, p in enumerate(parameters)}
    layout_default = parameters[position["layout"]].default
    function_ctx_type = torch.autograd.function.FunctionCtx

    def recorded(*args, **kwargs):
        if getattr(_in_gemm_call, "inside", False):  # a grouped entry point calling general_gemm
            return original(*args, **kwargs)
        if not _software_marked:
            _software_marked.append(True)
            try:
                _mark_software(torch)
            except Exception as exc:  # never break the program being checked
                _note(f"software versions not recorded: {type(exc).__name__}")
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
        except Exception as exc:  # never break the program being checked
            label = format_record(GEMM_PREFIX, {"entry": entry, "error": type(exc).__name__})
        torch.cuda.nvtx.range_push(label)
        _in_gemm_call.inside = True
        try:
            return original(*args, **kwargs)
        finally:
            _in_gemm_call.inside = False
            torch.cuda.nvtx.range_pop()

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
    torch.nn.modules.module.register_module_forward_pre_hook(_name_tree)


# --- installing the patches on import ---------------------------------------------------------

_PATCHES = {_QUANTIZATION: _patch_quantization, _GEMM: _patch_gemm}


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
