"""Which module makes a GEMM, for gemmscope's start-up hook (sitecustomize.py beside this file): the
model's layer paths, the TE module or operation behind a TE GEMM call, the module of any kind
around a GEMM, and the autograd.Function whose backward will run a GEMM's gradients."""

import os
import sys

from gemmscope_protocol import UNKNOWN
from gemmscope_records import te_base_class, te_class, thread

# Attributes through which wrappers hold the module they wrap, and wrapper classes (DDP holds it
# as `module`; Lightning Fabric's _FabricModule as `_forward_module`, and the module it was given as
# `_original_module`, which is the same one or inside it): left out of layer paths.
_WRAPPER_ATTRIBUTES = {"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod", "_forward_module",
                       "_original_module"}
_BASIC_OPS = "basic_ops"  # te.ops FusedOperation's list of the basic operations it fuses
_WRAPPER_CLASSES = {"FullyShardedDataParallel", "DistributedDataParallel", "CheckpointWrapper",
                    "OptimizedModule", "FSDPModule", "Float16Module", "_FabricModule", "DeepSpeedEngine"}


# Looked up once torch is imported (bind): every GEMM call reads them.
_CALL_IMPL = None  # nn.Module._call_impl's code
_is_compiling = None  # torch.compiler.is_compiling
_current_autograd_node = None  # torch._C._current_autograd_node


def bind(torch) -> None:
    global _CALL_IMPL, _is_compiling, _current_autograd_node
    _CALL_IMPL = torch.nn.Module._call_impl.__code__
    _is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    _current_autograd_node = getattr(torch._C, "_current_autograd_node", lambda: None)


def running_module(frame):
    """The innermost module whose forward runs on this thread, read from the frames that call a
    GEMM (None outside every module): every module call runs nn.Module._call_impl, whose `self` is
    the module. Read at the GEMM call, not kept by module hooks: global module hooks would put every
    module call of the program on nn.Module's slow path. The model's modules are named (name_tree)
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
        name_tree(outermost)
        if "_gemmscope_path" not in innermost.__dict__:  # run by a module that does not hold it
            name_tree(innermost)
    return innermost


def compiling() -> bool:
    return _is_compiling is not None and _is_compiling()


def name_tree(module) -> None:
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


def owner_record(module) -> dict:
    """The innermost module of any kind around a GEMM call (`module`, running_module): in a
    backward pass, with no module's forward running inside it (activation checkpointing's
    recompute), the module of the forward call whose backward node runs now (gemmscope_torch_gemms._watch_backward)."""
    if module is not None:
        return {"owner": type(module).__name__, "layer": module.__dict__.get("_gemmscope_path", "")}
    running = thread.__dict__.get("node")
    if running:
        return {"owner": running[-1]["module"], "layer": running[-1]["layer"]}
    return {"owner": UNKNOWN, "layer": ""}


def calling_module(torch, function_ctx_type) -> dict:
    """The TE module or fusible operation that called this GEMM. In a forward pass it is the
    innermost module running on this thread (running_module) when that is a TE module; the
    autograd.Function it applies is stamped with it (gemmscope_torch_gemms._recording_apply), and in the backward pass
    that Function's node, the one running, says whose GEMM this is. Otherwise (te.ops, whose fuser calls its operations
    without calling them as modules; a node nothing stamped) TE's calling frames are read
    (calling_frames). A GEMM a framework hands TE from a module of its own (Megatron's MoE
    router) has none: its owner says where it is."""
    module = running_module(sys._getframe(2))
    if module is not None:
        if te_class(type(module))[1]:
            record = _module_record(module)
            pending = thread.__dict__.get("pending")
            if pending:
                pending[-1][1] = record
            return record
    else:
        node = _current_autograd_node()
        record = getattr(node, "_gemmscope_module", None) if node is not None else None
        if record is not None:
            return record
    return calling_frames(torch, function_ctx_type, module)


def calling_frames(torch, function_ctx_type, module) -> dict:
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
    return {"module": UNKNOWN, "name": "", **owner_record(module)}


def await_backward_node(node: dict) -> None:
    """A GEMM inside a custom autograd.Function's forward (grad mode is off there): its node
    exists only once the Function's apply returns (gemmscope_torch_gemms._recording_apply)."""
    pending = thread.__dict__.get("pending")
    if pending:
        pending[-1][0] = node
