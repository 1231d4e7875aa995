"""RoBERTa's own (what every architecture shares is in test_parity.py): a segment id RoBERTa has
no row for reads as its one type; positions count from the padding id, so the longest input
is two short of the table, and a config without room past the padding is refused."""

import pytest
import torch

from bertctl.model import build
from bertctl.model.roberta import RobertaConfig, XLMRobertaConfig
from parity import shaken

transformers = pytest.importorskip("transformers")

SHAPE = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, max_position_embeddings=66, pad_token_id=1,
             bos_token_id=0, eos_token_id=2)


def _batch(T: int = 40, rows: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 211, (rows, T), generator=g)
    ids[:, 0] = 0
    mask = torch.ones(rows, T, dtype=torch.long)
    mask[1, T // 2:] = 0
    mask[-1, T - 3:] = 0
    ids[mask == 0] = 1
    return ids, mask


def test_one_token_type_reads_any_segment_id_as_it_and_length_is_refused():
    model = shaken(build("encoder", RobertaConfig(**SHAPE)))
    ids, mask = _batch()
    segments = (torch.arange(ids.size(1)) > 10).long().expand_as(ids)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, segments, mask)["last_hidden_state"],
                                   model(ids, None, mask)["last_hidden_state"])
    assert model.config.longest_input == SHAPE["max_position_embeddings"] - 2
    with pytest.raises(ValueError, match="exceeds"):
        model(torch.full((1, SHAPE["max_position_embeddings"] - 1), 5))


def test_a_transformers_config_without_room_past_the_padding_is_refused():
    from bertctl.errors import BertctlError

    with pytest.raises(BertctlError, match="leaves no position past the padding id"):
        RobertaConfig.from_hf_dict({**SHAPE, "model_type": "roberta",
                                    "max_position_embeddings": 2})
    with pytest.raises(BertctlError, match="model_type is 'roberta', not 'xlm-roberta'"):
        XLMRobertaConfig.from_hf_dict({**SHAPE, "model_type": "roberta"})
