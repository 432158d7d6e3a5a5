"""gemmscope's autocast hook (gemmscope/autocast_hook/sitecustomize.py) with real torch on the CPU:
module paths, the module a GEMM runs in, the records of GEMMs outside Transformer Engine forward and
backward, torch._scaled_mm's scaling; every record read back by gemmscope's own parser
(te_ranges.parse), so that the hook and the reader agree.

The hook is loaded from its folder with its gemmscope_* modules beside it, as `verify`'s PYTHONPATH
loads it, and patches torch with its own patch_torch (undone after this module); the `hook` fixture
holds its parts (records, modules, te, torch_gemms). Two things are
replaced for these tests only: its device check (`launches_kernel`: a CPU tensor stands for a GPU
one) and torch.cuda.nvtx's writers (a CPU build of torch has none), by a recorder of what the hook
would have written. test_hook_installs_itself_on_import runs it unreplaced at start-up, in a
process of its own."""

import contextlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import gemmscope
from gemmscope.assembly import te_ranges
from gemmscope.autocast_hook.gemmscope_protocol import (
    CAPTURE_RANGE,
    GEMM_PREFIX,
    MEMBERS_FIELD,
    PASS_BY_LAYOUT,
    PROCESS_PREFIX,
    SOFTWARE_PREFIX,
    STEP_PREFIX,
    TESTED_TORCH,
    TORCH_GEMM_PREFIX,
    UNPATCHED_PREFIX,
    format_record,
    parse_members,
    parse_record,
)

HOOK_DIR = Path(gemmscope.__file__).resolve().parent / "autocast_hook"


def _owner_and_attribute(root, path: str) -> tuple[object, str]:
    """The object holding the attribute at dotted `path` under `root` (a submodule imported where
    its package does not hold it: torch.optim.optimizer), and its name."""
    *owner_path, attribute = path.split(".")
    owner = root
    for part in owner_path:
        owner = (getattr(owner, part) if hasattr(owner, part) or not isinstance(owner, type(root))
                 else importlib.import_module(f"{owner.__name__}.{part}"))
    return owner, attribute


@contextlib.contextmanager
def _torch_patched_by(hook, torch):
    """The hook's patch_torch(torch) for the duration: the calls it replaces and Function.apply are put
    back afterwards, so the rest of the suite sees torch as it was."""
    owners = [_owner_and_attribute(torch, path) for path, *_ in hook.torch_gemms._TORCH_GEMM_CALLS]
    owners.append(_owner_and_attribute(torch, hook.torch_gemms.FUNCTION_APPLY))
    missing = object()
    saved = [(owner, attribute, vars(owner).get(attribute, missing)) for owner, attribute in owners]
    hook.torch_gemms.patch_torch(torch)
    try:
        yield
    finally:
        for owner, attribute, value in saved:
            if value is missing:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, value)


@pytest.fixture(scope="module")
def torch(torch_cpu):
    return torch_cpu


@pytest.fixture(scope="module")
def hook(torch):
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(HOOK_DIR))  # `from gemmscope_protocol import ...`, as on verify's PYTHONPATH
        # Its parts, not installed (gemmscope_install.install would wait for TE, which the rest of the
        # suite must not see patched): torch, imported already, is patched below as install would.
        parts = {part: importlib.import_module(f"gemmscope_{part}")
                 for part in ("install", "records", "modules", "te", "torch_gemms")}
        hook = SimpleNamespace(**parts)
        with _torch_patched_by(hook, torch):
            yield hook


class NvtxRecorder:
    """Stands in for torch.cuda.nvtx: what the hook writes, in order."""

    def __init__(self):
        self.events: list[tuple[str, str | None]] = []

    def range_push(self, label: str) -> None:
        self.events.append(("push", label))

    def range_pop(self) -> None:
        self.events.append(("pop", None))

    def mark(self, label: str) -> None:
        self.events.append(("mark", label))

    def pushed(self) -> list[str]:
        return [label for kind, label in self.events if kind == "push"]

    def torch_gemms(self) -> list[dict]:
        """Every torch_gemm range pushed, as gemmscope's reader sees it (te_ranges.parse) plus the
        op the hook named; each checked to read back as the hook wrote it."""
        gemms = []
        for label in self.pushed():
            written = parse_record(TORCH_GEMM_PREFIX, label)
            assert written is not None, f"not a torch_gemm record: {label}"
            read = te_ranges.parse(label)
            assert read["kind"] == te_ranges.TORCH_GEMM
            assert (read["module"], read["layer"], read["pass"]) == (
                None if written.get("module", "?") == "?" else written["module"],
                written.get("layer") or None, written.get("pass"))
            assert (read["operand_a"], read["operand_b"], read["scale"]) == (
                written.get("a"), written.get("b"), written.get("scale"))
            for key in ("m", "n", "k", "flops"):
                assert read[key] == (int(written[key]) if key in written else None), (key, label)
            gemms.append({"op": written["op"], **read})
        return gemms

    def balanced(self) -> bool:
        depth = 0
        for kind, _ in self.events:
            depth += {"push": 1, "pop": -1}.get(kind, 0)
            if depth < 0:
                return False
        return depth == 0


@pytest.fixture
def nvtx(hook, torch, monkeypatch) -> NvtxRecorder:
    """The hook recording GEMMs on CPU tensors into a fresh recorder, with fresh per-thread state."""
    recorder = NvtxRecorder()
    for writer in ("range_push", "range_pop", "mark"):
        monkeypatch.setattr(torch.cuda.nvtx, writer, getattr(recorder, writer))
    monkeypatch.setattr(hook.torch_gemms, "launches_kernel", lambda tensor: isinstance(tensor, torch.Tensor))
    hook.records.thread.__dict__.clear()  # fresh per-thread state
    yield recorder
    hook.records.thread.__dict__.clear()


def _layer_of(gemm: dict) -> tuple[str | None, str | None]:
    return gemm["module"], gemm["layer"]


# --- what is recorded at all ------------------------------------------------------------------

def test_cpu_gemms_are_not_recorded_by_the_hook_as_shipped(hook, torch, monkeypatch):
    recorder = NvtxRecorder()
    for writer in ("range_push", "range_pop", "mark"):
        monkeypatch.setattr(torch.cuda.nvtx, writer, getattr(recorder, writer))
    torch.nn.functional.linear(torch.randn(4, 8), torch.randn(16, 8))
    torch.randn(4, 8) @ torch.randn(8, 2)
    assert recorder.events == []


