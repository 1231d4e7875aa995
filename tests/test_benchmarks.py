"""Every benchmark still starts (#54: nothing tested them, so a rename in bertctl broke one
silently): each script's `--help` runs and prints its usage."""

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

SCRIPTS = sorted(p for p in (ROOT / "benchmarks").rglob("*.py")
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



# A main() each of these scripts still holds over 120 lines: to split; each must still need it.
LONG_MAINS = {"bench_build_pretrain_data.py", "bench_finetune.py", "bench_budget.py",
              "bench_search.py"}


@pytest.mark.parametrize("script", sorted((ROOT / "benchmarks").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT / "benchmarks")))
def test_every_benchmark_file_stays_readable(script):
    """#104: the size guard bertctl's modules have (tests/test_architecture.py), on the
    benchmarks too: at most 600 lines a file, 120 a function."""
    import ast

    text = script.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 600, f"{script.name} has {len(text.splitlines())} lines"
    long = {node.name for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 120}
    assert long == ({"main"} if script.name in LONG_MAINS else set()), (script.name, long)

def test_the_shared_helpers_are_written_once():
    """#54: `default_model` was written 7 times, the command runner 4: benchmarks/tools/common.py
    holds them, and no script defines them again."""
    shared = ("default_model", "minilm", "sh", "env", "cpu_slot", "machine")
    for script in SCRIPTS:
        again = [n for n in shared
                 if f"\ndef {n}(" in script.read_text(encoding="utf-8")]
        assert not again, f"{script.name} defines {again} (use benchmarks/tools/common.py)"


def test_bench_budget_takes_fine_tuning_rates_per_task(tmp_path, monkeypatch):
    """#55: one command fine-tunes CoNLL at its rate and SST-2 at several; a mistyped rate
    fails at once, before the hour of pretraining it would otherwise follow."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from studies.budget import bench_budget

    ap = argparse.ArgumentParser()
    tasks = ["SST-2", "CoNLL"]
    assert bench_budget.task_rates(None, tasks, ap) == {"SST-2": [1e-4], "CoNLL": [1e-3]}
    assert bench_budget.task_rates(["2e-4", "5e-4"], tasks, ap) == {
        "SST-2": [2e-4, 5e-4], "CoNLL": [2e-4, 5e-4]}
    assert bench_budget.task_rates(["2e-4", "CoNLL=1e-3", "SST-2=1e-4,3e-4"], tasks, ap) == {
        "SST-2": [1e-4, 3e-4], "CoNLL": [1e-3]}
    for bad, says in (("SST-2=x", "not a learning rate"), ("SST2=1e-4", "no task 'SST2'")):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "studies" / "budget" / "bench_budget.py"),
                            "--work", str(tmp_path / "w"), "--ft-lrs", bad],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 2 and says in r.stderr, r.stderr
        assert not (tmp_path / "w").exists()


def test_bench_budget_compares_rows_at_the_rates_both_ran(monkeypatch):
    """#55: a row fine-tuned at three rates against a peer run at one is compared at that one;
    each side takes its best of the rates both ran."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from studies.budget import bench_budget

    mine = {"glue_by_lr": {"1e-4": {"SST-2": [0.60, 0.62]}, "5e-4": {"SST-2": [0.80, 0.82]}}}
    peer = {"glue_by_lr": {"1e-4": {"SST-2": [0.70, 0.72]}}}
    assert bench_budget._at_shared_rates(mine, peer, "SST-2") == ([0.60, 0.62], [0.70, 0.72])
    peer["glue_by_lr"]["5e-4"] = {"SST-2": [0.66, 0.68]}
    assert bench_budget._at_shared_rates(mine, peer, "SST-2") == ([0.80, 0.82], [0.70, 0.72])
    assert bench_budget._at_shared_rates(mine, {"glue": {"SST-2": [0.5, 0.5]}}, "SST-2") == (
        [0.60, 0.62], [0.5, 0.5])   # a row from before --ft-lrs ran at 1e-4 alone
    assert bench_budget._at_shared_rates(mine, peer, "CoNLL") == ([], [])


