"""torch.profiler (Kineto) traces read into the frames the nsys reader makes, on real traces:
tests/fixtures/kineto (a V100 training trace from Holistic Trace Analysis's test data, and a CPU
trace made with real torch by make_cpu_traces.py). Counts are checked against the JSON read
independently with the standard library; bad inputs are made from the real traces here."""

import gzip
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from gemmscope import kernels
from gemmscope.assembly import te_ranges
from gemmscope.assembly.loading import load_one
from gemmscope.traces.read import read_trace, trace_paths

from cli_runner import assert_one_line_error, gemmscope, invoke
from fixture_paths import CORPUS, GPU_KINETO, KINETO

V100 = KINETO / "hta_v100_train_rank0.json.gz"
CPU = KINETO / "cpu_train.json.gz"


@pytest.fixture(scope="module")
def v100_events():
    with gzip.open(V100, "rt") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def v100():
    loaded = load_one(V100)
    assert loaded.error is None, loaded.error
    return loaded


def test_every_kernel_read_and_joined_to_the_call_that_launched_it(v100, v100_events):
    events = v100_events["traceEvents"]
    kernel_events = [e for e in events if e.get("cat") == "kernel"]
    launches = v100.launches
    assert len(launches) == len(kernel_events) == 4350
    correlations = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    joined = sum(e["args"]["correlation"] in correlations for e in kernel_events)
    assert launches["launch_api"].notna().sum() == joined
    assert set(launches["launch_api"].dropna()) <= {e["name"] for e in events if e.get("cat") == "cuda_runtime"}
    # times: Kineto's microseconds with three decimals, as integer nanoseconds
    first = min(kernel_events, key=lambda e: e["ts"])
    assert launches["start"].iloc[0] == round(first["ts"] * 1000)
    assert launches["duration_ns"].iloc[0] == round(first["dur"] * 1000)
    assert Counter(launches["name"]) == Counter(e["name"] for e in kernel_events)


def test_gemms_decoded_and_their_passes_told_by_the_launching_thread(v100, v100_events):
    names = [e["name"] for e in v100_events["traceEvents"] if e.get("cat") == "kernel"]
    decoded = kernels.decode_frame(__import__("pandas").Series(names))
    gemms = v100.launches[v100.launches["role"] == "gemm"]
    assert len(gemms) == (decoded["role"] == "gemm").sum() == 420
    assert set(gemms["precision"]) == {"fp32"}
    # Kineto names threads "thread N (name)": the OS name is what tells autograd's thread
    assert set(gemms["thread"]) == {"pt_main_thread", "pt_autograd_0"}
    forward = gemms[gemms["thread"] == "pt_main_thread"]
    assert set(forward["te_pass"]) == {"fprop"} and set(forward["pass_source"]) == {"thread"}
    backward = gemms[gemms["thread"] == "pt_autograd_0"]
    assert set(backward["pass_source"]) == {"layout"} and {"dgrad", "wgrad"} <= set(backward["te_pass"])


def test_rank_device_and_format_from_the_trace_head(v100):
    trace = v100.trace
    assert v100.launches["rank"].unique().tolist() == [0]  # distributedInfo
    assert trace.meta["profiler"] == "torch.profiler" and trace.meta["schema_version"] == "1"
    assert trace.meta["nsys_version"] is None and trace.sqlite is None
    assert {g["name"] for g in trace.meta["gpus"]} == {"Tesla V100-SXM2-32GB"}
    assert {g["sm"] for g in trace.meta["gpus"]} == {"sm70"}
    assert any("NVTX" in lack for lack in trace.meta["lacks"])


def test_record_function_labels_stand_in_for_nvtx_ranges():
    trace = read_trace(CPU)
    names = trace.nvtx["name"].tolist()
    assert names[:2] == ["step 0", "step 1"]
    assert set(trace.nvtx["kind"]) == {"push-pop"}
    assert trace.threads["name"].tolist() == ["python"]


