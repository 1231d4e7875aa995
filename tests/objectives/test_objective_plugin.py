"""A pretraining objective added from outside bertctl, with an option of its own: one module and
one `register` call. Its option becomes a pretrain flag in the objective's help panel and a
`--config` key, is part of the artifact's settings, reaches the objective, and is refused for
another objective. No stage, CLI or config file changes (as tests/tasks/test_family_plugin.py shows
for task families)."""

import json

import pytest
from pydantic import BaseModel, ConfigDict, Field
from bertctl.objectives import registry
from bertctl.objectives.mlm import MaskedLM

from helpers import TINY_MODEL, with_plugin


class WarmOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    warm_tokens: int | None = Field(None, ge=1, description="Tokens the objective counts first.")


class Warm(MaskedLM):
    """Masked LM that reads one option of its own."""

    name = "warm-mlm"
    title = "Masked LM, warm"
    options_model = WarmOptions
    seen: list = []

    def model_kwargs(self, settings) -> dict:
        Warm.seen.append(super().model_kwargs(settings))
        return {}   # BertForMaskedLM takes no such argument; the objective keeps it


@pytest.fixture
def plugin_cli():
    Warm.seen.clear()
    yield from with_plugin(registry.OBJECTIVES, Warm())


def test_an_objectives_option_is_a_flag_a_setting_and_reaches_it(plugin_cli, continuous_data,
                                                                 tmp_path):
    code, out, _ = plugin_cli("pretrain", "--help")
    assert code == 0 and "Masked LM, warm (objective warm-mlm)" in out and "--warm-tokens" in out

    args = ["pretrain", continuous_data, "--objective", "warm-mlm", *TINY_MODEL, "--steps", "2",
            "--batch-size", "4", "--eval-batches", "1"]
    code, _, err = plugin_cli(*args, "--warm-tokens", "7", "--out", tmp_path / "a")
    assert code == 0, err
    assert Warm.seen == [{"warm_tokens": 7}]
    manifest = json.loads((tmp_path / "a" / "artifact.json").read_text())
    assert manifest["config"]["warm_tokens"] == 7 and manifest["config"]["objective"] == "warm-mlm"

    config = tmp_path / "pretrain.yaml"
    config.write_text("warm_tokens: 9\n")
    code, _, err = plugin_cli(*args, "--config", config, "--out", tmp_path / "b")
    assert code == 0, err
    assert Warm.seen[-1] == {"warm_tokens": 9}
    other = json.loads((tmp_path / "b" / "artifact.json").read_text())
    assert other["config"]["warm_tokens"] == 9 and other["id"] != manifest["id"]

    # its checks are the objective's: a value out of range is one line, nothing written
    code, _, err = plugin_cli(*args, "--warm-tokens", "0", "--out", tmp_path / "c")
    assert code == 2 and "warm_tokens" in err and not (tmp_path / "c").exists()
    # another objective refuses it, naming the flag
    code, _, err = plugin_cli("pretrain", continuous_data, "--objective", "mlm", *TINY_MODEL,
                              "--steps", "1", "--warm-tokens", "3", "--out", tmp_path / "d")
    assert code == 2 and "--warm-tokens applies to another objective, not to --objective mlm" \
        in err and not (tmp_path / "d").exists()
