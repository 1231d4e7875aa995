"""DeBERTa-v2/v3 against transformers' own DebertaV2 classes (the reference), both directions:
bertctl's models save what `AutoModel`/`AutoModelFor*` load and give transformers' outputs on
the same weights (hidden states, MLM logits, every task head) on padded batches, for v3's
configuration (log buckets shorter than the input, shared keys, both disentangled terms, no
absolute positions) and v2's (separate position projections, absolute positions, token types,
no buckets); a packed row computes each sequence as alone; what bertctl does not implement is
refused by name."""

import pytest
import torch

from bertctl.model import build, load_model, save_model
from bertctl.model.deberta import DebertaV2Config
from parity import check_packed_row, shaken
from tolerance import TINY_FP32  # (each tolerance's reason)

transformers = pytest.importorskip("transformers")

SHAPE = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, max_position_embeddings=128, pad_token_id=0)
# v3: 16 buckets over 40-token inputs, so distances past 8 take the log buckets.
V3 = dict(relative_attention=True, position_buckets=16, norm_rel_ebd="layer_norm",
          share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
          type_vocab_size=0, max_relative_positions=-1)
V2 = dict(relative_attention=True, position_buckets=-1, max_relative_positions=24,
          norm_rel_ebd="none", share_att_key=False, pos_att_type=["c2p", "p2c"],
          position_biased_input=True, type_vocab_size=2)
KINDS = {"v3": V3, "v2": V2}


def _batch(T: int = 40, rows: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 211, (rows, T), generator=g)
    mask = torch.ones(rows, T, dtype=torch.long)
    mask[1, T // 2:] = 0
    mask[-1, T - 3:] = 0
    ids[mask == 0] = 0
    return ids, mask


def _close(a, b, real):
    torch.testing.assert_close(a[real], b[real], **TINY_FP32)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ours_saved_is_transformers_with_our_outputs(kind, tmp_path):
    ours = shaken(build("masked_lm", DebertaV2Config(**SHAPE, **KINDS[kind])))
    save_model(ours, tmp_path)
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path)).eval()
    assert type(theirs).__name__ == "DebertaV2ForMaskedLM"
    bare = transformers.AutoModel.from_pretrained(str(tmp_path)).eval()
    ids, mask = _batch()
    real = mask.bool()
    with torch.no_grad():
        mine = ours.deberta(ids, None, mask, output_hidden_states=True)
        ref = bare(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        logits = ours(ids, None, mask)["mlm_logits"]
        ref_logits = theirs(input_ids=ids, attention_mask=mask).logits
    assert len(mine["hidden_states"]) == len(ref.hidden_states) == 4
    for a, b in zip(mine["hidden_states"], ref.hidden_states):
        _close(a, b, real)
    _close(logits, ref_logits, real)


HEADS = {"SequenceClassification": {"num_labels": 3}, "TokenClassification": {"num_labels": 5},
         "QuestionAnswering": {}, "MultipleChoice": {}}


@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_transformers_heads_load_into_ours_and_agree(kind, head, tmp_path):
    torch.manual_seed(0)
    config = transformers.DebertaV2Config(**SHAPE, **KINDS[kind], **HEADS[head])
    theirs = shaken(getattr(transformers, f"DebertaV2For{head}")(config))
    theirs.save_pretrained(str(tmp_path))
    ours, report = load_model(tmp_path)
    assert type(ours).__name__ == f"DebertaV2For{head}"
    assert report.complete, report
    ours.eval()
    ids, mask = _batch()
    types = (torch.arange(ids.size(1)) > 12).long().expand_as(ids) if kind == "v2" else None
    real = mask.bool()
    with torch.no_grad():
        if head == "MultipleChoice":
            ids, mask = ids[None], mask[None]
            types = None if types is None else types[None]
        got = ours(ids, types, mask)
        ref = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types)
    if head == "QuestionAnswering":
        _close(got["start_logits"], ref.start_logits, real)
        _close(got["end_logits"], ref.end_logits, real)
    elif head == "TokenClassification":
        _close(got["logits"], ref.logits, real)
    else:
        torch.testing.assert_close(got["logits"], ref.logits, **TINY_FP32)


def test_a_packed_row_keeps_its_sequences_apart():
    """Packed rows: each sequence computes what it computes alone."""
    check_packed_row(shaken(build("encoder", DebertaV2Config(**SHAPE, **V3))), 211, 0)