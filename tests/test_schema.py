"""The machine interface: every JSON document gemmscope writes validates against its JSON Schema
(gemmscope/schemas), on real traces and runs; the schemas are valid, describe every key and use
the code's own vocabularies."""

import json
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from gemmscope import kernels
from gemmscope.api import bundle
from gemmscope.cli import main
from gemmscope.diagnosing import diagnosis
from gemmscope.judging import judgement, recipes
from gemmscope.plan import profile_run
from gemmscope.report import documents
from gemmscope.traces.read import read_trace

from fixture_paths import CORPUS, FIXTURES, GPU, HF_CONFIGS
from schema_check import REGISTRY, SCHEMAS, assert_valid

DOCUMENT_KINDS = {"analyze", "verify", "compare", "shapes", "kernel", "profile-results", "environment", "whatif", "timeline"}

RUNS = {"h200-example": Path(profile_run.__file__).parent.parent / "examples" / "h200-codonfm-5b",
        "h100": FIXTURES / "runs" / "h100-codonfm-5b"}
# analyze and verify: exit 1 (mismatches) and 4 (no recipe known, verify) still write the document.
DOCUMENT_EXITS = (0, 1, 4)


def _refuse(constant: str):
    raise AssertionError(f"{constant} in a JSON document: not JSON (RFC 8259), and a schema's number accepts it")


def parse(text: str) -> dict:
    return json.loads(text, parse_constant=_refuse)


def json_output(*args) -> dict:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code in DOCUMENT_EXITS, result.output
    return parse(result.stdout)


# --- the schema files themselves -------------------------------------------------------------------

def test_one_schema_per_document_kind_and_the_shared_parts():
    assert set(SCHEMAS) == DOCUMENT_KINDS | {"common"}


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_schema_is_a_valid_draft_2020_12_schema(kind):
    schema = SCHEMAS[kind]
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"urn:gemmscope:schema:{kind}"
    assert schema["title"] and schema["description"]


