"""Training steps found in programs that mark none, and --steps: real captures (tests/fixtures/gpu/steps,
README there) of Megatron-Core, a Hugging Face model in a plain loop and through accelerate's FP8
path, and TE's FSDP example on two ranks, made by `gemmscope verify` with gemmscope's hook marking
every optimizer step. Ground truth from the programs themselves: the GEMMs one step runs, counted
from each model's own module tree (their *.expected.json), and the steps each program ran."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gemmscope.assembly.loading import load_one
from gemmscope.cli import main
from gemmscope.diagnosing import steps

from fixture_paths import STEPS


def run(*args: str) -> tuple[int, dict | str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    out: dict | str = json.loads(result.stdout) if "json" in args else result.stdout
    return result.exit_code, out, result.stderr


def megatron_gemms_per_step(name: str) -> int:
    """Every TE module's GEMMs in each pass, and the output layer's (a ColumnParallelLinear outside
    TE): from the module tree megatron_gpt.py wrote."""
    tree = json.loads((STEPS / f"{name}.expected.json").read_text())
    per_pass = sum(m["gemms_per_pass"] for m in tree["te_modules"]) + 1
    return per_pass * len(tree["passes"])


def steps_per_process(report: dict) -> dict:
    found: dict = {}
    for step in report["breakdown"]["steps"]:
        found.setdefault((step["trace"], step["pid"]), []).append(step["index"])
    return found


def test_megatron_steps_found_without_any_mark_of_its_own():
    """Megatron-Core GPT, 10 steps: the hook's marks are its steps (10), each launching the GEMMs
    its module tree says, and the breakdown covers steps 1-9, not start-up."""
    name = "megatron_gpt_10steps"
    code, report, _ = run("analyze", STEPS / f"{name}.sqlite.xz", "--format", "json")
    assert code == 0
    per_step = megatron_gemms_per_step(name)
    assert report["summary"]["gemm_launches"] == 10 * per_step
    assert report["breakdown"]["step_range"] == steps.MARKED_PATTERN
    assert list(steps_per_process(report).values()) == [list(range(10))]
    window = report["breakdown"]["per_rank"][0]["window_ns"]
    whole = sum(s["wall_ns"] for s in report["breakdown"]["steps"])
    assert window < whole  # steps 1-9 on the GPU, not the process from its start
    table = " ".join(str(run("analyze", STEPS / f"{name}.sqlite.xz")[1]).split())
    assert "steps: the optimizer steps gemmscope's hook marked (gemmscope.step *), after the first" in table


@pytest.mark.parametrize("capture", ["megatron_gpt_steps5-7.sqlite.xz", "megatron_gpt_steps5-7_torch.rank0.json.gz"])
def test_megatron_steps_captured_alone(capture):
    """verify --steps 5-7 (nsys, torch.profiler): exactly those three steps' GEMMs, with the
    verdicts the whole run has over the same steps."""
    per_step = megatron_gemms_per_step("megatron_gpt_10steps")
    code, report, _ = run("analyze", STEPS / capture, "--steps", "5-7", "--format", "json")
    assert code == 0
    assert report["summary"]["gemm_launches"] == 3 * per_step
    assert list(steps_per_process(report).values()) == [[5, 6, 7]]
    _, whole, _ = run("analyze", STEPS / "megatron_gpt_10steps.sqlite.xz", "--steps", "5-7", "--format", "json")
    assert whole["summary"]["gemm_launches"] == 3 * per_step
    for key in ("mismatches", "expected", "precision_share"):
        assert report["summary"].get(key) == whole["summary"].get(key), key


def test_two_ranks_capture_the_same_steps():
    """TE's FSDP example on two ranks (one nsys session over torchrun) and Megatron-Core with TP=2:
    both ranks hold steps 5-7 alone, each rank the GEMMs of 3 steps: 2 TransformerLayers × 4 GEMMs
    (QKV, proj, FC1, FC2) × 3 passes for FSDP, the module tree's count for Megatron."""
    for capture, per_step in (("fsdp_2gpu_steps5-7.sqlite.xz", 2 * 4 * 3),
                              ("megatron_gpt_tp2_steps5-7.sqlite.xz",
                               megatron_gemms_per_step("megatron_gpt_tp2_steps5-7"))):
        code, report, _ = run("analyze", STEPS / capture, "--steps", "5-7", "--format", "json", "--per-launch")
        assert code == 0, capture
        assert sorted(steps_per_process(report).values()) == [[5, 6, 7], [5, 6, 7]], capture
        ranks = [g["rank"] for g in report["gemms"]]
        assert {r: ranks.count(r) for r in set(ranks)} == {0: 3 * per_step, 1: 3 * per_step}, capture


