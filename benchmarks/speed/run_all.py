"""Every speed and memory benchmark, one after another, and one table of their ratios.

    python benchmarks/speed/run_all.py --quick          # small inputs, ~25 minutes on 2 cores
    python benchmarks/speed/run_all.py                  # the sizes the README quotes (hours)
    python benchmarks/speed/run_all.py --only eval pretrain_step
    python benchmarks/speed/run_all.py --peak           # #86's figures: each step's MFU, ~25 minutes
    python benchmarks/speed/run_all.py --from-json benchmarks/speed/results/run_all_quick.json

Each benchmark runs in its own process with `--summary-json`, which appends one row per
comparison: what is compared, our figure, the reference's, the unit, the ratio (above 1: bertctl
is better), the target and whether it is met. Their own full output goes to
`<out>/<name>.log`; the table and the machine (CPU, AMX or not, native bf16, cores, threads)
go to stdout and to `<out>.json` / `<out>.md`. A benchmark that fails is reported as a row and
the others still run. Not a CI step: run it on a quiet machine (the figures are ratios measured
side by side, but a busy machine still skews them).

`--peak` runs what #86 judges each CPU kind by, side by side under one machine line: the
BERT pretraining step (mini and small, 32 x 128), the ModernBERT step of the same shapes, the
retrieval step (all-MiniLM-L6-v2, 32 pairs, one thread, against sentence-transformers: needs
the `bench` extra), each in fp32 and bf16 (fp32 alone where the CPU has no native bf16
matmuls), and the data path; each MFU row says the goal for the machine's kind and whether it
is met.

The quality benchmarks (bench_finetune_quality.py, bench_conll.py, bench_squad.py,
bench_feature_ablation.py) train for hours over seeds and print their own tables; they are not
run here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from speed import summary  # noqa: E402


def plan(quick: bool, threads: int, peak: bool = False,
         precisions: tuple[str, ...] = ("fp32", "bf16")) -> list[tuple[str, list[str]]]:
    """(name, script and arguments) of every benchmark, quick or full, or #86's (`peak`, its
    steps in `precisions`). An argument "{work}" is a scratch directory of the run's own,
    removed after it."""
    t = str(threads)
    if peak:
        modern = [(f"modernbert_{size}_{precision}",
                   ["bench_architectures.py", "--architecture", "modernbert", "--preset", size,
                    "--seqs", "128", "--infer", "--tokens", "4096", "--vocab", "30522",
                    "--precision", precision, "--hold-memory", "--threads", t])
                  for size in ("mini", "small") for precision in precisions]
        return [
            ("pretrain_step", ["bench_pretrain_step.py", "--presets", "mini", "small",
                               "--precisions", *precisions, "--hold-memory", "--threads", t]),
            *modern,
            ("retrieval_step", ["bench_retrieval.py", "--phases", "speed", "--out", "{work}",
                                "--speed-precisions", *precisions]),
            ("data_path", ["bench_data_path.py"]),
        ]
    if quick:
        return [
            ("tokenize", ["bench_tokenize.py", "--repeats", "1"]),
            ("build_pretrain_data", ["bench_build_pretrain_data.py", "--repeat", "1", "--runs",
                                     "1", "--dupe-factor", "2", "--only", "bertctl", "floor"]),
            ("build_scaling", ["bench_build_pretrain_data.py", "--dupe-factor", "1",
                               "--scaling", "1", "4"]),
            ("pretrain_step", ["bench_pretrain_step.py", "--presets", "mini", "--repeats", "3",
                               "--threads", t]),
            ("pretrain_step_512", ["bench_pretrain_step.py", "--presets", "mini", "--seq", "512",
                                   "--batch", "8", "--precisions", "fp32", "--repeats", "3",
                                   "--threads", t]),
            ("compile", ["bench_compile.py", "--presets", "mini", "--precisions", "fp32",
                         "--repeats", "3", "--threads", t]),
            ("finetune", ["bench_finetune.py", "--tasks", "rte", "mrpc", "sts-b", "cola",
                          "--max-train-examples", "1000", "--epochs", "1", "--threads", t]),
            ("eval", ["bench_eval.py", "--repeats", "1", "--threads", t]),
            ("embed", ["bench_embed.py", "--rows", "1000", "--repeats", "1", "--threads", t]),
            ("scaling", ["bench_scaling.py", "--presets", "mini", "--seqs", "128", "512",
                         "--finetune-batches", "16", "64", "--steps", "2", "--threads", t]),
            ("grad_checkpointing", ["bench_gradient_checkpointing.py", "--size", "mini",
                                    "--seq", "512", "--batch", "8", "--steps", "2",
                                    "--repeats", "1", "--threads", t]),
        ]
    return [
        ("tokenize", ["bench_tokenize.py"]),
        ("build_pretrain_data", ["bench_build_pretrain_data.py"]),
        ("build_scaling", ["bench_build_pretrain_data.py", "--dupe-factor", "1", "--scaling",
                           "2", "20", "200"]),   # about 5, 50 and 500 MB of books
        ("pretrain_step", ["bench_pretrain_step.py", "--threads", t]),
        ("pretrain_step_512", ["bench_pretrain_step.py", "--seq", "512", "--batch", "8",
                               "--threads", t]),
        ("pretrain_step_base", ["bench_pretrain_step.py", "--presets", "base", "--repeats",
                                "3", "--threads", t]),
        ("compile", ["bench_compile.py", "--threads", t]),
        ("finetune", ["bench_finetune.py", "--tasks", "rte", "mrpc", "sts-b", "cola",
                      "--max-train-examples", "2000", "--epochs", "1", "--threads", t]),
        ("eval", ["bench_eval.py", "--threads", t]),
        ("embed", ["bench_embed.py", "--threads", t]),
        ("scaling", ["bench_scaling.py", "--threads", t]),
        ("grad_checkpointing", ["bench_gradient_checkpointing.py", "--threads", t]),
        ("data_path", ["bench_data_path.py"]),
        ("gpu", ["bench_gpu.py"]),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small inputs (about 25 minutes)")
    p.add_argument("--peak", action="store_true",
                   help="#86's figures: each step's MFU against its CPU kind's goal")
    p.add_argument("--only", nargs="+", default=None, help="run only these benchmarks")
    p.add_argument("--threads", type=int, default=None, help="default: the usable cores")
    p.add_argument("--out", type=Path, default=None,
                   help="default: benchmarks/results/run_all[_quick|_peak]")
    p.add_argument("--from-json", type=Path, default=None,
                   help="print the table of a saved run; run nothing")
    a = p.parse_args()
    if a.from_json:
        saved = json.loads(a.from_json.read_text())
        print(saved["machine"] + "\n\n" + summary.table(saved["rows"]))
        return

    sys.path.insert(0, str(HERE.parents[1]))
    from bertctl import hardware

    threads = a.threads or hardware.usable_cpus()
    # Where bf16 matmuls are not native (an AVX2 CPU, or BERTCTL_CPU_BF16=0) #86 judges fp32
    # alone, and bf16 emulated in fp32 units would only lengthen the run.
    precisions = ("fp32", "bf16") if hardware.cpu_bf16_native() else ("fp32",)
    suite = "peak" if a.peak else "quick" if a.quick else "full"
    out = a.out or HERE / "results" / {"peak": "run_all_peak", "quick": "run_all_quick",
                                       "full": "run_all"}[suite]
    out.mkdir(parents=True, exist_ok=True)
    machine = (f"machine: {hardware.describe()}; {threads} thread(s); "
               f"{time.strftime('%Y-%m-%d')}; {suite}")
    print(machine, flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(HERE.parents[1]), os.environ.get("PYTHONPATH")])),
        "HF_HUB_OFFLINE": "1"}
    rows = []
    for name, (script, *args) in plan(a.quick, threads, a.peak, precisions):
        if a.only and name not in a.only:
            continue
        work = Path(tempfile.mkdtemp(prefix=f"{name}-"))
        args = [str(work) if x == "{work}" else x for x in args]
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            rows_file = Path(f.name)
        t0 = time.perf_counter()
        log = out / f"{name}.log"
        with open(log, "w") as logf:
            proc = subprocess.run([sys.executable, str(HERE / script), *args, "--summary-json",
                                   str(rows_file)], stdout=logf, stderr=subprocess.STDOUT,
                                  env=env)
        took = time.perf_counter() - t0
        shutil.rmtree(work, ignore_errors=True)
        got = json.loads(rows_file.read_text()) if rows_file.stat().st_size else []
        rows_file.unlink()
        if proc.returncode != 0:
            tail = log.read_text().strip().splitlines()[-1:] or ["no output"]
            got.append(summary.row(name, f"FAILED (exit {proc.returncode}): {tail[0][:80]}",
                                   None, None, ""))
        print(f"  {name}: {len(got)} row(s) in {took:.0f} s (log: {log})", flush=True)
        rows += [{**r, "run": name} for r in got]
    saved = out.parent / f"{out.name}.json"
    if a.only and saved.exists():   # update those benchmarks' rows in the saved table
        ran = {r["run"] for r in rows} | set(a.only)
        kept = [r for r in json.loads(saved.read_text())["rows"] if r.get("run") not in ran]
        rows = kept + rows
        order = [name for name, _ in plan(a.quick, threads, a.peak, precisions)]
        rows.sort(key=lambda r: order.index(r["run"]) if r.get("run") in order else len(order))
    table = summary.table(rows)
    print("\n" + table)
    saved.write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))
    (out.parent / f"{out.name}.md").write_text(machine + "\n\n" + table + "\n")


if __name__ == "__main__":
    main()