def test_software_versions_marked_once_at_the_first_gemm(hook, torch, nvtx, monkeypatch):
    monkeypatch.setattr(hook.records, "_software_marked", [])
    torch.mm(torch.randn(4, 8), torch.randn(8, 2))
    torch.mm(torch.randn(4, 8), torch.randn(8, 2))
    marks = [label for kind, label in nvtx.events if kind == "mark"]
    assert len(marks) == 1 and marks[0].startswith(SOFTWARE_PREFIX)
    assert nvtx.events[0] == ("mark", marks[0])  # before the first GEMM's range
    assert te_ranges.recorded_software(pd.Series(marks)) == {
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformer_engine": None, "cublaslt": None}


# --- GEMMs outside TE: op, operands, shape ----------------------------------------------------

# (id, call on operands made by t(*shape), op as recorded, (M, N, K)): every patched call, leading
# dimensions folded into M.
_GEMM_CALLS = [
    ("F.linear 3-D", lambda torch, t: torch.nn.functional.linear(t(2, 3, 8), t(16, 8)), "linear", (6, 16, 8)),
    ("F.linear bias", lambda torch, t: torch.nn.functional.linear(t(4, 8), t(16, 8), t(16)), "linear", (4, 16, 8)),
    ("torch.matmul", lambda torch, t: torch.matmul(t(4, 8), t(8, 5)), "matmul", (4, 5, 8)),
    ("torch.matmul 3-D", lambda torch, t: torch.matmul(t(2, 4, 8), t(8, 5)), "matmul", (8, 5, 8)),
    ("torch.matmul broadcast", lambda torch, t: torch.matmul(t(4, 8), t(3, 8, 5)), "matmul", (12, 5, 8)),
    ("torch.matmul vector", lambda torch, t: torch.matmul(t(4, 8), t(8)), "matmul", (4, 1, 8)),
    ("torch.mm", lambda torch, t: torch.mm(t(4, 8), t(8, 5)), "mm", (4, 5, 8)),
    ("torch.bmm", lambda torch, t: torch.bmm(t(3, 4, 8), t(3, 8, 5)), "bmm", (12, 5, 8)),
    ("torch.addmm", lambda torch, t: torch.addmm(t(4, 5), t(4, 8), t(8, 5)), "addmm", (4, 5, 8)),
    ("torch.baddbmm", lambda torch, t: torch.baddbmm(t(3, 4, 5), t(3, 4, 8), t(3, 8, 5)), "baddbmm", (12, 5, 8)),
    ("Tensor.matmul", lambda torch, t: t(4, 8).matmul(t(8, 5)), "matmul", (4, 5, 8)),
    ("@", lambda torch, t: t(2, 4, 8) @ t(8, 5), "matmul", (8, 5, 8)),
    ("Tensor.mm", lambda torch, t: t(4, 8).mm(t(8, 5)), "mm", (4, 5, 8)),
    ("Tensor.bmm", lambda torch, t: t(3, 4, 8).bmm(t(3, 8, 5)), "bmm", (12, 5, 8)),
    ("Tensor.addmm", lambda torch, t: t(4, 5).addmm(t(4, 8), t(8, 5)), "addmm", (4, 5, 8)),
    ("Tensor.baddbmm", lambda torch, t: t(3, 4, 5).baddbmm(t(3, 4, 8), t(3, 8, 5)), "baddbmm", (12, 5, 8)),
]


@pytest.mark.parametrize("call, op, shape", [case[1:] for case in _GEMM_CALLS], ids=[case[0] for case in _GEMM_CALLS])
@pytest.mark.parametrize("dtype_name, operand", [("bfloat16", "bf16"), ("float16", "fp16"), ("float32", "fp32")])
def test_each_gemm_call_recorded_once_with_op_operands_shape_and_flops(torch, nvtx, call, op, shape, dtype_name, operand):
    m, n, k = shape
    with torch.no_grad():
        call(torch, lambda *dims: torch.randn(*dims).to(getattr(torch, dtype_name)))
    gemms = nvtx.torch_gemms()
    assert len(gemms) == 1, nvtx.pushed()
    gemm = gemms[0]
    assert (gemm["op"], gemm["pass"], gemm["operand_a"], gemm["operand_b"]) == (op, "fprop", operand, operand)
    assert (gemm["m"], gemm["n"], gemm["k"], gemm["flops"]) == (m, n, k, 2 * m * n * k)
    assert gemm["requested"] == operand and gemm["scale"] is None
    assert (gemm["module"], gemm["layer"]) == (None, None)  # called outside any module
    assert nvtx.balanced()


@pytest.mark.parametrize("call, op, shape", [
    (lambda torch, t: torch.nn.functional.linear(input=t(4, 8), weight=t(16, 8)), "linear", (4, 16, 8)),
    (lambda torch, t: torch.matmul(t(4, 8), other=t(8, 5)), "matmul", (4, 5, 8)),
    (lambda torch, t: torch.mm(input=t(4, 8), mat2=t(8, 5)), "mm", (4, 5, 8)),
    (lambda torch, t: torch.bmm(t(3, 4, 8), mat2=t(3, 8, 5)), "bmm", (12, 5, 8)),
    (lambda torch, t: torch.addmm(t(4, 5), mat1=t(4, 8), mat2=t(8, 5)), "addmm", (4, 5, 8)),
    (lambda torch, t: torch.baddbmm(t(3, 4, 5), batch1=t(3, 4, 8), batch2=t(3, 8, 5)), "baddbmm", (12, 5, 8)),
    (lambda torch, t: t(4, 8).matmul(other=t(8, 5)), "matmul", (4, 5, 8)),
    (lambda torch, t: t(4, 5).addmm(mat1=t(4, 8), mat2=t(8, 5)), "addmm", (4, 5, 8)),
], ids=["F.linear", "torch.matmul", "torch.mm", "torch.bmm", "torch.addmm", "torch.baddbmm", "Tensor.matmul",
        "Tensor.addmm"])
def test_operands_given_by_name_recorded_too(torch, nvtx, call, op, shape):
    with torch.no_grad():
        call(torch, lambda *dims: torch.randn(*dims, dtype=torch.bfloat16))
    assert [(g["op"], g["operand_a"], (g["m"], g["n"], g["k"])) for g in nvtx.torch_gemms()] == [(op, "bf16", shape)]


@pytest.mark.parametrize("dtype_name, operand", [("bfloat16", "bf16"), ("float16", "fp16")])
def test_under_torch_autocast_operands_ask_for_the_autocast_type(torch, nvtx, dtype_name, operand):
    """A float32 model under torch.autocast: F.linear casts its operands before the GEMM, so the
    GEMM asks for the autocast type, not float32 (a BF16 kernel is what was asked, no fallback);
    float64 is not cast, and outside autocast float32 asks for float32."""
    weight = torch.randn(16, 8)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=getattr(torch, dtype_name)):
            torch.nn.functional.linear(torch.randn(4, 8), weight)
            torch.mm(torch.randn(4, 8, dtype=torch.float64), torch.randn(8, 2, dtype=torch.float64))
        torch.nn.functional.linear(torch.randn(4, 8), weight)
    assert [(g["operand_a"], g["operand_b"]) for g in nvtx.torch_gemms()] == [
        (operand, operand), ("fp64", "fp64"), ("fp32", "fp32")]


def test_fp64_operands_named(torch, nvtx):
    torch.mm(torch.randn(4, 8, dtype=torch.float64), torch.randn(8, 2, dtype=torch.float64))
    (fp64,) = nvtx.torch_gemms()
    assert (fp64["operand_a"], fp64["operand_b"], fp64["requested"]) == ("fp64", "fp64", "fp64")


def test_a_failing_gemm_keeps_ranges_balanced_and_raises_as_it_would(torch, nvtx):
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(torch.randn(4, 8), torch.randn(7, 2))
    assert len(nvtx.torch_gemms()) == 1 and nvtx.balanced()


def test_a_record_the_hook_cannot_make_names_its_error_and_the_call_still_runs(torch, nvtx):
    """torch._scaled_mm without scales: the record cannot say its scaling; the call goes on to
    torch's own error."""
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(16, 32).to(torch.float8_e4m3fn).t()
    with pytest.raises(TypeError):
        torch._scaled_mm(a, b)
    assert nvtx.pushed() == [f"{TORCH_GEMM_PREFIX}op=_scaled_mm|error=AttributeError"]
    assert te_ranges.parse(nvtx.pushed()[0])["kind"] == te_ranges.TORCH_GEMM
    assert nvtx.balanced()


# --- module paths -----------------------------------------------------------------------------

def _two_block_model(torch):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.Sequential(nn.Linear(8, 8))
            self.mlp = nn.ModuleDict({"up": nn.Linear(8, 16), "down": nn.Linear(16, 8)})

        def forward(self, x):
            return self.mlp["down"](self.mlp["up"](self.attn(x)))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Block(), Block()])
            self.head = nn.Linear(8, 4)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.head(x)

    return Model()


_TWO_BLOCK_LAYERS = [("Linear", f"layers.{i}.{path}") for i in (0, 1)
                     for path in ("attn.0", "mlp.up", "mlp.down")] + [("Linear", "head")]


def test_layer_paths_through_nested_modules_module_lists_and_dicts(torch, nvtx):
    _two_block_model(torch)(torch.randn(3, 8))
    assert [_layer_of(g) for g in nvtx.torch_gemms()] == _TWO_BLOCK_LAYERS
    assert nvtx.balanced()


@pytest.mark.parametrize("attribute", ["_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod",
                                       "_forward_module", "_original_module"])
def test_a_wrapper_attribute_is_left_out_of_paths(torch, nvtx, attribute):
    class Holder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.add_module(attribute, inner)

        def forward(self, x):
            return getattr(self, attribute)(x)

    Holder(_two_block_model(torch))(torch.randn(3, 8))
    assert [_layer_of(g) for g in nvtx.torch_gemms()] == _TWO_BLOCK_LAYERS


@pytest.mark.parametrize("wrapper_class", ["FullyShardedDataParallel", "DistributedDataParallel",
                                           "CheckpointWrapper", "OptimizedModule", "FSDPModule", "Float16Module",
                                           "_FabricModule", "DeepSpeedEngine"])
def test_a_wrapper_class_is_left_out_of_paths_whatever_it_holds_its_module_as(torch, nvtx, wrapper_class):
    def forward(self, x):
        return self.module(x)

    wrapper = type(wrapper_class, (torch.nn.Module,), {"forward": forward})()
    wrapper.module = _two_block_model(torch)
    wrapper(torch.randn(3, 8))
    assert [_layer_of(g) for g in nvtx.torch_gemms()] == _TWO_BLOCK_LAYERS


