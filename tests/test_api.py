"""The Python API (gemmscope.load / check / diagnose) on committed real GPU traces, and the README's
example run as it stands."""

import doctest
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gemmscope as gs
from gemmscope.assembly.loading import load as load_traces
from gemmscope.diagnosing.diagnosis import diagnose as diagnosis_of
from gemmscope.judging import judgement

from fixture_paths import CORPUS, GPU_KINETO

ROOT = Path(__file__).resolve().parent.parent
FIRST_LAST_BF16 = CORPUS / "megatron_gpt_first-last-bf16.sqlite.xz"


def readme_example() -> str:
    """The README's Python example: the pycon block after its marker."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- python-example:[^>]*-->\n```pycon\n(.*?)```", readme, re.S)
    assert found, "README.md lost its Python example"
    return found.group(1)


def test_readme_example_runs_as_written(monkeypatch):
    monkeypatch.chdir(ROOT)  # its paths are the repository's
    test = doctest.DocTestParser().get_doctest(readme_example(), {}, "README.md", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_import_loads_no_pandas():
    code = "import sys, gemmscope; print(sorted({'pandas', 'numpy', 'matplotlib'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_check_is_what_verify_says():
    """The API's verdicts are verify's, launch by launch, under the public column names."""
    result = gs.check(FIRST_LAST_BF16, expect="fp8-current", allow=["output_layer"])
    own = judgement.judge(load_traces([FIRST_LAST_BF16]), "fp8-current", ("output_layer",))
    assert result.passed is (not own.failed) is False
    assert len(result.gemms) == len(own.gemms) == 153
    assert result.gemms["kernel"].tolist() == own.gemms["name"].tolist()
    assert result.gemms["pass"].tolist() == own.gemms["te_pass"].tolist()
    assert len(result.mismatches) == len(own.mismatches) == 72
    assert len(result.allowed) == len(own.allowed) == 9
    assert set(result.allowed["layer"]) == {"output_layer"}


def test_results_to_dict_are_json():
    result = gs.check(FIRST_LAST_BF16, expect="fp8-current")
    as_dict = json.loads(json.dumps(result.to_dict()))
    assert as_dict["passed"] is False and as_dict["expected"] == ["fp8-current"]
    assert as_dict["gemm_launches"] == 153 and len(as_dict["mismatches"]) == 81
    assert {m["verdict"] for m in as_dict["mismatches"]} == {"FALLBACK"}
    diagnosis = gs.diagnose(result)
    own = diagnosis_of(result.judgement)
    as_dict = json.loads(json.dumps(diagnosis.to_dict()))
    assert [f["code"] for f in as_dict["findings"]] == [f["code"] for f in own.findings]
    assert as_dict["breakdown"][0]["window_ns"] == int(own.breakdown["window_ns"].iloc[0])
    assert as_dict["step_range"] == own.step_range


def test_load_takes_folders_and_globs_and_keeps_unreadable(tmp_path):
    broken = tmp_path / "rank9.sqlite"
    broken.write_bytes(b"not a trace")
    traces = gs.load([str(CORPUS / "megatron_gpt_first-last-*.sqlite.xz"), broken])
    assert [p.name for p in traces.paths] == [FIRST_LAST_BF16.name, "rank9.sqlite"]
    assert list(traces.errors) == ["rank9.sqlite"]
    result = gs.check(traces)
    assert not result.passed and result.unreadable[0]["trace"] == "rank9.sqlite"



def test_check_names_the_traces_whose_process_launched_no_kernel():
    """verify --profiler torch's traces of a small training run on an H100: the program's, and one
    of a process that launched nothing. The check passes and names that one apart from the
    unreadable, in the result and in its dict."""
    mixed = GPU_KINETO / "verify_torch_train_small_mixed"
    result = gs.check(sorted(mixed.glob("trace.*.json.gz")))
    assert result.passed and result.unreadable == []
    assert result.without_kernels == [{"trace": "trace.538.json.gz", "rank": None}]
    assert json.loads(json.dumps(result.to_dict()))["without_kernels"] == result.without_kernels
    assert len(result.gemms) == 81

@pytest.mark.parametrize("call", [
    lambda: gs.load(CORPUS / "no-such-trace-*.sqlite"),
    lambda: gs.check(FIRST_LAST_BF16, expect="fp9"),
    lambda: gs.check(FIRST_LAST_BF16, expect_map={"layer*": "fp9"}),
])
def test_bad_input_raises_input_error(call):
    with pytest.raises(gs.InputError):
        call()
