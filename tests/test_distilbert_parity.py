"""DistilBERT against transformers' own DistilBert classes (the reference), both directions:
hidden states, the masked LM and every task head on the same weights, learned and sinusoidal
positions; the fixed sinusoidal table is transformers'; a packed row computes each sequence as
alone."""

import pytest
import torch

from bertctl.model import build, load_model, save_model
from bertctl.model.distilbert import DistilBertConfig
from bertctl.model.distilbert.model import sinusoidal_table
from parity import check_packed_row, shaken
from tolerance import TINY_FP32  # (each tolerance's reason)

transformers = pytest.importorskip("transformers")

SHAPE = dict(vocab_size=211, dim=64, hidden_dim=96, n_layers=3, n_heads=4,
             max_position_embeddings=64, pad_token_id=0)


def _batch(T: int = 40, rows: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 211, (rows, T), generator=g)
    mask = torch.ones(rows, T, dtype=torch.long)
    mask[1, T // 2:] = 0
    ids[mask == 0] = 0
    return ids, mask


def _close(a, b, real):
    torch.testing.assert_close(a[real], b[real], **TINY_FP32)


@pytest.mark.parametrize("sinusoidal", [False, True])
def test_ours_saved_is_transformers_with_our_outputs(sinusoidal, tmp_path):
    ours = shaken(build("masked_lm", DistilBertConfig(**SHAPE, sinusoidal_pos_embds=sinusoidal)))
    save_model(ours, tmp_path)
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path)).eval()
    assert type(theirs).__name__ == "DistilBertForMaskedLM"
    bare = transformers.AutoModel.from_pretrained(str(tmp_path)).eval()
    ids, mask = _batch()
    real = mask.bool()
    with torch.no_grad():
        mine = ours.distilbert(ids, None, mask, output_hidden_states=True)
        ref = bare(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        logits = ours(ids, None, mask)["mlm_logits"]
        ref_logits = theirs(input_ids=ids, attention_mask=mask).logits
    for a, b in zip(mine["hidden_states"], ref.hidden_states, strict=True):
        _close(a, b, real)
    _close(logits, ref_logits, real)


def test_the_sinusoidal_table_is_transformers():
    torch.manual_seed(0)
    theirs = transformers.DistilBertModel(transformers.DistilBertConfig(
        **SHAPE, sinusoidal_pos_embds=True))
    torch.testing.assert_close(sinusoidal_table(64, 64),
                               theirs.embeddings.position_embeddings.weight.detach(),
                               atol=1e-6, rtol=0)   # float64 -> float32 rounding, both


HEADS = {"SequenceClassification": {"num_labels": 3}, "TokenClassification": {"num_labels": 5},
         "QuestionAnswering": {}, "MultipleChoice": {}}


@pytest.mark.parametrize("head", sorted(HEADS))
def test_transformers_heads_load_into_ours_and_agree(head, tmp_path):
    torch.manual_seed(0)
    config = transformers.DistilBertConfig(**SHAPE, **HEADS[head])
    theirs = shaken(getattr(transformers, f"DistilBertFor{head}")(config))
    theirs.save_pretrained(str(tmp_path))
    ours, report = load_model(tmp_path)
    assert type(ours).__name__ == f"DistilBertFor{head}" and report.complete, report
    ours.eval()
    ids, mask = _batch()
    real = mask.bool()
    with torch.no_grad():
        if head == "MultipleChoice":
            ids, mask = ids[None], mask[None]
        got = ours(ids, None, mask)
        ref = theirs(input_ids=ids, attention_mask=mask)
    if head == "QuestionAnswering":
        _close(got["start_logits"], ref.start_logits, real)
        _close(got["end_logits"], ref.end_logits, real)
    elif head == "TokenClassification":
        _close(got["logits"], ref.logits, real)
    else:
        torch.testing.assert_close(got["logits"], ref.logits, **TINY_FP32)


def test_a_packed_row_keeps_its_sequences_apart():
    """Packed rows: each sequence computes what it computes alone."""
    check_packed_row(shaken(build("encoder", DistilBertConfig(**SHAPE))), 211, 0)