def test_scaled_mm_asks_by_its_input_types_and_scale_shapes():
    """Without the hook, each aten::_scaled_mm's float8 operands and its scales' shapes say what
    it asked, read by the same grammar as the hook's records."""
    trace = read_trace(CPU)
    records = trace.nvtx[trace.nvtx["name"].str.startswith("gemmscope.torch_gemm|")]
    parsed = te_ranges.classify(records["name"])
    assert parsed["kind"].tolist() == [te_ranges.TORCH_GEMM] * 2
    assert parsed["requested"].tolist() == ["fp8", "fp8-rowwise"]
    assert parsed["scale"].tolist() == ["tensorwise", "rowwise"]
    assert parsed[["m", "n", "k"]].astype(int).values.tolist() == [[32, 48, 64]] * 2
    # each record spans its operator, inside the record_function range around the call
    outer = trace.nvtx.set_index("name").loc[["scaled tensorwise", "scaled rowwise"]]
    assert (records["start"].to_numpy() >= outer["start"].to_numpy()).all()
    assert (records["end"].to_numpy() <= outer["end"].to_numpy()).all()


def test_analyze_and_verify_read_a_kineto_trace_by_content(tmp_path):
    renamed = tmp_path / "rank0.trace"  # no .json in its name: told by what it holds
    shutil.copy(V100, renamed)
    result = invoke("analyze", renamed, "--format", "json")
    assert result.exit_code == 4, result.output  # no recipe recorded, none given: not checked
    doc = json.loads(result.stdout)
    assert doc["meta"]["profiler"] == "torch.profiler" and doc["summary"]["state"] == "not-checked"
    assert doc["summary"]["gemm_launches"] == 420
    done = gemmscope("verify", "--trace", renamed, "--expect", "bf16", "--quiet")
    assert done.returncode == 1, done.stderr  # fp32 ran where bf16 was expected
    assert done.stdout.startswith("MISMATCHES")
    assert "(torch.profiler) has no NVTX ranges" in done.stderr


def test_a_folder_lists_kineto_traces_and_not_other_json(tmp_path):
    shutil.copy(V100, tmp_path / "rank0.json.gz")
    (tmp_path / "expected.json").write_text('{"gemms": 3}')
    assert trace_paths([tmp_path]) == [tmp_path / "rank0.json.gz"]


# --- bad input: one line, exit 2 -------------------------------------------------------------

def _plain_copy(path: Path, to: Path) -> Path:
    with gzip.open(path, "rb") as f:
        to.write_bytes(f.read())
    return to


