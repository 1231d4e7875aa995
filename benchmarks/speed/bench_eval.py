"""`bertctl eval` against a plain padded transformers evaluation loop on GLUE dev sets.

    python benchmarks/speed/bench_eval.py [--tasks rte mrpc sts-b cola sst-2] [--repeats 3]
        [--precision fp32] [--threads 1] [--batch-size 64]

Both evaluate the same weights: all-MiniLM-L6-v2 with a classification (or regression) head
drawn with torch.manual_seed(0) and saved as a Hugging Face directory, once per task.

- bertctl: the real CLI, `python -m bertctl eval MODEL DEV --task glue/X`; its time is the
  manifest's `seconds` (the prediction loop: batches, forward passes, outputs; not reading,
  tokenizing or loading the model).
- plain: `BertForSequenceClassification.from_pretrained` and `BertTokenizerFast` on the same
  directory, the dev file in file order, batches of `--batch-size` padded to their longest
  row, `inference_mode`, bf16 autocast when asked; timed over the same part of the work (from
  the tokenized examples to the predicted labels or scores).

Both run in fresh processes, alternating which goes first per repeat, with the same threads;
the figure is the median ratio of examples/s (target: at least 2x). Predictions must agree:
the share of equal labels (classification) or the largest score difference (STS-B).
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
from speed import summary  # noqa: E402
from tools import common  # noqa: E402
from speed.bench_finetune import DEFAULT_GLUE, TASKS, hf_examples  # noqa: E402

TARGET = 2.0


def make_model(task: str, work: Path) -> Path:
    import shutil

    import torch
    import transformers
    from transformers import BertForSequenceClassification

    transformers.logging.set_verbosity_error()
    out = work / f"model-{task}"
    if (out / "config.json").exists():
        return out
    t, src = TASKS[task], common.default_model()
    torch.manual_seed(0)
    kw = (dict(num_labels=1, problem_type="regression") if t["labels"] is None
          else dict(num_labels=len(t["labels"]), problem_type="single_label_classification"))
    BertForSequenceClassification.from_pretrained(src, **kw).save_pretrained(out)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json"):
        shutil.copy(src / name, out / name)
    return out


def run_plain(task: str, dev: Path, model_dir: Path, a) -> dict:
    import torch
    import transformers
    from transformers import BertForSequenceClassification, BertTokenizerFast

    transformers.logging.set_verbosity_error()
    t = TASKS[task]
    tok = BertTokenizerFast.from_pretrained(model_dir)
    model = BertForSequenceClassification.from_pretrained(model_dir).eval()
    x, y, _ = hf_examples(task, dev)
    enc = tok(x, y, truncation=True, max_length=a.max_seq_length) if y else \
        tok(x, truncation=True, max_length=a.max_seq_length)
    keys = ("input_ids", "token_type_ids", "attention_mask")
    rows = [{k: enc[k][i] for k in keys} for i in range(len(x))]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16")
    preds = []
    t0 = time.perf_counter()
    with torch.inference_mode(), autocast:
        for i in range(0, len(rows), a.batch_size):
            batch = tok.pad(rows[i:i + a.batch_size], return_tensors="pt")
            logits = model(**batch).logits.float()
            preds.append(logits[:, 0] if t["labels"] is None else logits.argmax(-1))
    seconds = time.perf_counter() - t0
    preds = torch.cat(preds).tolist()
    if t["labels"] is not None:
        preds = [t["labels"][p] for p in preds]
    return {"seconds": seconds, "examples": len(rows), "predictions": preds}


def run_bertctl(task: str, dev: Path, model_dir: Path, a) -> dict:
    out = Path(a.work) / f"eval-{task}-{os.getpid()}"
    cmd = [sys.executable, "-m", "bertctl", "eval", str(model_dir), str(dev), "--task",
           TASKS[task]["preset"], "--out", str(out), "--precision", a.precision,
           "--batch-size", str(a.batch_size), "--max-seq-length", str(a.max_seq_length),
           "--json", "--force"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bertctl eval failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    stats = json.loads(proc.stdout)["stats"]
    with open(out / "predictions.tsv", encoding="utf-8") as f:
        preds = [r["prediction"] for r in csv.DictReader(f, delimiter="\t")]
    if TASKS[task]["labels"] is None:
        preds = [float(p) for p in preds]
    return {"seconds": stats["seconds"], "examples": stats["examples"], "predictions": preds}


def agreement(task: str, ours: list, plain: list) -> str:
    if TASKS[task]["labels"] is None:
        return f"max |score diff| {max(abs(p - q) for p, q in zip(ours, plain)):.2e}"
    same = sum(p == q for p, q in zip(ours, plain))
    return f"{same}/{len(plain)} labels equal"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--glue", type=Path, default=DEFAULT_GLUE)
    p.add_argument("--tasks", nargs="+", default=["rte", "mrpc", "sts-b", "cola", "sst-2"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--summary-json", type=Path, default=None,
                   help="append one row per task for run_all.py")
    p.add_argument("--run-one", choices=["plain", "bertctl"], help=argparse.SUPPRESS)
    p.add_argument("--task", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.run_one:
        import torch

        torch.set_num_threads(a.threads)
        dev = a.glue / TASKS[a.task]["dir"] / "dev.tsv"
        fn = run_plain if a.run_one == "plain" else run_bertctl
        print(json.dumps(fn(a.task, dev, a.model_dir, a)))
        return

    from bertctl import hardware

    work = a.work or Path(tempfile.mkdtemp(prefix="bench-eval-"))
    work.mkdir(parents=True, exist_ok=True)
    a.work = work
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    print(f"machine: {hardware.describe()}; {a.threads} thread(s), {a.precision}, batch "
          f"{a.batch_size}, length {a.max_seq_length}; median of {a.repeats}", flush=True)
    print(f"{'task':<7}{'examples':>9}{'bertctl ex/s':>14}{'plain ex/s':>12}{'ratio':>8}  "
          f"predictions")
    rows = []
    for task in a.tasks:
        model_dir = make_model(task, work)

        def one(which):
            cmd = [sys.executable, __file__, "--run-one", which, "--task", task, "--model-dir",
                   str(model_dir), "--glue", str(a.glue), "--precision", a.precision,
                   "--batch-size", str(a.batch_size), "--max-seq-length",
                   str(a.max_seq_length), "--threads", str(a.threads), "--work", str(work)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                raise SystemExit(f"{which} on {task} failed:\n{proc.stderr[-2000:]}")
            return json.loads(proc.stdout.strip().splitlines()[-1])

        runs = {"bertctl": [], "plain": []}
        for r in range(a.repeats):
            for which in (("bertctl", "plain") if r % 2 == 0 else ("plain", "bertctl")):
                runs[which].append(one(which))
        n = runs["plain"][0]["examples"]
        ours = statistics.median(n / x["seconds"] for x in runs["bertctl"])
        ref = statistics.median(n / x["seconds"] for x in runs["plain"])
        ratio = statistics.median(y["seconds"] / x["seconds"]
                                  for x, y in zip(runs["bertctl"], runs["plain"]))
        agree = agreement(task, runs["bertctl"][0]["predictions"], runs["plain"][0]["predictions"])
        print(f"{task:<7}{n:>9,}{ours:>14,.0f}{ref:>12,.0f}{ratio:>7.2f}x  {agree}", flush=True)
        rows.append(summary.row("eval", f"eval {task} dev ({n:,}), {a.precision}, "
                                f"{a.threads} thr", ours, ref, "examples/s", target=TARGET,
                                note=agree))
    summary.append(a.summary_json, rows)


if __name__ == "__main__":
    main()
