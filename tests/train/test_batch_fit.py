"""`--min-steps`: a time-budget run halves its batch size until the budget buys that many steps
on the machine at hand (bertctl/train/budget.py). The choice follows from a measured time per
example; the tests fix that measurement (and the loop's clock) so they are exact anywhere, and
one test measures for real."""

import json

import pytest
import torch

from bertctl.errors import BertctlError
from bertctl.settings import identity
from bertctl.train import budget
from bertctl.train.loop import train
from bertctl.train.settings import LoopSettings

from test_train_loop import RepeatedTokens, records, tiny_pretraining


def test_the_largest_batch_whose_steps_fit_the_budget():
    # 50 ms an example: 64 a step buys 375 steps of 1,200 s, 32 buys 750
    fit = budget.largest_batch_in_budget(64, 1, 600, 1200.0, 0.05, 1)
    assert (fit.batch_size, fit.expected_steps) == (32, 750)
    assert budget.largest_batch_in_budget(64, 1, 300, 1200.0, 0.05, 1).batch_size == 64   # already enough
    # two processes each do half of a step's examples
    assert budget.largest_batch_in_budget(64, 2, 600, 1200.0, 0.05, 2).batch_size == 64


def test_halving_stops_at_the_smallest_batch_and_at_the_micro_batch_unit():
    fit = budget.largest_batch_in_budget(64, 1, 10 ** 6, 1200.0, 0.05, 1)
    assert fit.batch_size == budget.SMALLEST_BATCH == 16 and fit.expected_steps == 1500
    assert "fewer than the 1000000 asked even at 16" in fit.message()
    assert budget.largest_batch_in_budget(96, 48, 10 ** 6, 1200.0, 0.05, 1).batch_size == 48  # micro-batch 48
    assert budget.largest_batch_in_budget(8, 1, 10 ** 6, 1200.0, 0.05, 1).batch_size == 8   # never raised


def _fitted_run(work, **overrides):
    settings = LoopSettings(**{"time_budget": 100, "batch_size": 32, "min_steps": 5, "lr": 1e-3,
                                "warmup": 0.2, "log_every": 1, "seed": 3, **overrides})
    return train(tiny_pretraining(), RepeatedTokens(64), settings, work)


def test_the_loop_trains_with_the_fitted_batch_and_a_resumed_run_keeps_it(
        tmp_path, monkeypatch, ten_seconds_a_step):
    # 1 s an example: 32 a step buys 3 steps of the 100 s, 16 buys 6 (>= min_steps 5)
    monkeypatch.setattr(budget, "seconds_per_example", lambda *a, **k: 1.0)
    whole = _fitted_run(tmp_path / "whole")
    assert whole.batch_fit == {"batch_size": 16, "asked": 32, "min_steps": 5, "budget_s": 100.0,
                               "seconds_per_example": 1.0, "expected_steps": 6}
    # 64 examples are 4 steps of 16 (2 of the 32 asked): step 1 is a quarter of an epoch
    assert records(tmp_path / "whole", "train")[0]["epoch"] == 0.25
    assert json.loads((tmp_path / "whole" / budget.FIT_FILE).read_text())["batch_size"] == 16

    first = _fitted_run(tmp_path / "run", checkpoint_every=3, stop_after=4)
    assert first.stopped_early and first.step == 4

    def measured_again(*a, **k):
        raise AssertionError("a resumed run measured again")
    monkeypatch.setattr(budget, "seconds_per_example", measured_again)
    resumed = _fitted_run(tmp_path / "run", checkpoint_every=3)
    assert resumed.resumed_from == 4 and resumed.batch_fit == whole.batch_fit
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_the_measurement_leaves_the_weights_and_gradients_alone():
    model = tiny_pretraining()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seconds = budget.seconds_per_example(model, RepeatedTokens(64), 4, torch.device("cpu"), "fp32")
    assert 0 < seconds < 10
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_min_steps_needs_a_budget_and_leaves_old_ids_alone():
    with pytest.raises(BertctlError, match="min_steps fits the batch size to a time budget"):
        LoopSettings(steps=10, min_steps=100)
    from bertctl.stages.settings.pretrain import PretrainSettings

    assert "min_steps" not in identity(PretrainSettings(time_budget="30m").resolved())
    assert identity(PretrainSettings(time_budget="30m", min_steps=600).resolved()
                    )["min_steps"] == 600


def test_pretrain_fits_its_batch_through_the_cli(cli, pretrain_data, tmp_path):
    from helpers import TINY_MODEL

    out = tmp_path / "m"
    r = cli("pretrain", pretrain_data, *TINY_MODEL, "--time-budget", "2s", "--batch-size", "32",
            "--min-steps", "1000000", "--eval-batches", "1", "--out", out)
    assert r.exit_code == 0, r.stderr
    manifest = json.loads((out / "artifact.json").read_text())
    fit = manifest["stats"]["batch_fit"]
    assert manifest["config"]["batch_size"] == 32 and manifest["config"]["min_steps"] == 1000000
    assert fit["batch_size"] == 16 and fit["asked"] == 32 and fit["seconds_per_example"] > 0
    assert "batch size 16 (asked 32)" in r.stderr + r.stdout
    assert "16 (fitted to the time budget: 32 asked" in (out / "README.md").read_text()
