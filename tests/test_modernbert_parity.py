"""ModernBERT against transformers' own implementation (the reference), both directions.

bertctl's `modernbert` saves what `AutoModel`/`AutoModelForMaskedLM` load with no remote code
and gives transformers' outputs on the same weights (hidden states, MLM logits, every task
head), padded batches, at lengths where the local windows are active: 16 (one window spans
it), 40 (the full local mask) and 300 (block by block). A directory saved by transformers loads
into bertctl with nothing missing. A packed row computes for each sequence what it would alone.
"""

import pytest
import torch

from bertctl.model import build, load_model, save_model
from bertctl.model.modernbert import ModernBertConfig
from tolerance import TINY_FP32  # (each tolerance's reason)

transformers = pytest.importorskip("transformers")

LENGTHS = (16, 40, 300)


def _config(**overrides) -> ModernBertConfig:
    # local_attention 32 (half window 16): 16 tokens fit in one window, 40 take the full
    # local mask, 300 the blocked path; 4 layers: global, local, local, global.
    values = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                  num_attention_heads=4, local_attention=32, max_position_embeddings=512,
                  pad_token_id=0, cls_token_id=2, sep_token_id=3)
    return ModernBertConfig(**{**values, **overrides})


def _shaken(model):
    """Norm weights away from 1 and biases away from 0, so a misplaced one shows."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def _batch(T: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 211, (3, T), generator=g)
    mask = torch.ones(3, T, dtype=torch.long)
    mask[1, T // 2:] = 0
    mask[2, T - 3:] = 0
    ids[mask == 0] = 0
    return ids, mask


def _close(a, b, real):
    torch.testing.assert_close(a[real], b[real], **TINY_FP32)


@pytest.mark.parametrize("T", LENGTHS)
def test_ours_saved_is_transformers_modernbert_with_our_outputs(T, tmp_path):
    ours = _shaken(build("masked_lm", _config(decoder_bias=True)))
    save_model(ours, tmp_path)
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path)).eval()
    assert type(theirs).__name__ == "ModernBertForMaskedLM"
    bare = transformers.AutoModel.from_pretrained(str(tmp_path)).eval()
    assert type(bare).__name__ == "ModernBertModel"
    ids, mask = _batch(T)
    real = mask.bool()
    with torch.no_grad():
        mine = ours.model(ids, None, mask, output_hidden_states=True)
        ref = bare(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        logits = ours(ids, None, mask)["mlm_logits"]
        ref_logits = theirs(input_ids=ids, attention_mask=mask).logits
    assert len(mine["hidden_states"]) == len(ref.hidden_states) == 5
    for a, b in zip(mine["hidden_states"], ref.hidden_states):
        _close(a, b, real)
    _close(mine["last_hidden_state"], ref.last_hidden_state, real)
    _close(logits, ref_logits, real)


HEADS = {
    "sequence_classification": ("ModernBertForSequenceClassification", {"num_labels": 3}),
    "token_classification": ("ModernBertForTokenClassification", {"num_labels": 5}),
    "question_answering": ("ModernBertForQuestionAnswering", {}),
}


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("role", sorted(HEADS))
def test_transformers_heads_load_into_ours_and_agree(role, pooling, tmp_path):
    name, kwargs = HEADS[role]
    torch.manual_seed(0)
    hf_config = transformers.ModernBertConfig(
        vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, local_attention=32, pad_token_id=0, bos_token_id=2,
        eos_token_id=3, cls_token_id=2, sep_token_id=3, classifier_pooling=pooling,
        norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
        **kwargs)
    theirs = _shaken(getattr(transformers, name)(hf_config))
    theirs.save_pretrained(str(tmp_path))
    ours, report = load_model(tmp_path)
    assert type(ours).__name__ == name
    assert report.complete, report
    ours.eval()
    for T in LENGTHS:
        ids, mask = _batch(T, seed=T)
        real = mask.bool()
        with torch.no_grad():
            got = ours(ids, None, mask)
            ref = theirs(input_ids=ids, attention_mask=mask)
        if role == "question_answering":
            _close(got["start_logits"], ref.start_logits, real)
            _close(got["end_logits"], ref.end_logits, real)
        elif role == "token_classification":
            _close(got["logits"], ref.logits, real)
        else:
            torch.testing.assert_close(got["logits"], ref.logits, **TINY_FP32)


def test_multiple_choice_agrees_with_transformers(tmp_path):
    torch.manual_seed(0)
    hf_config = transformers.ModernBertConfig(
        vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, local_attention=32, pad_token_id=0)
    theirs = _shaken(transformers.ModernBertForMultipleChoice(hf_config))
    theirs.save_pretrained(str(tmp_path))
    ours, report = load_model(tmp_path)
    assert report.complete, report
    ids, mask = _batch(40)
    ids, mask = ids.view(1, 3, 40), mask.view(1, 3, 40)
    with torch.no_grad():
        got = ours.eval()(ids, None, mask)["logits"]
        ref = theirs(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(got, ref, **TINY_FP32)


@pytest.mark.parametrize("lengths", [(9, 30), (50, 70, 11), (130, 170)])
def test_a_packed_row_keeps_its_sequences_apart_in_every_window(lengths):
    """Packed (sequence numbers in the mask, positions restarting): each sequence's states are
    those it has alone, in global layers and in local windows, near a neighbour's edge too."""
    model = _shaken(build("encoder", _config()))
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(4, 211, (n,), generator=g) for n in lengths]
    T = sum(lengths) + 5   # some padding at the end
    ids = torch.zeros(1, T, dtype=torch.long)
    mask = torch.zeros(1, T, dtype=torch.long)
    positions = torch.zeros(1, T, dtype=torch.long)
    start = 0
    for number, seq in enumerate(seqs, 1):
        ids[0, start:start + len(seq)] = seq
        mask[0, start:start + len(seq)] = number
        positions[0, start:start + len(seq)] = torch.arange(len(seq))
        start += len(seq)
    with torch.no_grad():
        packed = model(ids, None, mask, position_ids=positions)["last_hidden_state"][0]
        start = 0
        for seq in seqs:
            alone = model(seq[None])["last_hidden_state"][0]
            torch.testing.assert_close(packed[start:start + len(seq)], alone, **TINY_FP32)
            start += len(seq)
    assert torch.isfinite(packed).all()   # padding rows too (they see themselves)


