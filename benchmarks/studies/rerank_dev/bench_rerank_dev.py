"""A reranker on data it was not tuned on (#87): bertctl's reranker (listwise and pointwise,
its best epoch by dev) against sentence-transformers' CrossEncoderTrainer recipe on the same
rows, reordering the same first stage, on the two sets of bench_search_dev.py, over seeds.

    .venv/bin/python benchmarks/studies/rerank_dev/bench_rerank_dev.py --model MODEL --out runs/bench-rr \\
        [--sets squad-sentences wikitext-ict] [--seeds 0 1 2 3 4] \\
        [--variants listwise pointwise st] [--negatives 3] [--epochs 3] [--threads 2]

Each seed: `bertctl split` holds out the dev queries of TRAIN (the seed picks them, as the
pipeline's SEED does); MODEL mines each training query's rows (NEGATIVES negatives, as
search.mk's reranker rows) and the dev queries' rows over the dev corpus (9 negatives, the
pipeline's dev rows). Every variant trains from MODEL on those rows for EPOCHS and keeps its
best epoch by the dev rows' nDCG@10:
- listwise, pointwise: `bertctl finetune --task reranking --ranking-loss ... --dev`;
- st: CrossEncoder(MODEL, num_labels=1) with CrossEncoderTrainer and BinaryCrossEntropyLoss
  (pos_weight the negatives a row, as its MS MARCO recipe), the rows flattened to labelled
  pairs, a batch of as many pairs as bertctl's batch holds candidates, the same rate, warm-up
  and length, CrossEncoderRerankingEvaluator on the same dev rows each epoch and
  load_best_model_at_end.
Each reranker then reorders MODEL's top DEPTH of every test query (`bertctl eval --rerank`,
so the reordering and the metric are one code for all) and of every dev query; `bertctl
choose` says on dev whether the pipeline would take it. The table: the first stage's test
nDCG@10, each reranker's, the paired gain over the first stage in standard errors per seed,
how many seeds dev took it and how many of those the test agrees with.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from studies.search_dev import bench_search_dev as sets
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

ROOT = common.ROOT
VARIANTS = ("listwise", "pointwise", "st")


def bertctl(args, *argv: str) -> None:
    cmd = [sys.executable, "-m", "bertctl", *argv, "--threads", str(args.threads),
           *args.flags.split()]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                       env=common.env(args.threads))
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-4000:]}")


def prepare(args, data: Path, work: Path, seed: int) -> None:
    """The split, the training rows and the dev rows of one seed, and the first stage's test
    eval (MODEL's, the same every seed)."""
    if not (work / "split" / "artifact.json").is_file():
        subprocess.run([sys.executable, "-m", "bertctl", "split", str(data / "train.jsonl"),
                        "--seed", str(seed), "--out", str(work / "split")], cwd=ROOT,
                       check=True, capture_output=True, env=common.env(args.threads))
    if not (work / "rows" / "artifact.json").is_file():
        bertctl(args, "mine", str(args.model), str(work / "split" / "train.jsonl"),
                "--negatives", str(args.negatives), "--out", str(work / "rows"))
    if not (work / "dev-rows" / "artifact.json").is_file():
        bertctl(args, "mine", str(args.model), str(work / "split" / "dev-pairs.jsonl"),
                "--negatives", "9", "--corpus", str(work / "split" / "dev" / "corpus.jsonl"),
                "--out", str(work / "dev-rows"))


def _rows(path: Path) -> list[dict]:
    """Mined rows as (query, positive, negatives): `mine` writes negative_1 ... negative_N."""
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return [{"query": r["query"], "positive": r["positive"],
             "negatives": [v for k, v in r.items() if k.startswith("negative_")]} for r in rows]


def train_st(args, work: Path, out: Path, seed: int) -> None:
    """sentence-transformers' recipe on the same rows (see the module's docstring)."""
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (CrossEncoder, CrossEncoderTrainer,
                                                     CrossEncoderTrainingArguments)
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    torch.set_num_threads(args.threads)
    train = {"query": [], "document": [], "label": []}
    for row in _rows(work / "rows" / "pairs.jsonl"):
        for doc, label in [(row["positive"], 1.0)] + [(n, 0.0) for n in row["negatives"]]:
            train["query"].append(row["query"])
            train["document"].append(doc)
            train["label"].append(label)
    dev = [{"query": r["query"], "positive": [r["positive"]], "negative": r["negatives"]}
           for r in _rows(work / "dev-rows" / "pairs.jsonl")]
    model = CrossEncoder(str(args.model), num_labels=1, max_length=args.length)
    loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(float(args.negatives)))
    evaluator = CrossEncoderRerankingEvaluator(dev, at_k=10, name="dev", write_csv=False,
                                               batch_size=64)
    training = CrossEncoderTrainingArguments(
        output_dir=str(out / "checkpoints"), num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch * (1 + args.negatives),
        learning_rate=args.lr, warmup_ratio=0.1, seed=seed, data_seed=seed,
        bf16=args.bf16, eval_strategy="epoch", save_strategy="epoch", save_total_limit=1,
        load_best_model_at_end=True, metric_for_best_model="eval_dev_ndcg@10",
        greater_is_better=True, logging_strategy="no", report_to="none",
        dataloader_drop_last=False, use_cpu=True)
    trainer = CrossEncoderTrainer(model=model, args=training,
                                  train_dataset=Dataset.from_dict(train), loss=loss,
                                  evaluator=evaluator)
    trainer.train()
    model.save_pretrained(str(out / "model"))


