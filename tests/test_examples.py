"""Every shipped config validates against its stage's settings and starts with the command
that runs it."""

import pytest

from bertctl.cli import settings_of
from bertctl.settings import resolve

from helpers import EXAMPLES

CONFIGS = sorted((EXAMPLES / "configs").glob("*.yaml"))


def test_every_config_the_pipelines_and_docs_name_is_shipped_and_every_shipped_one_named():
    """The configs are the ones the Makefiles and README run: none missing, none orphaned."""
    import re

    from helpers import ROOT

    texts = [p.read_text() for p in [*(ROOT / "pipelines").glob("*"), ROOT / "README.md",
                                     *(ROOT / "docs").glob("*.md")] if p.is_file()]
    named = {m for t in texts for m in re.findall(r"configs/([\w.-]+\.yaml)", t)}
    assert named, "the pipelines name no example config"
    assert named == {p.name for p in CONFIGS}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_validates(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# bertctl "), "a shipped config starts with the command that runs it"
    stage = first.split()[2]
    assert f"--config examples/configs/{path.name}" in first
    resolve(settings_of(stage), path)
