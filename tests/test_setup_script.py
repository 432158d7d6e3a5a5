"""scripts/setup-tests.sh says what it leaves on the machine: run here with every tool it installs
already there (stand-ins first on PATH, so that it installs nothing), it names the apt source and
pin it left behind wherever this machine holds them (CI's does, after the set-up), and how to undo
them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "setup-tests.sh"
# What the script adds to apt's configuration to find nsys's packages (its APT_SOURCE and APT_PIN).
LEFT_BEHIND = (Path("/etc/apt/sources.list.d/gemmscope-nsys.sources"), Path("/etc/apt/preferences.d/gemmscope-nsys"))


def _stand_in(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{text}\n")
    path.chmod(0o755)


@pytest.mark.skipif(shutil.which("bash") is None, reason="the script is bash")
def test_setup_script_says_what_it_leaves_behind(tmp_path):
    bin_dir, nsys_dir = tmp_path / "bin", tmp_path / "nsys"
    bin_dir.mkdir()
    (nsys_dir / "target-linux-x64").mkdir(parents=True)
    _stand_in(nsys_dir / "target-linux-x64", "nsys", "echo 'NVIDIA Nsight Systems version stand-in'")
    _stand_in(bin_dir, "cc", "exit 0")  # a C compiler there
    _stand_in(bin_dir, "python", 'case "$*" in *print*) echo 2.13.0;; esac')  # torch imports, its version told
    _stand_in(bin_dir, "chromium", "echo Chromium stand-in")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GEMMSCOPE_NSYS_DIR": str(nsys_dir)}
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{nsys_dir / 'target-linux-x64' / 'nsys'}\n"  # nsys's path, last and alone
    said = done.stderr.splitlines()
    assert all(line.startswith("setup-tests: ") for line in said), said
    assert not any("installed" in line for line in said), said  # everything was there: nothing installed
    for path in LEFT_BEHIND:
        named = [line for line in said if f"left behind: {path} " in line]
        assert len(named) == int(path.exists()), (path, said)
        assert all("remove it" in line for line in named)
