"""Data-parallel training: 2 CPU processes under torchrun (gloo) against one process.

The same global batches, split into micro-batches dealt round-robin to the ranks, must give the
losses and weights of a single-process run with the same global batch (dropout off, so both
compute the same function). The DDP run is interrupted and resumed (every rank reads the
checkpoint), and an audit hook on rank 1 records any file it writes or creates in the work
directory: only rank 0 may write.

Run as a script (`python -m torch.distributed.run ... tests/train/test_train_ddp.py WORK_DIR
STOP_AFTER`) this file is the worker; data and model come from test_train_loop (synthetic).
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

pytestmark = pytest.mark.slow   # processes and real runs: seconds each


TESTS = Path(__file__).resolve().parents[1]   # tests/: its shared modules, run under torchrun too
sys.path.insert(0, str(TESTS))

from test_train_loop import RepeatedTokens, fixed_eval, records, tiny_pretraining  # noqa: E402

from bertctl.objectives.scoring import pretraining_step_metrics as pretraining_metrics  # noqa: E402
from bertctl.train.loop import train  # noqa: E402
from bertctl.train.settings import LoopSettings  # noqa: E402
from bertctl.train import checkpoint as ckpt  # noqa: E402
from bertctl.train import distributed as dist  # noqa: E402

SETTINGS = dict(steps=6, batch_size=8, micro_batch_size=2, lr=3e-3, warmup=0.2, log_every=1,
                eval_every=2, checkpoint_every=2, keep_last=None, group_by_length=True,
                device="cpu")
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def run(work_dir: Path, **overrides):
    data = RepeatedTokens(n=96)
    return train(tiny_pretraining(**NO_DROPOUT), data,
                 LoopSettings(**{**SETTINGS, **overrides}),
                 work_dir, evaluate=fixed_eval(data), select=("val_loss", "min"),
                 step_metrics=pretraining_metrics)


def _watch_writes(root: Path, log: list[str]) -> None:
    """Record every write-like file system call under `root` made by this process."""
    root_s = str(root)
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    events = {"os.mkdir", "os.rename", "os.remove", "os.rmdir", "shutil.rmtree", "os.link",
              "os.symlink", "os.truncate", "shutil.copyfile"}

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writes = (any(c in mode for c in "wax+") if isinstance(mode, str)
                      else bool((flags or 0) & write_flags))
            if writes and str(path).startswith(root_s):
                log.append(f"open {path} {mode or flags}")
        elif event in events and any(str(a).startswith(root_s) for a in args):
            log.append(f"{event} {args}")

    sys.addaudithook(hook)


def worker(work_dir: str, stop_after: str) -> None:
    torch.set_num_threads(1)
    work = Path(work_dir)
    rank = int(os.environ["RANK"])
    writes: list[str] = []
    if rank != 0:
        _watch_writes(work.resolve(), writes)
    if stop_after == "fit":   # a time budget whose batch size the ranks fit together
        result = run(work, steps=None, time_budget=3, min_steps=10 ** 6, batch_size=32)
    else:
        result = run(work, stop_after=int(stop_after) if stop_after != "none" else None)
    report = {"rank": rank, "world": int(os.environ["WORLD_SIZE"]), "step": result.step,
              "resumed_from": result.resumed_from, "best_step": result.best_step,
              "writes": writes, "history": result.history, "batch_fit": result.batch_fit}
    (work.parent / f"rank{rank}-{stop_after}.json").write_text(json.dumps(report))
    # As the stages do (train_to_artifact): a process group left to the interpreter's exit
    # tears its gloo threads down in any order, which once aborted a rank ("terminate called
    # without an active exception") after it had finished.
    dist.cleanup()
    # It did again (once in a loaded CI run, 2026-11-28), with the group destroyed: the report
    # is written, so the worker leaves without the interpreter's teardown of C++ statics.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def torchrun(work_dir: Path, stop_after: int | str | None) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
           "--nproc_per_node", "2", str(Path(__file__).resolve()), str(work_dir),
           str(stop_after if stop_after is not None else "none")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


def test_two_process_ddp_matches_one_process_and_resumes(tmp_path):
    torch.set_num_threads(1)
    single = run(tmp_path / "single")

    work = tmp_path / "ddp" / "work"
    work.parent.mkdir()
    torchrun(work, stop_after=3)    # interrupted: a checkpoint at 2 and at the stop, step 3
    torchrun(work, stop_after=None)  # resumed by both ranks from step 3

    reports = {(r, s): json.loads((work.parent / f"rank{r}-{s}.json").read_text())
               for r in (0, 1) for s in ("3", "none")}
    assert all(rep["world"] == 2 for rep in reports.values())
    assert [reports[(r, "3")]["step"] for r in (0, 1)] == [3, 3]
    assert [reports[(r, "none")]["resumed_from"] for r in (0, 1)] == [3, 3]
    assert reports[(1, "3")]["writes"] == [] and reports[(1, "none")]["writes"] == []

    # Rank 0 wrote one record per step and evaluation; every rank saw the same numbers.
    ddp_records = records(work)
    assert ddp_records == reports[(0, "none")]["history"]
    strip = [{k: v for k, v in r.items() if k not in ("tokens_per_s", "examples_per_s", "elapsed_s")}
             for r in ddp_records]
    assert strip == [{k: v for k, v in r.items() if k not in ("tokens_per_s", "examples_per_s", "elapsed_s")}
                     for r in reports[(1, "none")]["history"]]

    # ... and they match the single process: loss and metrics (counts summed over ranks).
    expected = records(tmp_path / "single")
    assert [(r["split"], r["step"]) for r in ddp_records] == [(r["split"], r["step"])
                                                              for r in expected]
    for got, want in zip(ddp_records, expected):
        for key in ("loss", "val_loss", "grad_norm", "lr"):
            if key in want:
                assert got[key] == pytest.approx(want[key], rel=1e-5), (key, got, want)
        for key in ("mlm_accuracy", "nsp_accuracy"):
            if key in want:
                assert got[key] == want[key], (key, got, want)
        if want["split"] == "train":
            assert got["examples_per_s"] > 0
    assert reports[(0, "none")]["best_step"] == single.best_step

    final = ckpt.step_dir(work, 6) / "model.safetensors"
    from safetensors.torch import load_file
    weights = load_file(str(final))
    for name, p in single.model.state_dict().items():
        torch.testing.assert_close(weights[name], p, rtol=1e-4, atol=1e-6, msg=name)
    assert [s for s, _ in ckpt.list_checkpoints(work)] == [2, 3, 4, 6]
    assert not list((work / "checkpoints").glob(".tmp-*"))
    assert np.isfinite([r["loss"] for r in ddp_records if r["split"] == "train"]).all()


def test_the_ranks_fit_one_batch_size_to_a_time_budget(tmp_path):
    work = tmp_path / "ddp" / "work"
    work.parent.mkdir(parents=True)
    torchrun(work, stop_after="fit")
    fits = [json.loads((work.parent / f"rank{r}-fit.json").read_text()) for r in (0, 1)]
    # each rank measured its own passes; both took the mean, so both chose alike
    assert fits[0]["batch_fit"] == fits[1]["batch_fit"]
    assert fits[0]["batch_fit"]["batch_size"] == 16 and fits[0]["batch_fit"]["asked"] == 32
    assert fits[1]["writes"] == []
    assert json.loads((work / "batch-fit.json").read_text()) == fits[0]["batch_fit"]


if __name__ == "__main__":
    worker(*sys.argv[1:])
