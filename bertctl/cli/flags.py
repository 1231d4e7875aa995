"""Flags from settings: each field of a stage's settings class becomes one `--flag` (its type,
help text, default and help panel read from the field), so a flag and the `--config` key of the
same name are one definition; and the plain help layout that groups them by panel."""

from __future__ import annotations

import inspect
import json
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from pydantic.fields import FieldInfo

from bertctl.settings import PANELS, field_meta


def option_type(annotation: Any) -> tuple[Any, str]:
    """The Python type typer parses a flag's text into, and a hint for help text. Choices
    (Literal) are parsed as str and checked by pydantic, whose error names the allowed values."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        return option_type(args[0]) if len(args) == 1 else (str, "")
    if origin is typing.Literal:
        return str, " Choices: " + ", ".join(map(str, args)) + "."
    if origin in (list, tuple):
        return list[option_type(args[0])[0]] if args else list[str], ""
    return annotation, ""


def field_parameter(name: str, field: FieldInfo) -> inspect.Parameter:
    extra = field_meta(field)
    kind, hint = option_type(field.annotation)
    if extra.get("text"):   # parsed by the settings (a duration: 30m, 2h)
        kind = str
    flag = extra.get("flag") or "--" + name.replace("_", "-")
    if kind is bool and "/" not in flag:
        flag = f"{flag}/--no-{flag[2:]}"
    default = field.get_default(call_default_factory=True)
    if kind is bool and isinstance(default, bool):
        shown = flag.split("/")[0 if default else 1].lstrip("-")
    else:
        shown = "unset" if default is None else json.dumps(default)
    help_text = f"{field.description or ''}{hint} [default: {shown}]"
    panel = extra.get("panel", "Settings")
    option = typer.Option(flag, help=help_text, show_default=False, rich_help_panel=panel)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                             annotation=Annotated[Optional[kind], option], default=None)


ARTIFACT = "Artifact"
# Every command's --json and --debug, the stages' and those of inspect and diff.
JSON_OUTPUT = Annotated[bool, typer.Option("--json", help="Print the result (the manifest, or "
                                           "the error) as one JSON object on stdout.",
                                           rich_help_panel=ARTIFACT)]
DEBUG = Annotated[bool, typer.Option("--debug", help="Show tracebacks.",
                                     rich_help_panel=ARTIFACT)]
COMMON = {
    "out": (Annotated[Path, typer.Option("--out", "-o", help="Artifact directory to write; may "
                                         "contain {id}.", rich_help_panel=ARTIFACT)],
            inspect.Parameter.empty),
    "config": (Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML file of "
                                                      "settings; flags override it.",
                                                      rich_help_panel=ARTIFACT)], None),
    "force": (Annotated[bool, typer.Option("--force", help="Replace what --out holds when it is "
                                           "not this very artifact (an up-to-date artifact is "
                                           "kept).", rich_help_panel=ARTIFACT)], False),
    "json_output": (JSON_OUTPUT, False),
    "debug": (DEBUG, False),
    "wait": (Annotated[bool, typer.Option("--wait", help="If another run is writing --out, "
                                          "wait for it instead of failing at once.",
                                          rich_help_panel=ARTIFACT)], False),
}


def help_sections(command, ctx) -> list[tuple[str, list[tuple[str, str]]]]:
    """The (flags, help) rows of a command's parameters, grouped by panel in the order help
    shows them: arguments, the command's own inputs, the settings panels (task, training, ...),
    the families' panels, and last the artifact options every stage shares."""
    sections: dict[str, list[tuple[str, str]]] = {}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        default = "Arguments" if param.param_type_name == "argument" else "Options"
        sections.setdefault(getattr(param, "rich_help_panel", None) or default, []).append(record)
    first = ["Arguments", "Options", *PANELS]
    order = sorted(sections, key=lambda p: (first.index(p) if p in first else len(first),
                                            p == ARTIFACT))
    return [(panel, sections[panel]) for panel in order]


class PanelledCommand(typer.core.TyperCommand):
    """Plain help (the texts name tokens like [MASK], which rich would read as markup) with the
    options grouped under their panels."""

    def format_options(self, ctx, formatter) -> None:
        for panel, records in help_sections(self, ctx):
            with formatter.section(panel):
                formatter.write_dl(records)
