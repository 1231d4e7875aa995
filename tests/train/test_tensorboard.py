"""`--tensorboard DIR`: the event files hold the same scalars as metrics.jsonl, read back with
TensorBoard's own reader."""

import json
import sys

import numpy as np
import pytest

from helpers import TINY_MODEL

ARGS = [*TINY_MODEL, "--steps", "6", "--batch-size", "8", "--log-every", "2", "--eval-every", "3",
        "--eval-batches", "2", "--device", "cpu"]


def test_event_files_hold_the_logged_scalars(tmp_path, pretrain_data, cli):
    pytest.importorskip("tensorboardX", reason="pip install 'bertctl[tensorboard]'")
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    board = tmp_path / "tb"
    r = cli("pretrain", pretrain_data, "--out", tmp_path / "m", *ARGS, "--tensorboard", board)
    assert r.exit_code == 0, r.stderr
    assert list(board.glob("events.out.tfevents.*"))
    reader = accumulator.EventAccumulator(str(board))
    reader.Reload()
    got = {tag: [(e.step, e.value) for e in reader.Scalars(tag)]
           for tag in reader.Tags()["scalars"]}
    expected = {}
    for line in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key, value in record.items():
            if key not in ("split", "step", "epoch") and isinstance(value, (int, float)):
                expected.setdefault(f"{record['split']}/{key}", []).append(
                    (record["step"], float(np.float32(value))))  # event files hold float32
    assert {"train/loss", "train/lr", "train/mlm_accuracy", "validation/mlm_loss",
            "validation/nsp_accuracy"} <= set(expected)
    assert got == expected
    # a run-only setting: the same run without it is the same artifact
    r = cli("pretrain", pretrain_data, "--out", tmp_path / "m", *ARGS)
    assert r.exit_code == 0 and "up to date" in r.stdout


def test_missing_extra_is_one_clear_line(tmp_path, pretrain_data, cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # as if not installed
    r = cli("pretrain", pretrain_data, "--out", tmp_path / "m", *ARGS, "--tensorboard",
            tmp_path / "tb")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: --tensorboard needs the optional package tensorboardX: "
                                "pip install 'bertctl[tensorboard]'")
    assert not (tmp_path / "m").exists() and not (tmp_path / "tb").exists()
    # no work directory either (the empty lock file beside --out stays by design)
    assert not [p for p in tmp_path.glob(".m*") if not p.name.endswith(".lock")]
