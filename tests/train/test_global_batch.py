"""Every loss is the global batch's (#105): under torchrun (2 CPU processes, gloo) and with
micro-batches, the loss and the weights after a step equal one process's on the whole global
batch in one pass, for a mean over tokens (pretraining's masked LM with next-sentence
prediction, and a tagger's, whose micro-batches hold different numbers of them) and for
in-batch negatives (retrieval, with and without cached
negatives), whose negatives are every rank's documents.

Run as a script (`python -m torch.distributed.run ... tests/train/test_global_batch.py OUT CASE`),
this file is the worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

TESTS = Path(__file__).resolve().parents[1]   # tests/: its shared modules, run under torchrun too
sys.path.insert(0, str(TESTS))

from helpers import tiny_embedder  # noqa: E402
from test_train_loop import RepeatedTokens, records, tiny_pretraining  # noqa: E402

from bertctl.model import BertConfig, build  # noqa: E402
from bertctl.tasks.retrieval.contrastive import ContrastiveLoss  # noqa: E402
from bertctl.tasks.retrieval.loss import LOSSES  # noqa: E402
from bertctl.train import distributed as dist  # noqa: E402
from bertctl.train.loop import train  # noqa: E402
from bertctl.train.settings import LoopSettings  # noqa: E402

pytestmark = pytest.mark.slow   # processes: seconds each

BATCH = 8
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


class Pairs:
    """Synthetic (query, positive, negative) rows of different lengths, padded per batch."""

    def __init__(self, n: int = 32):
        rng = np.random.default_rng(0)
        self.rows = [[rng.integers(5, 60, size=int(rng.integers(3, 12))) for _ in range(3)]
                     for _ in range(n)]

    def __len__(self) -> int:
        return len(self.rows)

    def lengths(self) -> np.ndarray:
        return np.array([max(len(t) for t in r) for r in self.rows])

    def batch(self, indices, epoch: int) -> dict[str, torch.Tensor]:
        T = max(len(t) for i in indices for t in self.rows[i])
        ids = np.zeros((len(indices), 3, T), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, i in enumerate(indices):
            for k, text in enumerate(self.rows[i]):
                ids[r, k, :len(text)], mask[r, k, :len(text)] = text, 1
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}


class Tags:
    """Synthetic tagged rows of different lengths: labels on some tokens (IGNORE_INDEX on the
    others and on padding), so micro-batches hold different numbers of them."""

    def __init__(self, n: int = 32):
        rng = np.random.default_rng(1)
        self.rows = [rng.integers(5, 60, size=int(rng.integers(4, 16))) for _ in range(n)]
        self.tags = [np.where(rng.random(len(r)) < 0.6, rng.integers(0, 5, len(r)), -100)
                     for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def lengths(self) -> np.ndarray:
        return np.array([len(r) for r in self.rows])

    def batch(self, indices, epoch: int) -> dict[str, torch.Tensor]:
        T = max(len(self.rows[i]) for i in indices)
        ids = np.zeros((len(indices), T), dtype=np.int64)
        mask, labels = np.zeros_like(ids), np.full_like(ids, -100)
        for r, i in enumerate(indices):
            n = len(self.rows[i])
            ids[r, :n], mask[r, :n], labels[r, :n] = self.rows[i], 1, self.tags[i]
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
                "labels": torch.from_numpy(labels)}


def run(case: str, work: Path, micro: int | None):
    """(the losses of each step, the final weights) of `case` on this process's world."""
    torch.manual_seed(0)
    settings = dict(steps=3, batch_size=BATCH, micro_batch_size=micro, lr=1e-3, warmup=0.0,
                    log_every=1, checkpoint_every=None, device="cpu")
    if case == "mlm":
        model, data = tiny_pretraining(**NO_DROPOUT), RepeatedTokens(n=48)
    elif case == "tagging":
        config = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=32,
                            max_position_embeddings=32, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0)
        model, data = build("token_classification", config, num_labels=5), Tags()
    else:
        cache = 2 if case == "cached" else 0
        model = ContrastiveLoss(tiny_embedder(), LOSSES["infonce"], cache_negatives=cache)
        data = Pairs()
    result = train(model, data, LoopSettings(**settings), work)
    losses = [r["loss"] for r in records(work) if r["split"] == "train"]
    return losses, {k: v.detach().clone() for k, v in result.model.state_dict().items()}


def worker(out: str, case: str) -> None:
    torch.set_num_threads(1)
    out_dir = Path(out)
    rank = int(os.environ["RANK"])
    # (the loss of in-batch negatives takes a rank's rows: no smaller micro-batches)
    micro = 2 if case in ("mlm", "tagging") else None
    losses, weights = run(case, out_dir / "work", micro)
    if rank == 0:
        torch.save(weights, out_dir / "weights.pt")
        (out_dir / "losses.json").write_text(json.dumps(losses))
    dist.cleanup()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # (see test_train_ddp.worker: gloo's teardown)


def torchrun(out: Path, case: str) -> tuple[list[float], dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
           "--nproc_per_node", "2", str(Path(__file__).resolve()), str(out), case]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return (json.loads((out / "losses.json").read_text()),
            torch.load(out / "weights.pt", weights_only=True))


@pytest.mark.parametrize("case", ["mlm", "tagging", "infonce", "cached"])
def test_two_processes_train_as_one_process_on_the_global_batch(case, tmp_path):
    """Tolerance: the same float32 arithmetic summed in another order (over ranks and
    micro-batches): rel 1e-5 on the losses, 1e-4 on weights after three AdamW steps."""
    torch.set_num_threads(1)
    want_losses, want = run(case, tmp_path / "one", micro=None)   # one pass over the batch
    if case in ("mlm", "tagging"):   # and micro-batches in one process: the same global mean
        micro_losses, micro_weights = run(case, tmp_path / "micro", micro=2)
        assert micro_losses == pytest.approx(want_losses, rel=1e-5)
    got_losses, got = torchrun(tmp_path / "two", case)
    assert got_losses == pytest.approx(want_losses, rel=1e-5)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6, msg=name)


if __name__ == "__main__":
    worker(*sys.argv[1:])
