"""Every shipped config validates against its stage's settings and starts with the command
that runs it."""

import pytest

from bertctl.cli import settings_of
from bertctl.settings import resolve

from conftest import EXAMPLES

CONFIGS = sorted((EXAMPLES / "configs").glob("*.yaml"))


def test_there_are_example_configs():
    assert len(CONFIGS) >= 4


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_validates(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# bertctl "), "a shipped config starts with the command that runs it"
    stage = first.split()[2]
    assert f"--config examples/configs/{path.name}" in first
    resolve(settings_of(stage), path)
