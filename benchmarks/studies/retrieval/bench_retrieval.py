"""The retrieval family against sentence-transformers: quality, speed and memory, side by side.

    .venv/bin/python benchmarks/studies/retrieval/bench_retrieval.py --out runs/bench-retrieval \
        [--modern DIR] [--seeds 0 1 2 3 4] [--phases quality speed memory simcse]
        [--shared ../shared/data]

The sets (built from `--shared`, the workplace's public data; bertctl never reads it):
- quality: examples/retrieval (examples/retrieval/prepare.py: SQuAD 2.0 dev subset, 293
  training pairs of questions of two articles and their paragraphs; scored on the 232
  questions of two other articles against all 173 paragraphs, BEIR layout).
- memory: inverse-cloze pairs from WikiText-2's valid text (a paragraph's third sentence
  against the rest of its paragraph), 2,048 of them.
- simcse: 20,000 lines of WikiText-2 and the Gutenberg books (one line a text, 8 words or
  more, at most 60), 200 steps of 32 at lr 3e-5 with dropout 0.1 everywhere (SimCSE's noise:
  bertctl's --dropout, and the same rate set on sentence-transformers' model); scored on
  STS-B's 1,500 dev pairs (Spearman of cosine similarities).

Each model is fine-tuned by bertctl (`bertctl finetune MODEL PAIRS --task retrieval`) and by
sentence-transformers' own trainer (SentenceTransformerTrainer with MultipleNegativesRanking-
Loss) with the same pairs, steps, batch, learning rate, warm-up (10%, then linear decay),
weight decay (0.01), sequence length (128) and seed; both in float32 on one thread, each in a
fresh process, and both scored by `bertctl eval` (whose metrics equal trec_eval's, a test says
so). The speed rows are the training loops' own times (from the quality runs) and encoding
over the same texts; the memory rows the peak RSS of a whole `bertctl finetune` process.
Results go to OUT/results.json (every run) and the tables to stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)
from speed import summary
from speed.bench_pretrain_step import MFU_TARGETS, cpu_kind, matmul_peak

ROOT = common.ROOT
EXAMPLE = ROOT / "examples" / "retrieval"
BERTCTL = [sys.executable, "-m", "bertctl"]


class Results:
    def __init__(self, path: Path):
        self.path = path
        self.rows = json.loads(path.read_text()) if path.exists() else {}

    def get(self, key):
        return self.rows.get(key)

    def put(self, key, value):
        self.rows[key] = value
        self.path.write_text(json.dumps(self.rows, indent=1))
        return value


# ---------------------------------------------------------------------------------------------
# Runs


def bertctl_train(model: Path, pairs: Path, out: Path, a, seed: int, lr: float, steps: int,
                  log: Path, precision: str = "fp32", extra=()) -> dict:
    if not (out / "artifact.json").exists():
        common.sh([*BERTCTL, "finetune", model, pairs, "--task", "retrieval", "--steps", steps,
            "--batch-size", a.batch, "--lr", lr, "--seed", seed, "--max-seq-length", 128,
            "--precision", precision, "--threads", 1, "--log-every", steps, *extra,
            *(("--cache-negatives", a.cache) if a.cache else ()),
            "--out", out, "--force"], log)
    last = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()
            if '"train"' in x][-1]
    used = json.loads((out / "artifact.json").read_text())["config"]["precision"]
    return {"seconds": last["elapsed_s"], "examples": steps * a.batch, "precision": used,
            "tokens": last["tokens"]}


ST_TRAIN = r"""
import json, sys, time, torch
torch.set_num_threads(1)
from datasets import Dataset
from sentence_transformers import (SentenceTransformer, SentenceTransformerTrainer,
                                   SentenceTransformerTrainingArguments, losses)
model_dir, pairs, out, seed, lr, steps, batch, precision, dropout, cache = sys.argv[1:11]
rows = [l.rstrip("\n").split("\t") for l in open(pairs, encoding="utf-8")][1:]
cols = list(zip(*rows))
data = {"anchor": list(cols[0]), "positive": list(cols[1] if len(cols) > 1 else cols[0])}
model = SentenceTransformer(model_dir, device="cpu")
model.max_seq_length = 128
if dropout != "none":   # the rate everywhere, as bertctl's --dropout
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = float(dropout)
        if isinstance(getattr(m, "attention_dropout", None), float):
            m.attention_dropout = float(dropout)
