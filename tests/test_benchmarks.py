"""Every benchmark still starts (#54: nothing tested them, so a rename in bertctl broke one
silently): each script's `--help` runs and prints its usage."""

import argparse
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py")
                 if '__name__ == "__main__"' in p.read_text(encoding="utf-8"))


def test_there_are_benchmarks():
    assert len(SCRIPTS) > 20


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_starts(script):
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                   "HOME": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower(), r.stdout[:500]


def test_the_shared_helpers_are_written_once():
    """#54: `default_model` was written 7 times, the command runner 4: benchmarks/common.py
    holds them, and no script defines them again."""
    shared = ("default_model", "minilm", "sh", "env", "cpu_slot")
    for script in SCRIPTS:
        again = [n for n in shared
                 if f"\ndef {n}(" in script.read_text(encoding="utf-8")]
        assert not again, f"{script.name} defines {again} (use benchmarks/common.py)"


def test_bench_budget_takes_fine_tuning_rates_per_task(tmp_path, monkeypatch):
    """#55: one command fine-tunes CoNLL at its rate and SST-2 at several; a mistyped rate
    fails at once, before the hour of pretraining it would otherwise follow."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_budget

    ap = argparse.ArgumentParser()
    tasks = ["SST-2", "CoNLL"]
    assert bench_budget.task_rates(None, tasks, ap) == {"SST-2": [1e-4], "CoNLL": [1e-3]}
    assert bench_budget.task_rates(["2e-4", "5e-4"], tasks, ap) == {
        "SST-2": [2e-4, 5e-4], "CoNLL": [2e-4, 5e-4]}
    assert bench_budget.task_rates(["2e-4", "CoNLL=1e-3", "SST-2=1e-4,3e-4"], tasks, ap) == {
        "SST-2": [1e-4, 3e-4], "CoNLL": [1e-3]}
    for bad, says in (("SST-2=x", "not a learning rate"), ("SST2=1e-4", "no task 'SST2'")):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_budget.py"),
                            "--work", str(tmp_path / "w"), "--ft-lrs", bad],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 2 and says in r.stderr, r.stderr
        assert not (tmp_path / "w").exists()


def test_bench_budget_compares_rows_at_the_rates_both_ran(monkeypatch):
    """#55: a row fine-tuned at three rates against a peer run at one is compared at that one;
    each side takes its best of the rates both ran."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_budget

    mine = {"glue_by_lr": {"1e-4": {"SST-2": [0.60, 0.62]}, "5e-4": {"SST-2": [0.80, 0.82]}}}
    peer = {"glue_by_lr": {"1e-4": {"SST-2": [0.70, 0.72]}}}
    assert bench_budget._at_shared_rates(mine, peer, "SST-2") == ([0.60, 0.62], [0.70, 0.72])
    peer["glue_by_lr"]["5e-4"] = {"SST-2": [0.66, 0.68]}
    assert bench_budget._at_shared_rates(mine, peer, "SST-2") == ([0.80, 0.82], [0.70, 0.72])
    assert bench_budget._at_shared_rates(mine, {"glue": {"SST-2": [0.5, 0.5]}}, "SST-2") == (
        [0.60, 0.62], [0.5, 0.5])   # a row from before --ft-lrs ran at 1e-4 alone
    assert bench_budget._at_shared_rates(mine, peer, "CoNLL") == ([], [])
