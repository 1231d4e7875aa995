"""The docs that come from the code stay in step with it, and the README's links resolve."""

import re
from pathlib import Path

from bertctl.cli import reference

ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_reference_is_generated_from_the_code():
    written = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert written == reference.render(), (
        "docs/cli.md differs from the code: run `python -m bertctl.cli.reference > docs/cli.md`")


def test_every_relative_link_in_the_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
