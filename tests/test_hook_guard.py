"""The hook never breaks the program it watches (gemmscope_records.patch): every entry point of the
installed torch (and TE, where installed) that the hook patches is where the hook looks; one that a
release moved or changed is skipped, said once on stderr, marked in the trace and named by the
check, and the program runs on. Real torch throughout: in-process with the hook loaded as
test_autocast_hook.py loads it, and in programs that import torch with the hook on PYTHONPATH, as
`verify` runs them, where a sitecustomize of the test's takes an entry point away as torch imports."""

import gzip
import json
import os
import subprocess
import sys

import pytest

import gemmscope as gs
from gemmscope.assembly import te_ranges
from gemmscope.autocast_hook.gemmscope_protocol import TESTED_TORCH, parse_record
from gemmscope.report.verdict import unpatched_line

from cli_runner import gemmscope
from fixture_paths import GPU
from test_autocast_hook import HOOK_DIR

# the sitecustomize that takes torch.nn.functional.linear away as torch imports (its docstring says how)
TAKE_AWAY = GPU / "take_away"


# --- in a program, as verify runs it ---------------------------------------------------------



# Two GEMMs: one through torch.nn.functional's C function itself (the entry point taken away), one
# through x @ w; their records written to stdout, as if on a GPU.
_PROGRAM = """\
import json, sys
import torch

if "--as-if-cuda" in sys.argv:  # records made and the trace written, as for a process on a GPU
    sys.modules["gemmscope_torch_gemms"].launches_kernel = lambda tensor: True
    sys.modules["gemmscope_torch_profiler"].used_cuda = lambda torch: True
written = []
if "--nvtx" in sys.argv:  # NVTX written to `written`
    torch.cuda.nvtx.range_push = lambda label: written.append(label)
    torch.cuda.nvtx.range_pop = lambda: None
    torch.cuda.nvtx.mark = lambda label: written.append(label)
x, w = torch.randn(4, 8), torch.randn(16, 8)
y = torch._C._nn.linear(x, w) + (x @ w.t())
print(json.dumps({"sum": round(float(y.sum()), 3), "written": written}))
"""


@pytest.fixture
def take_away(tmp_path):
    (tmp_path / "program.py").write_text(_PROGRAM)
    return TAKE_AWAY


def test_a_program_whose_torch_moved_an_entry_point_runs_on_with_one_line(torch_cpu, tmp_path, take_away):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), str(take_away)])}
    done = subprocess.run([sys.executable, str(tmp_path / "program.py"), "--as-if-cuda", "--nvtx"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if " not patched in " in line]
    assert len(said) == 1 and "Traceback" not in done.stderr, done.stderr
    assert said[0].startswith(f"gemmscope hook: torch.nn.functional.linear not patched in torch {torch_cpu.__version__}")
    output = json.loads(done.stdout)
    gemms = [parse_record("gemmscope.torch_gemm|", label) for label in output["written"]
             if label.startswith("gemmscope.torch_gemm|")]
    assert [g["op"] for g in gemms] == ["matmul"]  # the GEMM through the moved entry point went unrecorded
    assert [u["what"] for u in te_ranges.recorded_unpatched(output["written"])] == ["torch.nn.functional.linear"]


def test_verify_names_the_records_a_moved_entry_point_cost(torch_cpu, tmp_path, take_away):
    """`verify --profiler torch` of that program: its output, the one line, and a trace that holds
    what went unrecorded, in the check's words (a CPU trace holds no kernel to judge: the GPU run's
    committed trace is judged below)."""
    out = tmp_path / "out"
    done = gemmscope("verify", "--profiler", "torch", "--out", out, "--", sys.executable,
                     tmp_path / "program.py", "--as-if-cuda", timeout=300,
                     env={"PYTHONPATH": str(take_away)})
    assert '"sum": ' in done.stderr, done.stderr[-3000:]  # verify passes the program's output on, to stderr
    said = [line for line in done.stderr.splitlines() if " not patched in " in line]
    assert len(said) == 1 and said[0].startswith("gemmscope hook: torch.nn.functional.linear"), done.stderr
    assert "Traceback" not in done.stderr
    [trace] = out.glob("trace.*.json.gz")
    with gzip.open(trace, "rt") as text:  # a CPU-only trace, which gemmscope's reader refuses: read as written
        unpatched_records = te_ranges.recorded_unpatched(e.get("name", "") for e in json.load(text)["traceEvents"])
    (unpatched,) = unpatched_records
    assert (unpatched["what"], unpatched["misses"]) == ("torch.nn.functional.linear",
                                                        "GEMMs through torch.nn.functional.linear")
    assert unpatched["version"] == f"torch {torch_cpu.__version__}" and unpatched["why"].startswith("AttributeError")
    line = unpatched_line(unpatched_records)
    assert line.startswith("GEMMs through torch.nn.functional.linear (gemmscope's hook could not patch "
                           f"torch.nn.functional.linear in torch {torch_cpu.__version__}: AttributeError")


def test_a_trace_without_the_mark_names_nothing_unrecorded(gpu_xz):
    assert gs.check(gs.load(gpu_xz("torch_gemms"))).unpatched == []


def test_the_tested_releases_are_those_readme_and_pyproject_say():
    readme = (HOOK_DIR.parents[1] / "README.md").read_text(encoding="utf-8")
    assert f"torch {TESTED_TORCH[0]} to {TESTED_TORCH[1]}" in readme
    pyproject = (HOOK_DIR.parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert f'"torch>={TESTED_TORCH[0]}"' in pyproject
    ci = (HOOK_DIR.parents[1] / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash scripts/test-torch-releases.sh" in ci  # which reads TESTED_TORCH
