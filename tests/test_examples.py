"""Every shipped config validates against its stage's settings and starts with the command
that runs it."""

import pytest

from bertctl import config

from conftest import EXAMPLES

STAGES = {"tokenize": config.TokenizeSettings,
          "build-pretrain-data": config.BuildPretrainDataSettings,
          "pretrain": config.PretrainSettings, "finetune": config.FinetuneSettings,
          "eval": config.EvalSettings}
CONFIGS = sorted((EXAMPLES / "configs").glob("*.yaml"))


def test_there_are_example_configs():
    assert len(CONFIGS) >= 4


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_validates(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# bertctl "), "a shipped config starts with the command that runs it"
    stage = first.split()[2]
    assert f"--config examples/configs/{path.name}" in first
    config.resolve(STAGES[stage], path)