def test_real_wrappers_left_out_checkpoint_wrapper_and_ddp(torch, nvtx, tmp_path):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.nn.parallel import DistributedDataParallel

    model = _two_block_model(torch)
    model.layers[1] = checkpoint_wrapper(model.layers[1])
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        DistributedDataParallel(model)(torch.randn(3, 8))
    finally:
        torch.distributed.destroy_process_group()
    assert [_layer_of(g) for g in nvtx.torch_gemms() if g["pass"] == "fprop"] == _TWO_BLOCK_LAYERS


def test_real_lightning_fabric_module_left_out_of_paths(torch, nvtx):
    """Fabric.setup wraps the model in a _FabricModule holding it twice (_forward_module and
    _original_module): the paths are the model's own, as without Fabric."""
    fabric_module = pytest.importorskip("lightning.fabric")
    fabric = fabric_module.Fabric(accelerator="cpu", devices=1)
    model = fabric.setup(_two_block_model(torch))
    assert type(model).__name__ == "_FabricModule"
    model(torch.randn(3, 8))
    assert [_layer_of(g) for g in nvtx.torch_gemms()] == _TWO_BLOCK_LAYERS


def test_compiled_module_wrapper_left_out_of_paths(hook, torch):
    model = _two_block_model(torch)
    outer = torch.nn.Sequential(torch.compile(model))  # OptimizedModule holds it as _orig_mod
    hook.modules.name_tree(outer)
    assert model.__dict__["_gemmscope_path"] == "0"
    assert model.layers[1].mlp["up"].__dict__["_gemmscope_path"] == "0.layers.1.mlp.up"


def test_basic_operations_of_a_fused_operation_share_its_path(hook, torch):
    nn = torch.nn

    class FusedOperation(nn.Module):  # as te.ops' fuser holds the operations it fuses
        def __init__(self):
            super().__init__()
            self.basic_ops = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])

    model = nn.Module()
    model.blocks = nn.ModuleList([nn.Module()])
    model.blocks[0].fused = FusedOperation()
    model.blocks[0].skipped = None
    model.blocks[0].register_module("absent", None)
    hook.modules.name_tree(model)
    fused = model.blocks[0].fused
    assert [op.__dict__["_gemmscope_path"] for op in fused.basic_ops] == ["blocks.0.fused"] * 2
    assert fused.basic_ops.__dict__["_gemmscope_path"] == "blocks.0.fused"


def test_a_module_shared_by_two_parents_has_one_path(torch, nvtx):
    nn = torch.nn
    shared = nn.Linear(8, 8)
    model = nn.Sequential(nn.Sequential(shared), nn.Sequential(shared))
    model(torch.randn(2, 8))
    layers = [_layer_of(g) for g in nvtx.torch_gemms()]
    assert len(layers) == 2 and layers[0] == layers[1] and layers[0][1] in ("0.0", "1.0")


# --- which module: the per-thread stack of running modules ------------------------------------

def test_innermost_running_module_owns_a_gemm_and_its_parent_again_after(torch, nvtx):
    nn = torch.nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.weight = nn.Parameter(torch.randn(8, 8))

        def forward(self, x):
            scores = torch.matmul(x, x.transpose(-1, -2))  # the module's own GEMM
            out = self.proj(scores @ x)
            return out @ self.weight  # after its child returned

    model = nn.Sequential(Attention())
    model(torch.randn(2, 4, 8))
    assert [(g["op"], *_layer_of(g)) for g in nvtx.torch_gemms() if g["pass"] == "fprop"] == [
        ("matmul", "Attention", "0"), ("matmul", "Attention", "0"), ("linear", "Linear", "0.proj"),
        ("matmul", "Attention", "0")]


def test_the_hook_leaves_module_calls_on_their_fast_path(hook, torch):
    """No global module hook: with one, every module call of the program would run nn.Module's
    slow path (the hook's cost on a launch-bound training step); the module around a GEMM is read
    from the calling frames instead."""
    module_lib = torch.nn.modules.module
    assert not (module_lib._global_forward_pre_hooks or module_lib._global_forward_hooks
                or module_lib._global_backward_pre_hooks or module_lib._global_backward_hooks)


def test_an_exception_inside_forward_leaves_the_module(hook, torch, nvtx):
    nn = torch.nn

    class Failing(nn.Module):
        def forward(self, x):
            torch.mm(x, x.t())
            raise ValueError("planted")

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.failing = Failing()

        def forward(self, x):
            with contextlib.suppress(ValueError):
                self.failing(x)
            return torch.mm(x, x.t())

    Outer()(torch.randn(2, 8))
    assert [_layer_of(g) for g in nvtx.torch_gemms() if g["pass"] == "fprop"] == [
        ("Failing", "failing"), ("Outer", None)]


def test_modules_running_on_one_thread_do_not_own_another_threads_gemms(torch, nvtx):
    seen_elsewhere = []

    class Owner(torch.nn.Module):
        def forward(self, x):
            worker = threading.Thread(target=lambda: seen_elsewhere.append(torch.mm(x, x.t())))
            worker.start()
            worker.join()
            return torch.mm(x, x.t())

    with torch.no_grad():
        torch.nn.Sequential(Owner())(torch.randn(2, 8))
    assert len(seen_elsewhere) == 1
    assert [_layer_of(g) for g in nvtx.torch_gemms()] == [(None, None), ("Owner", "0")]


# --- backward ---------------------------------------------------------------------------------

@pytest.mark.parametrize("bias, input_shape, node", [
    (False, (4, 8), "MmBackward0"), (True, (4, 8), "AddmmBackward0"),
    (False, (2, 3, 8), "MmBackward0"), (True, (2, 3, 8), "AddmmBackward0")])
def test_backward_of_a_gemm_autograd_runs_in_cpp_is_one_range_around_its_node(
        hook, torch, nvtx, bias, input_shape, node):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16, bias=bias))
    x = torch.randn(*input_shape, dtype=torch.bfloat16, requires_grad=True)
    model.to(torch.bfloat16)(x).float().sum().backward()
    forward, backward = nvtx.torch_gemms()
    assert (forward["op"], forward["pass"]) == ("linear", "fprop")
    assert (backward["op"], backward["pass"], *_layer_of(backward)) == (node, "backward", "Linear", "0")
    assert (backward["operand_a"], backward["operand_b"], backward["requested"]) == ("bf16", "bf16", "bf16")
    assert backward["m"] is None and backward["flops"] is None  # two GEMMs run inside: no one shape
    assert nvtx.balanced() and hook.records.thread.node == []


def test_backward_node_range_holds_the_node_only(torch, nvtx):
    """Ranges pushed in the order autograd runs the nodes: the GEMM's node range closes before the
    next node's opens (a range left open would take in every later kernel)."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    model(torch.randn(4, 8, requires_grad=True)).sum().backward()
    assert [kind if kind == "pop" else parse_record(TORCH_GEMM_PREFIX, label)["op"]
            for kind, label in nvtx.events if kind != "mark"] == [
        "linear", "pop", "linear", "pop", "AddmmBackward0", "pop", "AddmmBackward0", "pop"]
    assert [g["layer"] for g in nvtx.torch_gemms()] == ["0", "2", "2", "0"]


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_a_forward_recomputed_in_backward_is_fprop_of_its_own_modules(hook, torch, nvtx, use_reentrant):
    """Activation checkpointing runs a block's forward again inside the backward (inside the
    backward node that needs its activations): those GEMMs are its modules' fprop, not backward
    GEMMs of that node's module."""
    from torch.utils.checkpoint import checkpoint

    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(8, 16, bias=False)
            self.down = nn.Linear(16, 8, bias=False)

        def forward(self, x):
            return self.down(self.up(x).relu())

    class Checkpointed(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=use_reentrant)

    Checkpointed()(torch.randn(4, 8, requires_grad=True)).sum().backward()
    gemms = nvtx.torch_gemms()
    assert [(g["layer"], g["pass"], g["m"], g["n"]) for g in gemms if g["op"] == "linear"] == [
        ("block.up", "fprop", 4, 16), ("block.down", "fprop", 4, 8)] * 2
    assert {g["layer"] for g in gemms if g["op"] == "MmBackward0"} == {"block.up", "block.down"}
    assert nvtx.balanced() and hook.records.thread.node == []


