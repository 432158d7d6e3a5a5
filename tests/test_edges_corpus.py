"""The edges of what a user's run gives, on real captures that need a GPU machine to make
(tests/fixtures/gpu/corpus/capture.sh `edges` and `edges-multi`): each test is skipped while its
trace is not committed yet, and runs, unchanged, once it is."""

import json
from collections import Counter
from pathlib import Path

import pytest

from gemmscope import diagnosis, steps
from gemmscope.traces.read import read_trace
from gemmscope.verify import check

from test_cli import gemmscope

CORPUS = Path(__file__).parent / "fixtures" / "gpu" / "corpus"
REPO = Path(__file__).resolve().parent.parent


def captured(name: str) -> Path:
    path = CORPUS / f"{name}.sqlite.xz"
    if not path.is_file():
        pytest.skip(f"{path.name} is captured on a GPU machine (capture.sh edges / edges-multi), not committed yet")
    return path


def test_compiled_model_counts_only_its_own_gemms_per_step():
    """torch.compile max-autotune: the autotuner's GEMMs are apart, every Triton GEMM is a GEMM,
    and each step after the first holds the program's own GEMMs, as many as the model has."""
    result = check([read_trace(captured("compiled_autotune_1gpu"))], "bf16")
    expected = json.loads((CORPUS / "compiled_autotune_1gpu.expected.json").read_text())
    assert len(result.autotuning) > 0
    assert result.autotuning["name"].str.startswith("triton_").any()  # the Triton candidates, benchmarked
    assert not result.gemms["name"].str.fullmatch(r"triton_(?:b?mm|mm_persistent\w*)").any()
    found = diagnosis.diagnose(result)
    assert found.step_range == expected["step_range"]
    per_step = sum(expected["gemms_per_step"].values())
    launched = Counter(steps.launching_step(result.gemms, found.steps))
    assert all(launched[step] == per_step for step in range(1, expected["steps"]))


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
    result = check([read_trace(captured("fsdp_fp8_2gpu_plain"))], "fp8-delayed")
    assert Counter(result.gemms["rank"].astype(int)) == {0: 72, 1: 72}
    passes = Counter(result.gemms["te_pass"])
    assert None not in passes and passes["fprop"] == 48
    assert passes["backward"] + passes["dgrad"] + passes["wgrad"] == 96
