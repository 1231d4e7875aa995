"""ELECTRA's own against transformers (what every architecture shares is in test_parity.py):
a discriminator checkpoint (ElectraForPreTraining) fine-tunes from its encoder."""

import pytest
import torch

from bertctl.model import load_model
from parity import close_where, shaken

transformers = pytest.importorskip("transformers")

SHAPE = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, max_position_embeddings=64, pad_token_id=0)


def _batch(T: int = 40, rows: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 211, (rows, T), generator=g)
    mask = torch.ones(rows, T, dtype=torch.long)
    mask[1, T // 2:] = 0
    ids[mask == 0] = 0
    types = (torch.arange(T) > 15).long().expand(rows, T)
    return ids, types, mask


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
    close_where(got, ref, mask.bool())
