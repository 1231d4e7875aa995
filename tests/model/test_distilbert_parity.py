"""DistilBERT's own against transformers (what every architecture shares is in
test_parity.py): the fixed sinusoidal position table is transformers'."""

import pytest
import torch

from bertctl.model.distilbert.modeling import sinusoidal_table

transformers = pytest.importorskip("transformers")

SHAPE = dict(vocab_size=211, dim=64, hidden_dim=96, n_layers=3, n_heads=4,
             max_position_embeddings=64, pad_token_id=0)


def test_the_sinusoidal_table_is_transformers():
    torch.manual_seed(0)
    theirs = transformers.DistilBertModel(transformers.DistilBertConfig(
        **SHAPE, sinusoidal_pos_embds=True))
    torch.testing.assert_close(sinusoidal_table(64, 64),
                               theirs.embeddings.position_embeddings.weight.detach(),
                               atol=1e-6, rtol=0)   # float64 -> float32 rounding, both
