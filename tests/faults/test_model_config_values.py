"""Every model config value an architecture reads is checked when the model is read (#52,
class 2): a ModernBERT `rope_theta` of 0 or below or a negative `norm_eps` made every output
NaN with exit 0, `local_attention: 1` was a ZeroDivisionError and `rope_theta: "abc"` a
ValueError (exit 1), and a config without model_type was reported as missing BERT weights. Each
is now one line naming config.json and the key, exit 2, nothing written."""

import json
import shutil

import pytest

from helpers import FIXTURES, made

TEXTS = FIXTURES / "glue" / "SST-2" / "dev.tsv"


@pytest.fixture(scope="module")
def modern(tmp_path_factory, continuous_data):
    return made(tmp_path_factory, "modern-config", "pretrain", continuous_data, "--objective",
                 "mlm", "--architecture", "modernbert", "--model-size", "tiny", "--hidden-size",
                 "32", "--num-attention-heads", "2", "--intermediate-size", "48", "--steps", "1",
                 "--batch-size", "4")


def _edited(model, tmp_path, edit):
    d = tmp_path / "model"
    shutil.copytree(model, d)
    (d / "artifact.json").unlink()   # a plain model directory: its config is what is read
    config = json.loads((d / "config.json").read_text())
    edit(config)
    (d / "config.json").write_text(json.dumps(config))
    return d


def _rope(value):
    def edit(c):
        c["rope_parameters"]["full_attention"]["rope_theta"] = value
    return edit


def _set(key, value):
    def edit(c):
        c[key] = value
    return edit


def _drop(key):
    def edit(c):
        c.pop(key)
    return edit


MODERN = {
    "rope_theta 0": (_rope(0), "rope_theta"),
    "rope_theta negative": (_rope(-10000.0), "rope_theta"),
    "rope_theta text": (_rope("abc"), "rope_theta"),
    "norm_eps negative": (_set("norm_eps", -1), "norm_eps"),
    "norm_eps 0": (_set("norm_eps", 0), "norm_eps"),
    "local_attention 1": (_set("local_attention", 1), "local_attention"),
    "local_attention odd": (_set("local_attention", 33), "local_attention"),
    "initializer_range text": (_set("initializer_range", "x"), "initializer_range"),
    "norm_bias text": (_set("norm_bias", "yes"), "norm_bias"),
    "no model_type": (_drop("model_type"), "no model_type"),
}
BERT = {
    "layer_norm_eps 0": (_set("layer_norm_eps", 0), "layer_norm_eps"),
    "layer_norm_eps negative": (_set("layer_norm_eps", -1e-12), "layer_norm_eps"),
    "layer_norm_eps text": (_set("layer_norm_eps", "abc"), "layer_norm_eps"),
    "dropout text": (_set("hidden_dropout_prob", "0.1"), "hidden_dropout_prob"),
    "initializer_range negative": (_set("initializer_range", -0.02), "initializer_range"),
    "pad_token_id fractional": (_set("pad_token_id", 1.5), "pad_token_id"),
}


CASES = [("modernbert", c) for c in sorted(MODERN)] + [("bert", c) for c in sorted(BERT)]


@pytest.mark.parametrize("architecture,case", CASES)
def test_a_config_value_is_checked_when_read(cli, request, tmp_path, architecture, case):
    edit, key = (MODERN if architecture == "modernbert" else BERT)[case]
    base = request.getfixturevalue("modern" if architecture == "modernbert" else
                                   "tiny_pretrained")
    model = _edited(base, tmp_path, edit)
    r = cli("embed", model, TEXTS, "--text-column", "sentence", "--out", tmp_path / "emb")
    _one_line(r, "config.json", key)
    assert not (tmp_path / "emb").exists()


def test_an_old_bert_config_without_model_type_is_still_read(cli, tiny_pretrained, tmp_path):
    model = _edited(tiny_pretrained, tmp_path, _drop("model_type"))
    r = cli("embed", model, TEXTS, "--text-column", "sentence", "--out", tmp_path / "emb")
    assert r.exit_code == 0, r.stderr


def _one_line(r, *parts):
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and all(p in errors[0] for p in parts), r.stderr
