"""docs/cli.md is every command's --help as the code renders it (gemmscope/cli/reference.py)."""

from pathlib import Path

from gemmscope.cli import main
from gemmscope.cli import reference as cli_reference

CLI_DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_cli_reference_has_no_drift():
    assert CLI_DOC.read_text(encoding="utf-8") == cli_reference.render(), (
        f"docs/cli.md differs from the commands' --help: regenerate it with `{cli_reference.REGENERATE}` "
        "(from the repository root) and commit it")


def test_cli_reference_has_every_command():
    page = cli_reference.render()
    for name, command in main.commands.items():
        assert (f"## gemmscope {name}\n" in page) != command.hidden, name
    assert "Usage: gemmscope verify [OPTIONS] [COMMAND]..." in page
