"""The corpus of public kernel names (tests/fixtures/kernel_names/corpus.tsv): every name decodes to
the role, precision and deciding rule its row says, a family's specific rule decides (the catch-alls
only where nothing specific matches), new precisions are judged by what they are, and the rules
table and docs/kernel-names.md name the same rules."""

import csv
import re
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmscope.cli import main
from gemmscope.judging.judgement import verdict
from gemmscope.kernels import PRECISIONS, RULES, SCALE_MODES, decode

ROOT = Path(__file__).parent.parent
CORPUS = [row for row in csv.DictReader(
    (line for line in (ROOT / "tests/fixtures/kernel_names/corpus.tsv").read_text().splitlines()
     if not line.startswith("#")), delimiter="\t")]
CATCH_ALLS = {"attention", "gemm-unplaced", "unknown"}


def test_corpus_covers_every_family_of_the_issue():
    families = Counter(row["family"] for row in CORPUS)
    assert {"trtllm-gen", "deepgemm", "cute-dsl", "cutlass", "triton", "quantize", "attention"} <= set(families)
    assert min(families.values()) >= 4
    assert all(row["source"] for row in CORPUS)


@pytest.mark.parametrize("row", CORPUS, ids=[f"{row['family']}:{row['name'][:60]}" for row in CORPUS])
def test_corpus_name_decodes_by_its_rule(row):
    info = decode(row["name"])
    assert (info.role, info.precision or "", info.rule) == (row["role"], row["precision"], row["rule"])
    assert info.rule not in CATCH_ALLS
    if info.role == "gemm":
        assert info.precision in PRECISIONS
        assert info.scale_mode is None or info.scale_mode in SCALE_MODES
        assert (info.note is not None) == (info.precision in {"unknown", "fp4"})  # unknown says why


def test_deciding_rules_shown(capsys):
    """Each corpus name with the rule that decides it (pytest -s prints the table)."""
    lines = [f"{decode(row['name']).rule:22} {row['precision'] or row['role']:14} {row['name'][:100]}" for row in CORPUS]
    print("\n".join(lines))
    assert len(lines) == len(CORPUS)


def test_catch_alls_decide_only_where_no_specific_rule_matches():
    for row in CORPUS:
        matching = [rule.id for rule in RULES if rule.pattern.search(row["name"])]
        assert matching[0] == row["rule"]
    # a name only a catch-all matches
    assert [rule.id for rule in RULES if rule.pattern.search("vendor_gemm_kernel")] == ["gemm-unplaced", "unknown"]


@pytest.mark.parametrize("name, a, b, out, scale_mode", [
    # trtllm-gen spells D, then A and B, then the accumulator; MX types and block sizes per operand
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_Ab32_Bb32_Cb32_t128x8x512_s3_et128x8", "e2m1", "e4m3", "e4m3", "mx-ue8m0-32"),
    ("bmm_Bfloat16_E2m1E2m1_Fp32_Ab16_Bb16_t128x8x512", "e2m1", "e2m1", "bf16", "nv-ue4m3-16"),
    ("gemm_Bfloat16_E4m3E4m3_Fp32_t128x8x128u2_s6_dsFp8_sm100f", "e4m3", "e4m3", "bf16", "block-2d"),
])
def test_trtllm_gen_operands(name, a, b, out, scale_mode):
    info = decode(name)
    assert (info.a_dtype, info.b_dtype, info.out_dtype, info.scale_mode) == (a, b, out, scale_mode)


def test_grouped_gemms_stay_gemms():
    moe = decode("bmm_E2m1_E2m1E2m1_Fp32_Ab16_Bb16_Cb16_t128x32x512u2_s4_swiGlu_dynB_sm100f")
    dense = decode("gemm_Bfloat16_E2m1E2m1_Fp32_t128x128x128_s3_TN_sm100f")
    assert (moe.role, moe.grouped, dense.role, dense.grouped) == ("gemm", True, "gemm", False)
    assert decode("void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u, (deep_gemm::GemmType)1>(int)").grouped
    assert not decode("void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u, (deep_gemm::GemmType)0>(int)").grouped
    assert not decode("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT").grouped


