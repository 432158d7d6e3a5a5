"""README.md's commands run as written, and what it shows of their output is what they print.

Every fenced block of README.md carries a marker comment on the line above it saying what is done
with it:

    <!-- run: ... -->            each `$ COMMAND` line is run (bash, from a scratch folder that
    <!-- run, exits N: ... -->   sees the repository's tests/ and gemmscope/), and must exit 0, or N;
                                 the lines under a command are the first lines it prints
    <!-- not run: REASON -->     a command that needs what the test machine lacks (a GPU) or would
                                 change it (pip): skipped, with REASON
    <!-- python-example: ... --> run by tests/test_api.py; <!-- test-command: ... -->: run by .ci/run

The docs' pages hold one more runnable thing each checked here: docs/python-api.md's example,
and docs/architecture.md's list of layers, which must be pyproject.toml's.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 150

# a marker comment, then the fenced block right under it
BLOCK = re.compile(r"^<!-- (?P<marker>[^>]*?) -->\n```(?P<lang>[a-z]*)\n(?P<body>.*?)^```$", re.M | re.S)
FENCE = re.compile(r"^```[a-z]*$", re.M)


@dataclass(frozen=True)
class Command:
    line: str  # as README writes it, after `$ `
    exit_code: int
    shown: tuple[str, ...]  # the output lines README shows under it: the first the command prints


def blocks(text: str) -> list[re.Match]:
    return list(BLOCK.finditer(text))


def commands(text: str) -> tuple[list[Command], list[tuple[str, str]]]:
    """The commands of the blocks marked `run`, and (first line, reason) of those marked `not run`."""
    run, not_run = [], []
    for block in blocks(text):
        marker = block["marker"]
        if marker.startswith("not run:"):
            first = block["body"].splitlines()[0]
            not_run.append((first, marker.removeprefix("not run:").strip()))
        elif marker.startswith("run"):
            exits = re.match(r"run, exits (\d+)", marker)
            for chunk in re.split(r"^\$ ", block["body"], flags=re.M)[1:]:
                line, *shown = chunk.rstrip("\n").split("\n")
                run.append(Command(line, int(exits[1]) if exits else 0, tuple(shown)))
    return run, not_run


README_TEXT = README.read_text(encoding="utf-8")
RUN, NOT_RUN = commands(README_TEXT)


def test_readme_fits_a_few_screens():
    assert len(README_TEXT.splitlines()) <= README_MAX_LINES


def test_every_block_says_what_is_done_with_it():
    """A fenced block without a marker would be a command nobody runs: each one has one."""
    opened = [m.start() for m in FENCE.finditer(README_TEXT)][::2]  # every other fence opens a block
    marked = [block.start("lang") - 3 for block in blocks(README_TEXT)]
    assert opened == marked, "a fenced block in README.md has no marker comment right above it"
    kinds = {block["marker"].split(":")[0].split(",")[0] for block in blocks(README_TEXT)}
    assert kinds <= {"run", "not run", "python-example", "test-command"}, kinds
    assert len(RUN) >= 8  # the verdict block's command, the traces task's and profile's


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A folder where README's relative paths resolve, so what the commands write lands here."""
    folder = tmp_path_factory.mktemp("readme")
    for name in ("tests", "gemmscope"):
        (folder / name).symlink_to(ROOT / name)
    return folder


def _environment() -> dict[str, str]:
    """This checkout's gemmscope first, its command on PATH from the interpreter running the tests."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("COLUMNS", None)  # the text output's own width, as a reader who pastes it gets
    return env


@pytest.mark.parametrize("command", RUN, ids=[c.line for c in RUN])
def test_readme_command_runs_as_written(command: Command, scratch: Path, tmp_path: Path):
    """Each command exits as README says and prints what it shows; what it writes goes into a
    scratch folder of the reader's (`mktemp -d`: here under TMPDIR), never into the folder it runs
    in (a clone, where it would lie untracked)."""
    env = _environment() | {"TMPDIR": str(tmp_path)}
    done = subprocess.run(["bash", "-c", command.line], cwd=scratch, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == command.exit_code, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    printed = [line.rstrip() for line in done.stdout.splitlines()]
    assert printed[:len(command.shown)] == [line.rstrip() for line in command.shown], \
        "README shows other lines than the command prints: paste its output again"
    left = sorted(p.name for p in scratch.iterdir())
    assert left == ["gemmscope", "tests"], f"the command left {left} in the folder it ran in"


def test_blocks_not_run_here_are_what_ci_or_a_gpu_runs():
    """README's blocks no test runs here say why, and only two whys hold: pip installs (CI runs
    `pip install .`, and each extra named is one pyproject declares) and a GPU's commands (what
    tests/test_gpu.py runs on the GPU machine): nothing else is left unrun, and nothing is a skip."""
    assert {reason for _, reason in NOT_RUN} == {"installs packages", "needs an NVIDIA GPU, Transformer Engine and nsys"}
    declared = re.search(r"^\[project\.optional-dependencies\]\n(.*?)^\[", (ROOT / "pyproject.toml").read_text(
        encoding="utf-8"), re.S | re.M)
    assert declared, "pyproject.toml declares no extras"
    extras = re.findall(r"^([\w-]+)\s*=", declared[1], re.M)
    install = next(block for block in blocks(README_TEXT) if "installs packages" in block["marker"])
    for line in install["body"].strip().splitlines():
        found = re.fullmatch(r"pip install (?:\.|'\.\[(\w+)\]')\s+#.*", line)
        assert found, line
        assert found[1] is None or found[1] in extras, line


def test_python_api_page_example_runs_as_written(monkeypatch):
    page = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- python-example:[^>]*-->\n```pycon\n(.*?)```", page, re.S)
    assert found, "docs/python-api.md lost its example"
    monkeypatch.chdir(ROOT)  # its paths are the repository's
    test = doctest.DocTestParser().get_doctest(found[1], {}, "python-api.md", "docs/python-api.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_architecture_page_lists_the_layers_of_the_contract():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    layers = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"][
        "contracts"][0]["layers"]
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- layers:[^>]*-->\n```text\n(.*?)\n```", page, re.S)
    assert found and found[1].split("\n") == layers, \
        "docs/architecture.md's layers differ from pyproject.toml's [tool.importlinter]: copy them over"


def test_benchmark_figures_stay_short():
    """benchmarks/README.md is a table of figures read at a glance: each cell at most 200 characters
    (the whole of a figure, and how it was measured, is HISTORY.md's)."""
    page = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    assert len(rows) > 1, "benchmarks/README.md lost its table"
    long = [cell[:60] for row in rows for cell in row.strip("| ").split(" | ") if len(cell) > 200]
    assert not long, f"cells over 200 characters in benchmarks/README.md: {long}"


def test_docs_links_lead_somewhere():
    """Every relative link of README and docs/ names a file that exists."""
    for page in [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which is not there"