def test_bench_budget_judges_a_lead_over_pretraining_runs(tmp_path, monkeypatch):
    """#55: one pretraining run moves fine-tuning by more than its seeds' standard error, so
    rows run more than once (NAME-seedN) are compared with the peer's runs together: each run's
    mean, then the mean over runs, the standard error the larger of the runs' spread and the
    seeds' (the variance of a mean over R runs of S seeds each)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from studies.budget import bench_budget

    assert [bench_budget.run_of(n) for n in ("m", "m-seed1", "m-seed12", "m-seedx", "seed1")] == [
        "m", "m", "m", "m-seedx", "seed1"]
    mine = [{"glue_by_lr": {"1e-3": {"CoNLL": [60.0, 62.0]}, "2e-3": {"CoNLL": [63.0, 65.0]}}},
            {"glue_by_lr": {"1e-3": {"CoNLL": [58.0, 58.0]}, "2e-3": {"CoNLL": [60.0, 61.0]}}}]
    peer = [{"glue_by_lr": {"1e-3": {"CoNLL": [55.0, 57.0]}, "2e-3": {"CoNLL": [50.0, 50.0]},
                            "5e-4": {"CoNLL": [70.0, 70.0]}}},   # a rate one side alone ran
            {"glue_by_lr": {"1e-3": {"CoNLL": [59.0, 59.0]}, "2e-3": {"CoNLL": [50.0, 52.0]}}}]
    # Mine at 2e-3 (run means 64, 60.5), the peer at 1e-3 (56, 59); 5e-4 is not shared. The
    # runs' spread is the larger on both sides: mine 6.125/2 against the seeds' (2/2 + 0.5/2)/4,
    # the peer's 4.5/2 against (2/2 + 0/2)/4.
    d = (64 + 60.5) / 2 - (56 + 59) / 2
    se = math.sqrt(statistics.variance([64, 60.5]) / 2 + statistics.variance([56, 59]) / 2)
    assert bench_budget._runs_difference(mine, peer, "CoNLL") == (
        f"{d:+.4f} (se {se:.4f}, {d / se:+.1f} se)")
    # Two runs that agree: the seeds' spread is the floor.
    same = [{"glue_by_lr": {"1e-3": {"CoNLL": [60.0, 64.0]}}}] * 2
    flat = [{"glue_by_lr": {"1e-3": {"CoNLL": [50.0, 50.0]}}}] * 2
    assert bench_budget._runs_difference(same, flat, "CoNLL") == (
        f"{12:+.4f} (se {math.sqrt((8 / 2 + 8 / 2) / 4):.4f}, {12 / math.sqrt(2):+.1f} se)")
    assert bench_budget._runs_difference(same, flat, "SST-2") == "–"
    # The table groups the runs by name.
    for name, rec in (("hf-modern", peer[0]), ("hf-modern-seed1", peer[1]), ("modern", mine[0]),
                      ("modern-seed1", mine[1])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "row.json").write_text(json.dumps(
            {"steps": 1, "tokens": 1, "heldout_mlm_loss": 4.0, **rec,
             "glue": {"CoNLL": rec["glue_by_lr"]["1e-3"]["CoNLL"]}, "ft_lr": {"CoNLL": "1e-3"}}))
    out = bench_budget.table(tmp_path, "hf-modern")   # columns: the tasks fine-tuned on
    assert "| pretraining | steps | tokens seen | held-out MLM loss | CoNLL dev (f1) |" in out
    assert f"| modern (2) | {d:+.4f}" in out, out


def test_bench_budget_keeps_a_further_pretraining_run_apart(tmp_path):
    """A kept row is reused as it is: --pretrain-seed 1 on a row pretrained with seed 0 would
    report the seed-0 run as the second one. It is refused before any work is done."""
    (tmp_path / "modern").mkdir()
    (tmp_path / "modern" / "row.json").write_text(json.dumps({"pretrain_seed": 0}))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "studies" / "budget" / "bench_budget.py"),
                        "--work", str(tmp_path), "--data", str(tmp_path / "none"), "--rows",
                        "modern", "--name", "modern", "--pretrain-seed", "1"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "pretrained with seed 0, not 1" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["modern"]


def test_a_measured_run_costs_its_own_process(tmp_path, monkeypatch):
    """common.measured: a child's own CPU time and peak memory, not the sum over every earlier
    child as RUSAGE_CHILDREN would give, nor the peak of the process that runs it (which a child
    forked from it starts with: this test failed so inside a pytest worker holding 1.2 GB); a
    failure stops the benchmark naming the log."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from tools import common

    log = tmp_path / "log.txt"
    held = bytearray(600 * 2**20)   # this process's own peak (a benchmark holding torch, data)
    held[::4096] = b"1" * len(held[::4096])
    big = common.measured([sys.executable, "-c", "x = bytearray(400 * 2**20); x[::4096] = "
                           "b'1' * len(x[::4096])"], log)
    small = common.measured([sys.executable, "-c", "pass"], log)
    assert big["code"] == small["code"] == 0
    # Neither the first child's peak nor this process's is the second's.
    assert big["peak_mb"] >= 400 > 100 > small["peak_mb"]
    del held
    busy = common.measured([sys.executable, "-c", "import time\nt = time.process_time()\n"
                            "while time.process_time() - t < 0.5: pass"], log)
    assert 0.5 <= busy["cpu_s"] <= busy["wall_s"] + 0.1
    with pytest.raises(SystemExit, match="see .*log.txt"):
        common.measured([sys.executable, "-c", "raise SystemExit(3)"], log)


