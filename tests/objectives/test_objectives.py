"""Pretraining objectives through the CLI: `mlm` trains a BertForMaskedLM that transformers
loads and computes alike, refuses next-sentence data, is scored by `eval` and fine-tuned as any
BERT; an unknown objective is a settings error."""

import json
import math

import numpy as np
import pytest
import torch

from bertctl.data.pretraining.dataset import PretrainingDataset

from helpers import CORPUS, FIXTURES, TINY_MODEL
from tolerance import MODEL_FP32, TINY_FP32  # (each tolerance's reason)


def test_mlm_trains_a_masked_lm_that_transformers_loads_alike(mlm_model, continuous_data):
    transformers = pytest.importorskip("transformers")
    from bertctl.model.hf import load_model

    config = json.loads((mlm_model / "config.json").read_text())
    assert config["architectures"] == ["BertForMaskedLM"]
    manifest = json.loads((mlm_model / "artifact.json").read_text())
    assert manifest["stats"]["objective"] == "mlm"
    assert manifest["stats"]["architecture"] == "bert"
    assert "nsp_accuracy" not in manifest["metrics"] and manifest["metrics"]["mlm_loss"] > 0

    hf, info = transformers.BertForMaskedLM.from_pretrained(str(mlm_model),
                                                            output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ours, _ = load_model(mlm_model)
    batch = PretrainingDataset(continuous_data, "validation").batch(np.arange(4))
    with torch.no_grad():
        theirs = hf.eval()(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                           attention_mask=batch["attention_mask"]).logits
        mine = ours.eval()(batch["input_ids"], batch["token_type_ids"],
                           batch["attention_mask"])["mlm_logits"]
    torch.testing.assert_close(mine, theirs, **MODEL_FP32)


def test_mlm_refuses_next_sentence_data(cli, pretrain_data, tmp_path):
    r = cli("pretrain", pretrain_data, "--objective", "mlm", *TINY_MODEL, "--steps", "2",
            "--out", tmp_path / "m")
    assert r.exit_code == 2 and "--no-nsp" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "m").exists()


def test_unknown_objective(cli, pretrain_data, tmp_path):
    r = cli("pretrain", pretrain_data, "--objective", "gpt", "--steps", "2", "--out", tmp_path / "m")
    assert r.exit_code == 2 and "unknown pretraining objective" in r.stderr and "mlm" in r.stderr


def test_eval_scores_an_mlm_model_and_finetune_takes_it(cli, mlm_model, continuous_data,
                                                        tmp_path):
    r = cli("eval", mlm_model, continuous_data, "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert set(metrics) == {"mlm_loss", "mlm_accuracy", "perplexity"}
    assert 0 < metrics["mlm_loss"] < 20 and metrics["perplexity"] > 1
    r = cli("finetune", mlm_model, FIXTURES / "glue" / "SST-2", "--task", "glue/sst2",
            "--steps", "2", "--batch-size", "8", "--out", tmp_path / "ft")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("rate", [0.15, 0.3])
def test_the_mask_rate_is_drawn_in_training(continuous_data, rate):
    """--mask-rate: the training batches mask that share of the maskable tokens (all but [CLS],
    [SEP] and padding), as Google's rule counts it: round(rate x tokens) per instance, at least
    one; the validation split keeps the data's own rate."""
    data = PretrainingDataset(continuous_data, "train", mask_rate=rate)
    idx = np.arange(min(len(data), 400))
    batch = data.batch(idx, epoch=1)
    # every real token but [CLS], the [SEP] after A, and the [SEP] after B where there is a B
    maskable = (batch["attention_mask"].sum(1) - 2
                - (batch["token_type_ids"].amax(1) > 0).long())
    predicted = (batch["labels"] != -100).sum(1)
    share = predicted.sum().item() / maskable.sum().item()
    assert share == pytest.approx(rate, abs=0.02)
    plain = PretrainingDataset(continuous_data, "train").batch(idx, epoch=1)
    assert (plain["labels"] != -100).sum().item() / maskable.sum().item() == pytest.approx(
        0.15, abs=0.02)


def test_a_mask_rate_needs_dynamic_masks(cli, small_tokenizer, tmp_path):
    static = tmp_path / "static"
    r = cli("build-pretrain-data", small_tokenizer, CORPUS / "alice.txt", "--out", static,
            "--max-seq-length", "64", "--no-nsp", "--dupe-factor", "1", "--workers", "1")
    assert r.exit_code == 0, r.stderr
    r = cli("pretrain", static, "--objective", "mlm", "--mask-rate", "0.3", *TINY_MODEL,
            "--steps", "2", "--out", tmp_path / "m")
    assert r.exit_code == 2 and "--masking dynamic" in r.stderr, r.stderr
    assert not (tmp_path / "m").exists()


def test_pretrain_with_a_mask_rate(cli, continuous_data, tmp_path):
    r = cli("pretrain", continuous_data, "--objective", "mlm", "--mask-rate", "0.5", *TINY_MODEL,
            "--steps", "2", "--batch-size", "8", "--eval-batches", "1", "--out", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    manifest = json.loads((tmp_path / "m" / "artifact.json").read_text())
    assert manifest["config"]["mask_rate"] == 0.5
    # The data's cap on predictions per instance is raised to what half its length needs, and
    # the manifest says so (it was raised silently before).
    data = json.loads((continuous_data / "artifact.json").read_text())["config"]
    need = math.ceil(0.5 * data["max_seq_length"])
    assert data["max_predictions_per_seq"] < need
    assert manifest["stats"]["masking"] == {"mask_rate": 0.5, "max_predictions_per_seq": need}
    r = cli("pretrain", continuous_data, "--objective", "mlm", *TINY_MODEL, "--steps", "1",
            "--batch-size", "8", "--eval-batches", "1", "--out", tmp_path / "d")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "d" / "artifact.json").read_text())["stats"]["masking"] == {
        "mask_rate": data["masked_lm_prob"],
        "max_predictions_per_seq": data["max_predictions_per_seq"]}


def test_training_dropout_is_set_everywhere_and_the_config_kept():
    from bertctl.model import BertConfig, BertForMaskedLM
    from bertctl.model.dropout import set_training_dropout

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=32))
    ids = torch.randint(5, 50, (2, 12))
    args = (ids, torch.zeros_like(ids), torch.ones_like(ids))
    with torch.no_grad():
        reference = model.eval()(*args)["mlm_logits"]
        model.train()
        assert not torch.allclose(model(*args)["mlm_logits"], reference)   # dropout at 0.1
        set_training_dropout(model, 0.0)
        torch.testing.assert_close(model(*args)["mlm_logits"], reference, **TINY_FP32)
    assert model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == 0.1


def test_pretrain_without_dropout_keeps_the_models_rates(cli, continuous_data, tmp_path):
    r = cli("pretrain", continuous_data, "--objective", "mlm", "--dropout", "0", *TINY_MODEL,
            "--steps", "2", "--batch-size", "8", "--eval-batches", "1", "--out", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "m" / "artifact.json").read_text())["config"]["dropout"] == 0
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["hidden_dropout_prob"] == config["attention_probs_dropout_prob"] == 0.1
    r = cli("pretrain", continuous_data, "--dropout", "1", *TINY_MODEL, "--steps", "2",
            "--out", tmp_path / "bad")
    assert r.exit_code == 2 and "dropout" in r.stderr and not (tmp_path / "bad").exists()
