"""RoBERTa and XLM-RoBERTa against transformers' own classes (the reference), both directions.

bertctl's models save what `AutoModel`/`AutoModelFor*` load with no remote code and give
transformers' outputs on the same weights (hidden states, MLM logits, every task head) on
padded batches, where each real token's position counts from the padding id; a directory
transformers saved loads into bertctl with nothing missing; a packed row computes for each
sequence what it computes alone; a segment id RoBERTa has no row for reads as its one type.
"""

import pytest
import torch

from bertctl.model import build, load_model, save_model
from bertctl.model.roberta import RobertaConfig, XLMRobertaConfig
from parity import check_packed_row, shaken
from tolerance import TINY_FP32  # (each tolerance's reason)

transformers = pytest.importorskip("transformers")

ARCHS = {"roberta": (RobertaConfig, "Roberta", "RobertaConfig"),
         "xlm-roberta": (XLMRobertaConfig, "XLMRoberta", "XLMRobertaConfig")}
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


def _close(a, b, real):
    torch.testing.assert_close(a[real], b[real], **TINY_FP32)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_ours_saved_is_transformers_with_our_outputs(arch, tmp_path):
    config_class, prefix, _ = ARCHS[arch]
    ours = shaken(build("masked_lm", config_class(**SHAPE)))
    save_model(ours, tmp_path)
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path)).eval()
    assert type(theirs).__name__ == f"{prefix}ForMaskedLM"
    bare = transformers.AutoModel.from_pretrained(str(tmp_path)).eval()
    assert type(bare).__name__ == f"{prefix}Model"
    ids, mask = _batch(SHAPE["max_position_embeddings"] - 2)   # the longest input
    real = mask.bool()
    with torch.no_grad():
        mine = ours.roberta(ids, None, mask, output_hidden_states=True)
        ref = bare(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        logits = ours(ids, None, mask)["mlm_logits"]
        ref_logits = theirs(input_ids=ids, attention_mask=mask).logits
    assert len(mine["hidden_states"]) == len(ref.hidden_states) == 4
    for a, b in zip(mine["hidden_states"], ref.hidden_states):
        _close(a, b, real)
    _close(logits, ref_logits, real)


HEADS = {
    "SequenceClassification": {"num_labels": 3},
    "TokenClassification": {"num_labels": 5},
    "QuestionAnswering": {},
    "MultipleChoice": {},
}


@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_transformers_heads_load_into_ours_and_agree(arch, head, tmp_path):
    _, prefix, config_name = ARCHS[arch]
    torch.manual_seed(0)
    hf_config = getattr(transformers, config_name)(**SHAPE, **HEADS[head])
    theirs = shaken(getattr(transformers, f"{prefix}For{head}")(hf_config))
    theirs.save_pretrained(str(tmp_path))
    ours, report = load_model(tmp_path)
    assert type(ours).__name__ == f"{prefix}For{head}"
    assert report.complete, report
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
    check_packed_row(shaken(build("encoder", RobertaConfig(**SHAPE))), 211, 1)


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