def train(args, variant: str, work: Path, seed: int) -> Path:
    out = work / variant
    model = out / ("model" if variant == "st" else "")
    if (model / "config.json").is_file():
        return model
    if variant == "st":
        train_st(args, work, out, seed)
    else:
        bertctl(args, "finetune", str(args.model), str(work / "rows" / "pairs.jsonl"),
                "--task", "reranking", "--ranking-loss", variant, "--epochs",
                str(args.epochs), "--batch-size", str(args.batch), "--lr", str(args.lr),
                "--max-seq-length", str(args.length), "--seed", str(seed),
                "--dev", str(work / "dev-rows" / "pairs.jsonl"), "--out", str(out))
    return model


def _per_query(path: Path) -> dict[str, float]:
    rows = [x.split("\t") for x in path.read_text().splitlines()]
    col = rows[0].index("ndcg@10")
    return {r[0]: float(r[col]) for r in rows[1:]}


def reorder(args, reranker: Path, beir: Path, out: Path) -> Path:
    if not (out / "artifact.json").is_file():
        bertctl(args, "eval", str(args.model), str(beir), "--task", "retrieval", "--rerank",
                str(reranker), "--rerank-depth", str(args.depth), "--out", str(out))
    return out


def dev_takes(args, dev_eval: Path, work: Path, variant: str) -> bool:
    out = work / f"choose-{variant}"
    if not (out / "artifact.json").is_file():
        subprocess.run([sys.executable, "-m", "bertctl", "choose", f"none={dev_eval}",
                        f"reranker={dev_eval}:rerank", "--out", str(out)], cwd=ROOT,
                       check=True, capture_output=True)
    return (out / "chosen.txt").read_text().strip() == "reranker"


def _gain(a: dict[str, float], b: dict[str, float]) -> tuple[float, float]:
    d = [a[q] - b[q] for q in b]
    return statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-rr")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--sets", nargs="+", default=list(sets.SETS), choices=list(sets.SETS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--negatives", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=32, help="rows a batch (bertctl); "
                   "sentence-transformers gets as many pairs as these rows hold")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--flags", default="", help="more bertctl flags (e.g. --precision fp32)")
    p.add_argument("--bf16", action="store_true", help="sentence-transformers in bf16 "
                   "(match bertctl's --precision)")
    args = p.parse_args()
    args.model = args.model.resolve()
    args.out = args.out.resolve()
    results_path = args.out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    print(f"# {common.machine(args.threads)}", flush=True)
    for name in args.sets:
        data = args.out / "data" / name
        if not (data / "train.jsonl").is_file():
            print(name, sets.SETS[name](args.shared, data), flush=True)
    for seed in args.seeds:          # each seed over every set first: a stopped run covers both
        for name in args.sets:
            data = args.out / "data" / name
            work = args.out / "runs" / name / f"seed{seed}"
            prepare(args, data, work, seed)
            for variant in args.variants:
                key = f"{name}/{variant}/{seed}"
                if key in results:
                    continue
                t0 = time.time()
                reranker = train(args, variant, work, seed)
                seconds = time.time() - t0
                test = reorder(args, reranker, data / "beir", work / f"test-{variant}")
                dev = reorder(args, reranker, work / "split" / "dev", work / f"dev-{variant}")
                results[key] = {
                    "first": _per_query(test / "per_query.tsv"),
                    "reranked": _per_query(test / "rerank_per_query.tsv"),
                    "dev_takes": dev_takes(args, dev, work, variant),
                    "train_s": round(seconds, 1)}
                results_path.write_text(json.dumps(results))
                g, se = _gain(results[key]["reranked"], results[key]["first"])
                print(key, f"first {statistics.fmean(results[key]['first'].values()):.4f}",
                      f"reranked {statistics.fmean(results[key]['reranked'].values()):.4f}",
                      f"gain {g:+.4f} ({g / se:+.1f} se)", "dev takes"
                      if results[key]["dev_takes"] else "dev refuses",
                      f"{seconds:.0f} s", flush=True)
    table(results, args)


def table(results: dict, args) -> None:
    print("| set | reranker | seeds | first stage | reranked | gain over the first stage "
          "(se), each seed | dev took it | test agreed | train s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.sets:
        for variant in args.variants:
            rs = [results[k] for k in (f"{name}/{variant}/{s}" for s in args.seeds)
                  if k in results]
            if not rs:
                continue
            gains = [_gain(r["reranked"], r["first"]) for r in rs]
            took = [r["dev_takes"] for r in rs]
            agreed = sum(t == (g > 0) for t, (g, _) in zip(took, gains))
            print(f"| {name} | {variant} | {len(rs)} | "
                  f"{statistics.fmean(statistics.fmean(r['first'].values()) for r in rs):.4f} "
                  f"| {statistics.fmean(statistics.fmean(r['reranked'].values()) for r in rs):.4f}"
                  f" | {'; '.join(f'{g:+.3f} ({g / se:+.1f})' for g, se in gains)} | "
                  f"{sum(took)}/{len(rs)} | {agreed}/{len(rs)} | "
                  f"{statistics.fmean(r['train_s'] for r in rs):.0f} |")


if __name__ == "__main__":
    main()
