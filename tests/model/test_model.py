"""The model core against transformers' BERT: same weights in, same numbers out; HF files in and
out; clear errors for directories that are not a BERT we can load."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from bertctl.errors import BertctlError
from bertctl.model import (
    BertConfig,
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    load_model,
    read_config,
    save_model,
)

from tolerance import TINY_FP32  # noqa: E402

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

ATOL = TINY_FP32["atol"]   # these sizes are tiny models (tests/tolerance.py says why 1e-5)
VOCAB = 120

# Sizes that exercise several head widths and depths; intermediate != 4H once on purpose.
CONFIGS = {
    "h32-l1-a2": dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64),
    "h64-l2-a4": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256),
    "h48-l3-a3": dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=3, intermediate_size=80,
                      type_vocab_size=3, max_position_embeddings=40, layer_norm_eps=1e-7),
}


def small_config(**kw) -> BertConfig:
    return BertConfig(**{"vocab_size": VOCAB, **CONFIGS["h64-l2-a4"], **kw})


def make_batch(config: BertConfig, batch: int = 3, seq: int = 17, seed: int = 0) -> dict:
    """Random ids with right padding of different lengths and two segments per row."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, config.vocab_size, (batch, seq), generator=g)
    lengths = torch.tensor([seq] + [max(2, seq - 4 * i - 3) for i in range(1, batch)])
    pos = torch.arange(seq)
    attention_mask = (pos[None] < lengths[:, None]).long()
    input_ids[attention_mask == 0] = 0
    token_type_ids = ((pos[None] >= (lengths // 2)[:, None]) & attention_mask.bool()).long()
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def mlm_labels(batch: dict, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    chosen = (torch.rand(batch["input_ids"].shape, generator=g) < 0.3) & batch["attention_mask"].bool()
    chosen[0, 1] = True  # at least one
    return torch.where(chosen, batch["input_ids"], torch.full_like(batch["input_ids"], -100))


def hf_twin(ours: torch.nn.Module, hf_class_name: str, attn: str = "eager", **hf_kwargs):
    """transformers' model of the same class, holding our weights."""
    hf_config = transformers.BertConfig(**ours.config.to_hf_dict(), **hf_kwargs)
    hf_config._attn_implementation = attn
    hf = getattr(transformers, hf_class_name)(hf_config).eval()
    missing, unexpected = hf.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}, missing
    hf.tie_weights()
    return hf


def close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> None:
    assert a.shape == b.shape, (a.shape, b.shape)
    torch.testing.assert_close(a, b, atol=atol, rtol=0)


# --------------------------------------------------------------------------------------------
# Config


def test_presets_match_the_paper_table():
    assert set(BertConfig.presets) == {"tiny", "mini", "small", "medium", "base", "large"}
    base = BertConfig.from_preset("base")
    assert (base.num_hidden_layers, base.hidden_size, base.num_attention_heads,
            base.intermediate_size) == (12, 768, 12, 3072)
    large = BertConfig.from_preset("large", vocab_size=1000, max_position_embeddings=128)
    assert (large.num_hidden_layers, large.hidden_size, large.intermediate_size,
            large.vocab_size, large.max_position_embeddings) == (24, 1024, 4096, 1000, 128)
    custom = BertConfig.from_preset("mini", hidden_size=384, num_attention_heads=6)
    assert custom.intermediate_size == 4 * 384 and custom.num_hidden_layers == 4
    # BERT-Base has 110M parameters (with the pooler).
    assert 109e6 < BertModel(BertConfig.from_preset("base")).num_parameters() < 110e6 + 1e6


def test_config_round_trips_through_hf_dict_and_transformers():
    config = small_config(hidden_act="relu", pad_token_id=3, classifier_dropout=0.2)
    d = config.to_hf_dict()
    assert d["model_type"] == "bert"
    assert BertConfig.from_hf_dict({**d, "some_future_key": [1, 2], "architectures": ["X"]}) == config
    hf = transformers.BertConfig(**d)
    assert BertConfig.from_hf_dict(hf.to_dict()) == config


@pytest.mark.parametrize("change, problem", [
    ({"model_type": "roberta"}, "model_type"),
    ({"hidden_size": None}, "hidden_size"),
    ({"num_attention_heads": 5}, "multiple"),
    ({"hidden_act": "mish"}, "hidden_act"),
    ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ({"hidden_dropout_prob": "0.1"}, "config.json"),
])
def test_bad_config_values_name_the_file_and_key(change, problem):
    d = {**small_config().to_hf_dict(), **change}
    d = {k: v for k, v in d.items() if v is not None}
    with pytest.raises(BertctlError, match=problem) as err:
        BertConfig.from_hf_dict(d, source="x/config.json")
    assert str(err.value).startswith("x/config.json: ")


def test_unknown_preset_is_a_user_error():
    with pytest.raises(BertctlError, match="huge"):
        BertConfig.from_preset("huge")


# --------------------------------------------------------------------------------------------
# Numerical parity with transformers (fp32, eval mode)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bert_model_matches_transformers(name, attn):
    torch.manual_seed(0)
    ours = BertModel(BertConfig(vocab_size=VOCAB, **CONFIGS[name])).eval()
    hf = hf_twin(ours, "BertModel", attn)
    batch = make_batch(ours.config)
    with torch.no_grad():
        a = ours(**batch, output_hidden_states=True)
        b = hf(**batch, output_hidden_states=True)
    close(a["last_hidden_state"], b.last_hidden_state)
    close(a["pooler_output"], b.pooler_output)
    assert len(a["hidden_states"]) == len(b.hidden_states)
    for x, y in zip(a["hidden_states"], b.hidden_states):
        close(x, y)
    # No mask and no segments behave like all-ones / all-zeros, as in HF.
    ids = batch["input_ids"][:1]
    with torch.no_grad():
        close(ours(ids)["last_hidden_state"], hf(ids).last_hidden_state)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_pretraining_matches_transformers(name):
    torch.manual_seed(1)
    ours = BertForPreTraining(BertConfig(vocab_size=VOCAB, **CONFIGS[name])).eval()
    hf = hf_twin(ours, "BertForPreTraining")
    batch = make_batch(ours.config)
    labels = mlm_labels(batch)
    nsp = torch.tensor([0, 1, 1])
    with torch.no_grad():
        full = ours(**batch)
        ref = hf(**batch, labels=labels, next_sentence_label=nsp)
        gathered = ours(**batch, labels=labels, next_sentence_label=nsp)
        mlm_only = ours(**batch, labels=labels)
    close(full["mlm_logits"], ref.prediction_logits)
    close(full["nsp_logits"], ref.seq_relationship_logits)
    # The gathered path scores exactly the labelled positions, in row-major order.
    keep = labels != -100
    close(gathered["mlm_logits"], ref.prediction_logits[keep])
    assert torch.equal(gathered["mlm_targets"], labels[keep])
    close(gathered["loss"], ref.loss)
    ref_mlm = torch.nn.functional.cross_entropy(ref.prediction_logits.reshape(-1, VOCAB), labels.reshape(-1))
    close(gathered["mlm_loss"], ref_mlm)
    close(gathered["nsp_loss"], torch.nn.functional.cross_entropy(ref.seq_relationship_logits, nsp))
    assert "nsp_loss" not in mlm_only
    close(mlm_only["loss"], ref_mlm)


def test_pretraining_gradients_match_transformers():
    torch.manual_seed(2)
    # A dropout that never drops still takes the training-mode attention path (explicit on CPU).
    config = small_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=1e-12)
    ours = BertForPreTraining(config).train()
    hf = hf_twin(ours, "BertForPreTraining", "sdpa").train()
    batch = make_batch(config)
    labels, nsp = mlm_labels(batch), torch.tensor([1, 0, 1])
    ours(**batch, labels=labels, next_sentence_label=nsp)["loss"].backward()
    hf(**batch, labels=labels, next_sentence_label=nsp).loss.backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        close(p.grad, theirs[name].grad, atol=1e-5)


def test_nothing_masked_gives_zero_mlm_loss_not_nan():
    torch.manual_seed(0)
    model = BertForPreTraining(small_config())
    batch = make_batch(model.config)
    out = model(**batch, labels=torch.full_like(batch["input_ids"], -100))
    assert out["loss"].item() == 0.0 and out["mlm_logits"].shape == (0, VOCAB)
    out["loss"].backward()


@pytest.mark.parametrize("fused", [False, True], ids=["sliced", "fused"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vocabulary_cross_entropy_is_the_definition(dtype, fused, monkeypatch):
    """The masked LM's loss, sliced by rows (a slice of 7 rows here, so 40 rows end on a
    partial slice), against cross-entropy's definition in float64: the sum over rows of
    logsumexp minus the target's logit (the caller divides: shared.token_mean); gradient
    softmax - one-hot. Tolerances: the loss is fp32 arithmetic over 3,000 logits, 40 rows of
    ~8 summed (a few ulps of ~320: 1e-4); the gradient is rounded to the logits' dtype at the
    end (fp32: 1e-7 of entries up to 1/40 after the division by N; bf16: its 8 bits, 2**-8
    relative). `fused`: the one cross-entropy a GPU takes, held to the same definition here."""
    from bertctl.model import shared

    monkeypatch.setattr(shared, "_LOSS_CHUNK_BYTES", 7 * 4 * 3000)
    gen = torch.Generator().manual_seed(0)
    n, vocabulary = 40, 3000
    logits = (torch.randn(n, vocabulary, generator=gen) * 4).to(dtype).requires_grad_()
    targets = torch.randint(0, vocabulary, (n,), generator=gen)
    x = logits.detach().double()   # a copy, taken before
    loss = shared.vocabulary_cross_entropy(logits, targets, fused=fused)
    (loss * 3 / n).backward()

    expected = (torch.logsumexp(x, -1) - x[torch.arange(n), targets]).sum()
    grad = torch.softmax(x, -1)
    grad[torch.arange(n), targets] -= 1
    grad = 3 * grad / n
    assert loss.dtype == torch.float32
    assert abs(loss.item() - expected.item()) < 1e-4
    if dtype == torch.float32:   # (fused: exp of the log-softmax, rounded twice)
        close(logits.grad.double(), grad, atol=2.5e-7 if fused else 1e-7)
    else:
        assert logits.grad.dtype == torch.bfloat16
        torch.testing.assert_close(logits.grad.double(), grad, rtol=2 ** -8, atol=1e-9)
    # The logits are not touched (fp32 logits are their own .float(), which the backward
    # must not change in place).
    torch.testing.assert_close(logits.detach().double(), x, rtol=0, atol=0)


@pytest.mark.parametrize("problem_type, num_labels", [("single_label_classification", 3), ("regression", 1)])
def test_sequence_classification_matches_transformers(problem_type, num_labels):
    torch.manual_seed(3)
    ours = BertForSequenceClassification(small_config(), num_labels, problem_type).eval()
    hf = hf_twin(ours, "BertForSequenceClassification", num_labels=num_labels, problem_type=problem_type)
    batch = make_batch(ours.config)
    labels = torch.tensor([0, 2, 1]) if num_labels > 1 else torch.tensor([0.5, 4.0, 2.5])
    with torch.no_grad():
        a = ours(**batch, labels=labels)
        b = hf(**batch, labels=labels)
    close(a["logits"], b.logits)
    close(a["loss"], b.loss)


def test_token_classification_and_qa_match_transformers():
    torch.manual_seed(4)
    config = small_config()
    batch = make_batch(config)
    tagger = BertForTokenClassification(config, num_labels=5).eval()
    assert tagger.bert.pooler is None  # as HF: no pooler weights in a tagger's checkpoint
    labels = torch.randint(0, 5, batch["input_ids"].shape).masked_fill(batch["attention_mask"] == 0, -100)
    with torch.no_grad():
        a = tagger(**batch, labels=labels)
        b = hf_twin(tagger, "BertForTokenClassification", num_labels=5)(**batch, labels=labels)
    close(a["logits"], b.logits)
    close(a["loss"], b.loss)

    qa = BertForQuestionAnswering(config).eval()
    start, end = torch.tensor([3, 40, 0]), torch.tensor([5, 41, 0])  # 40, 41: outside the window
    with torch.no_grad():
        a = qa(**batch, start_positions=start, end_positions=end)
        b = hf_twin(qa, "BertForQuestionAnswering")(**batch, start_positions=start, end_positions=end)
    close(a["start_logits"], b.start_logits)
    close(a["end_logits"], b.end_logits)
    close(a["loss"], b.loss)


def test_multiple_choice_matches_transformers():
    torch.manual_seed(5)
    config = small_config()
    model = BertForMultipleChoice(config).eval()
    flat = make_batch(config, batch=6)
    batch = {k: v.view(2, 3, -1) for k, v in flat.items()}
    labels = torch.tensor([2, 0])
    with torch.no_grad():
        a = model(**batch, labels=labels)
        b = hf_twin(model, "BertForMultipleChoice")(**batch, labels=labels)
    assert a["logits"].shape == (2, 3)
    close(a["logits"], b.logits)
    close(a["loss"], b.loss)


def test_bf16_autocast_runs_and_stays_close_to_fp32():
    torch.manual_seed(6)
    model = BertForPreTraining(small_config()).eval()
    batch = make_batch(model.config)
    labels = mlm_labels(batch)
    with torch.no_grad():
        ref = model(**batch, labels=labels, next_sentence_label=torch.tensor([0, 1, 0]))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(**batch, labels=labels, next_sentence_label=torch.tensor([0, 1, 0]))
    assert low["mlm_logits"].dtype == torch.bfloat16
    close(low["mlm_logits"].float(), ref["mlm_logits"], atol=0.05)
    close(low["loss"], ref["loss"], atol=0.02)
    # and trains: a backward pass under autocast reaches every parameter
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(**batch, labels=labels, next_sentence_label=torch.tensor([0, 1, 0]))["loss"].backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_init_follows_bert():
    torch.manual_seed(7)
    model = BertForSequenceClassification(BertConfig.from_preset("mini", vocab_size=2000))
    w = model.bert.encoder.layer[0].attention.self.query.weight
    assert abs(w.std().item() - 0.02) < 0.002
    assert abs(model.classifier.weight.std().item() - 0.02) < 0.005
    assert model.classifier.bias.abs().sum() == 0
    ln = model.bert.encoder.layer[1].output.LayerNorm
    assert torch.all(ln.weight == 1) and torch.all(ln.bias == 0)
    assert torch.all(model.bert.embeddings.word_embeddings.weight[0] == 0)  # [PAD] row


def test_dropout_is_active_in_training_only():
    torch.manual_seed(8)
    model = BertModel(small_config())
    batch = make_batch(model.config)
    a, b = model(**batch)["last_hidden_state"], model(**batch)["last_hidden_state"]
    assert not torch.allclose(a, b)
    model.eval()
    close(model(**batch)["last_hidden_state"], model(**batch)["last_hidden_state"], atol=0)


# --------------------------------------------------------------------------------------------
# Hugging Face files in and out


def test_saved_pretraining_model_loads_in_transformers(tmp_path):
    torch.manual_seed(9)
    ours = BertForPreTraining(small_config()).eval()
    save_model(ours, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForPreTraining"]
    hf, info = transformers.BertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    batch = make_batch(ours.config)
    with torch.no_grad():
        a, b = ours(**batch), hf.eval()(**batch)
    close(a["mlm_logits"], b.prediction_logits)
    close(a["nsp_logits"], b.seq_relationship_logits)


def test_saved_classifier_loads_in_transformers_and_back(tmp_path):
    torch.manual_seed(10)
    ours = BertForSequenceClassification(small_config(), num_labels=3).eval()
    labels = {"0": "entailment", "1": "neutral", "2": "contradiction"}
    save_model(ours, tmp_path, extra_config={"id2label": labels,
                                             "label2id": {v: int(k) for k, v in labels.items()}})
    hf, info = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    assert hf.config.id2label[2] == "contradiction" and hf.config.problem_type == "single_label_classification"
    batch = make_batch(ours.config)
    with torch.no_grad():
        close(ours(**batch)["logits"], hf.eval()(**batch).logits)
    # Back in, with the label count read from the file.
    again, report = load_model(tmp_path)
    assert type(again) is BertForSequenceClassification and again.num_labels == 3 and report.complete
    with torch.no_grad():
        close(again.eval()(**batch)["logits"], ours(**batch)["logits"], atol=0)


def test_saved_regressor_keeps_problem_type(tmp_path):
    save_model(BertForSequenceClassification(small_config(), problem_type="regression"), tmp_path)
    model, _ = load_model(tmp_path, BertForSequenceClassification)
    assert model.problem_type == "regression" and model.num_labels == 1
    hf = transformers.BertForSequenceClassification.from_pretrained(tmp_path)
    assert hf.config.num_labels == 1 and hf.config.problem_type == "regression"


@pytest.mark.parametrize("hf_class, ours_class", [
    ("BertForPreTraining", BertForPreTraining),
    ("BertForQuestionAnswering", BertForQuestionAnswering),
    ("BertForTokenClassification", BertForTokenClassification),
])
def test_transformers_save_pretrained_loads_in_ours(tmp_path, hf_class, ours_class):
    torch.manual_seed(11)
    num_labels = 4 if hf_class == "BertForTokenClassification" else 2  # QA: start and end
    hf_config = transformers.BertConfig(vocab_size=VOCAB, **CONFIGS["h32-l1-a2"], num_labels=num_labels)
    hf = getattr(transformers, hf_class)(hf_config).eval()
    hf.save_pretrained(tmp_path)
    ours, report = load_model(tmp_path, ours_class)
    assert report.complete, report
    batch = make_batch(ours.config)
    with torch.no_grad():
        a, b = ours.eval()(**batch), hf(**batch)
    if hf_class == "BertForPreTraining":
        close(a["mlm_logits"], b.prediction_logits)
    elif hf_class == "BertForQuestionAnswering":
        close(a["start_logits"], b.start_logits)
    else:
        assert ours.num_labels == 4
        close(a["logits"], b.logits)


def test_bare_encoder_checkpoint_loads_under_heads(tmp_path):
    torch.manual_seed(12)
    encoder = BertModel(small_config()).eval()
    save_model(encoder, tmp_path)  # keys without the "bert." prefix, like sentence-transformers
    model, report = load_model(tmp_path, BertForPreTraining)
    assert sorted(report.missing) == sorted(k for k in model.state_dict() if k.startswith("cls."))
    assert not report.unexpected
    batch = make_batch(encoder.config)
    with torch.no_grad():
        close(model.bert.eval()(**batch)["pooler_output"], encoder(**batch)["pooler_output"], atol=0)
    # and a headed checkpoint loads as a bare encoder, its heads reported as ignored
    save_model(model, tmp_path / "pt")
    bare, report = load_model(tmp_path / "pt", BertModel)
    assert not report.missing and all(k.startswith("cls.") for k in report.unexpected)


def test_old_names_load(tmp_path):
    """TF-converted files: LayerNorm gamma/beta, an explicit decoder and the bias on it."""
    torch.manual_seed(13)
    ours = BertForPreTraining(small_config()).eval()
    old = {}
    for key, value in ours.state_dict().items():
        key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        old["cls.predictions.decoder.bias" if key == "cls.predictions.bias" else key] = value
    old["cls.predictions.decoder.weight"] = ours.bert.embeddings.word_embeddings.weight.clone()
    old["bert.embeddings.position_ids"] = torch.arange(ours.config.max_position_embeddings)[None]
    save_file(old, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(ours.config.to_hf_dict()))
    model, report = load_model(tmp_path, BertForPreTraining)
    assert report.complete, report
    for (k, a), b in zip(model.state_dict().items(), ours.state_dict().values()):
        assert torch.equal(a, b), k


def test_classifier_of_another_size_is_reinitialised(tmp_path):
    save_model(BertForSequenceClassification(small_config(), num_labels=3), tmp_path)
    model, report = load_model(tmp_path, BertForSequenceClassification, num_labels=2)
    assert model.num_labels == 2
    assert sorted(report.mismatched) == ["classifier.bias", "classifier.weight"] and not report.missing


def test_bad_directories_are_user_errors(tmp_path):
    with pytest.raises(BertctlError, match="not a directory"):
        load_model(tmp_path / "nowhere", BertModel)
    with pytest.raises(BertctlError, match="config.json: not found"):
        load_model(tmp_path, BertModel)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(BertctlError, match="config.json: cannot read"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 10}))
    with pytest.raises(BertctlError, match="model_type is 'gpt2'"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(small_config().to_hf_dict()))
    with pytest.raises(BertctlError, match="model.safetensors: not found"):
        load_model(tmp_path, BertModel)
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle bytes that must never be loaded")
    with pytest.raises(BertctlError, match="pytorch_model.bin: only pickle"):
        load_model(tmp_path, BertModel)
    (tmp_path / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(BertctlError, match="model.safetensors: cannot read"):
        load_model(tmp_path, BertModel)
    # weights that disagree with config.json
    save_file({"embeddings.word_embeddings.weight": torch.zeros(7, 64)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(BertctlError, match="word_embeddings.weight has shape"):
        load_model(tmp_path, BertModel)


def test_save_unwraps_compiled_and_ddp_style_wrappers(tmp_path):
    class Wrapper(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

    model = BertForTokenClassification(small_config(), num_labels=3)
    save_model(Wrapper(model), tmp_path)
    _, report = load_model(tmp_path, BertForTokenClassification)
    assert report.complete


# --------------------------------------------------------------------------------------------
# A real checkpoint: all-MiniLM-L6-v2 (a bare BertModel, sentence-transformers layout)


def test_all_minilm_matches_transformers(minilm_dir):
    ours, report = load_model(minilm_dir, BertModel)
    assert report.complete, report  # its saved position_ids buffer is not worth a warning
    hf = transformers.BertModel.from_pretrained(minilm_dir, attn_implementation="eager").eval()
    batch = make_batch(ours.config, batch=4, seq=24, seed=3)
    with torch.no_grad():
        a, b = ours.eval()(**batch), hf(**batch)
    close(a["last_hidden_state"], b.last_hidden_state)
    close(a["pooler_output"], b.pooler_output)


def test_all_minilm_loads_under_pretraining_head(minilm_dir):
    model, report = load_model(minilm_dir, BertForPreTraining)
    assert report.missing and all(k.startswith("cls.") for k in report.missing)
    assert not report.unexpected and "cls.predictions.bias" in str(report)


def test_regression_scores_keep_fp32_resolution_under_bf16_autocast():
    """bf16 would round 0-5 scores to steps of 1/64, tying ranks that Spearman compares."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64)
    model = BertForSequenceClassification(config, problem_type="regression").eval()
    ids = torch.randint(5, 100, (64, 12))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        scores = model(ids)["logits"]
    assert scores.dtype == torch.float32
    assert len(torch.unique(scores)) == 64


def test_cpu_dropout_keeps_1_minus_p_scales_and_backpropagates_through_its_mask():
    """model.dropout.dropout's CPU mask (16-bit draws): the kept share is 1 - p within sampling
    error, kept values are scaled by 1 / (1 - p), the gradient flows through the same mask, the
    same seed gives the same mask, and eval mode or p = 0 is the identity."""
    from bertctl.model.dropout import dropout

    x = torch.randn(4, 64, 1001, requires_grad=True)   # an odd count: the 4-per-draw tail
    for p in (0.1, 0.5):
        torch.manual_seed(0)
        y = dropout(x, p, True)
        kept = y != 0
        share = kept.float().mean().item()
        assert abs(share - (1 - p)) < 4 * (p * (1 - p) / x.numel()) ** 0.5
        torch.testing.assert_close(y[kept], x[kept] / (1 - p))
        (g,) = torch.autograd.grad(y.sum(), x)
        torch.testing.assert_close(g, kept.float() / (1 - p))
        torch.manual_seed(0)
        assert torch.equal(dropout(x, p, True), y)
    assert dropout(x, 0.1, False) is x and dropout(x, 0.0, True) is x
    # The bits are uniform: neighbouring 16-bit lanes of one 64-bit draw are not correlated.
    torch.manual_seed(1)
    k = (dropout(torch.ones(4 * 100_000), 0.5, True) != 0).float().view(-1, 4)
    corr = torch.corrcoef(k.T)
    assert (corr - torch.eye(4)).abs().max() < 0.02


def test_a_class_no_loaded_family_has_is_refused_not_read_as_the_encoder(tmp_path, minilm_dir):
    """config.json naming a head whose family was never imported (a retrieval model's
    BertForEmbedding in a session that imported only bertctl.model), or a transformers class
    bertctl has no model of, is refused in one line rather than loaded as the bare encoder;
    the role given, or the family imported, loads it."""
    import shutil
    import subprocess
    import sys

    from bertctl.model import load_model

    for name in ("BertForEmbedding", "BertForNextSentencePrediction"):
        d = tmp_path / name
        d.mkdir()
        shutil.copy(minilm_dir / "model.safetensors", d)
        config = json.loads((minilm_dir / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**config, "architectures": [name]}))
        # A fresh interpreter: this session's imports registered every family already.
        code = ("import sys\nfrom bertctl.model import load_model\nfrom bertctl.errors import "
                "BertctlError\ntry:\n    load_model(sys.argv[1])\nexcept BertctlError as e:\n"
                "    print(e)\nelse:\n    print('loaded')\nload_model(sys.argv[1], 'encoder')\n"
                "import bertctl.tasks\nprint(type(load_model(sys.argv[1])[0]).__name__)")
        r = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True,
                           text=True, timeout=120)
        lines = r.stdout.splitlines()
        if name == "BertForEmbedding":
            assert r.returncode == 0, r.stderr
            assert lines[0] == (f"{d}/config.json: names {name}, a model class no loaded "
                                f"architecture or task family has; give the role to load "
                                f"(\"encoder\" for its encoder alone)")
            assert lines[1] == name   # the retrieval family imported: its own head
        else:
            with pytest.raises(BertctlError, match=f"names {name}, a model class no"):
                load_model(d)
            assert load_model(d, "encoder")[1].complete