args = SentenceTransformerTrainingArguments(
    output_dir=out + ".tmp", max_steps=int(steps), per_device_train_batch_size=int(batch),
    learning_rate=float(lr), warmup_ratio=0.1, weight_decay=0.01, lr_scheduler_type="linear",
    seed=int(seed), save_strategy="no", report_to="none", logging_steps=10_000, use_cpu=True,
    disable_tqdm=True, dataloader_num_workers=0, bf16=precision == "bf16")
trainer = SentenceTransformerTrainer(model=model, args=args,
                                     train_dataset=Dataset.from_dict(data),
                                     loss=losses.CachedMultipleNegativesRankingLoss(
                                         model, mini_batch_size=int(cache)) if int(cache)
                                     else losses.MultipleNegativesRankingLoss(model))
start = time.perf_counter()
trainer.train()
seconds = time.perf_counter() - start
model.save(out)
print(json.dumps({"seconds": seconds, "examples": int(steps) * int(batch)}))
"""


def st_train(model: Path, pairs: Path, out: Path, a, seed: int, lr: float, steps: int,
             log: Path, precision: str = "fp32", dropout: float | None = None) -> dict:
    done = out / "timing.json"
    if not done.exists():
        with open(log, "a", encoding="utf-8") as f:
            r = subprocess.run([sys.executable, "-c", ST_TRAIN, *map(str, (
                model, pairs, out, seed, lr, steps, a.batch, precision,
                "none" if dropout is None else dropout, a.cache))], stdout=subprocess.PIPE,
                stderr=f, env=common.env(), text=True, check=True)
        done.write_text(r.stdout.strip().splitlines()[-1])
    return json.loads(done.read_text())


def train(tool: str, model: Path, pairs: Path, out: Path, a, seed: int, lr: float, steps: int,
          log: Path, precision: str = "fp32", dropout: float | None = None) -> dict:
    """One run of `tool` ("bertctl" or "st"), the same settings on both sides."""
    if tool == "st":
        return st_train(model, pairs, out, a, seed, lr, steps, log, precision, dropout)
    return bertctl_train(model, pairs, out, a, seed, lr, steps, log, precision,
                         () if dropout is None else ("--dropout", dropout))


def evaluate(model: Path, data: Path, out: Path, log: Path, task: str = "retrieval") -> dict:
    if not (out / "metrics.json").exists():
        common.sh([*BERTCTL, "eval", model, data, "--task", task, "--precision", "fp32",
            "--max-seq-length", 128, "--threads", 1, "--out", out, "--force"], log)
    return json.loads((out / "metrics.json").read_text())


# ---------------------------------------------------------------------------------------------
# Phases


def quality(a, res: Results, name: str, model: Path, lr: float) -> None:
    work, log = a.out / name, a.out / f"{name}.log"
    work.mkdir(parents=True, exist_ok=True)
    beir, pairs = EXAMPLE / "beir", EXAMPLE / "train.tsv"
    res.put(f"{name}/original", evaluate(model, beir, work / "eval-original", log))
    # (name, tool, precision); the precision row: one model is enough to show it
    runs = [("bertctl", "bertctl", "fp32"), ("st", "st", "fp32")]
    if name == "minilm":
        runs.append(("bertctl-auto", "bertctl", "auto"))
    for seed in a.seeds:
        for run, tool, precision in runs:
            key = f"{name}/{run}/seed{seed}"
            if res.get(key):
                continue
            timing = train(tool, model, pairs, work / f"{run}-seed{seed}", a, seed, lr, a.steps,
                           log, precision)
            metrics = evaluate(work / f"{run}-seed{seed}", beir, work / f"eval-{run}-{seed}",
                               log)
            res.put(key, {**timing, **metrics})
            print(f"{key}: ndcg@10 {metrics['ndcg@10']:.4f}, {timing['examples'] / timing['seconds']:.1f} "
                  f"train examples/s", flush=True)


def mean_se(values):
    m = statistics.fmean(values)
    return m, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan"))


def quality_table(a, res: Results, names) -> None:
    print("\n| model | metric | original | bertctl (mean ± se) | sentence-transformers | "
          "bertctl − ST (se) |\n|---|---|---|---|---|---|")
    for name in names:
        orig = res.get(f"{name}/original")
        runs = {t: [res.get(f"{name}/{t}/seed{s}") for s in a.seeds] for t in ("bertctl", "st")}
        if not orig or any(r is None for v in runs.values() for r in v):
            continue
        for metric in ("ndcg@10", "mrr@10", "recall@10", "map"):
            ours = [r[metric] for r in runs["bertctl"]]
            theirs = [r[metric] for r in runs["st"]]
            diff = [x - y for x, y in zip(ours, theirs)]
            (mo, so), (mt, st), (md, sd) = mean_se(ours), mean_se(theirs), mean_se(diff)
            print(f"| {name} | {metric} | {orig[metric]:.4f} | {mo:.4f} ± {so:.4f} | "
                  f"{mt:.4f} ± {st:.4f} | {md:+.4f} ({md / sd if sd else float('nan'):+.1f} se) |")
        speed = {t: [r["examples"] / r["seconds"] for r in runs[t]] for t in runs}
        print(f"| {name} | train examples/s (1 thread, fp32, batch {a.batch}) | | "
              f"{statistics.median(speed['bertctl']):.1f} | {statistics.median(speed['st']):.1f} | "
              f"{statistics.median(speed['bertctl']) / statistics.median(speed['st']):.2f}x |")
        auto = [res.get(f"{name}/bertctl-auto/seed{s}") for s in a.seeds]
        if all(auto):
            v = [r["ndcg@10"] for r in auto]
            d = [x - r["ndcg@10"] for x, r in zip(v, runs["st"])]
            (mv, sv), (md, sd) = mean_se(v), mean_se(d)
            rate = statistics.median(r["examples"] / r["seconds"] for r in auto)
            print(f"| {name} | bertctl --precision auto ({auto[0]['precision']}): ndcg@10, "
                  f"train examples/s | | {mv:.4f} ± {sv:.4f}, {rate:.1f} | | {md:+.4f} "
                  f"({md / sd if sd else float('nan'):+.1f} se), "
                  f"{rate / statistics.median(speed['st']):.2f}x |")


ST_ENCODE = r"""
import json, sys, time, torch
torch.set_num_threads(1)
from sentence_transformers import SentenceTransformer
model_dir, texts = sys.argv[1:3]
lines = [l.rstrip("\n") for l in open(texts, encoding="utf-8")]
model = SentenceTransformer(model_dir, device="cpu")
model.max_seq_length = 128
model.encode(lines[:64], batch_size=64)
start = time.perf_counter()
model.encode(lines, batch_size=64)
print(json.dumps({"seconds": time.perf_counter() - start, "texts": len(lines)}))
"""


def speed(a, res: Results) -> None:
    """Encoding: bertctl embed against SentenceTransformer.encode on the same texts (short
    WikiText-2 lines, at most 60 words, so neither truncates nor windows)."""
    work, log = a.out / "speed", a.out / "speed.log"
    work.mkdir(parents=True, exist_ok=True)
    texts = work / "texts.txt"
    lines = [" ".join(x.split()[:60]) for x in wikitext(a, "valid")]
    texts.write_text("\n".join(lines[:4000]) + "\n", encoding="utf-8")
    model = common.default_model()
    # Training at another batch or with cached negatives is its own row; encoding runs with
    # the default one.
    tag = "" if (a.batch, a.cache) == (32, 0) else f"/b{a.batch}c{a.cache}"
    for rep in range(a.repeats if not tag else 0):
        if res.get(f"speed/encode/{rep}"):
            continue
        out = work / f"emb-{rep}"
        common.sh([*BERTCTL, "embed", model, texts, "--precision", "fp32", "--threads", 1,
            "--max-seq-length", 128, "--batch-size", 64, "--out", out, "--force"], log)
        ours = json.loads((out / "artifact.json").read_text())["stats"]
        with open(log, "a", encoding="utf-8") as f:
            r = subprocess.run([sys.executable, "-c", ST_ENCODE, str(model), str(texts)],
                               stdout=subprocess.PIPE, stderr=f, env=common.env(), text=True, check=True)
        theirs = json.loads(r.stdout.strip().splitlines()[-1])
        res.put(f"speed/encode/{rep}", {"bertctl": ours["rows"] / ours["seconds"],
                                        "st": theirs["texts"] / theirs["seconds"]})
    # Training, alone on the machine: one epoch of the example pairs per run, bertctl and
    # sentence-transformers alternating, in float32 and in bf16 (their `bf16=True`).
    pairs, steps = EXAMPLE / "train.tsv", 9
    if tag:   # 9 whole batches, one epoch for both tools: the example pairs repeated
        rows = pairs.read_text(encoding="utf-8").splitlines()
        pairs = work / f"pairs-{a.batch}.tsv"
        body = [rows[1 + i % (len(rows) - 1)] for i in range(steps * a.batch)]
        pairs.write_text("\n".join([rows[0], *body]) + "\n", encoding="utf-8")
    for rep in range(a.repeats):
        for precision in a.speed_precisions:
            for tool in ("bertctl", "st"):
                key = f"speed/train/{tool}/{precision}/{rep}{tag}"
                if res.get(key):
                    continue
                res.put(key, train(tool, model, pairs,
                                   work / f"train-{tool}-{precision}-{rep}{tag.replace('/', '-')}",
                                   a, rep, a.lr, steps, log, precision))
    cached = f", cached negatives {a.cache} a micro-batch" if a.cache else ""
    print(f"\ntraining, all-MiniLM-L6-v2, 1 thread, batch {a.batch}{cached}, {steps} steps, "
          f"medians of {a.repeats} (examples/s):")
    rows = []
    for precision in a.speed_precisions:
        rate = {t: statistics.median(
            res.get(f"speed/train/{t}/{precision}/{r}{tag}")["examples"]
            / res.get(f"speed/train/{t}/{precision}/{r}{tag}")["seconds"]
            for r in range(a.repeats)) for t in ("bertctl", "st")}
        runs = [res.get(f"speed/train/bertctl/{precision}/{r}{tag}") for r in range(a.repeats)]
        mfu = ""
        what = (f"retrieval train step, all-MiniLM-L6-v2, {a.batch} pairs{cached}, {precision}, "
                f"1 thr")
        rows.append(summary.row("retrieval", what + " vs sentence-transformers", rate["bertctl"],
                                rate["st"], "pairs/s"))
        if all("tokens" in r for r in runs):   # (rows kept from before they counted tokens)
            per_s = statistics.median(r["tokens"] / r["seconds"] for r in runs)
            texts_per_s = 2 * statistics.median(r["examples"] / r["seconds"] for r in runs)
            share, peak = step_mfu(model, per_s, per_s / texts_per_s, precision)
            mfu = f"; bertctl's MFU {share:.1%} of the one-thread peak ({peak:,.0f} GFLOP/s)"
            # MiniLM (6 x 384) is judged by #86's goal for mini, the lower of its two sizes.
            kind = cpu_kind()
            floor = MFU_TARGETS.get(("mini", precision, kind)) if not tag else None
            rows.append(summary.row("retrieval", what + " MFU", round(100 * share, 1), None,
                                    "% of matmul peak",
                                    target_text=f">= {floor:.0%} (mini's)" if floor else "",
                                    met=None if floor is None else share >= floor,
                                    note=f"{kind}; one-thread peak {peak:,.0f} GFLOP/s"))
        print(f"  {precision}: bertctl {rate['bertctl']:.1f}, sentence-transformers "
              f"{rate['st']:.1f} ({rate['bertctl'] / rate['st']:.2f}x){mfu}")
    summary.append(a.summary_json, rows)
    if tag:
        return
    b = [res.get(f"speed/encode/{r}")["bertctl"] for r in range(a.repeats)]
    s = [res.get(f"speed/encode/{r}")["st"] for r in range(a.repeats)]
    count = len(texts.read_text(encoding="utf-8").splitlines())
    print(f"\nencoding, all-MiniLM-L6-v2, {count:,} WikiText-2 lines, 1 thread, fp32, batch 64: "
          f"bertctl {statistics.median(b):.1f} texts/s, sentence-transformers "
          f"{statistics.median(s):.1f} ({statistics.median(b) / statistics.median(s):.2f}x, "
          f"medians of {a.repeats})")


def step_mfu(model: Path, tokens_per_s: float, length: float, precision: str
             ) -> tuple[float, float]:
    """The MFU of a retrieval training step (#86) at `tokens_per_s` real tokens a second (a
    query and its positive a pair): the encoder's model FLOPs a token, forward and backward
    (`matmul_flops` of a row of the texts' mean `length`, no masked-LM head), over the one-thread
    matmul peak measured now in `precision`; returns it and the peak in GFLOP/s."""
    import torch

    from bertctl.model.hf import read_config

    config = read_config(model)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        peak = matmul_peak(torch.bfloat16 if precision == "bf16" else torch.float32)
    finally:
        torch.set_num_threads(threads)
    flops = config.matmul_flops(1, round(length), mlm_fraction=0.0) / round(length)
    return flops * tokens_per_s / 1e9 / peak, peak


def memory(a, res: Results) -> None:
    work, log = a.out / "memory", a.out / "memory.log"
    work.mkdir(parents=True, exist_ok=True)
    pairs = work / "ict.tsv"
    pairs.write_text("query\tpositive\n" + "".join(f"{q}\t{p}\n" for q, p in ict(a, 2048)),
                     encoding="utf-8")
    for batch, cache in ((64, 0), (256, 0), (1024, 64)):
        key = f"memory/{batch}/{cache}"
        if res.get(key):
            continue
        out = work / f"b{batch}-c{cache}"
        run = common.measured([*BERTCTL, "finetune", common.default_model(), pairs, "--task",
                               "retrieval", "--steps", 1, "--batch-size", batch,
                               "--cache-negatives", cache, "--max-seq-length", 128,
                               "--precision", "fp32", "--threads", 1, "--out", out, "--force"],
                              log)
        res.put(key, run["peak_mb"])
    print("\npeak RSS of `bertctl finetune` (all-MiniLM-L6-v2, ICT pairs, 128 tokens, fp32):")
    for batch, cache in ((64, 0), (256, 0), (1024, 64)):
        print(f"  batch {batch}{f', --cache-negatives {cache}' if cache else ', uncached'}: "
              f"{res.get(f'memory/{batch}/{cache}'):,.0f} MB")


SEARCH = r"""
import json, resource, sys, time
import numpy as np
from bertctl.search import ranking
n, dim, queries, k = map(int, sys.argv[1:5])
rng = np.random.default_rng(0)
# the corpus's vectors as eval keeps them (float32, in parts of 10,000 rows), and the queries
corpus = [rng.standard_normal((min(10_000, n - i), dim), dtype=np.float32)
          for i in range(0, n, 10_000)]
q = rng.standard_normal((queries, dim), dtype=np.float32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start = time.perf_counter()
scores, idx = ranking.search(q, corpus, k)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"vectors_mb": n * dim * 4 / 2**20, "peak_mb": peak, "before_mb": before,
                  "seconds": seconds}))
