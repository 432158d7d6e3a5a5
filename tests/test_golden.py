"""Golden outputs: what the CLI prints and writes for the committed traces (terminal, Markdown,
HTML text, JSON, CSV), normalised and compared with tests/golden/, so that a restructuring shows
it changes nothing by itself.

An output changes only on purpose: regenerate with

    GEMMSCOPE_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py

and let the diff of tests/golden/ say, in the commit that changes it, what changed and why.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmscope.cli import main

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
GPU = "tests/fixtures/gpu"
CORPUS = f"{GPU}/corpus"
KINETO = f"{GPU}/kineto"
UPDATE = os.environ.get("GEMMSCOPE_UPDATE_GOLDEN", "") not in ("", "0")

# Every committed GPU trace: a terminal table and the JSON document each.
TRACES = {
    "train_mixed": f"{GPU}/train_mixed.sqlite.xz",
    "train_mixed_no-te-nvtx": f"{GPU}/train_mixed_no-te-nvtx.sqlite.xz",
    "train_clean": f"{GPU}/train_clean.sqlite.xz",
    "torch_gemms": f"{GPU}/torch_gemms.sqlite.xz",
    "te_linear_bf16": f"{GPU}/te_linear_bf16.sqlite.xz",
    "te_linear_fp8-block": f"{GPU}/te_linear_fp8-block.sqlite.xz",
    "te_linear_fp8-delayed": f"{GPU}/te_linear_fp8-delayed.sqlite.xz",
    "te_linear_fp8-current_no-te-nvtx": f"{GPU}/te_linear_fp8-current_no-te-nvtx.sqlite.xz",
    "te_layernorm_fp8-current": f"{GPU}/te_layernorm_fp8-current.sqlite.xz",
    "nn_linear_in_fp8_autocast": f"{GPU}/nn_linear_in_fp8_autocast.sqlite.xz",
    "request_mxfp8": f"{GPU}/request_mxfp8.sqlite.xz",
    "fsdp_fp8_1gpu": f"{CORPUS}/fsdp_fp8_1gpu.sqlite.xz",
    "fsdp_fp8_2gpu": f"{CORPUS}/fsdp_fp8_2gpu.sqlite.xz",
    "fsdp_fp8_2gpu_plain": f"{CORPUS}/fsdp_fp8_2gpu_plain.sqlite.xz",
    "fsdp_small_fp8_1gpu": f"{CORPUS}/fsdp_small_fp8_1gpu.sqlite.xz",
    "fsdp_layernormmlp_fp8_1gpu": f"{CORPUS}/fsdp_layernormmlp_fp8_1gpu.sqlite.xz",
    "grouped_linear_fp8-block": f"{CORPUS}/grouped_linear_fp8-block.sqlite.xz",
    "te_stack_fp8-block_2gpu": f"{CORPUS}/te_stack_fp8-block_2gpu.sqlite.xz",
    "te_stack_large_fp8-block_1gpu": f"{CORPUS}/te_stack_large_fp8-block_1gpu.sqlite.xz",
    "te_ops_sequential_fp8-current": f"{CORPUS}/te_ops_sequential_fp8-current.sqlite.xz",
    "gemm_bench_4096_hook": f"{CORPUS}/gemm_bench_4096_hook.sqlite.xz",
    "megatron_gpt_first-last-bf16": f"{CORPUS}/megatron_gpt_first-last-bf16.sqlite.xz",
    "megatron_moe_fp8-block": f"{CORPUS}/megatron_moe_fp8-block.sqlite.xz",
    "megatron_gpt_fp8-tensorwise_plain": f"{CORPUS}/megatron_gpt_fp8-tensorwise_plain.sqlite.xz",
    "torchao_rowwise": f"{CORPUS}/torchao_rowwise.sqlite.xz",
    "torchao_tensorwise_compiled": f"{CORPUS}/torchao_tensorwise_compiled.sqlite.xz",
    "compiled_autotune_1gpu": f"{CORPUS}/compiled_autotune_1gpu.sqlite.xz",
    "deferred_wgrad_fp8-block": f"{CORPUS}/deferred_wgrad_fp8-block.sqlite.xz",
    "kineto_te_stack": f"{KINETO}/te_stack_fp8-block_1gpu.rank0.json.gz",
    "kineto_megatron_moe": f"{KINETO}/megatron_moe_fp8-block.rank0.json.gz",
    "kineto_torchao_tensorwise": f"{KINETO}/torchao_tensorwise.json.gz",
}

# A few traces in every format a person pastes or a program reads.
EVERY_FORMAT = ("train_mixed", "fsdp_fp8_2gpu", "megatron_gpt_first-last-bf16", "te_stack_large_fp8-block_1gpu",
                "torchao_rowwise", "kineto_te_stack")


def _cases() -> dict[str, list[str]]:
    cases: dict[str, list[str]] = {}
    for name, trace in TRACES.items():
        cases[f"analyze.{name}.table"] = ["analyze", trace]
        cases[f"analyze.{name}.json"] = ["analyze", trace, "--format", "json"]
    for name in EVERY_FORMAT:
        trace = TRACES[name]
        cases[f"analyze.{name}.markdown"] = ["analyze", trace, "--format", "markdown"]
        cases[f"analyze.{name}.csv"] = ["analyze", trace, "--format", "csv"]
        cases[f"analyze.{name}.verbose"] = ["analyze", trace, "--verbose"]
        cases[f"diagnose.{name}"] = ["diagnose", trace]
        cases[f"report.{name}.html"] = ["report", trace, "-o", "-", "--format", "html"]
    cases["analyze.gemm_bench_4096.expect-map"] = [
        "analyze", f"{CORPUS}/gemm_bench_4096.sqlite.xz", "--expect-map", "BF16_*=bf16",
        "--expect-map", "FP8Current_*=fp8-current", "--expect-map", "FP8Delayed_*=fp8-delayed",
        "--expect-map", "FP8Block_*=fp8-block"]
    cases["analyze.te_stack_fp8-block_2gpu.allow"] = [
        "analyze", TRACES["te_stack_fp8-block_2gpu"], "--allow", "(outside TE)", "--format", "json"]
    cases["analyze.fsdp_fp8_1gpu.expect-bf16"] = ["analyze", TRACES["fsdp_fp8_1gpu"], "--expect", "bf16"]
    cases["analyze.fsdp_fp8_2gpu_ranks.table"] = [
        "analyze", f"{CORPUS}/fsdp_fp8_2gpu_rank0.sqlite.xz", f"{CORPUS}/fsdp_fp8_2gpu_rank1.sqlite.xz"]
    cases["analyze.te_stack_large.step-range"] = [
        "analyze", TRACES["te_stack_large_fp8-block_1gpu"], "--step-range", "step *", "--format", "json"]
    cases["verify.train_mixed.table"] = ["verify", "--trace", TRACES["train_mixed"]]
    cases["verify.torch_gemms.json"] = ["verify", "--trace", TRACES["torch_gemms"], "--expect", "bf16",
                                        "--format", "json"]
    cases["compare.fsdp_small.table"] = ["compare", f"{CORPUS}/fsdp_small_bf16_1gpu.sqlite.xz",
                                         TRACES["fsdp_small_fp8_1gpu"]]
    cases["compare.fsdp_large.json"] = ["compare", f"{CORPUS}/fsdp_large_bf16_1gpu.sqlite.xz",
                                        f"{CORPUS}/fsdp_large_fp8_1gpu.sqlite.xz", "--format", "json"]
    cases["compare.fsdp_large.markdown"] = ["compare", f"{CORPUS}/fsdp_large_bf16_1gpu.sqlite.xz",
                                            f"{CORPUS}/fsdp_large_fp8_1gpu.sqlite.xz", "--format", "markdown"]
    cases["analyze.example.table"] = ["analyze"]
    cases["profile.example.table"] = ["profile"]
    cases["profile.example.verbose"] = ["profile", "--verbose"]
    cases["report.example-run.markdown"] = ["report", "-o", "-", "--format", "markdown"]
    cases["report.example-run.html"] = ["report", "-o", "-", "--format", "html"]
    cases["shapes.llama-3-8b"] = ["shapes", "--model", "llama-3-8b"]
    cases["shapes.deepseek-v3.json"] = ["shapes", "--config", "tests/fixtures/hf_configs/deepseek-v3/config.json",
                                        "--format", "json"]
    # whatif without a GPU: the groups that would be measured and the command that measures them
    cases["whatif.megatron_gpt_first-last-bf16.table"] = ["whatif", TRACES["megatron_gpt_first-last-bf16"]]
    cases["whatif.torchao_rowwise.json"] = ["whatif", TRACES["torchao_rowwise"], "--format", "json"]
    cases["whatif.hf_llama_accelerate-fp8.table"] = ["whatif", f"{GPU}/steps/hf_llama_accelerate-fp8_10steps.sqlite.xz"]
    # whatif advising from a measurement an H200 made of the same trace's groups
    measured = f"{GPU}/whatif/megatron_first-last-bf16_h200"
    cases["whatif.megatron_gpt_first-last-bf16.measured.table"] = [
        "whatif", TRACES["megatron_gpt_first-last-bf16"], "--measured", measured]
    cases["whatif.megatron_gpt_first-last-bf16.measured.json"] = [
        "whatif", TRACES["megatron_gpt_first-last-bf16"], "--measured", measured, "--format", "json"]
    cases["kernel.names"] = ["kernel", "nvjet_sm90_qqtst_96x128_128x7_2x1_v_bz_bias_TNN",
                             "nvjet_sm100_oohsh_128x256_128x4_2x1_2cta_v_bz_Avec16UE4M3_Bvec16UE4M3_TNN",
                             "cublasLt::splitKreduce_kernel", "triton_tem_fused_mm_0", "cast_transpose_kernel"]
    return cases


CASES = _cases()

# What differs from one machine or run to the next, not from one version of gemmscope to the next.
_NORMALISE = (
    (re.compile(re.escape(str(REPO))), "<repo>"),
    (re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+"), "data:image/png;base64,<png>"),
    (re.compile(r"/tmp/[\w.\-/]+"), "<tmp>"),
)


def normalise(text: str) -> str:
    for pattern, replacement in _NORMALISE:
        text = pattern.sub(replacement, text)
    return text


def run_case(args: list[str]) -> str:
    """The command as a user runs it from the repository's root: stdout, stderr and exit code."""
    old = Path.cwd()
    os.chdir(REPO)
    try:
        result = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"}).invoke(main, args, catch_exceptions=False)
    finally:
        os.chdir(old)
    return normalise(f"$ gemmscope {' '.join(args)}\n--- exit {result.exit_code}\n--- stdout\n{result.stdout}"
                     f"--- stderr\n{result.stderr}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_output_is_golden(case: str) -> None:
    got = run_case(CASES[case])
    path = GOLDEN / f"{case}.txt"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(got, encoding="utf-8")
        return
    assert path.exists(), f"no golden output for {case}: run with GEMMSCOPE_UPDATE_GOLDEN=1"
    assert got == path.read_text(encoding="utf-8"), f"{case}: output differs from {path} (see the diff)"


def test_every_golden_file_has_its_case() -> None:
    """A case removed leaves no stale golden file behind to be mistaken for a guarded output."""
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(CASES)