def _linear_function(torch):
    """A custom autograd.Function, as Megatron-Core's and torchao's linears are: its forward and
    backward call torch's GEMMs themselves."""
    F = torch.nn.functional

    class LinearFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return F.linear(x, weight)

        @staticmethod
        def backward(ctx, grad_output):
            x, weight = ctx.saved_tensors
            grad_x = torch.matmul(grad_output, weight)
            grad_weight = grad_output.reshape(-1, grad_output.shape[-1]).t().matmul(x.reshape(-1, x.shape[-1]))
            return grad_x, grad_weight

    class FunctionLinear(torch.nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(out_features, in_features))

        def forward(self, x):
            return LinearFunction.apply(x, self.weight)

    return FunctionLinear


def test_custom_function_backward_gemms_are_dgrad_and_wgrad_of_the_forward_module(hook, torch, nvtx):
    model = torch.nn.Sequential(torch.nn.Identity(), _linear_function(torch)(8, 16))
    model(torch.randn(2, 3, 8, requires_grad=True)).sum().backward()
    gemms = nvtx.torch_gemms()
    assert [(g["op"], g["pass"], *_layer_of(g), g["m"], g["n"], g["k"]) for g in gemms] == [
        ("linear", "fprop", "FunctionLinear", "1", 6, 16, 8),
        ("LinearFunctionBackward", "backward", "FunctionLinear", "1", None, None, None),
        ("matmul", "dgrad", "FunctionLinear", "1", 6, 8, 16),
        ("matmul", "wgrad", "FunctionLinear", "1", 16, 8, 6),
    ]
    # the two backward GEMMs inside the node's range
    assert [kind for kind, _ in nvtx.events if kind != "mark"][2:] == ["push", "push", "pop", "push", "pop", "pop"]
    assert nvtx.balanced() and hook.records.thread.node == [] and hook.records.thread.pending == []


def test_custom_function_backward_gemm_whose_shape_fits_both_is_just_backward(torch, nvtx):
    model = _linear_function(torch)(8, 8)
    model(torch.randn(8, 8, requires_grad=True)).sum().backward()
    assert [g["pass"] for g in nvtx.torch_gemms()] == ["fprop", "backward", "backward", "backward"]


def test_custom_function_returning_a_tuple_with_its_weight_gradient_transposed(torch, nvtx):
    """A Function over x·W (W stored K×N, as torch.matmul takes it) returning (output, a tensor
    without gradient), whose backward computes the weight gradient N×K and transposes it: still
    the wgrad."""
    class MatmulFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return torch.matmul(x, weight), torch.zeros(1)

        @staticmethod
        def backward(ctx, grad_output, _grad_zeros):
            x, weight = ctx.saved_tensors
            return grad_output.matmul(weight.t()), grad_output.t().matmul(x).t()

    weight = torch.randn(8, 16, requires_grad=True)
    output, _ = MatmulFunction.apply(torch.randn(4, 8, requires_grad=True), weight)
    output.sum().backward()
    assert [(g["op"], g["pass"], g["m"], g["n"], g["k"]) for g in nvtx.torch_gemms()] == [
        ("matmul", "fprop", 4, 16, 8), ("MatmulFunctionBackward", "backward", None, None, None),
        ("matmul", "dgrad", 4, 8, 16), ("matmul", "wgrad", 16, 8, 4)]


def test_a_gemm_in_no_grad_outside_any_function_watches_no_backward(hook, torch, nvtx):
    with torch.no_grad():
        torch.nn.Linear(8, 8)(torch.randn(4, 8))
    assert [g["pass"] for g in nvtx.torch_gemms()] == ["fprop"]
    assert "pending" not in hook.records.thread.__dict__


# --- torch._scaled_mm -------------------------------------------------------------------------

def _fp8(torch, rows, cols, column_major=False):
    tensor = torch.randn(cols, rows) if column_major else torch.randn(rows, cols)
    tensor = tensor.to(torch.float8_e4m3fn)
    return tensor.t() if column_major else tensor


def _scaled_mm_record(torch, nvtx, a, b, scale_a, scale_b, **kwargs) -> dict:
    """The record of one torch._scaled_mm; it is written before the call, and the CPU runs only
    the tensor-wise and row-wise ones, so torch's error for the others is let pass."""
    with contextlib.suppress(RuntimeError, ValueError, NotImplementedError):
        torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, **kwargs)
    (gemm,) = nvtx.torch_gemms()
    assert nvtx.balanced()
    return gemm


@pytest.mark.parametrize("scales, scaling, requested", [
    (lambda torch: (torch.tensor(1.0), torch.tensor(1.0)), "tensorwise", "fp8"),
    (lambda torch: (torch.ones(16, 1), torch.ones(1, 24)), "rowwise", "fp8-rowwise"),
    (lambda torch: (torch.ones(16, 2), torch.ones(2, 1)), "blockwise", "fp8-block"),  # 1x128 and 128x128 blocks
    (lambda torch: (torch.ones(16, 1), torch.ones(24, 1)), "blockwise", "fp8-block"),  # B's scale not per column
    (lambda torch: (torch.ones(16, 8).to(torch.float8_e8m0fnu), torch.ones(24, 8).to(torch.float8_e8m0fnu)),
     "mx", "mxfp8"),
])
def test_scaled_mm_scaling_from_its_scales(torch, nvtx, scales, scaling, requested):
    scale_a, scale_b = scales(torch)
    gemm = _scaled_mm_record(torch, nvtx, _fp8(torch, 16, 256), _fp8(torch, 256, 24, column_major=True),
                             scale_a, scale_b)
    assert (gemm["op"], gemm["operand_a"], gemm["operand_b"]) == ("_scaled_mm", "fp8", "fp8")
    assert (gemm["scale"], gemm["requested"]) == (scaling, requested)
    assert (gemm["m"], gemm["n"], gemm["k"], gemm["flops"]) == (16, 24, 256, 2 * 16 * 24 * 256)


def test_scaled_mm_operands_and_scales_given_by_name(torch, nvtx):
    a, b = _fp8(torch, 16, 32), _fp8(torch, 32, 24, column_major=True)
    # recorded before the call: a torch whose CPU _scaled_mm runs tensor-wise scales alone (2.11) raises after it
    with contextlib.suppress(RuntimeError):
        torch._scaled_mm(a, b, scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 24), out_dtype=torch.bfloat16)
    with contextlib.suppress(RuntimeError):
        torch._scaled_mm(input=a, mat2=b, scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 24),
                         out_dtype=torch.bfloat16)
    assert [(g["scale"], g["m"], g["n"], g["k"]) for g in nvtx.torch_gemms()] == [("rowwise", 16, 24, 32)] * 2


def addmm_float8_unwrapped(torch, a, b, scale_a, scale_b, is_rowwise_scaling, post_inverse_scale):
    """Named and with the locals of torchao's float8_ops.addmm_float8_unwrapped, which runs a
    row-wise request (use_fast_accum off) as a tensor-wise _scaled_mm and rescales after."""
    output = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    return output if post_inverse_scale is None else output * post_inverse_scale


def addmm_float8_other(torch, a, b, scale_a, scale_b, is_rowwise_scaling, post_inverse_scale):
    output = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    return output if post_inverse_scale is None else output * post_inverse_scale


@pytest.mark.parametrize("caller, is_rowwise, rescaled, scaling", [
    (addmm_float8_unwrapped, True, True, "rowwise-rescaled"),
    (addmm_float8_unwrapped, False, True, "tensorwise"),
    (addmm_float8_unwrapped, True, False, "tensorwise"),
    (addmm_float8_other, True, True, "tensorwise"),
])
def test_torchao_rowwise_request_run_tensorwise_is_rowwise_rescaled(torch, nvtx, caller, is_rowwise, rescaled, scaling):
    a, b = _fp8(torch, 16, 32), _fp8(torch, 32, 24, column_major=True)
    post_inverse_scale = torch.ones(16, 24) if rescaled else None
    caller(torch, a, b, torch.tensor(1.0), torch.tensor(1.0), is_rowwise, post_inverse_scale)
    (gemm,) = nvtx.torch_gemms()
    assert gemm["scale"] == scaling
    assert gemm["requested"] == ("fp8-rowwise" if scaling == "rowwise-rescaled" else "fp8")