def _properties_without_description(node, path: str = "") -> list[str]:
    """Keys a schema names without a description; an `if` only tests keys described elsewhere."""
    missing = []
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            if "description" not in sub:
                missing.append(f"{path}/properties/{name}")
        for key, sub in node.items():
            if key != "if":
                missing += _properties_without_description(sub, f"{path}/{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            missing += _properties_without_description(sub, f"{path}/{i}")
    return missing


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_every_key_is_described(kind):
    assert _properties_without_description(SCHEMAS[kind]) == []


def test_schema_version_is_the_code_s():
    assert SCHEMAS["common"]["$defs"]["schema_version"]["const"] == documents.SCHEMA_VERSION


def test_vocabularies_are_the_code_s():
    common = SCHEMAS["common"]["$defs"]
    assert tuple(common["recipe"]["enum"]) == recipes.RECIPES
    assert tuple(common["kernel_precision"]["enum"]) == kernels.PRECISIONS
    assert tuple(common["category"]["enum"]) == diagnosis.CATEGORIES
    category_times = {f"{category}_ns" for category in diagnosis.CATEGORIES}
    assert category_times <= set(common["per_rank"]["required"])
    assert category_times <= set(SCHEMAS["compare"]["properties"]["totals"]["required"])
    assert tuple(SCHEMAS["kernel"]["properties"]["kernels"]["items"]["properties"]["role"]["enum"]) == kernels.ROLES
    assert tuple(SCHEMAS["profile-results"]["$defs"]["mode"]["enum"]) == profile_run.MODES


# --- analyze and verify on real traces ---------------------------------------------------------------

# (traces, options): several ranks; FP8 block scaling with steps; fallbacks, some allowed; no recipe.
CHECKED = {
    "fsdp-fp8-2-ranks": ([CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz", CORPUS / "fsdp_fp8_2gpu_rank1.sqlite.xz"], []),
    "te-stack-fp8-block-steps": ([CORPUS / "te_stack_fp8-block_1gpu.sqlite.xz"], ["--step-range", "step *"]),
    "train-mixed-allowed": ([GPU / "train_mixed.sqlite.xz"], ["--expect", "fp8-current", "--allow", "_LayerNormMLP"]),
    "te-linear-bf16-no-recipe": ([GPU / "te_linear_bf16.sqlite.xz"], []),
    # TE's GEMM benchmark range by range: one recipe raised (NO GEMM), one pattern names no range,
    # one range mapped to a recipe it did not run, GEMMs outside every mapped range left unchecked
    "gemm-benchmark-expect-map": ([CORPUS / "gemm_bench_4096_all.sqlite.xz"],
                                  ["--expect-map", "FP8Block_*=fp8-current", "--expect-map", "MXFP8_*=mxfp8",
                                   "--expect-map", "NVFP4_*=nvfp4", "--expect-map", "BF16_*=bf16"]),
}


@pytest.mark.parametrize("per_launch", [[], ["--per-launch"]], ids=["grouped", "per-launch"])
@pytest.mark.parametrize("case", sorted(CHECKED))
def test_analyze_json(case, per_launch):
    traces, options = CHECKED[case]
    assert_valid(json_output("analyze", *traces, *options, *per_launch, "--format", "json"), "analyze")


@pytest.mark.parametrize("per_launch", [[], ["--per-launch"]], ids=["grouped", "per-launch"])
@pytest.mark.parametrize("case", sorted(CHECKED))
def test_verify_json(case, per_launch):
    traces, options = CHECKED[case]
    trace_args = [arg for trace in traces for arg in ("--trace", trace)]
    assert_valid(json_output("verify", *trace_args, *options, *per_launch, "--format", "json"), "verify")


@pytest.mark.parametrize("case", sorted(CHECKED))
def test_analyze_jsonl_is_the_per_launch_records_a_line_each(case, monkeypatch):
    """--format jsonl streams, a few launches at a time (here 7, to cross chunk boundaries), the
    objects --per-launch puts in the document, each valid as one launch of the schema."""
    traces, options = CHECKED[case]
    document = json_output("analyze", *traces, *options, "--per-launch", "--format", "json")
    monkeypatch.setattr(documents, "JSONL_CHUNK", 7)
    result = CliRunner().invoke(main, ["analyze", *map(str, traces), *options, "--format", "jsonl"])
    assert result.exit_code in DOCUMENT_EXITS, result.output
    lines = [parse(line) for line in result.stdout.splitlines()]
    assert lines == document["gemms"] and len(lines) == document["summary"]["gemm_launches"]
    launch = "checked_launch" if document["summary"]["expected"] or "expect_map" in document["summary"] else "gemm_launch"
    validator = Draft202012Validator({"$ref": f"urn:gemmscope:schema:common#/$defs/{launch}"}, registry=REGISTRY)
    for line in lines:
        assert not list(validator.iter_errors(line))


def test_verify_json_of_a_command_gemmscope_ran(gpu_trace):
    # the document of `verify -- CMD` (a GPU run), built from a real trace: meta.command included
    result = judgement.judge([gpu_trace("nn_linear_in_fp8_autocast")], "fp8-current")
    for window in (None, {"nvtx_range": "step 3"}, {"delay_s": 2.0, "duration_s": 5.0}):
        command = {"exit_code": 1, "capture_window": window}
        document = documents.verification_document(result, command, diagnosis.diagnose(result), per_launch=True)
        assert_valid(parse(json.dumps(document)), "verify")


def test_verify_json_with_an_unreadable_rank_trace(tmp_path):
    broken = tmp_path / "fsdp_fp8_2gpu_rank1.sqlite"
    broken.write_bytes(b"not a trace")
    document = json_output("verify", "--trace", CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz", "--trace", broken,
                           "--workers", 1, "--format", "json")
    assert [t["rank"] for t in document["summary"]["unreadable_traces"]] == [1]
    assert_valid(document, "verify")


def test_validation_catches_a_broken_document():
    document = json_output("verify", "--trace", GPU / "train_mixed.sqlite.xz", "--format", "json", "--per-launch")
    document["mismatches"][0]["duration_ns"] = "6.4 µs"
    with pytest.raises(AssertionError, match="mismatches/0/duration_ns"):
        assert_valid(document, "verify")


# --- compare, shapes, kernel ----------------------------------------------------------------------------

@pytest.mark.parametrize("base, new", [
    (CORPUS / "fsdp_small_bf16_1gpu.sqlite.xz", CORPUS / "fsdp_small_fp8_1gpu.sqlite.xz"),
    (GPU / "train_clean.sqlite.xz", GPU / "train_mixed.sqlite.xz"),
])
def test_compare_json(base, new):
    assert_valid(json_output("compare", base, new, "--format", "json"), "compare")


@pytest.mark.parametrize("model", [
    ["--config", HF_CONFIGS / "deepseek-v3" / "config.json"],
    ["--config", HF_CONFIGS / "nemotron-h-56b-base-8k", "--tp", "8"],
    ["--model", "codonfm-5b", "--lm-head"],
])
def test_shapes_json(model):
    assert_valid(json_output("shapes", *model, "--format", "json"), "shapes")


def test_kernel_json_of_every_kernel_in_real_traces(gpu_trace):
    names = {name for trace in ("train_mixed", "torch_gemms") for name in gpu_trace(trace).kernels["name"]}
    names |= set(read_trace(CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz").kernels["name"])  # NCCL, attention
    document = json_output("kernel", *sorted(names), "--format", "json")
    assert len(document["kernels"]) == len(names)
    assert_valid(document, "kernel")


# --- a profile run's results.json ------------------------------------------------------------------------

def test_shipped_example_results_json():
    assert_valid(parse((RUNS["h200-example"] / "results.json").read_text()), "profile-results")


@pytest.mark.parametrize("run", sorted(RUNS))
def test_results_json_re_derived_from_the_trace(run):
    document = documents.results_document(profile_run.load_run(RUNS[run]), None)
    assert_valid(parse(json.dumps(document)), "profile-results")


# --- a bundle's environment.json -------------------------------------------------------------------------

@pytest.mark.parametrize("inputs", [
    [CORPUS / "fsdp_fp8_2gpu_rank0.sqlite.xz", CORPUS / "fsdp_fp8_2gpu_rank1.sqlite.xz"],
    [RUNS["h100"]],
], ids=["two-rank-traces", "profile-run-directory"])
def test_bundle_environment_json(inputs, tmp_path):
    with zipfile.ZipFile(bundle(inputs, tmp_path / "issue.zip").path) as zipped:
        document = parse(zipped.read("environment.json").decode())
    assert_valid(document, "environment")
    assert len(document["traces"]) == len(inputs)