def test_bert_ids_and_weights_do_not_move():
    """`--architecture bert` (the default) is left out of the id: a BERT run keeps the id
    it had before architectures existed."""
    from bertctl import settings as settings_mod
    from bertctl.stages.settings.declared import PretrainSettings

    default = settings_mod.identity(PretrainSettings(steps=10).resolved())
    assert "architecture" not in default
    modern = settings_mod.identity(PretrainSettings(steps=10, architecture="modernbert"
                                                    ).resolved())
    assert modern["architecture"] == "modernbert"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("packed", [False, True])
def test_rotary_positions_are_their_definition_bit_for_bit(dtype, packed):
    """`rotate` against RoFormer's definition as transformers writes it, x * cos +
    rotate_half(x) * sin with rotate_half(x) = (-x2, x1), in fp32: the same products and sums,
    so the output and the input's gradient are equal bit for bit (no tolerance), far positions
    and bf16 inputs included. The input is a view of a fused projection, as the attention
    passes it; packed rows have positions of their own."""
    from bertctl.model.modernbert.encoder import Rotary, rotate

    gen = torch.Generator().manual_seed(0)
    T = 135
    positions = (torch.randint(0, 8192, (2, T), generator=gen) if packed
                 else torch.arange(0, 8192, 61))
    cos, sin = Rotary(64, 160_000.0)(positions)
    qkv = torch.randn(2, T, 3, 4, 64, generator=gen).to(dtype)
    grad = torch.randn(2, 4, T, 64, generator=gen).to(dtype)

    def definition(t):
        t32 = t.float()
        turned = torch.cat((-t32[..., 32:], t32[..., :32]), dim=-1)
        return (t32 * cos + turned * sin).to(dtype)

    ours, theirs = qkv.clone().requires_grad_(), qkv.clone().requires_grad_()
    out = rotate(ours.permute(2, 0, 3, 1, 4)[0], cos, sin)
    want = definition(theirs.permute(2, 0, 3, 1, 4)[0])
    out.backward(grad)
    want.backward(grad)
    assert torch.equal(out, want) and torch.equal(ours.grad, theirs.grad)
    with torch.no_grad():   # evaluation and export take the same arithmetic without autograd
        assert torch.equal(rotate(qkv.permute(2, 0, 3, 1, 4)[0], cos, sin), want)
