"""Progress off a terminal: the training loop tells the display its plan (the steps, or the
budget), so every line has the total and the time left; the last line is not repeated."""

import re

from bertctl import console

from helpers import FAMILY_DATA


def test_lines_carry_the_total_and_the_time_left(monkeypatch):
    lines = []
    monkeypatch.setattr(console, "log", lines.append)
    now = [0.0]
    monkeypatch.setattr(console.time, "monotonic", lambda: now[0])
    p = console._LineProgress("fine-tuning", None, "steps", interval=0)   # starts at 0 s
    p.plan(40, None)
    now[0] = 10.0
    p.update(10, loss="0.5")      # 10 s for 10 of 40 steps: 30 s left
    now[0] = 20.0
    p.update(30)                  # done
    p._line()                     # the end: nothing new, so no line
    assert lines == ["fine-tuning: 10/40 steps (25%) in 10s, 30s left loss=0.5",
                     "fine-tuning: 40/40 steps (100%) in 20s loss=0.5"]
    lines.clear()
    b = console._LineProgress("pretraining", None, "steps", interval=0)
    b.plan(None, 600.0)
    now[0] = 140.0
    b.update(5)
    assert lines == ["pretraining: 5 steps in 120s, 8m00s of the budget left"]


def test_finetune_by_epochs_shows_its_steps_once_at_the_end(tiny_pretrained, tmp_path, cli):
    train, _ = FAMILY_DATA["single"]
    r = cli("finetune", tiny_pretrained, *train, "--epochs", "1", "--batch-size", "16",
            "--device", "cpu", "--out", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    steps = [ln for ln in r.stderr.splitlines() if ln.startswith("fine-tuning glue/sst2: ")]
    assert steps and all(re.search(r": \d+/\d+ steps \(\d+%\)", ln) for ln in steps), steps
    assert len(steps) == len(set(steps))
    assert steps[-1].split(" in ")[0].endswith("(100%)")