"""


def search(a, res: Results) -> None:
    """The exact search's memory over 1M random vectors (all-MiniLM-L6-v2's 384 dimensions):
    its peak beyond the vectors themselves, and its time for 1,000 queries, one thread."""
    if not res.get("search"):
        r = subprocess.run([sys.executable, "-c", SEARCH, "1000000", "384", "1000", "100"],
                           stdout=subprocess.PIPE, env=common.env(), text=True, check=True)
        res.put("search", json.loads(r.stdout.strip().splitlines()[-1]))
    s = res.get("search")
    print(f"\nexact search, 1,000,000 random 384-d vectors ({s['vectors_mb']:,.0f} MB), 1,000 "
          f"queries, top 100, 1 thread: peak RSS {s['peak_mb']:,.0f} MB ({s['before_mb']:,.0f} "
          f"before the search: the vectors and Python), {s['seconds']:.1f} s")


def simcse(a, res: Results, name: str, model: Path) -> None:
    work, log = a.out / f"simcse-{name}", a.out / f"simcse-{name}.log"
    work.mkdir(parents=True, exist_ok=True)
    texts = work / "texts.tsv"
    lines = [x for x in wikitext(a, "test") + books(a) if len(x.split()) >= 8]
    random.Random(0).shuffle(lines)
    texts.write_text("text\n" + "\n".join(" ".join(x.split()[:60]) for x in lines[:20000])
                     + "\n", encoding="utf-8")
    txt = work / "texts.txt"
    txt.write_text("\n".join(texts.read_text().splitlines()[1:]) + "\n", encoding="utf-8")
    sts = a.shared / "glue" / "STS-B" / "dev.tsv"
    res.put(f"simcse/{name}/original", evaluate(model, sts, work / "eval-original", log,
                                                "glue/sts-b-cosine"))
    for seed in a.seeds[:a.simcse_seeds]:
        for tool in ("bertctl", "st"):
            key = f"simcse/{name}/{tool}/seed{seed}"
            if res.get(key):
                continue
            out = work / f"{tool}-seed{seed}"
            timing = train(tool, model, txt if tool == "bertctl" else texts, out, a, seed,
                           a.simcse_lr, a.simcse_steps, log, dropout=a.simcse_dropout)
            m = evaluate(out, sts, work / f"eval-{tool}-{seed}", log, "glue/sts-b-cosine")
            res.put(key, {**timing, **m})
            print(f"{key}: STS-B spearman {m['spearman']:.4f}", flush=True)
    orig = res.get(f"simcse/{name}/original")["spearman"]
    vals = {t: [res.get(f"simcse/{name}/{t}/seed{s}")["spearman"]
                for s in a.seeds[:a.simcse_seeds]] for t in ("bertctl", "st")}
    (mo, so), (mt, st) = mean_se(vals["bertctl"]), mean_se(vals["st"])
    md, sd = mean_se([x - y for x, y in zip(vals["bertctl"], vals["st"])])
    print(f"\nSimCSE ({name}, {a.simcse_steps} steps of {a.batch}, lr {a.simcse_lr:g}): STS-B dev "
          f"Spearman {orig:.4f} before; bertctl {mo:.4f} ± {so:.4f}, sentence-transformers "
          f"{mt:.4f} ± {st:.4f}, difference {md:+.4f} ({md / sd if sd else float('nan'):+.1f} se)")


# ---------------------------------------------------------------------------------------------
# Text


def wikitext(a, split: str) -> list[str]:
    path = a.shared / "pretrain_text" / "wikitext-2-v1-tokens" / f"{split}.txt"
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("="):
            lines.append(line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", "."))
    return lines


def books(a) -> list[str]:
    lines = []
    for path in sorted((a.shared / "pretrain_text" / "gutenberg").glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
        lines += [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    return lines


def ict(a, n: int) -> list[tuple[str, str]]:
    """A paragraph's third sentence against the rest of the paragraph (inverse cloze)."""
    pairs = []
    for para in wikitext(a, "valid") + wikitext(a, "test"):
        sentences = re.split(r"(?<=[.!?]) (?=[A-Z])", para)
        if len(sentences) >= 4:
            rest = " ".join(sentences[:2] + sentences[3:])
            pairs.append((sentences[2], " ".join(rest.split()[:150])))
        if len(pairs) == n:
            break
    return pairs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--modern", type=Path, help="a ModernBERT checkpoint trained by bertctl")
    p.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--phases", nargs="+",
                   default=["quality", "speed", "memory", "search", "simcse"])
    p.add_argument("--models", nargs="+", default=["minilm", "modern"],
                   help="the quality phase's models (modern needs --modern)")
    p.add_argument("--steps", type=int, default=27, help="3 epochs of the 293 pairs at 32")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--cache", type=int, default=0,
                   help="cached negatives, this many a micro-batch (bertctl --cache-negatives, "
                        "sentence-transformers' CachedMultipleNegativesRankingLoss "
                        "mini_batch_size), every training run; the speed phase keeps its rows "
                        "apart (with --batch); 0: none")
    p.add_argument("--speed-precisions", nargs="+", default=["fp32", "bf16"])
    p.add_argument("--lr", type=float, default=2e-5, help="all-MiniLM-L6-v2's")
    p.add_argument("--modern-lr", type=float, default=1e-4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--simcse-steps", type=int, default=200)
    p.add_argument("--simcse-dropout", type=float, default=0.1,
                   help="SimCSE's noise (a ModernBERT has no dropout of its own)")
    p.add_argument("--simcse-lr", type=float, default=3e-5)
    p.add_argument("--simcse-seeds", type=int, default=2)
    p.add_argument("--summary-json", default=None,
                   help="append the speed phase's rows here (run_all.py's table)")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    res = Results(a.out / "results.json")
    print(f"machine: {common.machine(threads=1)}, {os.cpu_count()} cores", flush=True)
    names = [n for n in a.models if n != "modern" or a.modern]
    models = {"minilm": (common.default_model(), a.lr), "modern": (a.modern, a.modern_lr)}
    if "quality" in a.phases:
        for name in names:
            quality(a, res, name, *models[name])
        quality_table(a, res, names)
    if "speed" in a.phases:
        speed(a, res)
    if "memory" in a.phases:
        memory(a, res)
    if "search" in a.phases:
        search(a, res)
    if "simcse" in a.phases and a.modern:
        simcse(a, res, "modern", a.modern)


if __name__ == "__main__":
    main()
