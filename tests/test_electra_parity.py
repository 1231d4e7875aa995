"""ELECTRA discriminators as encoders, against transformers' own Electra classes (the
reference), both directions, with embeddings narrower than the width (ELECTRA-small's shape,
projected) and as wide: hidden states, the generator's masked LM and every task head on the
same weights; a discriminator checkpoint (ElectraForPreTraining) fine-tunes from its encoder."""

import pytest
import torch

from bertctl.model import build, load_model, save_model
from bertctl.model.electra import ElectraConfig
from parity import shaken
from tolerance import TINY_FP32  # (each tolerance's reason)

transformers = pytest.importorskip("transformers")

SHAPE = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, max_position_embeddings=64, pad_token_id=0)
WIDTHS = {"narrow": 32, "wide": 64}


def _batch(T: int = 40, rows: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 211, (rows, T), generator=g)
    mask = torch.ones(rows, T, dtype=torch.long)
    mask[1, T // 2:] = 0
    ids[mask == 0] = 0
    types = (torch.arange(T) > 15).long().expand(rows, T)
    return ids, types, mask


def _close(a, b, real):
    torch.testing.assert_close(a[real], b[real], **TINY_FP32)


@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_ours_saved_is_transformers_with_our_outputs(width, tmp_path):
    config = ElectraConfig(**SHAPE, embedding_size=WIDTHS[width])
    ours = shaken(build("masked_lm", config))
    save_model(ours, tmp_path)
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path)).eval()
    assert type(theirs).__name__ == "ElectraForMaskedLM"
    bare = transformers.AutoModel.from_pretrained(str(tmp_path)).eval()
    ids, types, mask = _batch()
    real = mask.bool()
    with torch.no_grad():
        mine = ours.electra(ids, types, mask, output_hidden_states=True)
        ref = bare(input_ids=ids, token_type_ids=types, attention_mask=mask,
                   output_hidden_states=True)
        logits = ours(ids, types, mask)["mlm_logits"]
        ref_logits = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
    for a, b in zip(mine["hidden_states"], ref.hidden_states, strict=True):
        _close(a, b, real)
    _close(logits, ref_logits, real)


HEADS = {"SequenceClassification": {"num_labels": 3}, "TokenClassification": {"num_labels": 5},
         "QuestionAnswering": {}, "MultipleChoice": {}}


@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_transformers_heads_load_into_ours_and_agree(width, head, tmp_path):
    torch.manual_seed(0)
    config = transformers.ElectraConfig(**SHAPE, embedding_size=WIDTHS[width], **HEADS[head])
    theirs = shaken(getattr(transformers, f"ElectraFor{head}")(config))
    theirs.save_pretrained(str(tmp_path))
    ours, report = load_model(tmp_path)
    assert type(ours).__name__ == f"ElectraFor{head}" and report.complete, report
    ours.eval()
    ids, types, mask = _batch()
    real = mask.bool()
    with torch.no_grad():
        if head == "MultipleChoice":
            ids, types, mask = ids[None], types[None], mask[None]
        got = ours(ids, types, mask)
        ref = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask)
    if head == "QuestionAnswering":
        _close(got["start_logits"], ref.start_logits, real)
        _close(got["end_logits"], ref.end_logits, real)
    elif head == "TokenClassification":
        _close(got["logits"], ref.logits, real)
    else:
        torch.testing.assert_close(got["logits"], ref.logits, **TINY_FP32)


def test_a_discriminator_checkpoint_is_an_encoder(tmp_path):
    """ElectraForPreTraining (replaced-token detection, no bertctl role): its encoder loads
    whole; only the detection head is left out, and said."""
    torch.manual_seed(0)
    config = transformers.ElectraConfig(**SHAPE, embedding_size=32)
    theirs = shaken(transformers.ElectraForPreTraining(config))
    theirs.save_pretrained(str(tmp_path))
    ours, report = load_model(tmp_path, role="sequence_classification", num_labels=2)
    assert not report.missing or all(k.startswith("classifier.") for k in report.missing)
    assert all(k.startswith("discriminator_predictions.") for k in report.unexpected)
    encoder, report = load_model(tmp_path, role="encoder")
    assert not report.missing, report
    ids, types, mask = _batch()
    with torch.no_grad():
        got = encoder.eval()(ids, types, mask)["last_hidden_state"]
        ref = theirs.electra(input_ids=ids, token_type_ids=types,
                             attention_mask=mask).last_hidden_state
    _close(got, ref, mask.bool())
