"""`finetune --freeze-encoder`: a head trained on the frozen encoder's hidden states (the paper's
feature-based use), end to end for classification and for tagging, on all-MiniLM-L6-v2."""

import json

import pytest
import torch

from safetensors.torch import load_file

from bertctl.model import load_model
from bertctl.model.features import FrozenFeatures, combine_layers

from helpers import FIXTURES

RTE = FIXTURES / "glue" / "RTE"
CONLL = FIXTURES / "conll2003"


def read_safetensors(directory):
    return load_file(str(directory / "model.safetensors"))


def _encoder_unchanged(minilm_dir, model_dir):
    before = read_safetensors(minilm_dir)
    after = read_safetensors(model_dir)
    encoder = {k: v for k, v in after.items() if k.startswith("bert.")}
    # all but the position_ids buffer and, for a token head, the pooler
    assert encoder and len(encoder) >= len(before) - 3
    for key, value in encoder.items():
        assert torch.equal(value, before[key.removeprefix("bert.")]), key


def test_classification_on_a_frozen_encoder(cli, minilm_dir, tmp_path):
    out = tmp_path / "m"
    r = cli("finetune", minilm_dir, RTE, "--task", "glue/rte", "--out", out, "--steps", "3",
            "--batch-size", "8", "--lr", "1e-2", "--max-seq-length", "64", "--freeze-encoder",
            "--features=-1,-2", "--combine", "sum", "--json")
    assert r.exit_code == 0, r.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["bertctl_features"] == {"layers": [6, 5], "combine": "sum", "head": "linear"}
    _encoder_unchanged(minilm_dir, out)
    r = cli("eval", out, RTE / "dev.tsv", "--out", tmp_path / "ev", "--json")
    assert r.exit_code == 0, r.stderr
    assert 0 <= r.json()["metrics"]["accuracy"] <= 1


def test_tagging_bilstm_weighted_mix(cli, minilm_dir, tmp_path):
    out = tmp_path / "m"
    r = cli("finetune", minilm_dir, CONLL, "--task", "conll2003", "--out", out, "--steps", "3",
            "--batch-size", "16", "--lr", "1e-3", "--max-seq-length", "32", "--freeze-encoder",
            "--features", "all", "--combine", "weighted", "--head", "bilstm", "--json")
    assert r.exit_code == 0, r.stderr
    _encoder_unchanged(minilm_dir, out)
    weights = read_safetensors(out)
    assert weights["features.scalar_weights"].shape == (7,)
    assert not torch.equal(weights["features.scalar_weights"], torch.zeros(7))   # it learned
    assert "features.lstm.weight_ih_l1_reverse" in weights
    r = cli("eval", out, CONLL / "valid.txt", "--out", tmp_path / "ev", "--json")
    assert r.exit_code == 0, r.stderr
    # the artifact reloads as the same model: its predictions are deterministic
    model, report = load_model(out)
    assert model.features.settings() == {"layers": list(range(7)), "combine": "weighted",
                                         "head": "bilstm"}
    assert not report.missing and not report.unexpected


def test_the_frozen_encoder_runs_without_dropout_or_gradient(minilm_dir):
    from bertctl.model import BertForTokenClassification

    model, _ = load_model(minilm_dir, BertForTokenClassification, num_labels=3,
                          features={"layers": [6, 3], "combine": "concat", "head": "linear"})
    model.train()
    assert not model.bert.training and model.classifier.in_features == 2 * 384
    ids = torch.tensor([[101, 7592, 2088, 102]])
    a = model.features(model.bert, ids, None, None)
    b = model.features(model.bert, ids, None, None)
    assert torch.equal(a, b) and not a.requires_grad
    out = model(ids, labels=torch.tensor([[0, 1, 2, 0]]))
    out["loss"].backward()
    assert all(p.grad is None for p in model.bert.parameters())
    assert model.classifier.weight.grad is not None


def test_weighted_mix_is_elmos_scalar_mix():
    states = [torch.randn(2, 3, 4) for _ in range(3)]
    w, gamma = torch.tensor([0.5, -1.0, 2.0]), torch.tensor(1.5)
    mix = torch.softmax(w, 0)
    want = gamma * (mix[0] * states[0] + mix[1] * states[1] + mix[2] * states[2])
    torch.testing.assert_close(combine_layers(states, [0, 1, 2], "weighted", w, gamma), want)
    assert FrozenFeatures(4, [0, 2], "concat").width == 8
    assert FrozenFeatures(4, [0, 2], "mean", head="bilstm").width == 8


@pytest.mark.parametrize("args,needle", [
    (["--task", "glue/rte", "--freeze-encoder", "--head", "bilstm"],
     "frozen-encoder heads are linear"),
    (["--task", "glue/rte", "--features=-1,-2"], "add --freeze-encoder"),
    (["--task", "glue/rte", "--freeze-encoder", "--features=-8"], "the model has 6 layers"),
])
def test_bad_settings_are_one_line(cli, minilm_dir, tmp_path, args, needle):
    r = cli("finetune", minilm_dir, RTE, "--out", tmp_path / "m", "--steps", "1", *args)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr
    assert not (tmp_path / "m").exists()
