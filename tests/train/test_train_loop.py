"""The shared training loop (bertctl.train), single process on CPU.

Most tests use `RepeatedTokens`, a small synthetic data source defined here (not real text): each
example is `[CLS] c c ... c [SEP]` for one random token c, with 15% of the c's masked per epoch,
and an NSP-style label c % 2. It is learnable in a few dozen steps by a 2-layer, 32-wide BERT,
which keeps every run to a second or two. One smoke test at the end runs the loop on a real
`PretrainingDataset` built from the text in tests/fixtures/pretrain/.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertctl.errors import BertctlError
from bertctl.model import BertConfig, BertForPreTraining, BertForSequenceClassification
from bertctl.objectives.scoring import pretraining_step_metrics as pretraining_metrics
from bertctl.train import checkpoint as ckpt
from bertctl.train.checkpoint import CorruptCheckpoint
from bertctl.train import memory
from bertctl.train.loop import TrainingDiverged, train
from bertctl.train.optim import lr_at, make_optimizer, no_decay_names, param_groups, warmup_steps
from bertctl.train.order import BatchOrder
from bertctl.train.settings import LoopSettings
from helpers import FIXTURES

TINY = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=32)
PAD, CLS, SEP, MASK = 0, 2, 3, 4
TIMING = ("tokens_per_s", "examples_per_s", "elapsed_s")


@pytest.fixture(autouse=True)
def one_thread():
    # A 32-wide model is all overhead: on a shared 2-core machine one intra-op thread is ~10x
    # faster than two, and the numbers do not depend on it.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class RepeatedTokens:
    """Synthetic data source (see the module docstring); `task` "pretrain" gives MLM + NSP
    labels, "classify" gives sequence-classification labels."""

    def __init__(self, n: int = 128, seed: int = 0, task: str = "pretrain"):
        self.task = task
        self.seqs, self.labels = [], []
        for i in range(n):
            rng = np.random.default_rng([seed, i])
            c = int(rng.integers(5, TINY["vocab_size"]))
            self.seqs.append(np.array([CLS] + [c] * int(rng.integers(6, 23)) + [SEP]))
            self.labels.append(c % 2)

    def __len__(self) -> int:
        return len(self.seqs)

    def lengths(self) -> np.ndarray:
        return np.array([len(s) for s in self.seqs])

    def batch(self, indices: np.ndarray, epoch: int) -> dict[str, torch.Tensor]:
        B, T = len(indices), max(len(self.seqs[i]) for i in indices)
        ids = np.full((B, T), PAD, dtype=np.int64)
        mask = np.zeros((B, T), dtype=np.int64)
        labels = np.full((B, T), -100, dtype=np.int64)
        for r, i in enumerate(indices):
            seq = self.seqs[i]
            ids[r, :len(seq)], mask[r, :len(seq)] = seq, 1
            if self.task == "pretrain":
                rng = np.random.default_rng([7, epoch, int(i)])  # a new mask every epoch
                pos = 1 + rng.choice(len(seq) - 2, size=max(1, (len(seq) - 2) * 15 // 100),
                                     replace=False)
                labels[r, pos], ids[r, pos] = seq[pos], MASK
        out = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
               "token_type_ids": torch.zeros(B, T, dtype=torch.long)}
        nsp = torch.tensor([self.labels[i] for i in indices])
        if self.task == "pretrain":
            return {**out, "labels": torch.from_numpy(labels), "next_sentence_label": nsp}
        return {**out, "labels": nsp}


def tiny_pretraining(seed: int = 0, **overrides) -> BertForPreTraining:
    torch.manual_seed(seed)
    return BertForPreTraining(BertConfig(**{**TINY, **overrides}))


def records(work_dir: Path, split: str | None = None) -> list[dict]:
    lines = (work_dir / "metrics.jsonl").read_text().splitlines()
    out = [json.loads(line) for line in lines]
    return [r for r in out if split is None or r["split"] == split]


def without_timing(rs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rs]


def fixed_eval(data: RepeatedTokens, n: int = 32):
    """An evaluate callback: the loss on a fixed batch (deterministic in eval mode)."""
    batch = data.batch(np.arange(n), epoch=0)

    def evaluate(model):
        return {"val_loss": float(model(**batch)["loss"])}
    return evaluate


# ---------------------------------------------------------------------------------------------
# Learning, accumulation, schedule, weight decay


def test_loss_decreases_on_a_learnable_task(tmp_path):
    settings = LoopSettings(steps=80, batch_size=16, lr=1e-2, warmup=0.1, log_every=10)
    result = train(tiny_pretraining(), RepeatedTokens(), settings, tmp_path,
                   step_metrics=pretraining_metrics)
    train_records = records(tmp_path, "train")
    assert [r["step"] for r in train_records] == list(range(10, 81, 10))
    assert result.step == 80 and result.history == train_records
    first, last = train_records[0], train_records[-1]
    assert last["loss"] < first["loss"] - 1.0, (first, last)
    assert last["mlm_accuracy"] > first["mlm_accuracy"] + 0.2
    for r in train_records:
        assert r["tokens_per_s"] > 0 and r["examples_per_s"] > 0 and r["grad_norm"] > 0
        assert 0 <= r["nsp_accuracy"] <= 1


def test_micro_batches_give_the_same_update_as_one_batch(tmp_path):
    # No dropout, so both runs compute the same function; the micro-batches are also padded to
    # their own longest example, which the attention mask must make irrelevant.
    data = RepeatedTokens(n=64, task="classify")
    finals, losses = [], []
    for micro in (None, 2):
        torch.manual_seed(0)
        model = BertForSequenceClassification(BertConfig(**TINY, hidden_dropout_prob=0.0,
                                                         attention_probs_dropout_prob=0.0))
        settings = LoopSettings(steps=3, batch_size=8, micro_batch_size=micro, lr=1e-3,
                                 warmup=0, log_every=1)
        result = train(model, data, settings, tmp_path / f"micro-{micro}")
        finals.append(result.model.state_dict())
        losses.append([r["loss"] for r in result.history])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    for name, p in finals[0].items():
        torch.testing.assert_close(finals[1][name], p, rtol=1e-5, atol=1e-6, msg=name)


def test_schedule_warms_up_then_decays_linearly_to_zero():
    assert warmup_steps(0.1, 1000) == 100 and warmup_steps(10_000, 1_000_000) == 10_000
    assert warmup_steps(0, 50) == 0
    lrs = [lr_at(t, 1.0, 4, 12) for t in range(12)]
    # the first update already moves; peak at the end of warm-up; the last is the smallest > 0
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert lrs[4:] == [1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8]
    assert lr_at(12, 1.0, 4, 12) == 0.0
    assert [lr_at(t, 2.0, 0, 4) for t in range(4)] == [2.0, 1.5, 1.0, 0.5]


def test_a_second_phase_continues_the_step_count_and_schedule(tmp_path):
    # The paper's recipe: 90% of the steps at 128 tokens, then 10% at 512 continuing the same
    # schedule. Here: 6 of 10 steps, then 4 more starting at step 6.
    data = RepeatedTokens()
    common = dict(batch_size=8, lr=1e-3, warmup=0.2, total_steps=10, log_every=1)
    one = train(tiny_pretraining(), data, LoopSettings(steps=6, **common), tmp_path / "one")
    two = train(one.model, data, LoopSettings(steps=4, start_step=6, **common), tmp_path / "two")
    logged = [(r["step"], r["lr"]) for r in one.history + two.history]
    assert logged == [(t + 1, lr_at(t, 1e-3, 2, 10)) for t in range(10)]
    assert two.step == 10 and two.history[0]["epoch"] == 0.0625  # the epoch count restarts


def test_weight_decay_skips_biases_and_layernorm_weights():
    model = tiny_pretraining()
    expected = sorted(n for n, _ in model.named_parameters()
                      if n.endswith("bias") or "LayerNorm" in n)
    assert sorted(no_decay_names(model)) == expected
    decay, rest = param_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and rest["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert "bert.embeddings.word_embeddings.weight" in decayed
    assert "bert.encoder.layer.0.attention.self.query.weight" in decayed
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))
    opt = make_optimizer(model, lr=1e-4)
    assert opt.defaults["eps"] == 1e-6 and opt.defaults["betas"] == (0.9, 0.999)


# ---------------------------------------------------------------------------------------------
# Data order


def test_batch_order_is_a_function_of_seed_and_epoch():
    lengths = RepeatedTokens(n=100).lengths()
    for grouped in (None, lengths):
        order = BatchOrder(100, 8, seed=3, lengths=grouped)
        assert order.steps_per_epoch == 12  # the incomplete last batch is dropped
        e0 = order.epoch(0)
        flat = np.concatenate(e0)
        assert len(e0) == 12 and all(len(b) == 8 for b in e0) and len(set(flat)) == 96
        again = BatchOrder(100, 8, seed=3, lengths=grouped)
        assert all((a == b).all() for a, b in zip(again.epoch(0), e0))
        assert not all((a == b).all() for a, b in zip(order.epoch(1), e0))
        epoch, batch = order.at(13)  # second batch of epoch 1
        assert epoch == 1 and (batch == order.epoch(1)[1]).all()
    # grouping by length pads less
    plain, grouped = BatchOrder(100, 8, 3, None), BatchOrder(100, 8, 3, lengths)

    def padding(o):
        return sum(int(lengths[b].max() * len(b) - lengths[b].sum()) for b in o.epoch(0))
    assert padding(grouped) < padding(plain) / 2


def test_each_epoch_trains_every_batch_of_its_order_once(tmp_path):
    # Step 1 is the first batch of epoch 0, step steps_per_epoch its last, and so on: no batch
    # skipped, none taken from the next epoch.
    class Recording(RepeatedTokens):
        seen: list = []

        def batch(self, indices, epoch):
            self.seen.append((epoch, tuple(int(i) for i in indices)))
            return super().batch(indices, epoch)

    data = Recording(n=40)
    settings = LoopSettings(epochs=2, batch_size=8, lr=1e-3, log_every=5, seed=4)
    train(tiny_pretraining(), data, settings, tmp_path)
    order = BatchOrder(40, 8, seed=4, lengths=None)
    expected = [(e, tuple(int(i) for i in b)) for e in (0, 1) for b in order.epoch(e)]
    # (first the memory plan's probe: the 2 longest rows, then the 3, train/memory.py)
    probe = [tuple(memory.probe_rows(data, 3)[:n]) for n in (2, 3)]
    assert data.seen == [(0, rows) for rows in probe] + expected


def test_epochs_evaluate_at_each_epoch_end(tmp_path):
    data = RepeatedTokens(n=40)
    settings = LoopSettings(epochs=2, batch_size=8, micro_batch_size=4, lr=1e-3, log_every=2,
                             group_by_length=True)
    result = train(tiny_pretraining(), data, settings, tmp_path, evaluate=fixed_eval(data))
    evals = records(tmp_path, "validation")
    assert [(r["step"], r["epoch"]) for r in evals] == [(5, 1.0), (10, 2.0)]
    assert [r["step"] for r in records(tmp_path, "train")] == [2, 4, 6, 8, 10]
    assert result.eval_metrics == {k: v for k, v in evals[-1].items() if k != "elapsed_s"}
    assert result.best_metrics is None and evals[-1]["elapsed_s"] >= 0


# ---------------------------------------------------------------------------------------------
# Checkpoints and exact resume


RESUME_BASE = dict(steps=12, batch_size=8, micro_batch_size=4, lr=3e-3, log_every=1,
                        checkpoint_every=4, keep_last=2, eval_every=3, group_by_length=True)


@pytest.mark.parametrize("log_every", [1, 5])  # 5: the checkpoint falls inside a log interval
def test_resume_is_bit_exact_in_fp32(tmp_path, log_every):
    RESUME = {**RESUME_BASE, "log_every": log_every}
    data = RepeatedTokens()
    evaluate = fixed_eval(data)
    select = ("val_loss", "min")
    full = train(tiny_pretraining(), data, LoopSettings(**RESUME), tmp_path / "full",
                 evaluate=evaluate, select=select, step_metrics=pretraining_metrics)
    assert not full.stopped_early and full.resumed_from is None
    # keep_last: only the newest two checkpoints remain
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / "full")] == [8, 12]

    # Interrupted at step 6 (a checkpoint is written when stopping) ...
    work = tmp_path / "interrupted"
    part = train(tiny_pretraining(), data, LoopSettings(**RESUME, stop_after=6), work,
                 evaluate=evaluate, select=select, step_metrics=pretraining_metrics)
    assert part.stopped_early and part.step == 6
    assert [s for s, _ in ckpt.list_checkpoints(work)] == [4, 6]
    # ... and, to look like a kill just before that checkpoint, remove it: metrics.jsonl now
    # holds records (steps 5, 6) past the newest checkpoint, which resuming must drop.
    ckpt.clear_best(work)  # best/ may also be newer than the checkpoint (eval at step 6)
    import shutil
    shutil.rmtree(ckpt.step_dir(work, 6))

    # A fresh model (other init) resumes from step 4 and ends exactly where `full` did.
    resumed = train(tiny_pretraining(seed=123), data, LoopSettings(**RESUME), work,
                    evaluate=evaluate, select=select, step_metrics=pretraining_metrics)
    assert resumed.resumed_from == 4 and resumed.step == 12
    assert without_timing(records(work)) == without_timing(records(tmp_path / "full"))
    assert [r["step"] for r in records(work, "train")] == (
        list(range(1, 13)) if log_every == 1 else [5, 10, 12])
    assert resumed.best_step == full.best_step and resumed.best_metrics == full.best_metrics
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)

    # A finished run re-run is a no-op returning the same result.
    again = train(tiny_pretraining(seed=5), data, LoopSettings(**RESUME), work,
                  evaluate=evaluate, select=select)
    assert again.resumed_from == 12 and again.step == 12
    assert again.eval_metrics == resumed.eval_metrics
    assert all(torch.equal(a[k], again.model.state_dict()[k]) for k in a)


def test_resume_refuses_other_data_settings(tmp_path):
    data = RepeatedTokens()
    settings = dict(steps=4, batch_size=8, lr=1e-3, checkpoint_every=2)
    train(tiny_pretraining(), data, LoopSettings(**settings, stop_after=2), tmp_path)
    with pytest.raises(BertctlError, match="batch_size differ"):
        train(tiny_pretraining(), data, LoopSettings(**{**settings, "batch_size": 4}), tmp_path)


def test_resume_refuses_another_runs_checkpoints(tmp_path):
    """#26 item 2: checkpoints copied from another run's directory (another lr) are not resumed
    as this run's; the run's own still are."""
    import shutil

    data = RepeatedTokens()
    settings = dict(steps=4, batch_size=8, lr=1e-3, checkpoint_every=2)
    other, mine = tmp_path / ".m.run-other", tmp_path / ".m.run-mine"
    train(tiny_pretraining(), data, LoopSettings(**{**settings, "lr": 5e-3}, stop_after=2), other)
    shutil.copytree(other / "checkpoints", mine / "checkpoints")
    with pytest.raises(BertctlError, match="written by another run .*'.m.run-other'"):
        train(tiny_pretraining(), data, LoopSettings(**settings), mine)
    result = train(tiny_pretraining(), data, LoopSettings(**{**settings, "lr": 5e-3}), other)
    assert result.resumed_from == 2


def _corrupt_model(path: Path) -> None:
    f = path / "model.safetensors"
    raw = bytearray(f.read_bytes())
    raw[-3] ^= 0xFF
    f.write_bytes(bytes(raw))


def _garbage_pickle_with_matching_checksums(path: Path) -> None:
    # Written damaged (or replaced along with its checksum): only reading it can tell.
    f = path / "state.pt"
    f.write_bytes(b"\x80\x04garbage that is no pickle")
    sums = json.loads((path / "checksums.json").read_text())
    sums["state.pt"] = {"sha256": ckpt._sha256(f), "size": f.stat().st_size}
    (path / "checksums.json").write_text(json.dumps(sums))


@pytest.mark.parametrize("damage, problem", [
    (_corrupt_model, "model.safetensors does not match its checksum"),
    (_garbage_pickle_with_matching_checksums, "state.pt cannot be read"),
    (lambda p: (p / "optimizer.pt").unlink(), "optimizer.pt is missing"),
    (lambda p: (p / "checksums.json").write_text("{"), "checksums.json is unreadable"),
])
def test_a_corrupted_checkpoint_is_named_and_an_earlier_one_can_be_used(tmp_path, damage,
                                                                       problem):
    data = RepeatedTokens()
    settings = dict(steps=6, batch_size=8, lr=1e-3, log_every=1, checkpoint_every=2,
                    keep_last=3)
    train(tiny_pretraining(), data, LoopSettings(**settings, stop_after=4), tmp_path)
    newest = ckpt.step_dir(tmp_path, 4)
    damage(newest)
    with pytest.raises(CorruptCheckpoint) as err:
        train(tiny_pretraining(), data, LoopSettings(**settings), tmp_path)
    message = str(err.value)
    assert str(newest) in message and problem in message
    assert "set resume_from to 2" in message and err.value.exit_code == 2

    result = train(tiny_pretraining(), data, LoopSettings(**settings, resume_from=2), tmp_path)
    assert result.resumed_from == 2 and result.step == 6
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [2, 4, 6]
    assert ckpt.verify_checkpoint(ckpt.step_dir(tmp_path, 4)) is None  # rewritten
    assert list((tmp_path / "checkpoints").glob("step-00000004.set-aside-*"))  # kept aside
    assert [r["step"] for r in records(tmp_path, "train")] == list(range(1, 7))


def test_corrupted_only_checkpoint_says_to_delete_it(tmp_path):
    data = RepeatedTokens()
    settings = dict(steps=4, batch_size=8, lr=1e-3, checkpoint_every=2)
    train(tiny_pretraining(), data, LoopSettings(**settings, stop_after=2), tmp_path)
    _corrupt_model(ckpt.step_dir(tmp_path, 2))
    with pytest.raises(CorruptCheckpoint, match="no earlier checkpoint: delete"):
        train(tiny_pretraining(), data, LoopSettings(**settings), tmp_path)


def test_checkpoint_files_load_without_pickle(tmp_path):
    train(tiny_pretraining(), RepeatedTokens(), LoopSettings(
        steps=2, batch_size=8, lr=1e-3, checkpoint_every=2), tmp_path)
    path = ckpt.step_dir(tmp_path, 2)
    for name in ("optimizer.pt", "state.pt"):
        torch.load(path / name, weights_only=True)  # raises on anything but plain data
    trainer = json.loads((path / "trainer.json").read_text())
    assert trainer["step"] == 2 and trainer["position"] == 2 and trainer["epoch"] == 0.125
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))


# ---------------------------------------------------------------------------------------------
# Divergence, precision, settings


class NaNFrom(torch.nn.Module):
    """A model whose loss turns NaN from its `start`-th forward call on."""

    def __init__(self, inner: torch.nn.Module, start: int):
        super().__init__()
        self.inner, self.start, self.calls = inner, start, 0

    def forward(self, **batch):
        out = self.inner(**batch)
        self.calls += 1
        if self.calls >= self.start:
            out["loss"] = out["loss"] * float("nan")
        return out


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    # the 7th forward call: the memory plan's two probes come before step 1
    model = NaNFrom(tiny_pretraining(), start=7)
    settings = LoopSettings(steps=10, batch_size=8, lr=1e-3, log_every=1, checkpoint_every=2)
    with pytest.raises(TrainingDiverged) as err:
        train(model, RepeatedTokens(), settings, tmp_path)
    assert err.value.exit_code == 1
    message = str(err.value)
    assert "step 5" in message and "loss is nan" in message
    assert str(ckpt.step_dir(tmp_path, 4)) in message
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [2, 4]
    assert ckpt.verify_checkpoint(ckpt.step_dir(tmp_path, 4)) is None
    assert [r["step"] for r in records(tmp_path)] == [1, 2, 3, 4]
    assert all(torch.isfinite(p).all() for p in model.parameters())  # not updated with NaN


def test_bf16_autocast_trains(tmp_path):
    dtypes = set()

    def watch(outputs, batch):
        dtypes.add(outputs["mlm_logits"].dtype)
        return pretraining_metrics(outputs, batch)

    result = train(tiny_pretraining(), RepeatedTokens(), LoopSettings(
        steps=4, batch_size=8, lr=1e-3, log_every=1, precision="bf16"), tmp_path,
        step_metrics=watch)
    assert dtypes == {torch.bfloat16}
    assert all(math.isfinite(r["loss"]) for r in result.history)
    assert all(p.dtype == torch.float32 for p in result.model.parameters())  # master weights


def test_fp16_on_cpu_is_refused(tmp_path):
    with pytest.raises(BertctlError, match="fp16 needs a CUDA GPU.*use bf16"):
        train(tiny_pretraining(), RepeatedTokens(), LoopSettings(
            steps=2, batch_size=8, precision="fp16", device="cpu"), tmp_path)


@pytest.mark.parametrize("settings, match", [
    (dict(steps=2, batch_size=8, micro_batch_size=3), "not a multiple of micro_batch_size 3"),
    (dict(steps=2, epochs=1), "exactly one of --steps, --epochs and --time-budget"),
    (dict(batch_size=8), "exactly one of --steps, --epochs and --time-budget"),
    (dict(steps=2, batch_size=1000), "larger than the training data"),
    (dict(steps=2, precision="fp8"), "train settings: setting .precision. = .fp8.: Input should be"),
    (dict(steps=4, total_steps=3), "total_steps 3 is before"),
    (dict(steps=2, resume_from="newest"), "setting .resume_from. = .newest.: String should match"),
    (dict(steps=2, lr=0), "setting .lr. = 0: Input should be greater than 0"),
    (dict(steps=2, betas=(0.9, 1.0)), "betas must be in \\[0, 1\\)"),
])
def test_bad_settings_are_user_errors(tmp_path, settings, match):
    with pytest.raises(BertctlError, match=match) as err:
        train(tiny_pretraining(), RepeatedTokens(), LoopSettings(**settings), tmp_path)
    assert err.value.exit_code == 2


def test_select_needs_a_returned_metric(tmp_path):
    with pytest.raises(BertctlError, match="evaluate returned no 'accuracy'"):
        train(tiny_pretraining(), RepeatedTokens(), LoopSettings(steps=2, batch_size=8),
              tmp_path, evaluate=lambda m: {"loss": 1.0}, select=("accuracy", "max"))


def test_select_returns_the_best_weights(tmp_path):
    # An evaluation that likes the earliest weights best: the model returned is step 2's.
    data = RepeatedTokens()
    calls = iter(range(100))
    settings = LoopSettings(steps=6, batch_size=8, lr=1e-2, eval_every=2, checkpoint_every=2,
                             keep_last=None)
    result = train(tiny_pretraining(), data, settings, tmp_path,
                   evaluate=lambda m: {"score": -next(calls)}, select=("score", "max"))
    assert result.best_step == 2 and result.best_metrics["score"] == 0
    assert result.eval_metrics["score"] == -2
    best = ckpt.step_dir(tmp_path, 2) / "model.safetensors"
    from safetensors.torch import load_file
    expected = load_file(str(best))
    assert all(torch.equal(expected[k], v) for k, v in result.model.state_dict().items())
    # every checkpoint carries the best weights as of its step (a hard link: no extra space)
    link = ckpt.step_dir(tmp_path, 6) / "best.safetensors"
    assert link.is_file() and os.stat(link).st_ino == os.stat(tmp_path / "best" /
                                                               "model.safetensors").st_ino


def test_patience_stops_when_the_dev_metric_stops_improving_and_keeps_the_best(tmp_path):
    """--patience 2: the scores 0, 3, 2, 1, ... improve at step 4 (the second evaluation),
    then not at 6 and 8: the run stops at step 8 of 20 with step 4's weights; the stop is
    recorded, and the same command rerun on its work directory stops there again."""
    scores = [0, 3, 2, 1, 0, -1, -2, -3, -4, -5]

    def run(work, stop_after=None):
        calls = iter(scores)
        settings = LoopSettings(steps=20, batch_size=8, lr=1e-2, eval_every=2,
                                 checkpoint_every=2, patience=2, stop_after=stop_after)
        notes = []
        result = train(tiny_pretraining(), RepeatedTokens(), settings, work,
                       evaluate=lambda m: {"score": next(calls)}, select=("score", "max"),
                       on_log=lambda r: notes.append(r.get("text")))
        return result, notes

    result, notes = run(tmp_path / "run")
    assert result.step == 8 and result.best_step == 4 and not result.stopped_early
    assert result.patience_stop == {"step": 8, "planned": 20, "best_step": 4}
    assert result.fits()["patience_stop"] == result.patience_stop
    assert any(n and "score has not improved for 2 evaluations: stopped at step 8 of 20" in n
               for n in notes)
    from safetensors.torch import load_file
    best = load_file(str(tmp_path / "run" / "best" / "model.safetensors"))   # step 4's
    assert all(torch.equal(best[k], v) for k, v in result.model.state_dict().items())
    # Interrupted at the stop (its checkpoint written, the artifact not yet): the rerun
    # trains no further.
    part, _ = run(tmp_path / "again", stop_after=8)
    assert part.step == 8
    again, _ = run(tmp_path / "again")
    assert again.step == 8 and again.best_step == 4 and again.resumed_from == 8
    assert all(torch.equal(best[k], v) for k, v in again.model.state_dict().items())


def test_patience_resumes_a_run_stopped_before_its_first_evaluation(tmp_path):
    settings = dict(steps=6, batch_size=8, lr=1e-2, eval_every=4, checkpoint_every=2,
                    patience=1)
    calls = iter([1.0, 0.5, 0.25])
    score = {"evaluate": lambda m: {"score": next(calls)}, "select": ("score", "max")}
    part = train(tiny_pretraining(), RepeatedTokens(), LoopSettings(**settings, stop_after=2),
                 tmp_path, **score)
    assert part.step == 2 and part.best_step is None
    done = train(tiny_pretraining(), RepeatedTokens(), LoopSettings(**settings), tmp_path,
                 **score)
    assert done.resumed_from == 2 and done.step == 6 and done.best_step == 4


def test_patience_needs_a_metric_to_select_by(tmp_path):
    with pytest.raises(BertctlError, match="--patience 2: .*give a dev set"):
        train(tiny_pretraining(), RepeatedTokens(),
              LoopSettings(steps=4, batch_size=8, patience=2), tmp_path)


# ---------------------------------------------------------------------------------------------
# Real data: a PretrainingDataset built from the fixture text


def _documents(path: Path) -> list[list[str]]:
    docs, doc = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            doc.append(line.strip())
        elif doc:
            docs.append(doc)
            doc = []
    return docs + ([doc] if doc else [])


def test_trains_on_a_real_pretraining_dataset(tmp_path, small_tokenizer):
    from bertctl.data.pretraining import build as pretraining
    from tokenizers import Tokenizer

    from bertctl.data.settings import PretrainingDataSettings
    from bertctl.data.pretraining.dataset import PretrainingDataset
    tokenizer = Tokenizer.from_file(str(small_tokenizer / "tokenizer.json"))
    docs = _documents(FIXTURES / "pretrain" / "bert_sample_text.txt")
    config = PretrainingDataSettings(max_seq_length=64, dupe_factor=1, masking="dynamic")
    pretraining.build_pretraining_data(docs, tokenizer, tmp_path / "data", config, workers=1)
    data = PretrainingDataset(tmp_path / "data", "train")
    model = tiny_pretraining(vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=64)
    settings = LoopSettings(steps=3, batch_size=4, micro_batch_size=2, lr=1e-3, log_every=1,
                             group_by_length=True, checkpoint_every=3)
    result = train(model, data, settings, tmp_path / "run", step_metrics=pretraining_metrics)
    assert [r["step"] for r in result.history] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) and 0 <= r["mlm_accuracy"] <= 1 for r in result.history)


def test_a_checkpoint_of_another_model_is_a_user_error(tmp_path):
    data = RepeatedTokens()
    settings = dict(steps=4, batch_size=8, lr=1e-3, checkpoint_every=2)
    train(tiny_pretraining(), data, LoopSettings(**settings, stop_after=2), tmp_path)
    with pytest.raises(BertctlError, match="does not fit this model"):
        train(tiny_pretraining(hidden_size=64, intermediate_size=128), data,
              LoopSettings(**settings), tmp_path)


def test_gradient_checkpointing_gives_the_same_gradients_and_training(tmp_path):
    """Recomputing each layer in the backward pass (dropout replayed from the saved RNG state)
    changes memory, not numbers: the same gradients, and a run that checkpoints and resumes
    ends bit-identical to a plain one."""
    data = RepeatedTokens()
    batch = data.batch(np.arange(8), 0)
    grads = []
    for on in (False, True):
        model = tiny_pretraining()
        model.train()
        model.bert.gradient_checkpointing = on
        torch.manual_seed(3)
        model(**batch)["loss"].backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.equal(grads[0][k], grads[1][k]) for k in grads[0])

    plain = train(tiny_pretraining(), data, LoopSettings(**RESUME_BASE), tmp_path / "plain")
    work = tmp_path / "recompute"
    train(tiny_pretraining(), data,
          LoopSettings(**RESUME_BASE, gradient_checkpointing=True, stop_after=6), work)
    resumed = train(tiny_pretraining(seed=9), data,
                    LoopSettings(**RESUME_BASE, gradient_checkpointing=True), work)
    assert resumed.resumed_from == 6
    a, b = plain.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert without_timing(records(work)) == without_timing(records(tmp_path / "plain"))


def test_lamb_trains_and_resumes_bit_exactly(tmp_path):
    data = RepeatedTokens()
    settings = {**RESUME_BASE, "optimizer": "lamb", "lr": 1e-2}
    full = train(tiny_pretraining(), data, LoopSettings(**settings), tmp_path / "full")
    losses = [r["loss"] for r in records(tmp_path / "full", "train")]
    assert losses[-1] < losses[0]
    work = tmp_path / "part"
    train(tiny_pretraining(), data, LoopSettings(**settings, stop_after=6), work)
    resumed = train(tiny_pretraining(seed=4), data, LoopSettings(**settings), work)
    assert resumed.resumed_from == 6
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                    reason="torch.compile on CPU builds its kernels with a C++ compiler")
@pytest.mark.slow
def test_compile_keeps_the_model_and_resumes_exactly(tmp_path, monkeypatch):
    """--compile (each encoder layer through torch.compile) changes speed, not the model: the
    same parameter names in checkpoints and artifacts, and without dropout the same gradients
    to rounding (with dropout the compiled kernels draw their masks from their own random
    stream: the same distribution, other masks). A compiled run that stops and resumes ends
    where an uninterrupted compiled run ends."""
    # Inductor's kernel cache is keyed without ATEN_CPU_CAPABILITY: kernels built for another
    # setting of it (a run under other kernels, docs/development.md) fail to build or run.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    data = RepeatedTokens()
    batch = data.batch(np.arange(8), 0)
    grads = []
    for compiled in (False, True):
        model = tiny_pretraining()
        model.eval()   # no dropout; autograd still on
        if compiled:
            model.bert.compile_layers()
        model(**batch)["loss"].backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], rtol=1e-4, atol=1e-6)

    straight = train(tiny_pretraining(), data, LoopSettings(**RESUME_BASE, compile=True),
                     tmp_path / "straight")
    work = tmp_path / "resumed"
    train(tiny_pretraining(), data, LoopSettings(**RESUME_BASE, compile=True, stop_after=6), work)
    resumed = train(tiny_pretraining(seed=9), data, LoopSettings(**RESUME_BASE, compile=True),
                    work)
    assert resumed.resumed_from == 6
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert a.keys() == tiny_pretraining().state_dict().keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)


class OutOfMemoryAbove(torch.nn.Module):
    """A model that runs out of memory (as a GPU does: torch.OutOfMemoryError) on batches of
    more than `rows` rows, from step 2 on (after the memory plan's probes and one step)."""

    def __init__(self, inner: torch.nn.Module, rows: int):
        super().__init__()
        self.inner, self.rows, self.calls = inner, rows, 0

    def forward(self, **batch):
        self.calls += 1
        if self.calls > 4 and batch["input_ids"].shape[0] > self.rows:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return self.inner(**batch)


def test_out_of_memory_mid_run_halves_the_micro_batch_and_keeps_the_global_batch(tmp_path):
    """The run goes on in micro-batches of half the rows and computes what a run with them from
    the start computes (no dropout; token-weighted losses: the same global means). Tolerance:
    the same fp32 sums in another order."""
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    base = dict(steps=4, batch_size=8, lr=1e-3, log_every=1, checkpoint_every=None)
    notes = []
    model = OutOfMemoryAbove(tiny_pretraining(**no_dropout), rows=2)
    result = train(model, RepeatedTokens(), LoopSettings(**base, micro_batch_size=4),
                   tmp_path / "oom", on_log=notes.append)
    steady = train(tiny_pretraining(**no_dropout), RepeatedTokens(),
                   LoopSettings(**base, micro_batch_size=2), tmp_path / "two")
    assert result.memory_fit["micro_batch_size"] == 2
    assert result.memory_fit["out_of_memory"] == [{"step": 2, "from": 4, "to": 2}]
    assert result.fits()["memory_fit"]["out_of_memory"]
    assert any("out of memory at step 2 with micro-batches of 4 rows: micro-batches of 2"
               in n.get("text", "") for n in notes)
    got = [r["loss"] for r in records(tmp_path / "oom", "train")]
    want = [r["loss"] for r in records(tmp_path / "two", "train")]
    assert got == pytest.approx(want, rel=1e-5)
    for name, p in steady.model.state_dict().items():
        torch.testing.assert_close(result.model.inner.state_dict()[name], p, rtol=1e-5,
                                   atol=1e-6)


def test_out_of_memory_with_nothing_to_halve_is_one_line(tmp_path):
    model = OutOfMemoryAbove(tiny_pretraining(), rows=0)
    with pytest.raises(BertctlError, match="out of memory at step 2 with micro-batches of 1 "
                                           "rows: give a shorter --max-seq-length"):
        train(model, RepeatedTokens(), LoopSettings(steps=3, batch_size=2, micro_batch_size=1,
                                                    lr=1e-3, checkpoint_every=None),
              tmp_path / "w")


class FakeCompile:
    """torch.compile replaced by a switch, and the trial's clock by given times: each
    encoder's layers 'compiled' or not, and the seconds at each of the trial's marks."""

    def __init__(self, monkeypatch, marks: list[float]):
        from bertctl.model.shared import EncoderBase
        from bertctl.train import compiling

        self.calls: list[bool] = []
        self.marks = iter(marks)
        monkeypatch.setattr(EncoderBase, "compile_layers",
                            lambda encoder, on=True: self.calls.append(on))
        monkeypatch.setattr(compiling.CompileChoice, "_mark",
                            lambda choice: choice.marks.append(next(self.marks)))
        monkeypatch.setattr(compiling, "compiler_missing", lambda device: None)


def test_compile_auto_leaves_a_short_run_eager(tmp_path, monkeypatch):
    fake = FakeCompile(monkeypatch, [0.0, 0.3])   # 0.1 s a step: 15 steps left repay nothing
    result = train(tiny_pretraining(), RepeatedTokens(), LoopSettings(**RESUME_BASE), tmp_path)
    assert fake.calls == []
    assert result.compile == {"mode": "auto", "eager_step_s": 0.1, "chosen": "eager",
                              "reason": "too few steps left to repay a compile"}
    assert result.fits()["compile"] == result.compile


@pytest.mark.parametrize("compiled_s, kept", [(50.0, True), (99.0, False)])
def test_compile_auto_keeps_the_faster_and_a_resumed_run_takes_its_choice(
        tmp_path, monkeypatch, compiled_s, kept):
    """Eager 100 s a step with 15 steps left: a compile that gains 10% repays a minute, so
    it is tried; kept where the compiled steps are faster, undone where they are not."""
    marks = [0.0, 300.0, 300.0 + 80 + compiled_s, 300.0 + 80 + 4 * compiled_s]
    fake = FakeCompile(monkeypatch, marks)
    work = tmp_path / "run"
    settings = {**RESUME_BASE, "checkpoint_every": 4}
    result = train(tiny_pretraining(), RepeatedTokens(), LoopSettings(**settings, stop_after=12),
                   work)
    assert fake.calls == ([True] if kept else [True, False])
    assert result.compile == {"mode": "auto", "eager_step_s": 100.0,
                              "compiled_step_s": compiled_s, "compile_s": 80.0,
                              "chosen": "compiled" if kept else "eager"}
    fake.calls.clear()
    resumed = train(tiny_pretraining(), RepeatedTokens(), LoopSettings(**settings), work)
    assert resumed.resumed_from == 12
    assert fake.calls == [kept] and resumed.compile == result.compile   # no trial again


def test_compile_on_and_off_are_as_given(tmp_path, monkeypatch):
    fake = FakeCompile(monkeypatch, [])
    on = train(tiny_pretraining(), RepeatedTokens(), LoopSettings(**RESUME_BASE, compile=True),
               tmp_path / "on")
    off = train(tiny_pretraining(), RepeatedTokens(),
                LoopSettings(**RESUME_BASE, compile=False), tmp_path / "off")
    assert fake.calls == [True]
    assert on.compile == {"mode": "on", "chosen": "compiled"}
    assert off.compile == {"mode": "off", "chosen": "eager"}


def test_compile_without_a_compiler_is_one_line(tmp_path, monkeypatch):
    from bertctl.train import compiling

    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    with pytest.raises(BertctlError, match=r"--compile: no C\+\+ compiler \(torch.compile "
                                           r"builds its CPU kernels with one\); install one"):
        train(tiny_pretraining(), RepeatedTokens(), LoopSettings(**RESUME_BASE, compile=True),
              tmp_path / "w")
    assert not (tmp_path / "w").exists()   # nothing written