@pytest.mark.parametrize("recipe, asked", [("tensorwise", "fp8"), ("rowwise", "fp8-rowwise")])
def test_a_float8_gemm_torchao_emulates_is_recorded_as_the_request_it_stands_for(torch, nvtx, recipe, asked):
    """Real torchao float8 training with `emulate` on (an FP32 torch.mm of the dequantized float8
    operands, on purpose): the GEMM that runs, in the forward and both backward GEMMs, is recorded
    as the float8 request it stands for, its scaling marked emulated; without `emulate` nothing is."""
    import dataclasses

    try:  # the test extra's torchao; the torch releases .ci/run also tries may be outside its range
        from torchao import float8
    except Exception as exc:
        pytest.skip(f"torchao's float8 does not import beside torch {torch.__version__}: {exc}")
    records = {}
    for emulate in (True, False):
        model = torch.nn.Sequential(torch.nn.Linear(32, 64, bias=False))
        config = dataclasses.replace(float8.Float8LinearConfig.from_recipe_name(recipe), emulate=emulate)
        float8.convert_to_float8_training(model, config=config)
        nvtx.events.clear()
        try:
            model(torch.randn(16, 32)).sum().backward()
        except Exception:  # torchao's real float8 GEMM, torch._scaled_mm, has no CPU kernel
            assert not emulate
        records[emulate] = [g for g in nvtx.torch_gemms() if (g["scale"] or "").startswith("emulated-")]
    emulated = records[True]
    assert [g["scale"] for g in emulated] == [f"emulated-{recipe}"] * 3
    assert [g["requested"] for g in emulated] == [asked] * 3
    assert sorted((g["m"], g["n"], g["k"]) for g in emulated) == sorted([(16, 64, 32), (16, 32, 64), (64, 32, 16)])
    assert records[False] == []


# --- operand types ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype_name, torch_type", [
    ("bfloat16", "bf16"), ("float16", "fp16"), ("float32", "fp32"), ("float64", "fp64"),
    ("float8_e4m3fn", "fp8"), ("float8_e5m2", "fp8"), ("float8_e4m3fnuz", "fp8"), ("float8_e5m2fnuz", "fp8"),
    ("int8", "torch.int8")])
def test_tensor_type_of_real_tensors(hook, torch, dtype_name, torch_type):
    assert hook.torch_gemms.tensor_type(torch.zeros(2, 2).to(getattr(torch, dtype_name))) == torch_type


def test_tensor_type_of_packed_fp4(hook, torch):
    assert hook.torch_gemms.tensor_type(torch.zeros(2, 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)) == "fp4"


def test_operand_type_of_plain_tensors_lists_and_nothing(hook, torch):
    bf16 = torch.zeros(2, 2, dtype=torch.bfloat16)
    assert [hook.te.operand_type(x) for x in (bf16, bf16.half(), bf16.float())] == ["bf16", "fp16", "fp32"]
    assert hook.te.operand_type([bf16.float(), bf16]) == "fp32"  # a grouped GEMM: its first member
    assert hook.te.operand_type((bf16,)) == "bf16"
    assert hook.te.operand_type([]) == hook.te.operand_type(None) == "?"
    assert hook.te.operand_type(bf16.double()) == "torch.float64"  # not one TE is handed: said as found


def test_a_debug_api_operand_is_the_tensor_the_gemm_takes(hook, torch):
    """TE's debug API hands general_gemm a DebugQuantizedTensor per operand, one tensor per use
    (high precision where it disables quantization); general_gemm takes A.get_tensor(not transa)
    and B.get_tensor(transb): the record types and sizes that one."""
    class DebugQuantizedTensor:  # the interface general_gemm uses (transformer_engine/debug/pytorch)
        def __init__(self, rowwise, columnwise):
            self.rowwise_gemm_tensor, self.columnwise_gemm_tensor = rowwise, columnwise

        def get_tensor(self, transpose: bool):
            return self.columnwise_gemm_tensor if transpose else self.rowwise_gemm_tensor

    weight = DebugQuantizedTensor(torch.zeros(16, 8, dtype=torch.bfloat16), torch.zeros(16, 8, dtype=torch.float16))
    grad = DebugQuantizedTensor(torch.zeros(4, 16, dtype=torch.bfloat16), torch.zeros(4, 16, dtype=torch.float32))
    x = torch.zeros(4, 8)
    fprop = hook.te.gemm_operands(weight, x, "TN")
    assert fprop[0] is weight.rowwise_gemm_tensor and fprop[1] is x
    assert hook.te.gemm_shape(*fprop, "TN") == (4, 16, 8)
    dgrad = hook.te.gemm_operands(weight, grad, "NN")
    assert [hook.te.operand_type(t) for t in dgrad] == ["fp16", "bf16"]
    wgrad = hook.te.gemm_operands(x, grad, "NT")
    assert wgrad[0] is x and hook.te.operand_type(wgrad[1]) == "fp32"


def test_a_custom_recipe_s_hybrid_and_identity_operands_are_the_tensors_the_gemm_takes(hook, torch):
    """TE 2.20's CustomRecipe hands general_gemm a HybridQuantizedTensorStorage (one sub-storage
    per use: FP8 rowwise for the forward, an IdentityTensorStorage columnwise for a high-precision
    backward) and IdentityTensorStorage (a high-precision tensor general_gemm dequantizes to its
    dtype): the record types the sub-storage that use takes, as TE's _unwrap_tensor picks it,
    through a debug wrapper too. Before, both were typed by their class names, and every such GEMM
    was a FALLBACK (a real CustomRecipe run on an H100)."""
    class Float8TensorStorage:
        def __init__(self, rows, cols):
            self._data = torch.zeros(rows, cols, dtype=torch.uint8)
            self.dtype = torch.bfloat16

    class IdentityTensorStorage:  # holds a high-precision tensor; dequantizes to its _dtype
        def __init__(self, dtype):
            self._dtype = dtype

    class HybridQuantizedTensorStorage:  # the interface _unwrap_tensor uses
        def __init__(self, rowwise, columnwise):
            self.rowwise_sub_storage, self.columnwise_sub_storage = rowwise, columnwise

    class DebugQuantizedTensor:
        def __init__(self, tensor):
            self.tensor = tensor

        def get_tensor(self, transpose: bool):
            return self.tensor

    weight = HybridQuantizedTensorStorage(Float8TensorStorage(16, 8), IdentityTensorStorage(torch.bfloat16))
    x = HybridQuantizedTensorStorage(Float8TensorStorage(4, 8), IdentityTensorStorage(torch.bfloat16))
    grad = IdentityTensorStorage(torch.bfloat16)
    fprop, dgrad, wgrad = (hook.te.gemm_operands(weight, x, "TN"), hook.te.gemm_operands(weight, grad, "NN"),
                           hook.te.gemm_operands(DebugQuantizedTensor(x), grad, "NT"))
    assert [hook.te.operand_type(t) for t in fprop] == ["fp8", "fp8"]
    assert [hook.te.operand_type(t) for t in dgrad] == ["bf16", "bf16"]
    assert [hook.te.operand_type(t) for t in wgrad] == ["bf16", "bf16"]
    assert te_ranges.requested_precision(*map(hook.te.operand_type, dgrad)) == "bf16"


@pytest.mark.parametrize("quantizer, storage, expected", [
    ("Float8Quantizer", "Float8TensorStorage", "fp8-delayed"),
    ("Float8CurrentScalingQuantizer", "Float8TensorStorage", "fp8-current"),
    ("Float8BlockQuantizer", "Float8BlockwiseQTensorStorage", "fp8-block"),
    ("MXFP8Quantizer", "MXFP8TensorStorage", "mxfp8"),
    ("NVFP4Quantizer", "NVFP4TensorStorage", "nvfp4"),
    (None, "Float8TensorStorage", "fp8"),
    ("SomeOtherQuantizer", "MXFP8TensorStorage", "mxfp8"),
    (None, "NVFP4TensorStorage", "nvfp4"),
])
def test_operand_type_of_te_quantized_tensors_by_quantizer_then_storage(hook, torch, quantizer, storage, expected):
    """TE's quantized tensors are torch.Tensor subclasses over a storage class, carrying the
    quantizer that made them (TE is not installable here: classes of TE's names, as the hook
    reads names)."""
    storage_class = type(storage, (), {})
    tensor_class = type("QuantizedTensor", (torch.Tensor, storage_class), {})
    tensor = torch.zeros(2, 2, dtype=torch.bfloat16).as_subclass(tensor_class)
    tensor._quantizer = type(quantizer, (), {})() if quantizer else None
    assert hook.te.operand_type(tensor) == expected


# --- torch.compile ----------------------------------------------------------------------------

