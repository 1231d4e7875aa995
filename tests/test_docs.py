"""The docs that come from the code stay in step with it, and the README's links resolve."""

import re
import shlex
from pathlib import Path

import pytest

from bertctl.cli import reference

ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_reference_is_generated_from_the_code():
    written = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert written == reference.render(), (
        "docs/cli.md differs from the code: run `python -m bertctl.cli.reference > docs/cli.md`")


def test_every_relative_link_in_the_docs_resolves():
    pages = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken



def _anchors(page: Path) -> set[str]:
    """The anchors a page's headings get on GitHub (lowercase, punctuation dropped, spaces as
    hyphens), code blocks left out."""
    prose = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#{1,6} (.*)$", prose, re.M)}


def test_every_anchor_in_the_docs_names_a_heading():
    """A link to a section (#104 moved the studies to a page each) lands on a heading."""
    pages = [ROOT / "README.md", ROOT / "benchmarks" / "README.md",
             *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        if page.name == "cli.md":
            continue
        for target in re.findall(r"\]\(([^)\s]+#[^)\s]+)\)", page.read_text(encoding="utf-8")):
            path, anchor = target.split("#", 1)
            dest = page.parent / path if path else page
            if "://" not in target and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken

# --- every command the docs show parses ----------------------------------------------------------

def _shown_commands():
    """(page, command line) for every `bertctl ...` and `make ...` the README and docs/ show: the
    lines of shell blocks (continuations joined) and inline code spans. cli.md is generated."""
    pages = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        if page.name == "cli.md":
            continue
        text = page.read_text(encoding="utf-8")
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        lines = [line.strip() for b in blocks for line in b.replace("\\\n", " ").splitlines()]
        prose = re.sub(r"```.*?```", "", text, flags=re.S).splitlines()
        spans = []
        for row in prose:
            # A pipeline table's row names the artifact a step writes: its --out.
            out = re.match(r"\| `([^`]+/[^`]*|\w+)`", row) if row.startswith("|") else None
            for span in re.findall(r"`([^`\n]+)`", row):
                if out and re.match(r"bertctl \S+ ", span) and " --out" not in span:
                    span += f" --out {out.group(1)}"
                spans.append(span)
        for line in lines + spans:
            line = line.split("  #")[0].strip()
            if re.match(r"(bertctl|make) ", line):
                yield page.name, line


SHOWN = sorted(set(_shown_commands()))


def test_the_docs_show_commands():
    assert len([c for _, c in SHOWN if c.startswith("bertctl ")]) > 40
    assert len([c for _, c in SHOWN if c.startswith("make ")]) > 10


@pytest.mark.parametrize("page,line", [s for s in SHOWN if s[1].startswith("bertctl ")])
def test_every_bertctl_command_shown_parses(page, line):
    """Each shown command line is one the CLI accepts: a known command, known flags taking the
    values shown, every required argument and option (`--out`) given. Values are placeholders
    (MODEL, N), so the line is parsed, not run."""
    import typer

    from bertctl.cli import app

    group = typer.main.get_command(app)
    words = shlex.split(line)[1:]
    ctx = group.make_context("bertctl", [], resilient_parsing=True)
    command = group.get_command(ctx, "tokenize" if words[0] == "COMMAND" else words[0])
    assert command is not None, f"{page}: unknown command in `{line}`"
    loose = command.make_context(words[0], words[1:], parent=ctx, resilient_parsing=True)
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    if not any(loose.params.get(a.name) for a in arguments):
        # `bertctl eval --precision fp32` in prose names a command and a flag of it, not a line
        # to run: its flags must still exist and take the values shown.
        words += ["x"] * len(arguments) + (["--out", "x"] if "out" in loose.params else [])
    try:
        command.make_context(words[0], words[1:], parent=ctx)
    except typer.Exit:                          # --help
        pass
    except Exception as exc:  # noqa: BLE001 - click's usage errors and pydantic's, alike
        # A placeholder where a number goes (`--add N`) is the only value allowed to fail.
        said = f"{exc} {exc.__cause__} {exc.__context__}"
        assert re.search(r"'[A-Z][A-Z_]*'", said), f"{page}: `{line}`: {exc}"


PIPELINES = "\n".join(p.read_text() for p in sorted((ROOT / "pipelines").iterdir()) if p.is_file())
TARGETS = {t for group in re.findall(r"^([\w.-]+(?: [\w.-]+)*):(?!=)", PIPELINES, re.M)
           for t in group.split()}


@pytest.mark.parametrize("page,line", [s for s in SHOWN if s[1].startswith("make ")])
def test_every_make_command_shown_names_a_target_and_variables_the_pipelines_have(page, line):
    words = shlex.split(line, comments=True)[1:]
    for i, word in enumerate(words):
        if word in ("-C", "-f", "...") or (i and words[i - 1] in ("-C", "-f")):
            continue
        if "=" in word:
            name = word.split("=")[0]
            assert f"$({name})" in PIPELINES, f"{page}: `{line}`: no pipeline reads {name}"
        elif not word.startswith("-"):
            assert word in TARGETS, f"{page}: `{line}`: no target {word}"
