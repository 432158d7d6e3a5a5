"""End-to-end on a GPU machine (Transformer Engine, nsys): skipped cleanly elsewhere.

They run the real commands: the canary, a small profile at every recipe and mode, and `verify`
on the small TE training script of the fixtures (mixed and clean)."""

import json
import os
import re
import sys
from pathlib import Path

import pytest

from gemmscope.profilers import nsys_runner

from cli_runner import gemmscope as run_gemmscope
from fixture_paths import CORPUS, GPU


def _gpu_ready() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as exc:  # TE raises more than ImportError when its libraries don't load
        return f"Transformer Engine unusable: {type(exc).__name__}"
    if nsys_runner.find_nsys() is None:
        return "nsys not found"
    return None


_why_not = _gpu_ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_why_not is not None, reason=f"GPU test: {_why_not}")]


def gemmscope(*args, cwd=None, env=None):
    return run_gemmscope(*args, cwd=cwd, env=env, timeout=580)


def test_canary_is_flagged():
    done = gemmscope("doctor", "--canary")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "planted BF16 GEMM flagged as FALLBACK" in done.stdout


def test_small_profile_every_recipe_and_mode(tmp_path):
    import torch

    out = tmp_path / "run"
    done = gemmscope("profile", "--hidden-size", "1024", "--intermediate-size", "4096", "--num-attention-heads", "8",
                     "--num-layers", "2", "--micro-batch-size", "2", "--seq-len", "512", "--iters", "5",
                     "--warmup", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert {p for p in ("results.json", "report.md", "report.png", "trace.sqlite", "trace.nsys-rep")} <= {
        f.name for f in out.iterdir()}
    blackwell = torch.cuda.get_device_capability()[0] >= 10
    for g in results["gemms"]:
        if g["precision"] in ("mxfp8", "nvfp4") and not blackwell:
            assert g["status"] == "unsupported" and "compute capability" in g["reason"], g
            assert g["e2e_ms"] is None and g["verdict"] is None
        else:
            assert g["status"] == "ok", g
            assert g["verdict"] == "OK", g
            assert g["gemm_launches"] == 5 and g["kernel_ms"] > 0
    # the profile's nsys capture asks for GPU memory events (verify's does not): without them
    # every peak would read 0
    ran = {(g["mode"], g["precision"]) for g in results["gemms"] if g["status"] == "ok"}
    peaks = {(m["mode"], m["precision"]): m["peak_mib"] for m in results["memory"]}
    assert ran <= set(peaks) and any(peaks[key] != 0 for key in ran), peaks
    # a peak is above the memory live when its entry started, never below; a recipe that raised has none
    assert all(peaks[key] >= 0 for key in ran) and all(peaks[key] is None for key in set(peaks) - ran), peaks
    assert set(results["speedups"]) == {"autocast", "prequant"}
    if not blackwell:
        assert results["speedups"]["autocast"]["nvfp4"] is None


@pytest.mark.parametrize("profiler", ["nsys", "torch"])
@pytest.mark.parametrize("scenario", ["mixed", "clean"])
def test_verify_small_training_run(tmp_path, scenario, profiler):
    """Without --expect each GEMM is checked against what it asked: the BF16 GEMMs (a layer
    outside autocast, a torch.nn.Linear) are coverage, not mismatches, and the run passes;
    captured by nsys or by torch.profiler alike."""
    done = gemmscope("verify", "--profiler", profiler, "--format", "json", "--per-launch", "--out", str(tmp_path), "--",
                     sys.executable, str(GPU / "train_small_te.py"), "--scenario", scenario,
                     "--expected-out", str(tmp_path / "expected.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[1/1] [" not in done.stderr and "\r" not in done.stderr  # nsys's progress bars held back
    report = json.loads(done.stdout)
    expected = json.loads((tmp_path / "expected.json").read_text())
    bf16 = sum(sum(per_pass.values()) for per_pass in expected["bf16"].values())
    fp8 = sum(sum(per_pass.values()) for per_pass in expected["fp8"].values())
    assert report["summary"]["expected"] == "fp8-current"  # recorded by the autocast hook
    assert report["summary"]["gemm_launches"] == bf16 + fp8
    assert report["summary"]["mismatches"] == 0
    assert report["summary"]["coverage"]["gemm_launches"] == bf16
    assert report["meta"]["command"]["profiler"] == profiler


def test_a_backward_override_is_the_cause_of_its_backward_gemms(tmp_path):
    """FP8 current scaling with NVTE_BACKWARD_OVERRIDE=high_precision (each MLP as a LayerNormLinear
    and a Linear: TE refuses the override in LayerNormMLP, as a run here showed): the FP8 layers' backward
    GEMMs (the script counts them per pass itself) ask and run BF16, as coverage said with that
    cause; --expect fp8-current flags exactly them, each with it."""
    done = gemmscope("verify", "--profiler", "torch", "--format", "json", "--per-launch", "--out", str(tmp_path), "--",
                     sys.executable, str(GPU / "train_small_te.py"), "--scenario", "clean", "--mlp", "linears",
                     "--expected-out", str(tmp_path / "expected.json"), env={"NVTE_BACKWARD_OVERRIDE": "high_precision"})
    assert done.returncode == 0, done.stderr[-2000:]
    expected = json.loads((tmp_path / "expected.json").read_text())
    backward = sum(n for per_pass in expected["fp8"].values() for p, n in per_pass.items() if p in ("dgrad", "wgrad"))
    why = "backward_override=high_precision (NVTE_BACKWARD_OVERRIDE)"
    groups = json.loads(done.stdout)["summary"]["coverage"]["groups"]
    assert backward and sum(g["launches"] for g in groups if g["why"] == why) == backward
    trace = next(tmp_path.glob("trace.*.json.gz"))
    flagged = gemmscope("verify", "--trace", str(trace), "--expect", "fp8-current", "--format", "json", "--per-launch")
    assert flagged.returncode == 1, flagged.stderr[-2000:]
    mismatches = [g for g in json.loads(flagged.stdout)["gemms"] if g["verdict"] == "FALLBACK"]
    assert len(mismatches) == backward and {g["cause"] for g in mismatches} == {"backward-override"}


def test_megatron_s_per_module_recipe_is_judged_module_by_module(tmp_path):
    """Megatron-Core GPT with the corpus's per-module YAML (every linear_proj BF16, every linear_fc2
    FP8 block scaling, the rest the run's FP8 current scaling), counted by the program from
    Megatron's own matcher: it passes; coverage names the linear_proj modules, with the config and
    matcher that asked, and the output layer; linear_fc2 runs fp8-block as asked. Under --expect
    fp8-current exactly the BF16 and block GEMMs are flagged: the matched modules' with cause
    module-recipe, the output layer's as requested-bf16."""
    pytest.importorskip("megatron.core", reason="megatron-core is not on this machine")
    done = gemmscope("verify", "--profiler", "torch", "--format", "json", "--per-launch", "--out", str(tmp_path), "--",
                     "torchrun", "--standalone", "--nproc-per-node", "1", str(CORPUS / "megatron_gpt.py"),
                     "--fp8-recipe", "tensorwise", "--te-precision-config-file", str(CORPUS / "megatron_per_module.yaml"),
                     "--expected-out", str(tmp_path / "expected.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    expected = json.loads((tmp_path / "expected.json").read_text())
    summary = json.loads(done.stdout)["summary"]
    by_module = {m["path"]: m for m in expected["te_modules"]}
    groups = summary["coverage"]["groups"]
    proj = {path for path, m in by_module.items() if path.endswith(".linear_proj")}
    assert {g["layer"] for g in groups if g["layer"] in proj} == proj
    assert all(g["why"] == 'quant_recipe config "bf16" (matcher "*.linear_proj")' for g in groups if g["layer"] in proj)
    assert any(g["layer"] == "output_layer" and not g.get("why") for g in groups), groups
    launches = sum(sum(per_pass.values()) for per_pass in expected["per_precision"].values())
    assert summary["gemm_launches"] == launches
    trace = next(tmp_path.glob("trace.*.json.gz"))
    flagged = gemmscope("verify", "--trace", str(trace), "--expect", "fp8-current", "--format", "json", "--per-launch")
    assert flagged.returncode == 1, flagged.stderr[-2000:]
    mismatches = json.loads(flagged.stdout)["mismatches"]
    not_current = sum(n for precision, per_pass in expected["per_precision"].items() if precision != "fp8-current"
                      for n in per_pass.values())
    assert len(mismatches) == not_current
    matched = [g for g in mismatches if by_module.get(g["layer"], {}).get("asked_by") == "matcher"]
    assert {g["cause"] for g in matched} == {"module-recipe"}
    assert {g["cause"] for g in mismatches if g["layer"] == "output_layer"} == {"requested-bf16"}
    assert {g["requested"] for g in mismatches if g["layer"].endswith(".linear_fc2")} == {"fp8-block"}


def _every_gemm(tmp_path) -> list[dict]:
    """Every GEMM launch of the torch.profiler trace a verify left in `tmp_path`, as analyze lists them."""
    trace = next(tmp_path.glob("trace.*.json.gz"))
    done = gemmscope("analyze", str(trace), "--format", "json", "--per-launch")
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return json.loads(done.stdout)["gemms"]


def test_a_custom_recipe_s_gemms_ask_what_their_quantizers_are(tmp_path):
    """TE's CustomRecipe picking a quantizer per module and role (fc2 FP8 block, blocks.1.proj FP8
    forward with a BF16 backward, head BF16, the rest FP8 current): each GEMM's request is what the
    quantizers TE holds for its module say (the program reads them itself), per pass; the run passes."""
    done = gemmscope("verify", "--profiler", "torch", "--format", "json", "--out", str(tmp_path), "--",
                     sys.executable, str(GPU / "te_custom_recipe.py"), "--steps", "3",
                     "--expected-out", str(tmp_path / "expected.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    expected = json.loads((tmp_path / "expected.json").read_text())
    assert not expected["disagreements"]
    from gemmscope.assembly.te_ranges import PRECISION_OF_OPERAND  # the recipe's operands -> the precision asked

    asked = {(m["path"], p): PRECISION_OF_OPERAND[m[p]] for m in expected["modules"] for p in expected["passes"]}
    gemms = [g for g in _every_gemm(tmp_path) if (g["layer"], g["te_pass"]) in asked]
    assert len(gemms) == sum(n for per_pass in expected["per_pass"].values() for n in per_pass.values())
    assert all(g["requested"] == asked[(g["layer"], g["te_pass"])] for g in gemms), [
        (g["layer"], g["te_pass"], g["requested"]) for g in gemms if g["requested"] != asked[(g["layer"], g["te_pass"])]]
    assert {g["verdict"] for g in gemms} == {"OK"}


def test_torchao_s_emulation_is_an_expected_substitution_with_its_cause(tmp_path):
    """torchao float8 training with `emulate` on: each float8 GEMM runs as FP32 on purpose (the
    program counts them from each Float8Linear's config); never a pass of float8 nor a fallback:
    each is an EXPECTED-SUBSTITUTION, cause emulated, asked fp8; the run exits 0."""
    pytest.importorskip("torchao", reason="torchao is not on this machine")
    done = gemmscope("verify", "--profiler", "torch", "--format", "json", "--out", str(tmp_path), "--",
                     sys.executable, str(CORPUS / "torchao_mlp.py"), "--recipe", "tensorwise", "--emulate",
                     "--expected-out", str(tmp_path / "expected.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    expected = json.loads((tmp_path / "expected.json").read_text())
    emulated = {(linear["path"], p) for linear in expected["linears"] if linear.get("emulated")
                for p, gemm in linear["gemms"].items() if gemm["emulated"]}
    count = sum(gemm["count"] for linear in expected["linears"] if linear.get("emulated")
                for gemm in linear["gemms"].values() if gemm["emulated"])
    gemms = [g for g in _every_gemm(tmp_path) if (g["layer"], g["te_pass"]) in emulated]
    assert emulated and len(gemms) == count
    assert {(g["verdict"], g["cause"], g["requested"]) for g in gemms} == {("EXPECTED-SUBSTITUTION", "emulated", "fp8")}
    assert {g["precision"] for g in gemms} <= {"fp32", "tf32"}


@pytest.mark.parametrize("profiler", ["nsys", "torch"])
def test_a_moved_entry_point_costs_its_records_not_the_program(tmp_path, profiler):
    """torch.nn.functional.linear taken away as torch imports (take_away/sitecustomize.py), as a
    release that moved it would: the program runs to its end, the hook says so in one line, the
    GEMMs through it are left unjudged (the program counts them itself) and the check names what
    went unrecorded: NOT FULLY CHECKED, never a pass."""
    done = gemmscope("verify", "--profiler", profiler, "--format", "json", "--per-launch", "--out", str(tmp_path),
                     "--", sys.executable, str(GPU / "moved_entry_point.py"),
                     env={"PYTHONPATH": os.pathsep.join(filter(None, [str(GPU / "take_away"),
                                                                      os.environ.get("PYTHONPATH")]))})
    assert done.returncode == 5, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("gemmscope hook: ")]
    assert len(said) == 1 and said[0].startswith("gemmscope hook: torch.nn.functional.linear not patched"), said
    counted = re.search(r"moved_entry_point: (\d+) GEMMs through torch._C._nn.linear, (\d+) through", done.stderr)
    assert counted, done.stderr[-2000:]
    unrecorded, recorded = map(int, counted.groups())
    summary = json.loads(done.stdout)["summary"]
    assert summary["gemm_launches"] == unrecorded + recorded
    assert summary["unjudged_gemm_launches"] == unrecorded and summary["mismatches"] == 0
    assert [u["what"] for u in summary["unpatched"]] == ["torch.nn.functional.linear"]


def test_an_audit_judges_each_window_as_it_lands(tmp_path):
    """--every 5 --window 2 over 30 steps of the clean run: windows 10-11, 15-16, 20-21, 25-26, each
    holding exactly two steps' GEMMs (the script counts them per step itself), each a pass."""
    done = gemmscope("verify", "--every", "5", "--window", "2", "--format", "json", "--out", str(tmp_path), "--",
                     sys.executable, str(GPU / "train_small_te.py"), "--scenario", "clean", "--steps", "30",
                     "--expected-out", str(tmp_path / "expected.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    windows = json.loads(done.stdout)["windows"]
    expected = json.loads((tmp_path / "expected.json").read_text())
    per_step = sum(sum(per_pass.values()) for per_pass in expected["fp8"].values()) // 30
    assert [w["steps"] for w in windows] == [[10, 11], [15, 16], [20, 21], [25, 26]]
    assert [(w["state"], w["gemm_launches"], w["alerts"]) for w in windows] == [("pass", 2 * per_step, [])] * 4
    assert len([line for line in done.stderr.splitlines() if line.startswith("gemmscope: window ")]) == 4


def test_an_audit_flags_a_precision_change_at_the_first_window_after_it(tmp_path):
    """Block 1 leaves te.autocast from step 22 on (as a resume that lost the recipe would): the
    windows before pass, the first after it (25-26) is flagged with the layers, module and pass that
    changed, and the run exits 1."""
    done = gemmscope("verify", "--every", "5", "--window", "2", "--expect", "fp8-current", "--format", "json",
                     "--out", str(tmp_path), "--", sys.executable, str(GPU / "train_small_te.py"), "--scenario",
                     "clean", "--steps", "40", "--block1-bf16-from", "22")
    assert done.returncode == 1, done.stderr[-3000:]
    windows = json.loads(done.stdout)["windows"]
    assert [w["steps"] for w in windows] == [[10, 11], [15, 16], [20, 21], [25, 26], [30, 31], [35, 36]]
    assert [w["state"] for w in windows] == ["pass"] * 3 + ["fail"] * 3
    first_flagged = next(w for w in windows if w["alerts"])
    assert first_flagged["steps"] == [25, 26]
    alert = first_flagged["alerts"][0]
    assert alert["code"] == "new-mismatch" and alert["steps"] == [25, 26]
    assert alert["places"] and all(place.startswith("blocks.1.") for place in alert["places"]), alert["places"]


@pytest.mark.parametrize("profiler", ["nsys", "torch"])
def test_verify_captures_the_steps_asked(tmp_path, profiler):
    """--steps 2-3 of a 6-step run: the hook marks each optimizer step and the capture keeps
    exactly those two steps' GEMMs (the script counts its GEMMs per step itself); the breakdown
    covers them, named as the hook's steps."""
    done = gemmscope("verify", "--profiler", profiler, "--steps", "2-3", "--format", "json", "--out", str(tmp_path),
                     "--", sys.executable, str(GPU / "train_small_te.py"), "--scenario", "clean", "--steps", "6",
                     "--expected-out", str(tmp_path / "expected.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    expected = json.loads((tmp_path / "expected.json").read_text())
    per_step = sum(sum(per_pass.values()) for per_pass in expected["fp8"].values()) // 6
    assert report["summary"]["gemm_launches"] == 2 * per_step
    assert report["meta"]["command"]["capture_window"] == {"steps": [2, 3]}
    assert report["breakdown"]["step_range"] == "gemmscope.step *"
    assert sorted(s["index"] for s in report["breakdown"]["steps"]) == [2, 3]


def test_verify_of_a_job_that_ends_before_the_steps(tmp_path):
    done = gemmscope("verify", "--steps", "8-9", "--out", str(tmp_path), "--", sys.executable,
                     str(GPU / "train_small_te.py"), "--scenario", "clean", "--steps", "3")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "ended before training step 8" in done.stderr


_MXFP8_ON_HOPPER = """
import torch, transformer_engine.pytorch as te
from transformer_engine.common.recipe import MXFP8BlockScaling
layer = te.Linear(256, 256, params_dtype=torch.bfloat16)
with te.autocast(recipe=MXFP8BlockScaling()):
    layer(torch.randn(256, 256, device="cuda", dtype=torch.bfloat16))
"""


def test_verify_of_a_crashing_command_fails(tmp_path):
    """MXFP8 asked on Hopper: TE raises mid-run. A CI gate must not pass that run."""
    import torch

    if torch.cuda.get_device_capability()[0] >= 10:
        pytest.skip("MXFP8 runs on this GPU")
    done = gemmscope("verify", "--format", "json", "--per-launch", "--out", str(tmp_path), "--",
                     sys.executable, "-c", _MXFP8_ON_HOPPER)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "the command failed (exit 1)" in done.stderr
    assert json.loads(done.stdout)["meta"]["command"]["exit_code"] == 1


@pytest.mark.parametrize("profiler", ["nsys", "torch"])
def test_verify_transformer_layer_stack(tmp_path, profiler):
    """te.TransformerLayer stack under DDP and FP8 block scaling, layer 2 outside autocast and a
    plain torch LM head: every GEMM has module and pass; with --expect the flagged ones are
    exactly that layer's and the head's. With torch.profiler, torchrun's launcher writes no trace,
    its worker one with the GEMMs, named for its rank."""
    done = gemmscope("verify", "--profiler", profiler, "--expect", "fp8-block", "--format", "json", "--per-launch",
                     "--out", str(tmp_path),
                     "--", "torchrun", "--standalone", "--nproc-per-node", "1", str(CORPUS / "te_stack.py"),
                     "--expected-out", str(tmp_path / "expected.json"))
    assert done.returncode == 1, done.stderr[-2000:]
    report = json.loads(done.stdout)
    expected = json.loads((tmp_path / "expected.json").read_text())
    assert report["summary"]["expected"] == expected["recipe"]
    groups = report["summary"]["groups"]
    assert all(g["pass"] in ("fprop", "dgrad", "wgrad") and g["module"] for g in groups)
    if profiler == "torch":
        # no trace without a rank (the launcher's); one holds the GEMMs; others of the worker's
        # processes that only touched CUDA (torch.compile's workers inherit RANK) launched nothing
        names = {t.name for t in tmp_path.glob("trace.*.json.gz")}
        assert names and {name.split(".")[1] for name in names} == {"rank0"}, names
        checked = {Path(t["trace"]).name for t in report["meta"]["traces"]}
        idle = {t["trace"] for t in report["summary"]["traces_without_kernels"]}
        assert len(checked) == 1 and checked | idle == names and not report["summary"]["unreadable_traces"]
    flagged = {g["layer"] for g in groups if g["verdict"] == "FALLBACK"}
    layer = f"layers.{expected['outside_layer']}."
    head = {name for name in flagged if not name.startswith(layer)}
    assert len(head) == 1 and not next(iter(head)).startswith("layers.")  # the torch head, by its path
    assert len(report["mismatches"]) == sum(sum(p.values()) for p in expected["bf16"].values())


# A program shaped like TE's GEMM benchmark in its Nsight mode: the CUDA profiler API opens the
# capture, one NVTX range per recipe; a GEMM before the capture must not be seen.
_RANGES_PER_RECIPE = """
import torch, transformer_engine.pytorch as te
from transformer_engine.common.recipe import Float8CurrentScaling
x = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
linear = te.Linear(512, 512, params_dtype=torch.bfloat16)
torch.matmul(x, x)  # before the capture
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
torch.cuda.nvtx.range_push("BF16_512")
for _ in range(3):
    torch.matmul(x, x)
torch.cuda.nvtx.range_pop()
torch.cuda.nvtx.range_push("FP8Current_512")
with te.autocast(enabled=True, recipe=Float8CurrentScaling()):
    for _ in range(3):
        linear(x)
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
"""


def test_verify_profiler_api_window_range_by_range(tmp_path):
    done = gemmscope("verify", "--capture-range", "cudaProfilerApi", "--expect-map", "BF16_*=bf16",
                     "--expect-map", "FP8Current_*=fp8-current", "--format", "json", "--out", str(tmp_path), "--",
                     sys.executable, "-c", _RANGES_PER_RECIPE)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)["summary"]
    assert {r["range"]: (r["gemms"], r["verdict"]) for r in summary["ranges_checked"]} == {
        "BF16_512": (3, "OK"), "FP8Current_512": (3, "OK")}
    assert summary["gemm_launches"] == 6  # the GEMM before cudaProfilerStart is not in the window


def test_verify_capture_window_holds_one_training_step(tmp_path):
    """A real training loop with NVTX step ranges, captured from the start to the end of `step 2`
    only: the trace holds that step's GEMMs, not the other steps'."""
    steps = 4
    done = gemmscope("verify", "--expect", "fp8-block", "--capture-range", "step 2", "--format", "json",
                     "--out", str(tmp_path), "--", "torchrun", "--standalone", "--nproc-per-node", "1",
                     str(CORPUS / "te_stack.py"), "--steps", str(steps), "--nvtx-steps",
                     "--expected-out", str(tmp_path / "expected.json"))
    assert done.returncode == 1, done.stderr[-2000:]  # layer 2 runs outside autocast: BF16 GEMMs
    report = json.loads(done.stdout)
    expected = json.loads((tmp_path / "expected.json").read_text())
    assert report["meta"]["command"]["capture_window"] == {"nvtx_range": "step 2"}
    per_step = {p: sum(per_module[p] for kind in ("fp8", "bf16") for per_module in expected[kind].values()) // steps
                for p in ("fprop", "dgrad", "wgrad")}
    by_pass = {}
    for row in report["summary"]["by_module_pass"]:
        by_pass[row["pass"]] = by_pass.get(row["pass"], 0) + row["gemms"]
    assert by_pass["fprop"] == per_step["fprop"]  # the step's forward, whole
    assert all(by_pass.get(p, 0) <= per_step[p] for p in per_step)  # and nothing of another step


def test_a_capture_window_does_not_end_the_run(tmp_path):
    """--duration bounds what nsys collects: the training run goes on to its own end (it writes
    its expected counts only there) and its exit status is its own, 0."""
    done = gemmscope("verify", "--expect", "fp8-block", "--delay", "2", "--duration", "1", "--out", str(tmp_path),
                     "--", "torchrun", "--standalone", "--nproc-per-node", "1", str(CORPUS / "te_stack.py"),
                     "--steps", "200", "--expected-out", str(tmp_path / "expected.json"))
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: what the window held ran outside autocast
    assert (tmp_path / "expected.json").is_file()  # the run reached its end
    assert "the trace holds from 2 s after the start to 3 s; the command ran to its own end" in done.stderr
    assert "the command failed" not in done.stderr


# A CUDA program that starts a process of its own well after its first GEMM (as torch.compile
# does when TE first compiles a fused function): under nsys profile's own --duration the session
# had ended by then and the process failed to start, and the run with it.
_STARTS_A_PROCESS_LATE = """
import subprocess, sys, time, torch
a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
torch.cuda.nvtx.range_push("early_window")
(a @ a).sum().item()
torch.cuda.nvtx.range_pop()
time.sleep(5)
subprocess.run([sys.executable, "-c", "print('started after the window')"], check=True)
(a @ a).sum().item()
print("ran to its own end", file=sys.stderr)
"""


@pytest.mark.parametrize("window", [["--delay", "1", "--duration", "1"], ["--capture-range", "early_window"]])
def test_a_process_the_program_starts_after_the_window_runs(window):
    done = gemmscope("verify", "--expect", "bf16", *window, "--", sys.executable, "-c", _STARTS_A_PROCESS_LATE)
    assert "started after the window" in done.stderr and "ran to its own end" in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 1) and "the command failed" not in done.stderr


def test_whatif_measures_the_megatron_first_last_run(tmp_path):
    """whatif on the committed Megatron first/last-BF16 trace: every module shape timed forward
    and backward at each recipe under nsys; BF16 and FP8 current scaling run (with the kernel of
    their precision in the timed range), a recipe this GPU cannot run is recorded with TE's reason,
    never a figure; the change is written as Megatron's arguments."""
    import torch

    out = tmp_path / "whatif"
    trace = GPU / "corpus" / "megatron_gpt_first-last-bf16.sqlite.xz"
    done = gemmscope("whatif", str(trace), "--out", str(out), "--iters", "10", "--warmup", "2", "--format", "json")
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert document["state"] == "measured" and (out / "measurement" / "trace.sqlite").exists()
    per_recipe = {(r["group"], r["recipe"]): r for r in document["per_recipe"]}
    for group in document["groups"]:
        if group["module_class"] == "ColumnParallelLinear":
            continue
        for recipe in ("bf16", "fp8-current"):
            row = per_recipe[(group["group"], recipe)]
            assert row["status"] == "ok" and row["predicted_ms"] > 0 and row["kernel_verdict"] == "OK", row
        mxfp8 = per_recipe[(group["group"], "mxfp8")]
        if torch.cuda.get_device_capability()[0] < 10:
            assert mxfp8["status"] == "unsupported" and mxfp8["reason"] and mxfp8["predicted_ms"] is None
    assert (out / "megatron_args.txt").exists() and (out / "whatif.html").exists()
