"""ModernBERT's own (what every architecture shares is in test_parity.py): a packed row keeps
its sequences apart in global layers and in every local window, near a neighbour's edge too;
rotary positions are their definition bit for bit; a BERT run's id does not move."""

import pytest
import torch

from bertctl.model import build
from bertctl.model.modernbert import ModernBertConfig
from parity import shaken
from tolerance import TINY_FP32  # (each tolerance's reason)

transformers = pytest.importorskip("transformers")

def _config(**overrides) -> ModernBertConfig:
    # local_attention 32 (half window 16): 16 tokens fit in one window, 40 take the full
    # local mask, 300 the blocked path; 4 layers: global, local, local, global.
    values = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                  num_attention_heads=4, local_attention=32, max_position_embeddings=512,
                  pad_token_id=0, cls_token_id=2, sep_token_id=3)
    return ModernBertConfig(**{**values, **overrides})


@pytest.mark.parametrize("lengths", [(9, 30), (50, 70, 11), (130, 170)])
def test_a_packed_row_keeps_its_sequences_apart_in_every_window(lengths):
    """Packed (sequence numbers in the mask, positions restarting): each sequence's states are
    those it has alone, in global layers and in local windows, near a neighbour's edge too."""
    model = shaken(build("encoder", _config()))
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
    from bertctl.stages.settings.pretrain import PretrainSettings

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
    from bertctl.model.modernbert.modeling import Rotary, rotate

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
