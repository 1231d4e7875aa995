"""What the architectures' parity tests against transformers share: weights moved away from
their initial values, padded batches, and the packed-row check."""

import torch

from tolerance import TINY_FP32  # (each tolerance's reason)


def shaken(model):
    """Norm weights away from 1 and biases away from 0, so a misplaced one shows."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower() or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def padded_batch(vocab: int, pad: int, T: int = 40, rows: int = 3, seed: int = 0):
    """(ids, mask): row 1 half padding, the last row three padding tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (rows, T), generator=g)
    mask = torch.ones(rows, T, dtype=torch.long)
    mask[1, T // 2:] = 0
    mask[-1, T - 3:] = 0
    ids[mask == 0] = pad
    return ids, mask


def close_where(a, b, real):
    torch.testing.assert_close(a[real], b[real], **TINY_FP32)


def check_packed_row(model, vocab: int, pad: int, lengths=(9, 30, 17)) -> None:
    """Packed (sequence numbers in the mask, positions restarting at 0): each sequence's states
    are those it has alone."""
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(4, vocab, (n,), generator=g) for n in lengths]
    T = sum(lengths) + 4
    ids = torch.full((1, T), pad, dtype=torch.long)
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
    assert torch.isfinite(packed).all()