def test_torch_profiler_window_leaves_out_kernels_launched_before_it():
    """The torch.profiler traces of the same FSDP run begin while the GPU still runs step 4's
    backward GEMMs, whose launch calls precede the window: they are not kernels of steps 5-7, and
    the count is the nsys capture's."""
    traces = sorted(STEPS.glob("fsdp_2gpu_steps5-7_torch.rank*.json.gz"))
    code, report, _ = run("analyze", *traces, "--steps", "5-7", "--format", "json")
    assert code == 0
    assert report["summary"]["gemm_launches"] == 2 * 3 * 2 * 4 * 3
    loaded = load_one(traces[1])
    assert loaded.launches is not None and loaded.launches["launch_start"].isna().any()  # the case is in the trace


def test_a_long_runs_steps_read_the_same_from_torch_profiler_and_nsys():
    """TE's FSDP example, 8 TransformerLayers of 4 GEMMs (QKV, projection, FC1, FC2) in 3 passes, 400
    iterations, steps 200-202 captured alone by each profiler (`verify --steps 200-202`): the same
    GEMMs, kernels and verdicts from both, 3 steps' worth."""
    groups = {}
    for capture in ("fsdp_400iters_steps200-202.sqlite.xz", "fsdp_400iters_steps200-202_torch.rank0.json.gz"):
        code, report, _ = run("analyze", STEPS / capture, "--steps", "200-202", "--expect", "fp8-delayed",
                              "--format", "json")
        assert code == 0 and report["summary"]["state"] == "pass", capture
        assert report["summary"]["gemm_launches"] == 3 * 8 * 4 * 3, capture
        assert {s["index"] for s in report["breakdown"]["steps"]} == {200, 201, 202}, capture
        groups[capture] = sorted((g["layer"], g["module"], g["pass"], g["kernel"], g["verdict"], g["launches"])
                                 for g in report["summary"]["groups"])
    assert len(set(map(tuple, groups.values()))) == 1


def test_hugging_face_plain_loop_steps():
    """A Llama from transformers trained in a plain loop (no NVTX anywhere), BF16 and through
    accelerate's FP8 path: 10 steps of the GEMMs its nn.Linears run; --steps 5-7 alone."""
    # The BF16 capture predates the hook's reading of torch.autocast (its records say float32
    # operands): it is checked against --expect bf16, as it was captured.
    for name, expect in (("hf_llama_10steps", ["--expect", "bf16"]), ("hf_llama_accelerate-fp8_10steps", [])):
        expected = json.loads((STEPS / f"{name}.expected.json").read_text())
        code, report, _ = run("analyze", STEPS / f"{name}.sqlite.xz", *expect, "--format", "json")
        assert code == 0, name
        assert report["summary"]["gemm_launches"] == expected["steps"] * expected["gemms_per_step"], name
        assert list(steps_per_process(report).values()) == [list(range(expected["steps"]))], name
    expected = json.loads((STEPS / "hf_llama_10steps.expected.json").read_text())
    code, report, _ = run("analyze", STEPS / "hf_llama_steps5-7.sqlite.xz", "--expect", "bf16", "--steps", "5-7",
                          "--format", "json")
    assert code == 0
    assert report["summary"]["gemm_launches"] == 3 * expected["gemms_per_step"]


