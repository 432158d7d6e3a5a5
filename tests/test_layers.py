"""The layering is a contract, not a habit: import-linter's contracts in pyproject.toml
([tool.importlinter]: the layers, and the report reading no trace) hold, and the hook's modules,
which Python runs inside the user's program before gemmscope exists there, import only the
standard library, each other and, inside functions, torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HOOK = Path(__file__).resolve().parent.parent / "gemmscope" / "autocast_hook"


def test_import_contracts_hold():
    """import-linter's own command (installed with the test extras), as a developer runs it."""
    command = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(command), "--no-cache"], capture_output=True, text=True, timeout=300,
                          cwd=HOOK.parent.parent)
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
