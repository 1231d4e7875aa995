"""#52 class 7: a training step that cannot fit in memory is fitted (a smaller micro-batch, the
same batch) or refused before the first step (bertctl/train/memory.py). The memory a machine
has is set with BERTCTL_MEMORY, so each test decides the same way on every machine."""

import numpy as np
import pytest
import torch
from torch import nn

from bertctl.errors import BertctlError
from bertctl.model import BertConfig, BertForSequenceClassification
from bertctl.train import memory
from bertctl.train.loop import train
from bertctl.train.settings import LoopSettings

from test_train_loop import TINY, RepeatedTokens

GB = 2**30


def peak(fixed, per_row, rows: int) -> int:
    """A step's planned peak at `rows` (memory.micro_batch_that_fits's)."""
    return int(np.max(fixed + rows * np.asarray(per_row)))


class OneLinear(nn.Module):
    """A step whose tensors autograd documents: the layer's output (5x3) and mse_loss's
    difference and loss; in the backward, the loss's gradient, the output's, and the weight's
    and bias's gradients before they are added to the ones already there."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 3)

    def forward(self, x, y):
        return {"loss": nn.functional.mse_loss(self.linear(x), y)}


class Vectors:
    def __len__(self):
        return 16

    def batch(self, indices, epoch):
        n = len(indices)
        return {"x": torch.ones(n, 8), "y": torch.zeros(n, 3)}


def test_peak_bytes_count_each_storage_once_while_it_lives():
    with memory.PeakBytes() as live:
        a = torch.empty(1000, dtype=torch.uint8)
        view = a[10:]                       # a view: no new storage
        b = torch.empty(2000, dtype=torch.uint8)
        a.add_(1)                           # in place: no new storage
        assert (live.live, live.peak) == (3000, 3000)
        del a, view                         # freed: the peak stays
        c = torch.empty(500, dtype=torch.uint8)
        assert (live.live, live.peak) == (2500, 3000)
        del b, c
    assert live.live == 0
    before = torch.ones(10_000)
    with memory.PeakBytes() as live:
        before.mul_(2)                      # made before: not counted
    assert live.peak == 0


def test_a_step_is_measured_over_its_forward_and_backward():
    model = OneLinear()
    batch = Vectors().batch(range(5), 0)
    most = memory.step_bytes(model, batch, torch.device("cpu"), "fp32")
    # at least the forward's output and difference (5x3 floats each) and the output's
    # gradient; at most everything the step makes, each once (a few small tensors more)
    assert 3 * 15 * 4 <= most <= 16 * 15 * 4 + 2 * (8 * 3 + 3) * 4
    assert all(p.grad is None for p in model.parameters())     # the probe leaves none
    fixed, per_row, per_sequence = memory.step_envelope(model, Vectors(), torch.device("cpu"), "fp32")
    assert peak(fixed, per_row, 8) > peak(fixed, per_row, 1) and per_sequence == 1
    assert memory.state_bytes(model) == (8 * 3 + 3) * 4 * 3   # gradient + two moments


def test_a_bert_step_is_measured_per_row_from_its_longest_rows():
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY))
    data = RepeatedTokens(n=32, task="classify")
    longest = memory.probe_rows(data, 8)
    assert [len(data.seqs[i]) for i in longest] == sorted(map(len, data.seqs))[::-1][:8]
    # rows of one length: the peak of a step of 8 rows is on the two-point line
    data.seqs = [np.concatenate([s[:1], np.full(22, s[1]), s[-1:]]) for s in data.seqs]
    fixed, per_row, _ = memory.step_envelope(model, data, torch.device("cpu"), "fp32")
    eight = memory.step_bytes(model, data.batch(list(range(8)), 0), torch.device("cpu"),
                              "fp32")
    # Not exactly on it: a step's peak is where its largest transient meets the activations
    # still held, which moves a little with the rows (a 10% band; per row tens of KB here).
    assert per_row.max() > 10_000 and abs(eight - peak(fixed, per_row, 8)) <= 0.1 * eight


def test_gradient_checkpointing_is_measured_as_it_runs():
    """The probe measures the step the loop will run: with checkpointing, each layer's
    activations are recomputed in the backward pass, so a row costs less."""
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**{**TINY, "num_hidden_layers": 4}))
    data = RepeatedTokens(n=32, task="classify")
    plain = memory.step_envelope(model, data, torch.device("cpu"), "fp32")
    model.bert.gradient_checkpointing = True
    recomputed = memory.step_envelope(model, data, torch.device("cpu"), "fp32")
    assert peak(*recomputed[:2], 16) < peak(*plain[:2], 16)


@pytest.mark.parametrize("available, given, expect", [
    (100 * GB, False, 64),         # fits as asked
    (None, False, 16),             # the largest divisor that fits
    (None, True, "give --micro-batch-size 16"),
    (1 * GB, False, "even one row needs about"),
])
def test_the_micro_batch_is_the_largest_that_fits_or_a_refusal_names_the_flag(
        available, given, expect):
    state, fixed, per_row = GB, 0, GB // 16    # 1 GB of state, 64 MB a row
    # room for 16 rows' activations with the margin and the reserve, not for 32
    room = (state + int(memory.ACTIVATION_MARGIN * 16 * per_row) + memory.RESERVE_BYTES)
    got = lambda: memory.micro_batch_that_fits(64, given, state, fixed, per_row, available or room)  # noqa: E731
    if isinstance(expect, int):
        fit = got()
        assert fit.micro_batch_size == expect and fit.need_bytes <= fit.available_bytes
        return
    with pytest.raises(BertctlError, match=expect):
        got()


def test_a_loss_that_compares_rows_is_never_split_and_cached_rows_count_as_one_chunk():
    state, per_row = GB, GB // 16
    room = state + int(memory.ACTIVATION_MARGIN * 16 * per_row) + memory.RESERVE_BYTES
    with pytest.raises(BertctlError, match="--cache-negatives N"):
        memory.micro_batch_that_fits(64, False, state, 0, per_row, room, splittable=False,
                      hint="--cache-negatives N")
    # embedding 8 of 2-sequence rows at a time holds 4 rows' activations
    fit = memory.micro_batch_that_fits(64, False, state, 0, per_row, room, splittable=False,
                        live_rows=lambda r: min(r, 8 / 2))
    assert fit.micro_batch_size == 64


def test_sizes_and_the_machine():
    assert memory.parse_size("8GB") == 8 * GB and memory.parse_size("512M") == 512 * 2**20
    assert memory.parse_size("1000") == 1000
    for bad in ("lots", "-1G", "0"):
        with pytest.raises(BertctlError, match="BERTCTL_MEMORY"):
            memory.parse_size(bad)
    assert 0 < memory.available_bytes(torch.device("cpu"))


def _classifier():
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(**TINY, hidden_dropout_prob=0.0,
                                                    attention_probs_dropout_prob=0.0))


def test_a_step_too_large_is_trained_in_micro_batches_with_the_same_result(tmp_path,
                                                                             monkeypatch):
    data = RepeatedTokens(n=64, task="classify")
    base = dict(steps=3, batch_size=16, lr=1e-3, warmup=0, log_every=1, seed=1)
    model = _classifier()
    fixed, per_row, _ = memory.step_envelope(model, data, torch.device("cpu"), "fp32")
    state = memory.state_bytes(model)
    # memory for 4 rows a micro-batch, not 8
    room = state + int(memory.ACTIVATION_MARGIN * peak(fixed, per_row, 4)) + memory.RESERVE_BYTES
    monkeypatch.setenv(memory.MEMORY_ENV, str(room))
    notes = []
    fitted = train(_classifier(), data, LoopSettings(**base), tmp_path / "fitted",
                   on_log=lambda r: notes.append(r.get("text")))
    assert fitted.memory_fit["micro_batch_size"] == 4 and fitted.memory_fit["asked"] == 16
    assert fitted.fits()["memory_fit"] == fitted.memory_fit
    assert any(n and "micro-batches of 4 accumulate to the same batch" in n for n in notes)
    monkeypatch.delenv(memory.MEMORY_ENV)
    chosen = train(_classifier(), data, LoopSettings(**base, micro_batch_size=4),
                   tmp_path / "chosen")
    assert "memory_fit" not in chosen.fits()
    for name, p in chosen.model.state_dict().items():   # the same computation, step by step
        assert torch.equal(fitted.model.state_dict()[name], p), name
    whole = train(_classifier(), data, LoopSettings(**base), tmp_path / "whole")
    losses = [[r["loss"] for r in res.history] for res in (fitted, whole)]
    # the same updates: a batch's mean loss over 4 micro-batches or one (fp32, 16 rows)
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)


def test_a_micro_batch_the_user_chose_is_refused_before_anything_is_written(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv(memory.MEMORY_ENV, "1MB")
    with pytest.raises(BertctlError, match=r"memory: a training step at micro-batch 8 needs "
                       r"about .* GB and this machine has 0.0 GB available"):
        train(_classifier(), RepeatedTokens(n=32, task="classify"),
              LoopSettings(steps=2, batch_size=8, micro_batch_size=8), tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_the_cli_refuses_in_one_line_and_leaves_nothing(cli, tiny_pretrained, tmp_path,
                                                        monkeypatch):
    monkeypatch.setenv(memory.MEMORY_ENV, "1MB")
    out = tmp_path / "model"
    r = cli("finetune", tiny_pretrained, "examples/glue/SST-2", "--task", "glue/sst2",
            "--steps", "2", "--out", out)
    # (after the line saying what loading the model found)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and r.stderr.strip().endswith(errors[0])
    assert "memory: a training step at micro-batch 32" in errors[0]
    assert "even one row needs about" in errors[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []


class Contrastive(OneLinear):
    """A loss over the whole batch (as in-batch negatives), embedded `cache_negatives` rows
    at a time when set."""
    compares_rows = "--cache-negatives N"

    def __init__(self, cache_negatives=0):
        super().__init__()
        self.cache_negatives = cache_negatives
        self.seen = []

    def forward(self, x, y):
        self.seen.append(self.cache_negatives)
        return super().forward(x, y)


def test_an_embedding_model_is_refused_with_its_own_flag_and_its_chunks_are_planned(
        monkeypatch):
    from bertctl.tasks.retrieval.contrastive import ContrastiveLoss

    assert "--cache-negatives" in ContrastiveLoss.compares_rows
    settings = LoopSettings(steps=1, batch_size=16)
    model = Contrastive()
    state = memory.state_bytes(model)
    fixed, per_row, _ = memory.step_envelope(model, Vectors(), torch.device("cpu"), "fp32")
    # room for a step of 4 rows beside the state and the reserve
    room = state + int(memory.ACTIVATION_MARGIN * peak(fixed, per_row, 4)) + memory.RESERVE_BYTES
    monkeypatch.setenv(memory.MEMORY_ENV, str(room))
    with pytest.raises(BertctlError, match="at micro-batch 16 .*: --cache-negatives N$"):
        memory.fit_to_memory(model, Vectors(), settings, settings.batch_size,
                             torch.device("cpu"), 1)
    cached = Contrastive(cache_negatives=4)
    fit = memory.fit_to_memory(cached, Vectors(), settings, settings.batch_size,
                               torch.device("cpu"), 1)
    # the batch stays whole; the probe ran unchunked and the setting is back
    assert fit.micro_batch_size == 16 and cached.seen == [0, 0] and cached.cache_negatives == 4


def test_lambs_temporaries_are_planned():
    """LAMB's step holds a denominator and an update the size of the weights (optim.Lamb);
    AdamW's fused kernel holds none."""
    model = torch.nn.Linear(8, 3)
    weights = (8 * 3 + 3) * 4
    assert memory.state_bytes(model, "adamw") == weights * 3
    assert memory.state_bytes(model, "lamb") == weights * 5


def test_a_gpus_free_memory_is_read_after_the_cache_is_returned(monkeypatch):
    """The caching allocator's unused blocks are free to this run: they are returned before
    the free memory is read, and a share of the card is left to its fragmentation."""
    calls = []
    monkeypatch.delenv(memory.MEMORY_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))

    def info(device):
        calls.append("info")
        return 30 * 2**30, 80 * 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", info)
    got = memory.available_bytes(torch.device("cuda", 0))
    assert calls == ["empty", "info"]
    assert got == 30 * 2**30 - int(memory.CUDA_FRAGMENTATION * 80 * 2**30)
