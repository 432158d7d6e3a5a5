"""Text output (`--format table`) fits 100 columns, on the shipped example, corpus traces and the
shipped profile run, and says the same figures as the JSON: kernel names shortened but
recognisable, counts unchanged, what did not run blank.

Commands run in-process with click's CliRunner: stdout is not a terminal, so nothing depends on
the terminal's width or on COLUMNS; `profile` also runs in a fresh interpreter with COLUMNS set
wider, as a user's shell would."""

import json
import lzma
import re
import sqlite3
from collections import Counter
from contextlib import closing

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from gemmscope.cli import EXAMPLE_RUN, main
from gemmscope.plan import gpu_profile, profile_run
from gemmscope.report import terminal
from gemmscope.traces.read import read_trace

from cli_runner import gemmscope
from fixture_paths import CORPUS, GPU, HF_CONFIGS

WIDTH = 100
BENCH_MAP = ["--expect-map", "BF16_*=bf16", "--expect-map", "FP8Current_*=fp8-current",
             "--expect-map", "FP8Delayed_*=fp8-delayed", "--expect-map", "FP8Block_*=fp8-block",
             "--expect-map", "MXFP8_*=mxfp8"]

# (arguments, exit code): every command with text output, on real traces and runs.
COMMANDS = {
    "analyze-example": (["analyze"], 1),
    "analyze-example-verbose": (["analyze", "--verbose"], 1),
    "analyze-fsdp-2-ranks": (["analyze", CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz",
                              CORPUS / "fsdp_fp8_2gpu_rank1.sqlite.xz"], 0),
    "analyze-fsdp-expect-mxfp8": (["analyze", CORPUS / "fsdp_fp8_1gpu.sqlite.xz", "--expect", "mxfp8"], 1),
    "analyze-te-stack-large-verbose": (["analyze", "--verbose", CORPUS / "te_stack_large_fp8-block_1gpu.sqlite.xz",
                                        "--step-range", "step *"], 0),
    "analyze-grouped-linear-verbose": (["analyze", "--verbose", CORPUS / "grouped_linear_fp8-block.sqlite.xz"], 0),
    "analyze-te-ops": (["analyze", CORPUS / "te_ops_sequential_fp8-current.sqlite.xz"], 0),
    "analyze-allowed": (["analyze", GPU / "train_mixed.sqlite.xz", "--expect", "fp8-current",
                         "--allow", "_LayerNormMLP"], 1),
    "analyze-torch-gemms-verbose": (["analyze", "--verbose", GPU / "torch_gemms.sqlite.xz"], 4),  # NOT CHECKED
    "verify-2-ranks": (["verify", "--trace", CORPUS / "te_stack_fp8-block_2gpu.sqlite.xz"], 1),
    "verify-2-ranks-verbose": (["verify", "--verbose", "--trace", CORPUS / "te_stack_fp8-block_2gpu.sqlite.xz"], 1),
    "verify-expect-map-verbose": (["verify", "--verbose", "--trace", CORPUS / "gemm_bench_4096_all.sqlite.xz",
                                   *BENCH_MAP], 1),
    "compare-fsdp-bf16-fp8": (["compare", CORPUS / "fsdp_large_bf16_1gpu.sqlite.xz",
                               CORPUS / "fsdp_large_fp8_1gpu.sqlite.xz"], 0),
    "compare-fsdp-small": (["compare", CORPUS / "fsdp_small_bf16_1gpu.sqlite.xz",
                            CORPUS / "fsdp_small_fp8_1gpu.sqlite.xz"], 0),
    "shapes-mixtral": (["shapes", "--model", "mixtral-8x7b", "--tp", "2", "--lm-head"], 0),
    "shapes-deepseek-v3": (["shapes", "--config", HF_CONFIGS / "deepseek-v3" / "config.json"],
                           0),
    "doctor": (["doctor"], 0),
    "whatif-megatron-first-last": (["whatif", CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz", "--no-measure"], 0),
    "whatif-accelerate-te": (["whatif", GPU / "steps" / "hf_llama_accelerate-fp8_10steps.sqlite.xz", "--no-measure"],
                             0),
}
NO_GPU = pytest.mark.skipif(gpu_profile.gpu_available(), reason="a GPU is here: profile would run for real")


def invoke(*args, code: int | None = None) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    if code is not None:
        assert result.exit_code == code, result.output[-3000:]
    return result.stdout


def json_of(*args) -> dict:
    per_launch = ["--per-launch"] if args[0] in ("analyze", "verify") else []  # the launches one by one too
    return json.loads(invoke(*args, "--format", "json", *per_launch))


def assert_fits(text: str) -> None:
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert wide == [], f"{len(wide)} lines wider than {WIDTH} columns, e.g.:\n" + "\n".join(wide[:3])
    assert not [line for line in text.splitlines() if line != line.rstrip()], "trailing spaces"


def section(text: str, title: str) -> list[str]:
    """The lines of the section whose heading starts with `title`, up to the next blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def rows(lines: list[str]) -> list[list[str]]:
    """A section's table rows (after the header's rule), split into cells; the indented lines
    under a row (its kernels) left out."""
    rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
    return [re.split(r"\s{2,}", line.strip()) for line in lines[rule + 1:] if not line.startswith(" ")]


def recognisable(name: str, text: str) -> bool:
    """A kernel name is in the text whole, or shortened in the middle with its family and arch at
    the front and its layout at the end on one line."""
    return name in text or any(name[:10] in line and "…" in line and name[-8:] in line for line in text.splitlines())


@pytest.mark.parametrize("case", sorted(COMMANDS))
def test_text_fits_100_columns(case):
    args, code = COMMANDS[case]
    assert_fits(invoke(*args, code=code))


def test_mismatches_keep_their_counts_and_kernels():
    text = invoke("analyze", code=1)
    doc = json_of("analyze")
    mismatches = [g for g in doc["gemms"] if g["verdict"] == "FALLBACK" and not g["allowed"]]
    assert doc["summary"]["mismatches"] == len(mismatches) == 45
    by_cause = Counter(g["cause"] for g in mismatches)
    for cause, count in by_cause.items():  # one table per cause, said once in its heading
        (heading,) = [line for line in text.splitlines() if line.startswith(f"Mismatches (requested precision did "
                                                                                f"not run): {cause},")]
        assert f"{cause}, {count} launches" in heading
        assert sum(int(r[-2]) for r in rows(section(text, heading))) == count
    assert text.count("all ran as bf16") == len(by_cause)
    assert all(recognisable(g["kernel"], text) for g in mismatches)


def test_module_and_pass_launches_are_the_json_s():
    text = invoke("analyze", CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz", CORPUS / "fsdp_fp8_2gpu_rank1.sqlite.xz")
    doc = json_of("analyze", CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz", CORPUS / "fsdp_fp8_2gpu_rank1.sqlite.xz")
    table = {(r[0], r[1]): int(r[2]) for r in rows(section(text, "GEMMs per module and pass"))}
    assert table == {(r["module"], r["pass"]): r["gemms"] for r in doc["summary"]["by_module_pass"]}
    breakdown = section(text, "Where the GPU time went")
    assert re.search(r"figure\s+rank 0\s+rank 1$", breakdown[1])  # a column per rank
    launches = {r[0]: r[1:] for r in rows(breakdown)}["kernel launches"]
    assert list(map(int, launches)) == [r["kernel_launches"] for r in doc["breakdown"]["per_rank"]]


def test_two_rank_mismatches_say_the_rank_count_once():
    text = invoke("verify", "--trace", CORPUS / "te_stack_fp8-block_2gpu.sqlite.xz", "--expect", "fp8-block", code=1)
    heading = "Mismatches (requested precision did not run): requested-bf16, 72 launches"
    assert heading in text
    said = " ".join(text.split())  # the line says it once above the table, wrapped to the width
    assert "TE was handed bf16 operands" in said and "not fp8-block" in said and "all ran as bf16, on 2 ranks." in said
    table = rows(section(text, heading))
    assert sum(int(r[-2]) for r in table) == 72
    assert table[0][0] == "layers.2.self_attention.layernorm_qkv · _LayerNormLinear"  # fits whole


def test_ranks_beyond_the_width_continue_in_a_second_table(tmp_path):
    # twelve per-rank copies of a real trace that records no rank: the file names number them; each
    # copy's session starts a nanosecond after the last, as the ranks of one job do (the same
    # session twice would be one capture given twice, read once)
    seed = lzma.decompress((CORPUS / "grouped_linear_fp8-block.sqlite.xz").read_bytes())
    for rank in range(12):
        copy = tmp_path / f"trace_rank{rank}.sqlite"
        copy.write_bytes(seed)
        with closing(sqlite3.connect(copy)) as db, db:
            db.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (rank,))
    text = invoke("analyze", tmp_path, "--workers", 1, code=0)
    assert_fits(text)
    first, continued = section(text, "Where the GPU time went"), section(text, "Where the GPU time went, continued")
    headers = re.findall(r"rank \d+", first[1]) + re.findall(r"rank \d+", continued[1])
    assert headers == [f"rank {rank}" for rank in range(12)]  # in rank order, 2 before 10
    launches = [int(n) for r in rows(first) + rows(continued) if r[0] == "kernel launches" for n in r[1:]]
    per_rank = json_of("analyze", tmp_path, "--workers", 1)["breakdown"]["per_rank"]
    assert launches == [r["kernel_launches"] for r in sorted(per_rank, key=lambda r: int(r["rank"]))]


def test_verbose_lists_every_launch_once_with_its_kernel_named_in_full():
    trace = CORPUS / "te_stack_large_fp8-block_1gpu.sqlite.xz"
    text = invoke("analyze", "--verbose", trace)
    gemms = json_of("analyze", trace)["gemms"]
    launches = section(text, "Every GEMM launch")
    table = rows(launches)
    assert len(table) == len(gemms)
    kernels = list(dict.fromkeys(g["kernel"] for g in gemms))
    legend = text.split("\n".join(launches))[1]
    assert [line.split()[1] for line in legend.split("\n\n")[1].splitlines()] == kernels
    assert [r[3] for r in table] == [f"K{kernels.index(g['kernel']) + 1}" for g in gemms]
    assert [r[-1] for r in table] == [g["verdict"] for g in gemms]


def test_compare_lists_each_changed_kernel_as_a_line():
    base, new = CORPUS / "fsdp_large_bf16_1gpu.sqlite.xz", CORPUS / "fsdp_large_fp8_1gpu.sqlite.xz"
    text = invoke("compare", base, new)
    doc = json.loads(invoke("compare", base, new, "--format", "json"))
    changed = section(text, "GEMM kernels that changed")
    for row in doc["kernels_changed"]:
        for sign, side in (("−", "base"), ("+", "new")):
            for kernel in row[side].split(" + "):
                assert any(line.startswith(f"  {sign} ") and recognisable(kernel, line) for line in changed)
    window = {r[0]: r[1:] for r in rows(section(text, "Totals: NEW − BASE"))}["window (ms)"]
    assert int(window[2]) == round(doc["totals"]["window_ns"]["difference"] / 1e6)


def test_kernel_names_each_in_full_under_the_table():
    names = sorted(set(read_trace(GPU / "torch_gemms.sqlite.xz").kernels["name"]))
    text = invoke("kernel", *names, code=0)
    assert_fits(text)
    assert len(rows(section(text, "kernels"))) == len(names)
    legend = text.split("\n\n", 1)[1]
    keys = [line.split(None, 1) for line in legend.splitlines() if not line.startswith(" ")]
    assert [int(key) for key, _ in keys] == list(range(1, len(names) + 1))
    # each name in full, a long one folded under itself (at its spaces, where it has some)
    folded = re.split(r"^\S+", legend, flags=re.MULTILINE)[1:]
    assert [re.sub(r"\s", "", name) for name in folded] == [re.sub(r"\s", "", name) for name in names]


@NO_GPU
def test_profile_fits_and_keeps_its_figures():
    text = invoke("profile", code=0)
    assert_fits(text)
    run = profile_run.load_run(EXAMPLE_RUN)
    assert "autocast: fp8-delayed 1.66×" in text
    assert "Not in the tables below: mxfp8, nvfp4: no GEMM ran" in text
    for recipe in ("MXFP8", "NVFP4"):  # TE's reason once per recipe
        assert text.count(f"required for {recipe} execution") == 1
    ran = run.gemms[run.gemms["status"] == "ok"]
    for (mode, pass_), part in ran.groupby(["mode", "pass"], sort=False):
        # a row per entry that ran, none for those that did not: its speedup, as results.json has it
        speedups = re.findall(r"\s(\d+\.\d\dx)\s", "\n".join(section(text, f"{mode}: {pass_}")))
        assert sorted(speedups) == sorted(part["speedup"].map("{:.2f}x".format))
    memory = {tuple(r[:2]): r[2:] for r in rows(section(text, "GPU memory while each precision ran"))}
    assert memory[("autocast", "mxfp8")] == [] and memory[("autocast", "bf16")] == ["868"]  # blank, never 0
    per_layer = {tuple(r[:2]): r[2:] for r in rows(section(text, "Per layer"))}
    assert per_layer[("prequant", "nvfp4")] == ["12"]  # not run: 12 GEMMs; flagged left blank


@NO_GPU
def test_profile_verbose_fits_and_has_throughput():
    text = invoke("profile", "--verbose", code=0)
    assert_fits(text)
    throughput = section(text, "prequant: wgrad: throughput and noise")
    table = throughput[[i for i, line in enumerate(throughput) if line.startswith("─")][0] + 1:]
    assert len(table) == 16  # 4 GEMMs × the 4 recipes that ran
    assert all(len(re.findall(r"\s\d+(?:\.\d+)?(?=\s|$)", line)) == 6 for line in table)  # IQR … FLOP/B


@NO_GPU
def test_profile_in_a_shell_with_wider_columns():
    done = gemmscope("profile", env={"COLUMNS": "250"}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert_fits(done.stdout)
    assert done.stdout == invoke("profile")


@pytest.mark.parametrize("trace", ["te_stack_large_fp8-block_1gpu", "fsdp_fp8_1gpu"])
def test_layer_names_keep_their_index_and_leaf(trace):
    names = {g["layer"] for g in json_of("analyze", CORPUS / f"{trace}.sqlite.xz")["gemms"] if g["layer"]}
    indexed = {name for name in names if any(part.isdigit() for part in name.split("."))}
    assert len(indexed) > 1
    for name in indexed:
        parts = name.split(".")
        index = next(i for i, part in enumerate(parts) if part.isdigit())
        head = ".".join(parts[:index + 1]) + "."
        for width in range(len(head) + 1 + len(parts[-1]), len(name) + 1):
            short = terminal.shorten_layer(name, width)
            assert len(short) <= width
            assert short.startswith(head) and short.endswith(parts[-1])


_COMPONENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=14)
_LAYER_SET = st.lists(st.integers(0, 99), min_size=1, max_size=4, unique=True).map(
    lambda n: "{" + ",".join(map(str, sorted(n))) + "}")


@given(st.lists(_COMPONENT, min_size=1, max_size=3), st.lists(_COMPONENT, min_size=1, max_size=3),
       st.lists(st.one_of(_LAYER_SET, st.integers(0, 99).map(str)), min_size=2, max_size=2, unique=True),
       st.integers(20, 60))
def test_layer_names_of_other_layers_stay_apart(before, after, indexes, width):
    """Two rows of one module in other layers (whatif's `decoder.layers.{0,3}.mlp.linear_fc2` and
    `….{1,2}.…`): however short the column, their cut names differ while the index and leaf fit."""
    names = [".".join([*before, index, *after]) for index in indexes]
    short = [terminal.shorten_layer(name, width) for name in names]
    assert all(len(s) <= width for s in short)
    if all(len(f"…{index}.…{after[-1]}") <= width for index in indexes):
        assert short[0] != short[1], (names, short)


def test_whatif_rows_of_one_module_in_other_layers_stay_apart():
    """The first/last-BF16 run's per-recipe table (measured on an H200): one row per module group,
    none two alike once their names are cut to the table's width."""
    done = gemmscope("whatif", str(CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz"), "--measured",
                     str(GPU / "whatif" / "megatron_first-last-bf16_h200"))
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("\n\n")
    per_recipe = next(block for block in table if "unsupported" in block)
    names = [re.split(r"\s{2,}", line)[0] for line in per_recipe.splitlines() if line.startswith(("decoder", "…"))]
    assert len(names) > 4 and len(names) == len(set(names)), names


def test_kernel_names_are_cut_in_the_middle():
    for name in set(read_trace(CORPUS / "te_stack_large_fp8-block_1gpu.sqlite.xz").kernels["name"]):
        for width in range(21, len(name) + 1):  # family and arch (10 characters) kept from 21 on
            short = terminal.shorten_middle(name, width)
            assert short == name if width >= len(name) else len(short) == width
            assert recognisable(name, short)
