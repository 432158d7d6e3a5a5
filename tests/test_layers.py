"""The layering is a contract, not a habit: import-linter's contracts in pyproject.toml
([tool.importlinter]: the layers, and the report reading no trace) hold, and the hook's modules,
which Python runs inside the user's program before gemmscope exists there, import only the
standard library, each other and, inside functions, torch. docs/architecture.md's layout has a
line for every package and top module, saying what the layers let it import."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOOK = ROOT / "gemmscope" / "autocast_hook"
# docs/architecture.md's layout: "- `NAME`: what it is. May import: what the layers let it."
LAYOUT_LINE = re.compile(r"^- `(?P<name>[^`]+)`(?: \(leaf\))?: .*?(?: May import: (?P<imports>[^.]+)\.)?$", re.M)


def test_import_contracts_hold():
    """import-linter's own command (installed with the test extras), as a developer runs it."""
    command = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(command), "--no-cache"], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:]  # each broken contract with the import chain that breaks it


def test_the_hook_imports_only_the_standard_library_and_its_siblings():
    siblings = {path.stem for path in HOOK.glob("*.py")}
    for path in HOOK.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                root = name.split(".")[0]
                allowed = root in siblings or root in sys.stdlib_module_names
                # torch (and what TE brings) only inside functions, once the program imported it
                allowed = allowed or (id(node) not in top_level and root in ("torch", "transformer_engine",
                                                                              "transformer_engine_torch"))
                assert allowed, f"{path.name}:{node.lineno} imports {name}"


def _layout() -> dict[str, str | None]:
    """docs/architecture.md's layout lines: each folder or module named, with what it may import."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = page.split("<!-- packages:", 1)[1].split("\n\n", 1)[0]
    lines = LAYOUT_LINE.findall(block)
    names = [name for name, _ in lines]
    assert len(names) == len(set(names)), "docs/architecture.md names a package twice in its layout"
    return {name: imports or None for name, imports in lines}


def test_architecture_page_has_a_line_per_package_and_top_module():
    folders = {f"{path.name}/" for path in (ROOT / "gemmscope").iterdir() if path.is_dir() and path.name != "__pycache__"}
    modules = {path.name for path in (ROOT / "gemmscope").glob("*.py")}
    assert set(_layout()) == folders | modules, \
        "docs/architecture.md's layout and gemmscope/ differ: give each package and top module one line"


def test_architecture_page_says_what_the_layers_let_each_import():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    layers = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"][
        "contracts"][0]["layers"]
    names = [[name.strip().removeprefix("gemmscope.") for name in re.split(r"[|:]", layer)] for layer in layers]
    layout = _layout()
    for i, layer in enumerate(names):
        below = ", ".join(names[i + 1]) if i + 1 < len(names) else "only the leaves"
        said = below + " and below" if i + 2 < len(names) else below
        for name in layer:
            line = name + "/" if (ROOT / "gemmscope" / name).is_dir() else name + ".py"
            assert layout.get(line) == said, f"docs/architecture.md: {line} may import {said}"