def test_deepgemm_block_size_first_scale_encoding_in_scale_mode():
    row = next(r for r in CORPUS if "(unsigned int)128, (unsigned int)128" in r["name"])
    info = decode(row["name"])
    assert (info.precision, info.scale_mode) == ("fp8-block", "block-1d-ue8m0")


@pytest.mark.parametrize("name, out_dtype, scale_mode", [
    ("void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)2, __nv_bfloat16, 32, true, false>",
     "e4m3", "mx-ue8m0-32"),
    ("void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)0, __nv_bfloat16, 16, false>",
     "e2m1", "nv-ue4m3-16"),
    ("void per_token_group_quant_8bit_kernel<c10::BFloat16, c10::Float8_e4m3fn, true, true, float>(int)", "e4m3", "block-1d"),
    ("void vllm::dynamic_per_token_scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>(int)", "e4m3", "rowwise"),
    ("void vllm::cvt_fp16_to_fp4<__nv_bfloat16, false>(int)", "e2m1", "nv-ue4m3-16"),
])
def test_quantize_kernels_say_their_target(name, out_dtype, scale_mode):
    info = decode(name)
    assert (info.role, info.precision, info.out_dtype, info.scale_mode) == ("quantize", None, out_dtype, scale_mode)


@pytest.mark.parametrize("ran, asked, expected", [
    ("fp4", "nvfp4", "UNKNOWN"),  # FP4, scale type not in the name: neither OK nor a fallback
    ("fp4", "mxfp4", "UNKNOWN"),
    ("fp4", "fp8-current", "FALLBACK"),  # but surely not FP8
    ("mxfp4×mxfp8", "mxfp4×mxfp8", "OK"),  # operand by operand
    ("mxfp4×mxfp8", "mxfp8×mxfp4", "OK"),  # A and B swapped by the kernel (transposed output)
    ("mxfp4×mxfp8", "mxfp8", "FALLBACK"),  # weights ran MXFP4 where MXFP8 was asked
    ("mxfp8", "mxfp4×mxfp8", "FALLBACK"),
    ("nvfp4", "nvfp4", "OK"),
])
def test_new_precisions_are_judged_by_what_they_are(ran, asked, expected):
    assert verdict(ran, asked, 100) == expected


def test_docs_name_every_rule_in_table_order():
    docs = (ROOT / "docs/kernel-names.md").read_text()
    table = docs.split("## The table, in match order", 1)[1].split("\n## ", 1)[0]
    documented = [rid for cell in re.findall(r"^\| (`[^|]+`) \|", table, re.MULTILINE)
                  for rid in re.findall(r"`([\w-]+)`", cell)]
    assert documented == [rule.id for rule in RULES]


def test_kernel_reads_names_from_a_file_and_stdin(tmp_path):
    names = [row["name"] for row in CORPUS[:3]]
    listing = tmp_path / "kernels.txt"
    listing.write_text("\n".join(names) + "\n\n")
    by_file = CliRunner().invoke(main, ["kernel", "--from", str(listing), "--format", "json"])
    by_stdin = CliRunner().invoke(main, ["kernel", "--format", "json"], input="\n".join(names))
    by_args = CliRunner().invoke(main, ["kernel", *names, "--format", "json"])
    assert by_file.exit_code == by_stdin.exit_code == by_args.exit_code == 0
    assert by_file.stdout == by_stdin.stdout == by_args.stdout
    assert '"grouped": true' in by_args.stdout


def test_kernel_without_names_is_bad_input(tmp_path):
    empty = CliRunner().invoke(main, ["kernel"], input="")
    missing = CliRunner().invoke(main, ["kernel", "--from", str(tmp_path / "none.txt")])
    assert (empty.exit_code, missing.exit_code) == (2, 2)
    assert "no kernel names" in empty.output and "cannot read it" in missing.output