@pytest.mark.parametrize("compressed", [False, True])
def test_truncated_trace(tmp_path, compressed):
    data = V100.read_bytes() if compressed else _plain_copy(V100, tmp_path / "whole.json").read_bytes()
    cut = tmp_path / ("cut.json.gz" if compressed else "cut.json")
    cut.write_bytes(data[: len(data) // 2])
    done = gemmscope("analyze", cut)
    assert_one_line_error(done)
    assert "truncated or damaged torch.profiler trace" in done.stderr


def test_cpu_only_trace():
    done = gemmscope("verify", "--trace", CPU, "--expect", "bf16")
    assert_one_line_error(done)
    assert "CPU-only torch.profiler trace" in done.stderr


def test_trace_without_gpu_kernels(tmp_path, v100_events):
    """The GPU trace with its kernel records taken out, as when CUPTI recorded none."""
    doc = dict(v100_events, traceEvents=[e for e in v100_events["traceEvents"] if e.get("cat") != "kernel"])
    path = tmp_path / "no_kernels.json"
    path.write_text(json.dumps(doc))
    done = gemmscope("analyze", path)
    assert_one_line_error(done)
    launch_calls = sum(e.get("cat") == "cuda_runtime" and "Launch" in e["name"] for e in v100_events["traceEvents"])
    assert f"without GPU activity: it holds {launch_calls} kernel launch calls" in done.stderr


def test_unknown_format_version(tmp_path, v100_events):
    path = tmp_path / "future.json"
    path.write_text(json.dumps(dict(v100_events, schemaVersion=7)))
    done = gemmscope("analyze", path)
    assert_one_line_error(done)
    assert "format version 7" in done.stderr


def test_nothing_half_written_on_bad_input(tmp_path):
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(V100.read_bytes()[:5000])
    out = tmp_path / "report.html"
    done = gemmscope("report", cut, "-o", out)
    assert_one_line_error(done)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json.gz"]


# --- report, bundle and scrub ------------------------------------------------------------------

SECRET = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwX"


@pytest.fixture(scope="module")
def with_secrets(tmp_path_factory, v100_events):
    """The V100 trace with a token in a record_function label and the user's e-mail in its host
    name, as a careless run would leave them."""
    events = list(v100_events["traceEvents"])
    label = next(e for e in events if e.get("cat") == "user_annotation")
    events.append(dict(label, name=f"step with token {SECRET}"))
    path = tmp_path_factory.mktemp("secrets") / "rank0.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(dict(v100_events, host_name="someone@example.com", traceEvents=events), f)
    return path


def test_scrub_writes_a_kineto_trace_without_the_secrets_that_reads_the_same(tmp_path, with_secrets):
    out = tmp_path / "scrubbed.json.gz"
    done = gemmscope("scrub", with_secrets, "-o", out)
    assert done.returncode == 0, done.stderr
    assert "1 hugging-face-token" in done.stderr and "email" in done.stderr
    text = gzip.open(out, "rt").read()
    assert SECRET not in text and "someone@example.com" not in text
    scrubbed, original = load_one(out), load_one(with_secrets)
    assert len(scrubbed.launches) == len(original.launches) == 4350
    assert scrubbed.launches["te_pass"].equals(original.launches["te_pass"])
    assert (scrubbed.launches["start"] == original.launches["start"]).all()


def test_scrub_of_a_kineto_trace_in_process(tmp_path, with_secrets):
    # the same as the CLI's, called here (mutation runs see into it): the redacted JSON, gzipped
    # as its name asks, every launch read back alike, the redactor's counts
    from gemmscope.redaction.scrub import recorded_redactor, scrub

    redactor = recorded_redactor([with_secrets])
    out = scrub(with_secrets, tmp_path / "scrubbed.json.gz", redactor)
    assert out == tmp_path / "scrubbed.json.gz" and not list(tmp_path.glob("*partial*"))
    text = gzip.open(out, "rt").read()
    assert SECRET not in text and "someone@example.com" not in text and "[redacted]" in text
    assert redactor.counts["hugging-face-token"] == 1
    scrubbed, original = load_one(out), load_one(with_secrets)
    assert scrubbed.launches["te_pass"].equals(original.launches["te_pass"])
    assert (scrubbed.launches["start"] == original.launches["start"]).all()
    plain = scrub(with_secrets, tmp_path / "scrubbed.json")  # no .gz: plain JSON
    assert json.loads(plain.read_text())["traceEvents"] and SECRET not in plain.read_text()
    # a trace already read (as bundle and report hand it over) is scrubbed from its own file
    read = read_trace(with_secrets)
    assert read.sqlite is None
    again = scrub(read, tmp_path / "read.json")
    assert json.loads(again.read_text()) == json.loads(plain.read_text())


def test_report_and_bundle_of_a_kineto_trace(tmp_path, with_secrets):
    import zipfile

    html = tmp_path / "report.html"
    done = gemmscope("report", with_secrets, "-o", html)
    assert done.returncode == 0, done.stderr
    assert SECRET not in html.read_text() and "Tesla V100-SXM2-32GB" in html.read_text()
    zipped = tmp_path / "issue.zip"
    done = gemmscope("bundle", with_secrets, "-o", zipped, "--expect", "bf16")
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(zipped) as archive:
        names = archive.namelist()
        assert "traces/rank0.json.gz" in names
        analysis = json.loads(archive.read("analysis.json"))
        trace = gzip.decompress(archive.read("traces/rank0.json.gz")).decode()
    assert analysis["summary"]["gemm_launches"] == 420 and analysis["summary"]["mismatches"] == 420
    assert analysis["meta"]["profiler"] == "torch.profiler"
    assert SECRET not in trace


# --- paired captures: the same program by nsys and by torch.profiler ---------------------------

PAIRS = sorted(GPU_KINETO.glob("*.json.gz"))


def _nsys_twin(kineto: Path) -> Path | None:
    """The nsys capture of the same program (tests/fixtures/gpu/corpus/NAME.sqlite.xz for
    kineto/NAME[.rankN].json.gz, the rank torchrun's), None where there is none."""
    name = re.sub(r"\.rank\d+$", "", kineto.name.removesuffix(".json.gz"))
    twin = CORPUS / f"{name}.sqlite.xz"
    return twin if twin.exists() else None


def test_every_gpu_kineto_trace_but_one_has_its_nsys_twin():
    """The pairs the conformance test below compares (the plain te.TransformerLayer stack's
    torch.profiler capture has no plain nsys one: its passes are checked on their own)."""
    assert [p.name for p in PAIRS if _nsys_twin(p) is None] == ["te_stack_fp8-block_1gpu_plain.rank0.json.gz"]


@pytest.mark.parametrize("kineto", [p for p in PAIRS if _nsys_twin(p)], ids=lambda p: p.name)
def test_paired_captures_give_the_same_gemms_and_verdicts(kineto):
    """The same program captured by nsys and by torch.profiler (each with the hook, or each
    without): GEMM counts per precision and pass, module, layer path and the verdict agree;
    where both carry the hook's records, so do the requests. Without the hook a torch.profiler
    trace still has aten::_scaled_mm's operand types, which an nsys trace lacks."""
    from gemmscope.judging import judgement

    nsys, torch_profiler = (judgement.judge([load_one(path)], None, ()) for path in (_nsys_twin(kineto), kineto))

    def shape(result):
        gemms = result.gemms
        return (Counter(zip(gemms["precision"], gemms["te_pass"])), Counter(gemms["module"]),
                Counter(gemms["layer"].dropna()), result.failed)

    assert shape(torch_profiler) == shape(nsys)
    if "_plain" in kineto.name:
        assert nsys.gemms["requested"].isna().all()
        asked = torch_profiler.gemms["requested"].dropna()
        assert Counter(asked) == {"fp8-rowwise": 9, "fp8": 18}  # torchao rowwise: 3 Float8Linear × 3 steps
    else:
        assert Counter(torch_profiler.gemms["requested"].dropna()) == Counter(nsys.gemms["requested"].dropna())


def test_plain_torch_profiler_capture_tells_backward_by_autograds_thread():
    """te.TransformerLayer stack, torch.profiler without the hook or TE's ranges: every GEMM the
    autograd thread launched is backward (the 16-bit ones dgrad / wgrad by layout), the rest
    fprop; counts from te_stack.py's structure (4 layers × 4 GEMMs + a head, 3 steps)."""
    trace = GPU_KINETO / "te_stack_fp8-block_1gpu_plain.rank0.json.gz"
    gemms = load_one(trace).launches.query("role == 'gemm'")
    expected = json.loads((CORPUS / "te_stack_fp8-block_1gpu.expected.json").read_text())
    per_pass = sum(module["fprop"] for precision in ("fp8", "bf16") for module in expected[precision].values())
    passes = Counter(gemms["te_pass"])
    assert passes["fprop"] == per_pass
    assert passes["backward"] + passes["dgrad"] + passes["wgrad"] == 2 * per_pass


MIXED = GPU_KINETO / "verify_torch_train_small_mixed"


def test_a_process_that_launched_no_kernel_is_no_failure():
    """What verify --profiler torch wrote on an H100 for the mixed small training run: the
    program's trace and one of a process that only asked CUDA for its devices. The program's
    GEMMs are all checked, as many per precision as the program itself counted, and the check
    passes; the other trace is named as having launched nothing, not as unreadable."""
    done = gemmscope("verify", "--format", "json", "--trace", *sorted(str(p) for p in MIXED.glob("trace.*.json.gz")))
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)["summary"]
    expected = json.loads((MIXED / "expected.json").read_text())
    counts = {precision: sum(sum(per_pass.values()) for per_pass in expected[precision].values())
              for precision in ("fp8", "bf16")}
    assert summary["gemm_launches"] == counts["fp8"] + counts["bf16"] == 81
    assert summary["coverage"]["gemm_launches"] == counts["bf16"] and summary["mismatches"] == 0
    assert summary["unreadable_traces"] == []
    assert summary["traces_without_kernels"] == [{"trace": "trace.538.json.gz", "rank": None}]
    assert "trace.538.json.gz: the process ran and launched no GPU kernel" in done.stderr


def test_a_trace_without_kernels_alone_is_still_no_gemm_ran():
    """The same trace on its own: nothing ran at all, which is exit 1 (no GEMM ran), not a pass."""
    done = gemmscope("verify", "--expect", "fp8-current", "--trace", str(MIXED / "trace.538.json.gz"))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "ran no GPU kernel" in done.stderr
