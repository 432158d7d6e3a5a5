"""The public kernel names of 2026 (tests/fixtures/kernel_names/public-2026.csv): names copied from
public traces, issue threads and the sources of the libraries that make them, each with the role and
precision its source says it has. The table must place them as their sources do: at least 95 % of
roles and of precisions right, and never a wrong precision (a precision the name does not carry is
"unknown", not wrong). The rules follow each library's naming scheme; they are not tuned to this
list, which only measures them (pytest -s prints every miss)."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from gemmscope.kernels import PRECISIONS, ROLES, decode

PUBLIC = Path(__file__).parent / "fixtures/kernel_names/public-2026.csv"
ROWS = list(csv.DictReader(line for line in PUBLIC.read_text(encoding="utf-8").splitlines() if not line.startswith("#")))
GEMM_ROLES = {"gemm", "gemm-tail"}


def _wrong(row: dict, precision: str | None) -> bool:
    """A precision the decoder claims that is not the source's: wrong. "unknown" and no precision
    claim nothing."""
    return precision not in (None, "unknown") and precision != row["precision"]


def test_rows_are_well_formed():
    assert len(ROWS) >= 80
    assert len({row["name"] for row in ROWS}) == len(ROWS)
    for row in ROWS:
        assert row["role"] in ROLES, row["name"]
        assert (row["precision"] in PRECISIONS) if row["role"] in GEMM_ROLES else row["precision"] == "", row["name"]
        assert row["source"].startswith(("https://", "constructed from")), row["name"]


def test_the_corpus_spans_the_families_of_2026():
    """Serving and training stacks, Hopper and Blackwell: the families issue 47 names."""
    names = " ".join(row["name"] for row in ROWS)
    for family in ("nvjet_", "bmm_", "_matmul_ogs_", "fused_moe_kernel", "matmul_kernel_persistent", "triton_tem_fused_",
                   "vllm::cutlass_3x_gemm", "cutlass3x_sm100_simt_sgemm", "tf32gemm", "dpsk::grouped_gemm",
                   "kernel_cutlass_", "quackgemm", "post_reorder_deepgemm", "QuantizeSwizzledKernel"):
        assert family in names, family
    assert set(Counter(row["role"] for row in ROWS)) == set(ROLES)


def test_at_least_95_percent_right_and_no_precision_wrong(capsys):
    decoded = [(row, decode(row["name"])) for row in ROWS]
    role_right = sum(info.role == row["role"] for row, info in decoded)
    precision_right = sum((info.precision or "") == row["precision"] for row, info in decoded)
    wrong = [row["name"] for row, info in decoded if _wrong(row, info.precision)]
    with capsys.disabled():
        for row, info in decoded:
            if info.role != row["role"] or (info.precision or "") != row["precision"]:
                print(f"\n  {row['role']}/{row['precision'] or '-'} decoded {info.role}/{info.precision or '-'} "
                      f"[{info.rule}]  {row['name'][:100]}", end="")
        print(f"\n  public names: role {role_right}/{len(ROWS)}, precision {precision_right}/{len(ROWS)}, "
              f"wrong {len(wrong)}")
    assert not wrong
    assert role_right >= 0.95 * len(ROWS)
    assert precision_right >= 0.95 * len(ROWS)


def test_gemms_are_gemms_and_say_why_their_precision_is_open():
    """Every GEMM of the list decodes as a GEMM; an unknown precision comes with its reason, and
    the families whose names never spell their dtypes (Triton, CuTe DSL classes launched with TMA
    atoms) say the precision must come from elsewhere."""
    for row in ROWS:
        if row["role"] not in GEMM_ROLES:
            continue
        info = decode(row["name"])
        assert info.role in GEMM_ROLES, row["name"]
        assert info.dtype_in_name is not None or info.rule == "gemm-unplaced", row["name"]
        if info.precision == "unknown":
            assert info.note, row["name"]
        if info.family == "triton" and info.precision == "unknown":
            assert info.dtype_in_name is False and "elsewhere" in info.note, row["name"]


@pytest.mark.parametrize("name, precision", [
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1_swiglu", "bf16×mxfp4"),
    ("bmm_Bfloat16_MxE2m1Bfloat16_castBfloat16_Fp32_t128x8x512_s3_et128x8", "bf16×mxfp4"),
    ("bmm_Bfloat16_MxInt4Bfloat16_castBfloat16_Fp32_Ab32_t128x16x256u2_s3_et128x16_m256x16x16_c2x1x1_rM_BN_transOut_"
     "schPd2x1x2x3_biasBfloat16Mn_bN_tma_tmaSf_rgTma_clmp_swiGlu_dynB_sm100f", "bf16×int4"),
    ("void cutlass::Kernel2<cutlass::gemm::kernel::GemmFpAIntB<cutlass::bfloat16_t, cutlass::uint4b_t>>(int)", "bf16×int4"),
])
def test_weight_only_gemms_name_activations_then_weights(name, precision):
    """BF16 activations against MXFP4 or int4 weights: a weight-only precision, the 16-bit operand
    first whatever the name's order (trtllm-gen writes the weights first)."""
    assert decode(name).precision == precision
