"""The command-line reference, docs/cli.md: every command's `--help`, as Markdown.

    python -m gemmscope.cli.reference > docs/cli.md

The commands are read from the `gemmscope` group at run time, so a new command appears without
touching this module; tests/test_cli_reference.py fails when docs/cli.md and the code differ.
"""

from __future__ import annotations

import sys

import click

from gemmscope.cli import main

# Help is wrapped at this width whatever the terminal, so the page comes out the same everywhere.
HELP_WIDTH = 100
REGENERATE = "python -m gemmscope.cli.reference > docs/cli.md"


def _help_sections(command: click.Command, context: click.Context) -> list[str]:
    """The command's help as a Markdown section, then each visible subcommand's, in the order
    its `--help` lists them."""
    sections = [f"## {context.command_path}\n\n```text\n{command.get_help(context).rstrip()}\n```\n"]
    if isinstance(command, click.Group):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                sections += _help_sections(sub, click.Context(sub, info_name=name, parent=context,
                                                              **sub.context_settings))
    return sections


def render() -> str:
    """docs/cli.md: the `gemmscope` group's help and every command's."""
    context = click.Context(main, info_name="gemmscope", terminal_width=HELP_WIDTH, max_content_width=HELP_WIDTH)
    header = (f"# gemmscope command line\n\nEvery command's `--help`, generated from the code by\n`{REGENERATE}`: "
              "do not edit by hand.\n")
    return "\n".join([header, *_help_sections(main, context)])


if __name__ == "__main__":
    sys.stdout.write(render())