@pytest.fixture
def compiling(torch, tmp_path, monkeypatch):
    """torch.compile with a cache of this test's own (a folder named as users may name theirs),
    forgotten afterwards."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "compile-cache"))
    torch._dynamo.reset()
    yield torch.compile
    torch._dynamo.reset()


def test_torch_compile_tracing_records_nothing(hook, torch, nvtx, compiling):
    model = _two_block_model(torch)
    compiling(model, backend="eager")(torch.randn(3, 8))
    assert nvtx.torch_gemms() == []


def test_gemms_inductor_generated_code_calls_are_not_recorded(hook, torch, nvtx, compiling):
    def step(a, b):
        return torch.mm(a, b).relu()

    a, b = torch.randn(256, 256), torch.randn(256, 256)
    compiled = compiling(step)(a, b)
    from torch._inductor.select_algorithm import extern_kernels

    # the generated code calls its extern kernel torch.mm through the hook's wrapper...
    assert getattr(extern_kernels.mm, "__wrapped__", None) is not None
    assert nvtx.events == []
    # ...which records the same call made eagerly
    assert torch.allclose(compiled, step(a, b))
    assert [g["op"] for g in nvtx.torch_gemms()] == ["mm"]


# --- installed as verify installs it ----------------------------------------------------------

_PROGRAM = """
import gemmscope_torch_gemms
import torch
gemmscope_torch_gemms.launches_kernel = lambda tensor: True
torch.cuda.nvtx.range_push = lambda label: print("push", label)
torch.cuda.nvtx.range_pop = lambda: print("pop")
torch.cuda.nvtx.mark = lambda label: print("mark", label)
torch.nn.Sequential(torch.nn.Linear(8, 4)).to(torch.bfloat16)(torch.randn(2, 8, dtype=torch.bfloat16))
"""


def test_hook_installs_itself_on_import(torch, tmp_path):
    """On PYTHONPATH first, as `verify` puts it: torch is patched when the program imports it,
    and the interpreter's own sitecustomize, which the hook shadows, still runs."""
    shadowed = tmp_path / "shadowed"
    shadowed.mkdir()
    (shadowed / "sitecustomize.py").write_text('print("shadowed sitecustomize ran")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), str(shadowed)])}
    done = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "shadowed sitecustomize ran"
    pushed = [line.removeprefix("push ") for line in lines if line.startswith("push ")]
    assert len(pushed) == 1
    read = te_ranges.parse(pushed[0])
    assert (read["module"], read["layer"], read["requested"], read["m"], read["n"], read["k"]) == (
        "Linear", "0", "bf16", 2, 4, 8)
    assert lines[-1] == "pop"


# --- TE GEMM calls: shapes, FLOPs, TE classes, the process mark (logic that needs no TE) ------

@pytest.mark.parametrize("gemm_pass, a_shape, b_shape, layout, shape", [
    # TE's calls (module/linear.py): fprop general_gemm(weight, inp, "TN"), dgrad (weight,
    # grad_output, "NN"), wgrad (inp, grad_output, "NT"); weight N×K, input M×K (2·3 tokens)
    ("fprop", (16, 8), (2, 3, 8), "TN", (6, 16, 8)),
    ("dgrad", (16, 8), (2, 3, 16), "NN", (6, 8, 16)),
    ("wgrad", (2, 3, 8), (2, 3, 16), "NT", (16, 8, 6)),
])
def test_te_gemm_shape_and_flops_from_operands_and_layout(hook, torch, gemm_pass, a_shape, b_shape, layout, shape):
    a, b = torch.zeros(*a_shape), torch.zeros(*b_shape)
    assert PASS_BY_LAYOUT[layout] == gemm_pass
    assert hook.te.gemm_shape(a, b, layout) == shape
    m, n, k = shape
    assert hook.te.member_shapes(a, b, layout) == [shape]
    assert hook.te.gemm_flops([shape]) == 2 * m * n * k
    # a grouped GEMM (lists of operands): each member's shape, their FLOPs summed
    assert hook.te.member_shapes([a, a], [b, b], layout) == [shape, shape]
    assert hook.te.gemm_flops([shape, shape]) == 2 * (2 * m * n * k)


def test_te_gemm_shape_unknown_without_matrices(hook, torch):
    assert hook.te.gemm_shape(torch.zeros(8), torch.zeros(4, 8), "TN") is None
    assert hook.te.gemm_shape(None, torch.zeros(4, 8), "TN") is None
    assert hook.te.member_shapes([torch.zeros(4, 8), None], [torch.zeros(4, 8)] * 2, "TN") is None
    assert hook.te.member_shapes([], [], "TN") is None


# TE's grouped GEMM entry points with their 2.x signatures (cpp_extensions/gemm.py): operands as
# lists, one member per expert; GroupedLinear's calls (module/grouped_linear.py) hand it fprop
# (weights, inputs split by m_splits, "TN"), dgrad (weights, grad outputs, "NN") and wgrad
# (inputs, grad outputs, "NT"). Weights out×in (2048×1024); tokens per expert M_SPLITS.
M_SPLITS = (310, 198, 0, 516)


def general_grouped_gemm(A, B, out, quantization_params, out_dtype, layout="TN", m_splits=None, gelu=False,
                         grad=False, accumulate=False, bias=None, use_bias=False, use_split_accumulator=False,
                         D_dtype=None, single_output=False):
    return "ran"


def general_grouped_gemm_for_grouped_tensor(A, B, out, *, layout="TN", accumulate=False,
                                            use_split_accumulator=False, bias=None, bias_scale=None, grad=False,
                                            alpha=None, beta=None):
    return "ran"


def _matrices(*shapes):
    return [SimpleNamespace(shape=shape, dtype="torch.bfloat16") for shape in shapes]


@pytest.mark.parametrize("layout, a, b, members", [
    ("TN", _matrices(*[(2048, 1024)] * 4), _matrices(*[(m, 1024) for m in M_SPLITS]),
     "4:310,198,0,516x2048x1024"),
    ("NN", _matrices(*[(2048, 1024)] * 4), _matrices(*[(m, 2048) for m in M_SPLITS]),
     "4:310,198,0,516x1024x2048"),
    ("NT", _matrices(*[(m, 1024) for m in M_SPLITS]), _matrices(*[(m, 2048) for m in M_SPLITS]),
     "4:2048x1024x310,198,0,516"),
    ("TN", _matrices(*[(2048, 1024)] * 4), _matrices(*[(128, 1024)] * 4), "4:128x2048x1024"),
])
def test_a_grouped_gemm_records_its_members_and_their_flops(hook, torch, nvtx, layout, a, b, members):
    """Each member's shape from its operands and the layout, compact (what every member shares
    once), read back by gemmscope's reader as written; the FLOPs their sum; the call runs as it would."""
    gemm = hook.te._recording("general_grouped_gemm", general_grouped_gemm, torch)
    assert gemm(a, b, [None], [None] * 4, "bf16", layout=layout, m_splits=list(M_SPLITS), single_output=True) == "ran"
    (label,) = [label for label in nvtx.pushed() if label.startswith(GEMM_PREFIX)]
    read = te_ranges.parse(label)
    assert read["members"] == parse_record(GEMM_PREFIX, label)[MEMBERS_FIELD] == members
    shapes = parse_members(members)
    assert len(shapes) == 4 and read["flops"] == sum(2 * m * n * k for m, n, k in shapes)
    assert (read["m"], read["n"], read["k"]) == (None, None, None)  # a grouped call has no one shape
    assert read["pass"] == PASS_BY_LAYOUT[layout] and nvtx.balanced()


def test_a_grouped_gemm_whose_members_cannot_be_read_records_none_and_runs(hook, torch, nvtx):
    gemm = hook.te._recording("general_grouped_gemm", general_grouped_gemm, torch)
    a = _matrices((2048, 1024), (2048, 1024))
    for b in ([*_matrices((4, 1024)), object()], _matrices((4, 1024), (4, 1024))[0]):  # a member without a shape; no list
        assert gemm(a, b, [None], [None, None], "bf16") == "ran"
    records = [parse_record(GEMM_PREFIX, label) for label in nvtx.pushed() if label.startswith(GEMM_PREFIX)]
    assert len(records) == 2 and all(MEMBERS_FIELD not in r and r["flops"] == "?" for r in records)
    assert nvtx.balanced()


def test_a_grouped_tensor_gemm_records_no_members(hook, torch, nvtx):
    """GroupedTensor operands keep their members' sizes on the device: nothing read, nothing recorded."""
    gemm = hook.te._recording("general_grouped_gemm_for_grouped_tensor", general_grouped_gemm_for_grouped_tensor, torch)
    grouped = SimpleNamespace(shape=(1024, 1024), num_tensors=4, dtype="torch.bfloat16")
    assert gemm(grouped, grouped, None, layout="TN") == "ran"
    (record,) = [parse_record(GEMM_PREFIX, label) for label in nvtx.pushed() if label.startswith(GEMM_PREFIX)]
    assert MEMBERS_FIELD not in record and record["flops"] == "?" and "m" not in record


@pytest.mark.parametrize("text", ["", "4", "0:1x2x3", "x:1x2x3", "3:1,2x2x3", "2:1x2", "2:1x2x3x4", "2:1,-2x2x3",
                                  "100000000:1x2x3"])
def test_a_members_field_not_as_written_reads_as_none(text):
    assert parse_members(text) is None


def test_te_base_class_of_a_framework_subclass(hook, torch):
    te_linear = type("Linear", (torch.nn.Module,), {"__module__": "transformer_engine.pytorch.module.linear"})
    framework_linear = type("TELayerNormColumnParallelLinear", (te_linear,), {"__module__": "megatron.core.extensions"})
    assert hook.records.te_base_class(framework_linear) == hook.records.te_base_class(te_linear) == "Linear"
    assert hook.records.te_base_class(torch.nn.Linear) is None


@pytest.mark.parametrize("env, rank", [
    ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}, 3),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "8"}, 5),
    ({"SLURM_PROCID": "7", "SLURM_LOCALID": "3", "SLURM_NTASKS": "8"}, 7),
    ({}, None),
])
def test_process_mark_names_the_launchers_rank(hook, torch, nvtx, monkeypatch, env, rank):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    hook.records.mark_process(torch)
    (kind, label), = nvtx.events
    assert kind == "mark"
    read = te_ranges.parse(label)
    assert (read["kind"], read["rank"]) == (te_ranges.PROCESS, rank)
    assert parse_record(PROCESS_PREFIX, label)["pid"] == str(os.getpid())


