"""A task family added from outside bertctl: one module and one `register` call, and its option
becomes a finetune and eval flag in its own help panel, reaches the family through the task
spec, is stored with the model and read back by eval. No stage, CLI or config file changes."""

import json

import pytest
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from bertctl import cli
from bertctl.tasks import registry
from bertctl.tasks.base import check_options
from bertctl.tasks.classification import Classification

from helpers import FIXTURES, with_plugin

GLUE = FIXTURES / "glue"


class MarkerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    marker: str | None = Field(None, description="A word put before every text (a domain tag).")


class Marked(Classification):
    """Single-sentence classification whose texts get a marker word in front."""

    options_model = MarkerOptions
    seen: list[str] = []   # the markers read, for the test to see what reached the family

    def __init__(self):
        super().__init__("marked", "Marked sentence", 1)

    def check_spec(self, spec) -> None:
        super().check_spec(spec)
        check_options(MarkerOptions, spec)

    def check_metric(self, spec) -> None:  # the options are this family's own, checked above
        super().check_metric(spec.model_copy(update={"options": {}}))

    def read_texts(self, spec, table, path, first_row=0):
        text_a, text_b, choices = super().read_texts(spec, table, path, first_row)
        marker = MarkerOptions(**spec.options).marker
        if marker:
            Marked.seen.append(marker)
            text_a = [f"{marker} {t}" for t in text_a]
        return text_a, text_b, choices


@pytest.fixture
def plugin_cli():
    Marked.seen.clear()
    yield from with_plugin(registry.FAMILIES, Marked())


def test_the_family_brings_its_flag_in_its_own_panel(plugin_cli):
    code, out, _ = plugin_cli("finetune", "--help")
    assert code == 0
    panel = out[out.index("Marked sentence (family marked):"):]
    assert "--marker" in panel.split("\n\n")[0]
    assert "marked" in out[out.index("--family"):out.index("--text-column")]
    code, out, _ = plugin_cli("eval", "--help")
    assert "--marker" in out
    # The app made before the family was registered has no such flag.
    assert "--marker" not in CliRunner().invoke(cli.app, ["finetune", "--help"]).stdout


def test_the_family_trains_and_evaluates_through_the_cli(plugin_cli, tiny_pretrained, tmp_path):
    model = tmp_path / "m"
    code, _, err = plugin_cli("finetune", tiny_pretrained, GLUE / "SST-2" / "train.tsv",
                              "--dev", GLUE / "SST-2" / "dev.tsv", "--family", "marked",
                              "--text-column", "sentence", "--label-column", "label",
                              "--marker", "xyzzy", "--steps", "2", "--batch-size", "8",
                              "--out", model)
    assert code == 0, err
    assert Marked.seen == ["xyzzy", "xyzzy"]   # the training and the dev file
    manifest = json.loads((model / "artifact.json").read_text())
    assert manifest["config"]["marker"] == "xyzzy"
    task = json.loads((model / "bertctl_task.json").read_text())
    assert task["spec"]["family"] == "marked" and task["spec"]["options"] == {"marker": "xyzzy"}

    # eval reads the family and its option from the model's task file ...
    code, _, err = plugin_cli("eval", model, GLUE / "SST-2" / "dev.tsv", "--out", tmp_path / "e")
    assert code == 0, err
    assert Marked.seen[-1] == "xyzzy"
    metrics = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert 0 <= metrics["accuracy"] <= 1
    # ... and the flag refines it.
    code, _, err = plugin_cli("eval", model, GLUE / "SST-2" / "dev.tsv", "--marker", "plugh",
                              "--out", tmp_path / "e2")
    assert code == 0, err
    assert Marked.seen[-1] == "plugh"


def test_a_bad_option_is_one_line_before_any_work(plugin_cli, tiny_pretrained, tmp_path):
    code, _, err = plugin_cli("finetune", tiny_pretrained, GLUE / "SST-2" / "train.tsv",
                              "--family", "single", "--text-column", "sentence", "--marker", "x",
                              "--steps", "2", "--out", tmp_path / "m")
    assert code == 2
    assert "marker" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()
