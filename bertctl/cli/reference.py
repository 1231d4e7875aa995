"""docs/cli.md, generated from the command tree itself: every command's usage and help, and each
of its flags (grouped in the panels `--help` shows) with the type, the default and the help
text, all read from the same settings classes the flags are made from, plus the registered task
families and presets. tests/test_docs.py fails when the file and the code differ.

    python -m bertctl.cli.reference > docs/cli.md
"""

from __future__ import annotations

import sys

import typer

from bertctl.cli import make_app
from bertctl.cli.flags import help_sections
from bertctl.tasks import FAMILIES, PRESETS

HEADER = """# CLI reference

Generated from the code by `python -m bertctl.cli.reference > docs/cli.md`; a test fails when
this file and the code differ, so it is what the installed `bertctl` accepts. Every settings
flag is also a key of `--config FILE.yaml` (`vocab_size: 8000` or `vocab-size: 8000`); a flag
given on the command line wins over the file, the file over the default. The guide to what each
command does is [commands.md](commands.md).
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def command_section(name: str, command, parent) -> list[str]:
    ctx = type(parent)(command, parent=parent, info_name=name)
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"## bertctl {name}", "", "```", f"bertctl {name} {usage}", "```", "",
             " ".join((command.help or "").split()), ""]
    # The rows `--help` prints (flags with their value type, help with the default), in its
    # panels and their order.
    for panel, records in help_sections(command, ctx):
        lines += [f"**{panel}**", "", "| flag | help |", "|---|---|"]
        lines += [f"| `{_cell(flags)}` | {_cell(text)} |" for flags, text in records]
        lines.append("")
    return lines


def families_section() -> list[str]:
    lines = ["## Task families and presets", "",
             "`finetune` and `eval` take `--task PRESET`, or `--family NAME` and the columns.", "",
             "| family | title | head | default metric | options |", "|---|---|---|---|---|"]
    for name, family in FAMILIES.items():
        options = family.options_model.model_fields if family.options_model else {}
        lines.append(f"| `{name}` | {family.title} | {family.head} | {family.default_metric} | "
                     + (", ".join(f"`--{o.replace('_', '-')}`" for o in options) or "none")
                     + " |")
    lines += ["", "| preset | family | metric | files |", "|---|---|---|---|"]
    for name, spec in PRESETS.items():
        files = ", ".join(f"{k}: `{v}`" for k, v in spec.files.items())
        lines.append(f"| `{name}` | {spec.family} | {spec.metric} | {files} |")
    return lines + [""]


def render() -> str:
    app = make_app()
    group = typer.main.get_command(app)
    ctx = group.make_context("bertctl", ["--help"], resilient_parsing=True)
    lines = [HEADER, "| command | what it does |", "|---|---|"]
    names = group.list_commands(ctx)
    for name in names:
        command = group.get_command(ctx, name)
        first = " ".join((command.help or "").split()).split(". ")[0].rstrip(".")
        lines.append(f"| [`{name}`](#bertctl-{name}) | {_cell(first)}. |")
    lines.append("")
    for name in names:
        lines += command_section(name, group.get_command(ctx, name), ctx)
    lines += families_section()
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
