"""Variable-length attention (#105): where a batch's sequences are, found without asking the
device; the path's gradients; when auto takes it; and where it cannot run, one line. (Its
outputs against the masked model, for every architecture: test_parity.py.)"""

from __future__ import annotations

import pytest
import torch

from bertctl.errors import BertctlError
from bertctl.model import BertConfig, build, varlen
from bertctl.model.attention import AttentionPolicy
from bertctl.step_scope import StepTargets, step_targets
from tolerance import TINY_FP32  # (each tolerance's reason)


def test_a_padded_batchs_sequences_are_its_rows_real_tokens():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    s = varlen.Sequences.of(mask, False, 3, 4, torch.device("cpu"))
    assert s.index.tolist() == [0, 1, 2, 4, 8, 9, 10, 11]
    assert s.cu_seqlens.tolist() == [0, 3, 4, 8] and s.cu_seqlens.dtype == torch.int32
    assert s.max_seqlen == 4


def test_a_packed_batchs_sequences_are_its_numbered_runs():
    mask = torch.tensor([[1, 1, 2, 2, 2, 0], [1, 2, 2, 3, 0, 0]])
    s = varlen.Sequences.of(mask, True, 2, 6, torch.device("cpu"))
    assert s.index.tolist() == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert s.cu_seqlens.tolist() == [0, 2, 5, 6, 8, 9] and s.max_seqlen == 3


def test_full_rows_without_a_mask_are_whole_sequences():
    s = varlen.Sequences.of(None, False, 2, 5, torch.device("cpu"))
    assert s.index.tolist() == list(range(10)) and s.cu_seqlens.tolist() == [0, 5, 10]


def test_in_the_training_step_the_sequences_come_from_the_hosts_copy():
    """The loop's scope holds the batch as the loader made it: the sequences are read there,
    not from the tensor on the device (here told apart by their values)."""
    device_mask = torch.tensor([[1, 1, 1, 1]])
    host_mask = torch.tensor([[1, 1, 0, 0]])
    scope = StepTargets({"attention_mask": device_mask}, {"attention_mask": host_mask})
    with step_targets(scope):
        s = varlen.Sequences.of(device_mask, False, 1, 4, torch.device("cpu"))
    assert s.cu_seqlens.tolist() == [0, 2]


def _bert(dropout: float = 0.0):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=48,
                        max_position_embeddings=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=dropout)
    return build("masked_lm", config)


def test_the_gradients_through_the_variable_length_path_are_the_masked_ones():
    """Tolerance: TINY_FP32 (the same products over the same tokens in another order)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 97, (3, 20), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 12:], mask[2, 5:] = 0, 0
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.3, ids, -100)
    labels[mask == 0] = -100
    grads = {}
    for mode in ("fused", "varlen"):
        model = _bert().train()
        model.encoder.attention_policy.configure(mode)
        model(ids, None, mask, labels=labels)["loss"].backward()
        grads[mode] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads["fused"].keys() == grads["varlen"].keys()
    for name, grad in grads["fused"].items():
        torch.testing.assert_close(grads["varlen"][name], grad, **TINY_FP32, msg=name)


def test_varlen_with_attention_dropout_is_one_line():
    model = _bert(dropout=0.1).train()
    model.encoder.attention_policy.configure("varlen")
    ids = torch.randint(5, 97, (2, 8))
    mask = torch.tensor([[1] * 8, [1] * 4 + [0] * 4])
    with pytest.raises(BertctlError, match="--attention varlen: the variable-length kernel has "
                                           "no dropout on the attention probabilities"):
        model(ids, None, mask)


def test_auto_takes_it_where_the_kernel_runs_and_records_it(monkeypatch):
    """On a GPU in bf16 (the kernel's `supported`), without attention dropout or a bias: auto
    takes it and says so in its choices; with dropout it does not."""
    monkeypatch.setattr(varlen, "supported", lambda q: True)
    policy = AttentionPolicy()
    q = torch.zeros(1, 2, 4, 8)
    assert not policy.takes_varlen(q, 0.1) and policy.choices() == {}
    assert policy.takes_varlen(q, 0.0) and policy.choices() == {"varlen": "taken"}
    assert not AttentionPolicy("fused").takes_varlen(q, 0.0)
    assert not AttentionPolicy(varlen=False).wants_sequences(torch.device("cuda"))
    assert AttentionPolicy().wants_sequences(torch.device("cuda"))
    assert not AttentionPolicy().wants_sequences(torch.device("cpu"))   # no kernel there


def test_deberta_with_varlen_is_one_line_and_writes_nothing(cli, tmp_path, continuous_data):
    r = cli("pretrain", continuous_data, "--objective", "mlm", "--architecture", "deberta-v2",
            "--model-size", "tiny", "--steps", "1", "--batch-size", "4", "--attention",
            "varlen", "--out", tmp_path / "m")
    assert r.exit_code == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "--attention varlen" in r.stderr
    assert not (tmp_path / "m").exists()