def test_a_program_without_an_optimizer_says_so():
    code, table, _ = run("analyze", STEPS / "hf_llama_inference.sqlite.xz", "--expect", "bf16")
    assert code == 0
    assert f"the whole trace: {steps.NO_OPTIMIZER_STEP}" in " ".join(str(table).split())


def test_steps_a_trace_does_not_hold_are_one_line():
    code, _, err = run("analyze", STEPS / "megatron_gpt_steps5-7.sqlite.xz", "--steps", "8-9")
    assert code == 2
    assert err.strip().splitlines() == [
        "gemmscope: error: steps 8-9 are not in the trace: it holds steps 4-7 (the hook marks each optimizer step; "
        "did the job end before them?)"]
    code, report, err = run("analyze", STEPS / "megatron_gpt_steps5-7.sqlite.xz", "--steps", "6-9", "--format", "json")
    assert code == 0 and "steps 8-9 are not in the traces" in err
    assert list(steps_per_process(report).values()) == [[6, 7]]


@pytest.mark.parametrize("text", ["7-5", "x", "-1-2", ""])
def test_steps_option_refuses_what_is_no_interval(text):
    code, _, err = run("analyze", STEPS / "megatron_gpt_steps5-7.sqlite.xz", "--steps", text)
    assert code == 2 and "--steps" in err


def test_marked_steps_start_at_the_last_mark_of_the_step_before():
    """Step n runs from the last mark of n-1 to its own last; a step whose start the trace lacks
    (the capture opened inside it) is not a step."""
    loaded = load_one(STEPS / "megatron_gpt_steps5-7.sqlite.xz")
    assert loaded.trace is not None and loaded.launches is not None
    found = steps.marked_steps(loaded.trace, loaded.launches)
    marks = loaded.trace.nvtx[loaded.trace.nvtx["name"].str.startswith("gemmscope.step|n=", na=False)]
    last = marks.assign(n=marks["name"].str.split("=").str[1].astype(int)).groupby("n")["start"].max()
    assert found["index"].tolist() == [n for n in last.index if n - 1 in last.index]
    assert (found["end"].to_numpy() == last.loc[found["index"]].to_numpy()).all()
    assert (found["start"].to_numpy() == last.loc[found["index"] - 1].to_numpy()).all()


def test_step_table_and_steps_that_differ():
    """Per rank and step, the step's time and where it went, adding up to the rank's breakdown;
    a step made slow names itself (slow-steps) and a rank made slow lags (rank-lag)."""
    from gemmscope import api
    from gemmscope.diagnosing import diagnosis

    result = api.check([STEPS / "fsdp_2gpu_steps5-7.sqlite.xz"], steps=(5, 7)).judgement
    assert result is not None
    found = diagnosis.diagnose(result)
    times = found.step_times
    assert sorted(zip(times["rank"].astype(str), times["step"])) == [(r, s) for r in "01" for s in (5, 6, 7)]
    per_rank = times.groupby("rank")[["window_ns", "busy_ns", "gemm_ns"]].sum()
    whole = found.breakdown.set_index("rank")[["window_ns", "busy_ns", "gemm_ns"]]
    assert (per_rank.sort_index().to_numpy() == whole.sort_index().to_numpy()).all()
    assert diagnosis.uneven_steps(times) == []  # the run's steps are even (within 25 %)
    slow = times.copy()
    slow.loc[2, "window_ns"] *= 2
    (finding,) = diagnosis.uneven_steps(slow)
    assert finding["code"] == "slow-steps"
    assert finding["figures"]["slow_steps"] == {f"rank {slow.at[2, 'rank']} step {slow.at[2, 'step']}":
                                                int(slow.at[2, "window_ns"])}
    median = slow[slow["rank"] == slow.at[2, "rank"]]["window_ns"].median()
    assert finding["explains_ns"] == int(2 * times.at[2, "window_ns"] - median)
    lagging = times.copy()
    lagging["window_ns"] = lagging["window_ns"].where(lagging["rank"].astype(str) != "1", lagging["window_ns"] * 6 // 5)
    assert [f["code"] for f in diagnosis.uneven_steps(lagging)] == ["rank-lag"]