# --- TE GEMM calls: which TE module made them, forward and backward ---------------------------

def _te_model(torch, hook):
    """Stand-ins defined in TE's modules (what the hook knows TE by): a Linear whose autograd
    Function calls TE's general_gemm, recorded by the hook as on TE's import, with TE's layouts
    (fprop TN, dgrad NN, wgrad NT); a framework's subclass of it (Megatron's TERowParallelLinear)
    in blocks of a model. The products are einsums, which the hook does not record."""
    def general_gemm(A, B, out_dtype=None, layout="TN", grad=False):
        return None

    gemm = hook.te._recording("general_gemm", general_gemm, torch)

    class _Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, inp, weight):
            ctx.save_for_backward(inp, weight)
            gemm(weight, inp, layout="TN")
            return torch.einsum("mk,nk->mn", inp, weight)

        @staticmethod
        def backward(ctx, grad):
            inp, weight = ctx.saved_tensors
            gemm(weight, grad, layout="NN")
            gemm(inp, grad, layout="NT")
            return torch.einsum("mn,nk->mk", grad, weight), torch.einsum("mn,mk->nk", grad, inp)

    _Linear.__module__ = "transformer_engine.pytorch.module.linear"
    te_linear = type("Linear", (torch.nn.Module,), {
        "__module__": "transformer_engine.pytorch.module.linear",
        "__init__": lambda self: (torch.nn.Module.__init__(self),
                                  setattr(self, "weight", torch.nn.Parameter(torch.randn(8, 8)))) and None,
        "forward": lambda self, x: _Linear.apply(x, self.weight)})
    framework_linear = type("TERowParallelLinear", (te_linear,), {"__module__": "megatron.core.extensions"})
    block = type("Block", (torch.nn.Module,), {
        "__init__": lambda self: (torch.nn.Module.__init__(self), setattr(self, "proj", framework_linear())) and None,
        "forward": lambda self, x: self.proj(x)})
    return torch.nn.Sequential(block(), block())


def test_te_gemms_name_their_module_forward_from_the_stack_backward_from_the_node(hook, torch, nvtx, monkeypatch):
    """Each TE GEMM names the TE module (by its TE base class, a framework's subclass too) and its
    path: in the forward pass the innermost running module; in the backward pass the module whose
    Function's node runs, stamped at apply -- neither reads the calling frames."""
    model = _te_model(torch, hook)
    monkeypatch.setattr(hook.modules, "calling_frames", lambda *args: pytest.fail("calling frames read"))
    model(torch.randn(4, 8, requires_grad=True)).sum().backward()
    records = [te_ranges.parse(label) for label in nvtx.pushed()]
    assert all(r["kind"] == te_ranges.HOOK_GEMM for r in records)
    assert [(r["layer"], r["pass"]) for r in records] == [
        ("0.proj", "fprop"), ("1.proj", "fprop"),
        ("1.proj", "dgrad"), ("1.proj", "wgrad"), ("0.proj", "dgrad"), ("0.proj", "wgrad")]
    assert {r["module"] for r in records} == {te_ranges.parse(
        format_record(GEMM_PREFIX, {"module": "Linear"}))["module"]}
    assert nvtx.balanced()


def test_te_gemm_of_an_unstamped_node_falls_back_to_the_calling_frames(hook, torch, nvtx, monkeypatch):
    """A backward whose Function's apply stamped nothing (the forward ran outside every module):
    the calling frames are read, and with no TE frame among them the GEMM's module is unknown."""
    model = _te_model(torch, hook)
    read = []
    frames = hook.modules.calling_frames
    monkeypatch.setattr(hook.modules, "calling_frames", lambda *args: read.append(True) or frames(*args))
    linear = model[0].proj
    linear.forward(torch.randn(4, 8, requires_grad=True)).sum().backward()  # forward, not __call__: no module hook
    records = [r for r in map(te_ranges.parse, nvtx.pushed()) if r["kind"] == te_ranges.HOOK_GEMM]
    assert [r["pass"] for r in records] == ["fprop", "dgrad", "wgrad"] and len(read) == 3
    assert {r["layer"] for r in records} == {None}


# --- training steps: a mark at every optimizer step, and the capture of the steps asked -------

_TRAINING = """
import json, sys
import torch
written = []
torch.cuda.nvtx.mark = lambda label: written.append(["mark", label])
torch.cuda.nvtx.range_start = lambda label: written.append(["start", label]) or 7
torch.cuda.nvtx.range_end = lambda handle: written.append(["end", handle])
if sys.argv[2:] == ["gemms"]:  # the model's GEMMs recorded as if on a GPU
    import gemmscope_torch_gemms
    gemmscope_torch_gemms.launches_kernel = lambda tensor: True
    torch.cuda.nvtx.range_push = lambda label: written.append(["push", label])
    torch.cuda.nvtx.range_pop = lambda: None
model = torch.nn.Linear(8, 8)
first, second = torch.optim.AdamW(model.parameters()), torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for i in range(int(sys.argv[1])):
    loss = model(torch.randn(4, 8)).sum() * (float("inf") if i == 2 else 1.0)
    scaler.scale(loss).backward()
    scaler.step(first)  # iteration 2's gradients are inf: GradScaler skips the optimizer's step
    scaler.update()
    second.step()
    first.zero_grad()
    written.append(["iteration", i])
print(json.dumps(written))
"""


