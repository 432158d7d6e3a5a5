"""The `gemmscope` command as the tests run it: in-process through click's CliRunner (`invoke`), or
as a user would, in a fresh interpreter (`gemmscope`), and the one-line error a bad input ends in."""

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from gemmscope.cli import main

REPO = Path(__file__).resolve().parent.parent


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def gemmscope(*args, timeout=120, cwd=REPO, env=None):
    """Run the command as a user would, in a fresh interpreter (`python -m gemmscope`): every test
    that starts the CLI as a process starts it here. `env`: variables set on top of this one's."""
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "gemmscope", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def assert_one_line_error(done):
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gemmscope: error: ")
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
