"""The edges of what a user's run gives, on real captures that need a GPU machine to make
(tests/fixtures/gpu/corpus/capture.sh `edges` and `edges-multi`): each test is skipped while its
trace is not committed yet, and runs, unchanged, once it is."""

import json
from collections import Counter
from pathlib import Path

import pytest

from gemmscope.diagnosing import diagnosis, steps
from gemmscope.judging.judgement import judge
from gemmscope.report.documents import summary_document
from gemmscope.traces.read import read_trace

from cli_runner import gemmscope
from fixture_paths import CORPUS


def captured(name: str) -> Path:
    path = CORPUS / f"{name}.sqlite.xz"
    if not path.is_file():
        pytest.skip(f"{path.name} is captured on a GPU machine (capture.sh edges / edges-multi), not committed yet")
    return path


def test_compiled_model_counts_only_its_own_gemms_per_step():
    """torch.compile max-autotune: the GEMMs its autotuner times while compiling (step 0), Triton
    candidates and cuBLAS ones alike, are apart; every step, the first included, holds the
    program's own GEMMs, as many as the model has (expected.json, written by the program), the same
    kernels in step 0 as after it."""
    result = judge([read_trace(captured("compiled_autotune_1gpu"))], "bf16")
    expected = json.loads((CORPUS / "compiled_autotune_1gpu.expected.json").read_text())
    tuned = result.job.autotuning["name"]
    assert tuned.str.startswith("triton_").any() and (~tuned.str.startswith("triton_")).any()
    assert not result.gemms["name"].str.fullmatch(r"triton_(?:b?mm|mm_persistent\w*)").any()
    assert summary_document(result)["autotuning_gemm_launches"] == len(tuned)
    found = diagnosis.diagnose(result)
    assert found.step_range == expected["step_range"]
    per_step = sum(expected["gemms_per_step"].values())
    step_of = steps.launching_step(result.gemms, found.steps)
    assert Counter(step_of) == dict.fromkeys(range(expected["steps"]), per_step)
    kernels_of = [Counter(result.gemms["name"][step_of == step]) for step in range(expected["steps"])]
    assert all(kernels == kernels_of[-1] for kernels in kernels_of)


def test_mxfp8_benchmark_that_skips_on_hopper_ran_nothing():
    """TE's GroupedLinear benchmark asked for MXFP8 on Hopper skips and exits 0: no GEMM ran at
    mxfp8 (exit 1), said as such, not as a capture made without CUDA tracing (exit 2)."""
    path = captured("grouped_linear_mxfp8_hopper")
    done = gemmscope("analyze", path, "--expect", "mxfp8", timeout=300)
    assert done.returncode == 1, done.stderr
    assert "captured with --trace=cuda" not in done.stderr


def test_plain_two_process_capture_is_split_by_rank_with_backward_passes():
    """`nsys profile torchrun --nproc-per-node 2` without the hook or TE's ranges: the ranks come
    from the GPU each process used, the autograd thread's GEMMs are at least backward."""
    result = judge([read_trace(captured("fsdp_fp8_2gpu_plain"))], "fp8-delayed")
    assert Counter(result.gemms["rank"].astype(int)) == {0: 72, 1: 72}
    passes = Counter(result.gemms["te_pass"])
    assert None not in passes and passes["fprop"] == 48
    assert passes["backward"] + passes["dgrad"] + passes["wgrad"] == 96
