"""`--time-budget`: the run ends when the budget is spent, the learning rate is laid over the
budget (warm-up and decay by elapsed share), a killed budget run resumes with the budget it had
left, and bad budgets are settings errors. The loop's clock is replaced by one that advances 10 s
per step, so the tests are exact on any machine; one CLI test runs on the real clock."""

import json

import pytest
import torch

from bertctl.errors import BertctlError
from bertctl.contract.modelcard import tokens_trained
from bertctl.objectives.scoring import pretraining_step_metrics
from bertctl.train.loop import train
from bertctl.train.settings import LoopSettings
from bertctl.train.optim import lr_at_share
from bertctl.train.settings import parse_duration

from test_train_loop import RepeatedTokens, records, tiny_pretraining


def _budget_run(work, **overrides):
    settings = LoopSettings(**{"time_budget": 100, "batch_size": 8, "lr": 1e-3, "warmup": 0.2,
                                "log_every": 1, "seed": 3, **overrides})
    return train(tiny_pretraining(), RepeatedTokens(64), settings, work,
                 step_metrics=pretraining_step_metrics)


def test_the_run_ends_at_the_budget_with_a_decayed_rate(tmp_path, ten_seconds_a_step):
    result = _budget_run(tmp_path / "run")
    assert result.step == 10 and result.elapsed == 100.0   # 10 steps of 10 s
    lrs = [r["lr"] for r in records(tmp_path / "run", "train")]
    # each step's rate is the schedule at the elapsed share before it: 0, 0.1, ..., 0.9
    assert lrs == pytest.approx([lr_at_share(k / 10, 1e-3, 0.2) for k in range(10)])
    assert max(lrs) == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-3 * 0.1 / 0.8)
    assert tokens_trained(result.history) == sum(
        r["tokens"] for r in records(tmp_path / "run", "train")) > 0


@pytest.mark.parametrize("budget", [91, 95, 99.9, 100, 100.1])
def test_the_loop_overruns_its_budget_by_less_than_one_step(tmp_path, ten_seconds_a_step, budget):
    """The bound the docs state: the loop ends after the step that reaches the budget, so it
    runs past it by less than one step (10 s here), never a step more."""
    result = _budget_run(tmp_path / "run", time_budget=budget)
    assert 0 <= result.elapsed - budget < 10
    assert result.step == -(-budget // 10)


def test_a_killed_budget_run_resumes_with_the_budget_it_had_left(tmp_path, ten_seconds_a_step):
    whole = _budget_run(tmp_path / "whole")
    first = _budget_run(tmp_path / "run", checkpoint_every=3, stop_after=7)
    assert first.stopped_early and first.step == 7 and first.elapsed == 70.0
    resumed = _budget_run(tmp_path / "run", checkpoint_every=3)
    assert resumed.resumed_from == 7
    assert resumed.step == whole.step and resumed.elapsed == whole.elapsed
    assert tokens_trained(resumed.history) == tokens_trained(whole.history)
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_the_schedule_over_a_budget():
    assert lr_at_share(0.1, 1.0, 0.2) == pytest.approx(0.5)
    assert lr_at_share(0.2, 1.0, 0.2) == pytest.approx(1.0)
    assert lr_at_share(0.6, 1.0, 0.2) == pytest.approx(0.5)
    assert lr_at_share(1.0, 1.0, 0.2) == 0.0
    assert 0 < lr_at_share(0.0, 1.0, 0.2) < 0.01   # the first step already moves


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("2h", 7200),
                                          ("1d", 86400), ("1h30m", 5400), ("45", 45)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("settings,message", [
    (dict(time_budget="30m", steps=5), "exactly one of --steps, --epochs and --time-budget"),
    (dict(time_budget="soon"), "not a duration"),
    (dict(time_budget="0s"), "greater than 0"),
    (dict(time_budget="1h", warmup=1000), "warmup is a fraction of the budget"),
])
def test_bad_budgets_are_settings_errors(settings, message):
    with pytest.raises(BertctlError, match=message):
        LoopSettings(**settings)


def test_pretrain_with_a_budget_through_the_cli(cli, pretrain_data, tmp_path):
    from helpers import TINY_MODEL

    out = tmp_path / "m"
    r = cli("pretrain", pretrain_data, *TINY_MODEL, "--time-budget", "3s", "--batch-size", "8",
            "--checkpoint-every", "5", "--eval-batches", "1", "--out", out)
    assert r.exit_code == 0, r.stderr
    manifest = json.loads((out / "artifact.json").read_text())
    stats = manifest["stats"]
    assert manifest["config"]["time_budget"] == 3.0 and stats["time_budget_s"] == 3.0
    assert stats["elapsed_s"] >= 3.0 and stats["tokens"] > 0 and stats["step"] >= 1
    last = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
            if '"train"' in line][-1]
    assert last["lr"] < 0.5 * manifest["config"]["lr"]   # decayed by the end of the budget
    # One line says where the time went, inside the budget and outside it.
    line = next(x for x in r.stderr.splitlines() if x.startswith("time budget 3s spent:"))
    assert f"{stats['step']:,} steps, {stats['tokens']:,} tokens" in line
    start_up = float(line.split("start-up ")[1].split("s,")[0])
    assert "writing" in line and 0 <= start_up < 60       # this test process is older than that


def test_a_budget_is_one_setting_however_written():
    from bertctl.stages.settings.pretrain import PretrainSettings
    from bertctl.settings import identity

    assert identity(PretrainSettings(time_budget="30m").resolved()) == identity(
        PretrainSettings(time_budget="1800").resolved()) == identity(
        PretrainSettings(time_budget=1800.0).resolved())


def test_bad_budget_flags_are_one_line_before_any_work(cli, pretrain_data, tmp_path):
    for args, message in ((["--time-budget", "30m", "--steps", "5"], "exactly one of"),
                          (["--time-budget", "tomorrow"], "not a duration")):
        r = cli("pretrain", pretrain_data, "--model-size", "tiny", *args, "--out", tmp_path / "m")
        assert r.exit_code == 2 and message in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "m").exists()
