"""A training step never waits for the device (#105).

On a GPU the host queues a step's kernels ahead of the device; any op whose result the host
needs (a read back to Python, or an op whose output's size depends on the data: nonzero,
masked_select, boolean indexing, unique) makes it wait for every queued kernel, and the device
then idles while the host queues the rest. Counted here on the CPU, where the same code runs:
every op of `Trainer.train_step` passes through a dispatch mode that records those that wait,
and the Python reads of tensors are counted beside it. The loop reads the device once per log
interval (`Trainer.read`), outside the step.
"""

from __future__ import annotations

import threading

import pytest
import torch

from helpers import EXAMPLES, FAMILY_DATA, FIXTURES, TINY_MODEL, made
from test_stage_matrix import ROBERTA_SPELLED, TINY, bpe_data  # noqa: F401 (a fixture)
from bertctl import step_scope
from bertctl.model import ARCHITECTURES
from bertctl.train import loop
from bertctl.train.waits import HostWaits, caller

READS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")


def _on_the_host(tensor) -> bool:
    """One of the loader's host tensors of the step's micro-batch (step_scope.host_twin's):
    reading it waits for nothing."""
    scope = step_scope._STEP.get()
    return scope is not None and any(tensor is t for t in scope.host.values())


@pytest.fixture
def watched(monkeypatch):
    """Every waiting op and Python read of a tensor inside the loop's steps, and the number of
    steps and of reads of the device."""
    seen = {"waits": [], "steps": 0, "reads": 0}
    inside = threading.local()

    for name in READS:
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            if getattr(inside, "step", False) and not _on_the_host(self):
                seen["waits"].append((_name, caller()))
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counting)

    step, read = loop.Trainer.train_step, loop.Trainer.read

    def watched_step(self, *args, **kwargs):
        mode = HostWaits()
        inside.step = True
        try:
            with mode:
                return step(self, *args, **kwargs)
        finally:
            inside.step = False
            seen["waits"] += mode.found
            seen["steps"] += 1

    def counted_read(self):
        seen["reads"] += bool(self.unread.steps)
        return read(self)
    monkeypatch.setattr(loop.Trainer, "train_step", watched_step)
    monkeypatch.setattr(loop.Trainer, "read", counted_read)
    return seen


STEPS = ["--steps", "4", "--batch-size", "8", "--micro-batch-size", "4", "--log-every", "2"]


def _no_waits(seen, steps=4, reads=2):
    assert seen["steps"] == steps
    assert seen["waits"] == [], sorted(set(seen["waits"]))
    assert seen["reads"] == reads   # one per log interval, none in a step


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_a_pretraining_step_waits_for_nothing_on_every_architecture(
        arch, watched, cli, tmp_path, continuous_data, bpe_data):  # noqa: F811
    data = bpe_data if arch in ROBERTA_SPELLED else continuous_data
    r = cli("pretrain", data, "--objective", "mlm", "--architecture", arch, *TINY, *STEPS,
            "--eval-batches", "1", "--out", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    _no_waits(watched)


@pytest.mark.parametrize("objective", ["bert", "electra"])
def test_a_pretraining_step_waits_for_nothing_on_every_objective(
        objective, watched, cli, tmp_path, pretrain_data, electra_data):
    data = pretrain_data if objective == "bert" else electra_data
    r = cli("pretrain", data, "--objective", objective, *TINY, *STEPS, "--eval-batches", "1",
            "--out", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    _no_waits(watched)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, continuous_data):
    return made(tmp_path_factory, "sync-bert", "pretrain", continuous_data, "--objective",
                 "mlm", *TINY_MODEL, "--steps", "1", "--batch-size", "8", "--eval-batches", "1")


@pytest.mark.parametrize("family", sorted(FAMILY_DATA))
def test_a_fine_tuning_step_waits_for_nothing_in_every_family(family, watched, cli, tmp_path,
                                                              tiny_bert):
    data, _ = FAMILY_DATA[family]
    r = cli("finetune", tiny_bert, *data, *STEPS, "--out", tmp_path / "ft")
    assert r.exit_code == 0, r.stderr
    _no_waits(watched)


RETRIEVAL = {"infonce": [EXAMPLES / "retrieval" / "train.tsv", "--task", "retrieval"],
             "symmetric": [EXAMPLES / "retrieval" / "train.tsv", "--task", "retrieval",
                           "--loss", "symmetric"],
             "cosent": [FIXTURES / "glue" / "STS-B", "--task", "glue/sts-b-cosine"]}


@pytest.mark.parametrize("loss", sorted(RETRIEVAL))
def test_a_retrieval_step_waits_for_nothing(loss, watched, cli, tmp_path, tiny_bert):
    r = cli("finetune", tiny_bert, *RETRIEVAL[loss], "--steps", "4", "--batch-size", "8",
            "--log-every", "2", "--out", tmp_path / "r")
    assert r.exit_code == 0, r.stderr
    _no_waits(watched)