def test_the_machine_line_names_the_cpu_and_the_threads(monkeypatch):
    """Every figure is written next to its machine: the CPU's model and which bf16 matmuls it
    has (as /proc/cpuinfo lists them), the threads the runs use."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from tools import common

    line = common.machine(1)
    assert ", 1 thread, CPU capability " in line
    assert line.startswith(common.cpu() + ", torch ")
    info = Path("/proc/cpuinfo")
    if info.exists():
        text = info.read_text()
        name = next(x.split(":", 1)[1].strip() for x in text.splitlines()
                    if x.startswith("model name"))
        assert common.cpu().startswith(name + " (")
        assert common.cpu().endswith("(AMX)") == (" amx_bf16" in text)


def test_the_outside_matmul_share_replays_the_steps_own_matmuls(monkeypatch):
    """#86: what a step spends outside matmuls is its time less its matmuls replayed alone, so
    the replay must see each matmul the step calls, with its operands' shapes: a linear's
    addmm, `@` as mm or bmm, an attention's baddbmm; nothing else."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import torch

    from speed import bench_pretrain_step

    linear = torch.nn.Linear(8, 4)
    x, a, b = torch.randn(3, 8), torch.randn(2, 5, 6), torch.randn(2, 6, 7)

    def step():
        linear(x).relu().sum()
        x @ torch.randn(8, 2)
        a @ b
        a @ b
        torch.baddbmm(torch.zeros(2, 5, 7), a, b)
        (x * 2).softmax(-1)

    assert bench_pretrain_step.matmul_calls(step) == {
        ((3, 8), (8, 4)): 1, ((3, 8), (8, 2)): 1, ((2, 5, 6), (2, 6, 7)): 3}
    assert bench_pretrain_step.matmul_seconds(step, torch.float32, repeats=1) > 0


def test_bench_search_sums_a_stage_of_several_processes(tmp_path, monkeypatch, capsys):
    """A stage's cost per seed sums its processes' times and keeps their largest memory; a
    stage run again replaces the earlier figure, and one that found its artifact up to date
    costs nothing; the table's CPU ratio is the peer's over bertctl's, over the stages both
    ran."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from studies.search import bench_search

    monkeypatch.setattr(bench_search, "_COSTED", set())
    out, log = tmp_path / "artifact", tmp_path / "log.txt"
    write = [sys.executable, "-c", f"import pathlib; p = pathlib.Path({str(out)!r}); "
             "p.mkdir(exist_ok=True); (p / 'artifact.json').write_text('{}')"]
    assert bench_search.made(write, out, log, 1)["code"] == 0     # written: its cost
    assert bench_search.made([sys.executable, "-c", "pass"], out, log, 1) is None  # up to date
    nothing: dict = {}
    bench_search._cost(nothing, "mine", 0, None)
    assert nothing == {}
    results = {"costs": {"distill": {"0": {"wall_s": 99, "cpu_s": 99, "peak_mb": 9}}}}
    for cost in ({"wall_s": 10, "cpu_s": 15, "peak_mb": 700},
                 {"wall_s": 20, "cpu_s": 35, "peak_mb": 500}):
        bench_search._cost(results, "distill", 0, cost)
    bench_search._cost(results, "st-distill", 0, {"wall_s": 60, "cpu_s": 100, "peak_mb": 900})
    assert results["costs"]["distill"]["0"] == {"wall_s": 30, "cpu_s": 50, "peak_mb": 700}
    bench_search.costs_table(results["costs"])
    table = capsys.readouterr().out
    assert "| distill | 30, 50, 700 | 60, 100, 900 | 2.00x |" in table
    assert "| the stages both ran | CPU 50 s | 100 s | 2.00x |" in table


@pytest.mark.slow
def test_the_gpu_check_runs_end_to_end_on_a_cpu(tmp_path):
    """#86, #105: bench_gpu.py is written on the code paths the CPU runs, so `--device cpu
    --quick` runs all of it (the step tables of BERT and ModernBERT against transformers, the
    real pretrain loop with its steps watched, the fine-tuning steps of SST-2 and SQuAD): it
    is not broken when a GPU comes. The loop's steps wait for nothing."""
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed" / "bench_gpu.py"), "--device",
                        "cpu", "--quick", "--precision", "fp32", "--summary-json", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT / "benchmarks",
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                            "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = json.loads(out.read_text())
    steps = [x for x in rows if "vs transformers" in x["compared"] and "pretrain" in x["compared"]]
    assert len(steps) == 3 and all(x["ours"] > 0 and x["reference"] > 0 for x in steps)
    assert {x["compared"].split(": pretrain ")[1].split()[0] for x in steps} == {
        "bert", "modernbert"}
    (looped,) = [x for x in rows if "pretrain loop" in x["compared"]]
    assert looped["ours"] > 0 and looped["note"].startswith("0.00 host syncs per step")
    tuned = {x["compared"].split("finetune ")[1].split()[0]: x for x in rows
             if "finetune" in x["compared"]}
    assert set(tuned) == {"SST-2", "SQuAD"}
    assert all(x["ours"] > 0 and x["reference"] > 0 for x in tuned.values())


def test_the_gpu_checks_anchor_is_nvidias_at_each_length():
    """NVIDIA's BERT-Large pretraining on one A100 80 GB with AMP: 580 sequences/s at 128
    tokens, 210 at 512 (DeepLearningExamples), not 580 at 512."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from speed import bench_gpu

    assert bench_gpu.ANCHOR == {128: 580, 512: 210}
    assert bench_gpu.PEAK_BF16["H100"] == 989.0 and bench_gpu.PEAK_BF16["A100"] == 312.0