def _training(tmp_path, iterations: int, *args: str, **env: str) -> list:
    env = {**os.environ, "PYTHONPATH": str(HOOK_DIR), **env}
    done = subprocess.run([sys.executable, "-c", _TRAINING, str(iterations), *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_every_optimizer_step_marked_once_per_iteration(torch, tmp_path):
    """Two optimizers stepped each iteration (one through GradScaler) make one step each
    iteration, numbered from 0; an iteration whose step GradScaler skipped is still a step."""
    written = _training(tmp_path, 5)
    numbers, iteration = [], 0
    for kind, value in written:
        if kind == "iteration":
            iteration = value + 1
        elif kind == "mark":
            numbers.append((iteration, parse_record(STEP_PREFIX, value)["n"]))
    assert numbers == [(i, str(i)) for i in range(5) for _ in range(2)]


@pytest.mark.parametrize("steps, opened_after, closed_after", [("3-4", 1, 5), ("2-2", 0, 3), ("6-9", 4, None)])
def test_the_capture_range_opens_a_step_early_and_closes_a_step_late(torch, tmp_path, steps, opened_after,
                                                                        closed_after):
    """GEMMSCOPE_STEPS=A-B (nsys): the capture range starts at the first mark of step A-2 (from the
    start for A <= 1) and ends at the first mark of step B+1, before either mark is made; a job
    that ends inside the window leaves it open (nsys ends it with the process)."""
    written = [(k, v) for k, v in _training(tmp_path, 8, GEMMSCOPE_STEPS=steps) if k != "iteration"]
    marks = [parse_record(STEP_PREFIX, v)["n"] if k == "mark" else k for k, v in written]
    starts, ends = [i for i, m in enumerate(marks) if m == "start"], [i for i, m in enumerate(marks) if m == "end"]
    assert len(starts) == 1 and written[starts[0]][1] == CAPTURE_RANGE
    assert marks[starts[0] + 1] == str(opened_after) and (opened_after == 0 or marks[starts[0] - 1] == str(opened_after - 1))
    if closed_after is None:
        assert ends == []
    else:
        assert len(ends) == 1 and marks[ends[0] + 1] == str(closed_after) and marks[ends[0] - 1] == str(closed_after - 1)


@pytest.mark.parametrize("steps, recorded", [(None, range(8)), ("3-4", range(2, 6)), ("0-1", range(0, 3))])
def test_gemm_calls_are_recorded_only_while_the_capture_of_steps_is_open(torch, tmp_path, steps, recorded):
    """Under GEMMSCOPE_STEPS=A-B the model's GEMM calls are recorded from the capture's start to its
    end (steps A-1..B+1, what the capture holds), none before or after it; without it, in every
    iteration."""
    written = _training(tmp_path, 8, "gemms", **({"GEMMSCOPE_STEPS": steps} if steps else {}))
    per_iteration, iteration = [0] * 8, 0
    for kind, value in written:
        if kind == "iteration":
            iteration = value + 1
        elif kind == "push" and value.startswith(TORCH_GEMM_PREFIX) and iteration < 8:
            per_iteration[iteration] += 1
    # each iteration: the forward's linear and the backward node around its dgrad and wgrad
    assert [i for i, count in enumerate(per_iteration) if count] == list(recorded)
    assert len({per_iteration[i] for i in recorded}) == 1


def test_a_capture_from_the_start_on_a_torch_without_nvtx_leaves_the_program_running(torch, tmp_path):
    """GEMMSCOPE_STEPS=0-1 opens the capture as torch is imported; a torch without NVTX (this CPU
    build) cannot, and the program runs on, its steps marked as ever."""
    if torch.version.cuda is not None:  # a CUDA build (CI's newest and oldest torch) has NVTX, with or without a GPU
        pytest.skip(f"torch {torch.__version__} is a CUDA build: it has NVTX, and the capture opens")
    env = {**os.environ, "PYTHONPATH": str(HOOK_DIR), "GEMMSCOPE_STEPS": "0-1"}
    done = subprocess.run([sys.executable, "-c", _TRAINING, "3"], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the capture of steps 0-1 could not open" in done.stderr
    assert [v for k, v in json.loads(done.stdout.splitlines()[-1]) if k == "iteration"] == [0, 1, 2]


# --- entry points moved or changed: never the program's loss (records.patch; tests/test_hook_guard.py runs programs) ---

def _torch_entry_points(hook) -> list[str]:
    """Every path under torch the hook patches or binds to."""
    return ([path for path, *_ in hook.torch_gemms._TORCH_GEMM_CALLS]
            + [hook.torch_gemms.FUNCTION_APPLY, hook.steps.GRAD_SCALER_STEP, hook.steps.OPTIMIZER_STEP_HOOK,
               *hook.records.TORCH_INTERNALS])


@pytest.fixture(scope="module")
def steps(hook):
    hook.steps = importlib.import_module("gemmscope_steps")
    return hook.steps


def test_every_torch_entry_point_the_hook_patches_is_where_it_looks(hook, torch, steps):
    """The next torch release that moves one fails here, by name, not in a user's run."""
    for path in _torch_entry_points(hook):
        try:
            owner, attribute = _owner_and_attribute(torch, path)
            getattr(owner, attribute)
        except AttributeError as exc:
            pytest.fail(f"torch {torch.__version__} moved torch.{path}, which gemmscope's hook patches: {exc}")


def test_every_te_entry_point_the_hook_patches_is_where_it_looks(hook):
    te = pytest.importorskip("transformer_engine.pytorch", reason="Transformer Engine is not installed (GPU machine)")
    for module_name, paths in ((hook.te.QUANTIZATION_MODULE, hook.te.AUTOCAST_ENTRY_POINTS),
                               (hook.te.GEMM_MODULE, ("general_gemm",))):
        module = importlib.import_module(module_name)
        for path in paths:
            try:
                _owner_and_attribute(module, path + ".__call__")
            except AttributeError as exc:
                pytest.fail(f"TE {te.__version__} moved {module_name}.{path}, which gemmscope's hook patches: {exc}")


def test_the_hook_patched_every_entry_point_of_this_torch(hook, torch):
    """The hook fixture patched torch as verify's hook does: nothing was skipped on this release
    (2.14's built-in autograd.Function.apply included)."""
    assert hook.records._unpatched == []
    apply = _owner_and_attribute(torch, hook.torch_gemms.FUNCTION_APPLY)
    assert getattr(*apply).__func__.__name__ == "apply"  # the hook's classmethod, named as torch's


def test_a_class_method_torch_defines_in_c_is_patched_as_a_python_one(hook, torch, nvtx, monkeypatch):
    """torch 2.14 defines autograd.Function.apply in C (a built-in class method); on an older torch
    the same shape is had by removing Function's Python apply, which leaves _FunctionBase's. The
    hook patches it, and a custom Function's backward GEMM is recorded with its forward's module."""
    monkeypatch.delattr(torch.autograd.Function, "apply")
    assert type(vars(torch._C._FunctionBase)["apply"]).__name__ == "classmethod_descriptor"
    assert hook.records.patch(torch, hook.torch_gemms.FUNCTION_APPLY,
                              lambda original: hook.torch_gemms._recording_apply(torch, original), "the backward")

    x = torch.randn(2, 3, 8, requires_grad=True)
    _linear_function(torch)(8, 16)(x).sum().backward()
    # the Function's node bracketed as a backward, its two GEMMs told apart by their shapes
    assert [(g["op"], g["pass"], *_layer_of(g)) for g in nvtx.torch_gemms()] == [
        ("linear", "fprop", "FunctionLinear", None), ("LinearFunctionBackward", "backward", "FunctionLinear", None),
        ("matmul", "dgrad", "FunctionLinear", None), ("matmul", "wgrad", "FunctionLinear", None)]
    assert x.grad is not None and nvtx.balanced()


def test_a_missing_entry_point_is_said_once_marked_and_left_as_it_was(hook, torch, nvtx, monkeypatch, capsys):
    monkeypatch.setattr(hook.records, "_unpatched", [])
    monkeypatch.delattr(torch, "baddbmm")
    for _ in range(2):  # the same patch asked twice, as two imports of one module would
        assert not hook.records.patch(torch, "baddbmm", lambda original: pytest.fail("wrapped"),
                                      "GEMMs through torch.baddbmm")
    assert not hasattr(torch, "baddbmm")
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1
    assert said[0].startswith(f"gemmscope hook: torch.baddbmm not patched in torch {torch.__version__} "
                              "(AttributeError: ")
    assert said[0].endswith("GEMMs through torch.baddbmm not recorded; the program runs on unwatched there")
    marks = [label for kind, label in nvtx.events if kind == "mark"]
    assert marks and all(label.startswith(UNPATCHED_PREFIX) for label in marks)
    (unpatched,) = te_ranges.recorded_unpatched(marks)
    assert unpatched == {"what": "torch.baddbmm", "version": f"torch {torch.__version__}",
                         "why": unpatched["why"], "misses": "GEMMs through torch.baddbmm"}
    assert unpatched["why"].startswith("AttributeError: ") and "|" not in unpatched["why"]


def test_a_wrapper_that_cannot_be_made_leaves_the_entry_point_as_it_was(hook, torch, monkeypatch, capsys):
    monkeypatch.setattr(hook.records, "_unpatched", [])
    original = torch.mm

    def cannot_wrap(_original):
        raise TypeError("a signature this hook does not know")

    assert not hook.records.patch(torch, "mm", cannot_wrap, "GEMMs through torch.mm")
    assert torch.mm is original
    assert "TypeError: a signature this hook does not know" in capsys.readouterr().err


@pytest.mark.parametrize("release, said", [("2.10.1", True), (TESTED_TORCH[0] + ".0", False),
                                           (TESTED_TORCH[1] + ".1+cu130", False), ("3.0.0", True)])
def test_a_torch_outside_the_tested_releases_is_said(hook, monkeypatch, capsys, release, said):
    hook.records.note_untested_torch(type("torch", (), {"__version__": release}))
    err = capsys.readouterr().err
    assert (f"torch {release} is outside the releases gemmscope's hook is tested on "
            f"({TESTED_TORCH[0]} to {TESTED_TORCH[1]})" in err) is said
