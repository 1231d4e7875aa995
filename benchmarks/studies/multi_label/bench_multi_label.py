"""Multi-label fine-tuning against a plain transformers loop, over paired seeds.

    python benchmarks/studies/multi_label/bench_multi_label.py --rows 3000 --seeds 0,1,2 \
        --epochs 2 --parallel 2 --json-out results/entity_types.json

The task: CoNLL-2003's sentences and the entity types each names (entity_types.py), a
sample of `--rows` training sentences (seed 0, the same file for every run), the whole dev
(valid.txt) and test files. Both sides fine-tune the real all-MiniLM-L6-v2 checkpoint with
the same seeds, lr, batch size, epochs, warm-up (10%, then linear decay), weight decay 0.01
(not on biases and LayerNorm), gradient clipping 1.0, max length and fp32:

- `bertctl`: `bertctl finetune --family multi_label` (the real CLI, its default batching),
  then `bertctl eval` on the test file: the thresholds it tuned on dev;
- `plain`: a hand-written loop (benchmarks/reference/loop.py) over transformers'
  `AutoModelForSequenceClassification(problem_type="multi_label_classification")`, padded
  random batches; its thresholds tuned on dev by the same rule (each label's best dev F1).

Printed per variant: test micro-F1 at 0.5 and at the tuned thresholds, macro-F1 and subset
accuracy at the tuned ones, mean ± sd over seeds, and bertctl minus plain with the standard
error of the paired difference.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from reference import loop  # noqa: E402
from tools import common  # noqa: E402
from studies.multi_label.entity_types import convert  # noqa: E402

CONLL = common.ROOT.parent / "shared" / "data" / "conll2003"
TASK = ["--family", "multi_label", "--text-column", "text", "--label-column", "labels"]


def make_data(rows: int, work: Path) -> Path:
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    for conll, name in (("train.txt", "all-train.tsv"), ("valid.txt", "dev.tsv"),
                        ("test.txt", "test.tsv")):
        convert(CONLL / conll, data / name)
    head, *lines = (data / "all-train.tsv").read_text(encoding="utf-8").splitlines(True)
    random.Random(0).shuffle(lines)
    (data / "train.tsv").write_text(head + "".join(lines[:rows]), encoding="utf-8")
    return data


def read(path: Path, label_list=None):
    from bertctl.tasks import get, make_task_spec

    spec = make_task_spec(family="multi_label", text_columns=["text"], label_column="labels")
    return get("multi_label").read(spec, path, label_list=label_list, require_labels=True)


def scores(probabilities, labels, thresholds):
    from bertctl.metrics import multi_label_scores

    return multi_label_scores(probabilities >= thresholds, labels)


def run_plain(a, data: Path) -> dict:
    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from bertctl.tasks.multi_label import best_thresholds

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    train = read(data / "train.tsv")
    dev, test = (read(data / f, train.label_list) for f in ("dev.tsv", "test.tsv"))
    tok = AutoTokenizer.from_pretrained(a.model)
    enc = {name: tok(ex.text_a, truncation=True, max_length=a.max_seq_length)
           for name, ex in (("train", train), ("dev", dev), ("test", test))}

    def batch(split, idx):
        rows = [{k: enc[split][k][i] for k in ("input_ids", "token_type_ids", "attention_mask")}
                for i in idx]
        return tok.pad(rows, return_tensors="pt")

    torch.manual_seed(a.seed)
    model = AutoModelForSequenceClassification.from_pretrained(
        a.model, num_labels=len(train.label_list), problem_type="multi_label_classification")
    labels = torch.from_numpy(train.labels)
    total = int(round(math.ceil(len(train) / a.batch_size) * a.epochs))
    seconds = loop.fit(model, len(train), a.batch_size, total, a.lr, a.seed,
                       lambda idx: model(**batch("train", idx), labels=labels[idx]).loss)
    model.eval()

    def probabilities(split, n):
        with torch.inference_mode():
            return np.concatenate([torch.sigmoid(model(**batch(split, idx.tolist())).logits)
                                   .numpy() for idx in torch.arange(n).split(64)])

    p_dev, p_test = probabilities("dev", len(dev)), probabilities("test", len(test))
    tuned = best_thresholds(p_dev, dev.labels)
    return {"at_half": scores(p_test, test.labels, 0.5), "tuned": scores(p_test, test.labels, tuned),
            "train_seconds": seconds, "steps": total}


def run_bertctl(a, data: Path) -> dict:
    out = Path(a.work) / f"bertctl-{a.seed}-{os.getpid()}"
    common_flags = ["--json", "--force"]
    cmd = [sys.executable, "-m", "bertctl", "finetune", a.model, data / "train.tsv", "--dev",
           data / "dev.tsv", *TASK, "--out", out / "model", "--seed", a.seed, "--epochs",
           a.epochs, "--batch-size", a.batch_size, "--lr", a.lr, "--max-seq-length",
           a.max_seq_length, "--precision", "fp32", "--keep", "last", "--eval-every",
           "100000000", *common_flags]
    results = {}
    for name, extra in (("tuned", []), ("at_half", ["--threshold", "0.5"])):
        if name == "tuned":
            subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True)
        proc = subprocess.run([str(c) for c in (sys.executable, "-m", "bertctl", "eval",
                                                out / "model", data / "test.tsv", "--out",
                                                out / f"eval-{name}", *extra, *common_flags)],
                              check=True, capture_output=True, text=True)
        metrics = json.loads(proc.stdout)["metrics"]
        results[name] = {k: v for k, v in metrics.items() if isinstance(v, float)}
    return results


def summary(values):
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def table(results: list[dict]) -> str:
    lines = ["| variant | test micro-F1 at 0.5 | test micro-F1, tuned | macro-F1, tuned | "
             "subset accuracy, tuned |", "|---|---|---|---|---|"]
    by = {v: sorted((r for r in results if r["variant"] == v), key=lambda r: r["seed"])
          for v in ("bertctl", "plain")}
    for variant, runs in by.items():
        cells = []
        for where, key in (("at_half", "micro_f1"), ("tuned", "micro_f1"),
                           ("tuned", "macro_f1"), ("tuned", "subset_accuracy")):
            m, sd = summary([r[where][key] for r in runs])
            cells.append(f"{m:.4f} ± {sd:.4f}")
        lines.append(f"| {variant} ({len(runs)} seeds) | " + " | ".join(cells) + " |")
    diffs = [b["tuned"]["micro_f1"] - p["tuned"]["micro_f1"]
             for b, p in zip(by["bertctl"], by["plain"])]
    m, sd = summary(diffs)
    se = sd / math.sqrt(len(diffs)) if diffs else 0.0
    lines.append(f"\nbertctl - plain, tuned test micro-F1, paired: {m:+.4f} ± {se:.4f} (SE)")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=float, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2 (registry package)")
    p.add_argument("--json-out", type=Path)
    p.add_argument("--run-one", choices=("bertctl", "plain"), help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    a = p.parse_args()
    a.model = str(a.model or common.default_model())
    if a.run_one:
        fn = run_bertctl if a.run_one == "bertctl" else run_plain
        print(json.dumps(fn(a, a.data)))
        return
    work = Path(tempfile.mkdtemp(prefix="bench-multi-label-"))
    data = make_data(a.rows, work)
    jobs = [(v, int(s)) for s in a.seeds.split(",") for v in ("bertctl", "plain")]

    def run(job):
        variant, seed = job
        args = [sys.executable, __file__, "--run-one", variant, "--seed", seed, "--data", data,
                "--work", work, "--model", a.model, "--epochs", a.epochs, "--batch-size",
                a.batch_size, "--lr", a.lr, "--max-seq-length", a.max_seq_length, "--threads",
                a.threads]
        proc = subprocess.run([str(x) for x in args], capture_output=True, text=True,
                              env=common.env(a.threads))
        if proc.returncode:
            raise SystemExit(f"{variant} seed {seed} failed:\n{proc.stderr[-3000:]}")
        return {"variant": variant, "seed": seed, **json.loads(proc.stdout.splitlines()[-1])}

    with ThreadPoolExecutor(a.parallel) as pool:
        results = list(pool.map(run, jobs))
    print(common.machine(a.threads))
    print(f"{a.rows} training sentences, {a.epochs} epochs, batch {a.batch_size}, lr {a.lr}")
    print(table(results))
    if a.json_out:
        a.json_out.parent.mkdir(parents=True, exist_ok=True)
        a.json_out.write_text(json.dumps({"machine": common.machine(a.threads),
                                          "settings": {k: str(v) for k, v in vars(a).items()},
                                          "results": results}, indent=1))


if __name__ == "__main__":
    main()
