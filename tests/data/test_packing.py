"""Packed training batches (data.collate.pack_batch): several sequences per row, attention kept
inside each. The definition they must meet: every sequence's outputs are those it gets when
run alone, so the loss and its gradients equal the padded batch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertctl.data.collate import pack_batch, pad_to_tensor
from bertctl.model.bert.config import BertConfig
from bertctl.labels import IGNORE_INDEX
from bertctl.model import BertForSequenceClassification, BertForTokenClassification

PAD = 0


def padded_batch(lengths, seed=0, token_labels=False, num_labels=3):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(5, 200, size=n) for n in lengths]
    ids = pad_to_tensor(seqs, PAD)
    T = ids.shape[1]
    lens = torch.tensor(lengths)[:, None]
    mask = (torch.arange(T)[None] < lens).long()
    types = ((torch.arange(T)[None] >= lens // 2) & mask.bool()).long()
    if token_labels:
        labels = torch.from_numpy(rng.integers(0, num_labels, (len(lengths), T)))
        labels = labels.masked_fill(~mask.bool(), IGNORE_INDEX)
        labels[:, 0] = IGNORE_INDEX     # as [CLS] is
    else:
        labels = torch.from_numpy(rng.integers(0, num_labels, len(lengths)))
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels}


def tiny(cls, **kwargs):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    return cls(config, **kwargs).eval()


LENGTHS = [3, 17, 9, 30, 5, 5, 12, 28, 2, 21]


def test_layout_every_token_once_rows_bounded_positions_restart():
    batch = padded_batch(LENGTHS, token_labels=True)
    packed = pack_batch(batch, capacity=32, pad_id=PAD)
    seq, pos = packed["attention_mask"], packed["position_ids"]
    assert packed["input_ids"].shape[1] <= 32
    assert int((seq > 0).sum()) == sum(LENGTHS)                   # no token lost or repeated
    assert packed["input_ids"].shape[0] < len(LENGTHS)            # rows were shared
    # Each (row, sequence number) holds one whole sequence, positions 0..n-1 in order.
    found = []
    for r in range(seq.shape[0]):
        for k in seq[r].unique().tolist():
            if k == 0:
                continue
            where = (seq[r] == k).nonzero().flatten()
            assert torch.equal(where, torch.arange(where[0], where[0] + len(where)))  # contiguous
            assert torch.equal(pos[r, where], torch.arange(len(where)))
            found.append(packed["input_ids"][r, where])
    originals = [batch["input_ids"][i, :n] for i, n in enumerate(LENGTHS)]
    assert sorted(map(tuple, map(torch.Tensor.tolist, found))) == \
        sorted(map(tuple, map(torch.Tensor.tolist, originals)))
    # Labels move with their tokens; padding is ignored by the loss.
    assert int((packed["labels"] != IGNORE_INDEX).sum()) == int((batch["labels"] != IGNORE_INDEX).sum())
    assert bool((packed["labels"][seq == 0] == IGNORE_INDEX).all())
    assert bool((packed["input_ids"][seq == 0] == PAD).all())


def test_sequence_labels_follow_sequence_starts():
    batch = padded_batch(LENGTHS)
    packed = pack_batch(batch, capacity=40, pad_id=PAD)
    flat_ids = packed["input_ids"].flatten()
    width = packed["input_ids"].shape[1]
    for start, label in zip(packed["sequence_starts"].tolist(), packed["labels"].tolist()):
        r, c = divmod(start, width)
        n = int((packed["attention_mask"][r] == packed["attention_mask"][r, c]).sum())
        tokens = flat_ids[start:start + n]
        i = next(i for i, m in enumerate(LENGTHS)
                 if m == n and torch.equal(batch["input_ids"][i, :n], tokens))
        assert label == int(batch["labels"][i])
        assert int(packed["position_ids"][r, c]) == 0


def test_a_teachers_cached_outputs_move_as_the_labels_do():
    """Values a batch carries besides the features' (a distillation teacher's cached outputs):
    per token (B, T, K) with their tokens, 0 on padding; per example (B, K) with their
    sequences, in the order of sequence_starts."""
    from bertctl.distillation import TEACHER

    batch = padded_batch(LENGTHS, token_labels=True)
    per_token = batch["input_ids"].float()[..., None] * torch.tensor([1.0, -1.0])
    packed = pack_batch({**batch, TEACHER + "logits": per_token}, capacity=32, pad_id=PAD,
                        per_token={TEACHER + "logits"})
    moved = packed[TEACHER + "logits"]
    assert moved.shape == (*packed["input_ids"].shape, 2) and moved.dtype == torch.float32
    torch.testing.assert_close(moved[..., 0], packed["input_ids"].float())
    assert bool((moved[packed["attention_mask"] == 0] == 0).all())

    batch = padded_batch(LENGTHS)
    per_example = torch.stack([batch["labels"].float(), torch.arange(len(LENGTHS)).float()], 1)
    packed = pack_batch({**batch, TEACHER + "logits": per_example}, capacity=40, pad_id=PAD,
                        per_example={TEACHER + "logits"})
    torch.testing.assert_close(packed[TEACHER + "logits"][:, 0], packed["labels"].float())
    assert sorted(packed[TEACHER + "logits"][:, 1].tolist()) == list(range(len(LENGTHS)))


def test_a_sequence_longer_than_capacity_gets_its_own_row():
    packed = pack_batch(padded_batch([40, 3, 4]), capacity=16, pad_id=PAD)
    assert packed["input_ids"].shape == (2, 40)


@pytest.mark.parametrize("cls,token_labels", [(BertForSequenceClassification, False),
                                              (BertForTokenClassification, True)])
def test_packed_outputs_equal_each_sequence_run_alone(cls, token_labels):
    model = tiny(cls, num_labels=3)
    batch = padded_batch(LENGTHS, token_labels=token_labels)
    packed = pack_batch(batch, capacity=48, pad_id=PAD)
    with torch.no_grad():
        logits = model(**{k: v for k, v in packed.items() if k != "labels"})["logits"]
        alone = [model(input_ids=batch["input_ids"][i:i + 1, :n],
                       token_type_ids=batch["token_type_ids"][i:i + 1, :n])["logits"][0]
                 for i, n in enumerate(LENGTHS)]
    if token_labels:
        seq = packed["attention_mask"]
        # Each packed sequence against the run of its own tokens (found by content).
        ids = packed["input_ids"]
        for r in range(seq.shape[0]):
            for k in (k for k in seq[r].unique().tolist() if k):
                tokens = ids[r, seq[r] == k]
                i = next(i for i, n in enumerate(LENGTHS)
                         if n == len(tokens) and torch.equal(batch["input_ids"][i, :n], tokens))
                torch.testing.assert_close(logits[r, seq[r] == k], alone[i], atol=1e-5, rtol=1e-4)
    else:
        order = [next(i for i, n in enumerate(LENGTHS) if torch.equal(
                    batch["input_ids"][i, :n],
                    packed["input_ids"].flatten()[s:s + n])) for s in
                 packed["sequence_starts"].tolist()]
        torch.testing.assert_close(logits, torch.stack([alone[i] for i in order]),
                                   atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("cls,token_labels", [(BertForSequenceClassification, False),
                                              (BertForTokenClassification, True)])
def test_packed_loss_and_gradients_equal_the_padded_batch(cls, token_labels):
    model = tiny(cls, num_labels=3)
    batch = padded_batch(LENGTHS, seed=1, token_labels=token_labels)
    grads = []
    for b in (batch, pack_batch(batch, capacity=64, pad_id=PAD)):
        model.zero_grad()
        loss = model(**b)["loss"]
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()
                                      if p.grad is not None]))
    (l1, g1), (l2, g2) = grads
    torch.testing.assert_close(l1, l2, atol=1e-6, rtol=1e-5)
    assert len(g1) == len(g2)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_regression_and_frozen_linear_heads_pack_but_bilstm_does_not():
    assert tiny(BertForSequenceClassification, problem_type="regression").packs
    frozen = {"layers": [1, 2], "combine": "weighted", "head": "linear"}
    assert tiny(BertForTokenClassification, features=frozen).packs
    # A BiLSTM reads a row left to right: packed sentences would see each other.
    assert not tiny(BertForTokenClassification, features={**frozen, "head": "bilstm"}).packs


def test_frozen_features_packed_equal_alone():
    model = tiny(BertForTokenClassification, num_labels=3,
                 features={"layers": [0, 2], "combine": "concat", "head": "linear"})
    batch = padded_batch(LENGTHS, token_labels=True)
    packed = pack_batch(batch, capacity=64, pad_id=PAD)
    with torch.no_grad():
        l1 = model(**batch)["loss"]
        l2 = model(**packed)["loss"]
    torch.testing.assert_close(l1, l2, atol=1e-6, rtol=1e-5)
