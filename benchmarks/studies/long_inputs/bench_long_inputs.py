"""Long inputs: what a 2,048-token window buys over 512 on a task whose inputs are that long (#40).

    .venv/bin/python benchmarks/studies/long_inputs/bench_long_inputs.py --models bert=runs/budget60/recipe/model \
        modern=runs/budget60/modern/model --lengths 512 2048 --seeds 0 1 2 --threads 1

The task: which of the seven Gutenberg books of ../shared/data/pretrain_text a passage comes from
(authorship and subject, a document-classification task with inputs of any length). Each book's
body is cut into passages of --words whitespace words (1,500: about 2,000 pieces with the
budget benchmark's 8,000-piece tokenizer), every third passage to dev and the others to train,
at most --per-book of each split per book, evenly spaced through it (the classes count about
the same; the shortest book has fewer). The same passages are read at every length: at 512 a
model sees a passage's first 512 pieces, at 2,048 all of it, so a row's gain with length is what
the rest of the passage tells.

Every (model, length) runs `bertctl finetune --family single` then `bertctl eval` on the dev
passages, a fresh process each (the wall time includes start-up, a few seconds), for each seed;
a length beyond a model's positions (BERT's 512) is skipped and said. Results per run are kept in
--work (a rerun does only what is missing); --table prints the table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402

ROOT = common.ROOT
BERTCTL = [sys.executable, "-m", "bertctl"]


def spread(items: list, k: int) -> list:
    """k of the items, evenly spaced through them (all if there are no more)."""
    return items if len(items) <= k else [items[j * len(items) // k] for j in range(k)]


def build_task(books: Path, out: Path, words: int, per_book: int) -> tuple[Path, Path]:
    train, dev = out / "train.jsonl", out / "dev.jsonl"
    if train.exists() and dev.exists():
        return train, dev
    out.mkdir(parents=True, exist_ok=True)
    rows = {"train": [], "dev": []}
    for book in sorted(books.glob("pg*.txt")):
        text = book.read_text(encoding="utf-8").split()
        passages = [" ".join(text[i:i + words]) for i in range(0, len(text) - words + 1, words)]
        split = {"train": spread([p for i, p in enumerate(passages) if i % 3 != 2], per_book),
                 "dev": spread(passages[2::3], per_book)}
        for name, kept in split.items():
            rows[name] += [{"text": p, "label": book.stem} for p in kept]
    for name, path in (("train", train), ("dev", dev)):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[name]), encoding="utf-8")
    return train, dev


def declared(model: Path, length: int, work: Path) -> Path | None:
    """The model as it can read `length` tokens, or None. A rotary model (ModernBERT) has no
    position table: its config's max_position_embeddings only declares a length, which a budget
    model pretrained beside BERT set to BERT's 512; a copy of the directory declares `length`
    instead (the weights copied, not changed). BERT's learned table cannot grow."""
    config = json.loads((model / "config.json").read_text())
    if length <= config["max_position_embeddings"]:
        return model
    if config.get("model_type") != "modernbert":
        return None
    copy = work / "models" / f"{model.parent.name}-{model.name}-{length}"
    if not copy.exists():
        shutil.copytree(model, copy)   # not links: an artifact refuses them
        (copy / "config.json").write_text(json.dumps({**config,
                                                      "max_position_embeddings": length}))
    return copy


def run(name: str, model: Path, length: int, seed: int, files, args) -> dict:
    out = args.work / f"{name}-{length}-seed{seed}"
    result = out / "result.json"
    if result.exists():
        return json.loads(result.read_text())
    threads = ["--threads", str(args.threads)]
    t0 = time.perf_counter()
    subprocess.run(BERTCTL + ["finetune", str(model), str(files[0]), "--family", "single",
                              "--text-column", "text", "--label-column", "label",
                              "--out", str(out / "model"), "--max-seq-length", str(length),
                              "--epochs", str(args.epochs), "--lr", str(args.lr),
                              "--batch-size", str(args.batch_size), "--warmup", "0.1",
                              "--seed", str(seed), *threads], check=True)
    train_s = time.perf_counter() - t0
    subprocess.run(BERTCTL + ["eval", str(out / "model"), str(files[1]), "--out",
                              str(out / "dev"), *threads], check=True)
    manifest = json.loads((out / "dev" / "artifact.json").read_text())["stats"]
    rec = {"accuracy": json.loads((out / "dev" / "metrics.json").read_text())["accuracy"],
           "train_s": round(train_s, 1), "eval_s": manifest.get("seconds")}
    result.write_text(json.dumps(rec))
    return rec


def table(work: Path) -> str:
    lines = ["| model | length | dev accuracy (mean ± sd, n) | fine-tuning s (wall) | eval s |",
             "|---|---|---|---|---|"]
    groups: dict[tuple[str, int], list[dict]] = {}
    for f in sorted(work.glob("*-seed*/result.json")):
        name, length, _ = f.parent.name.rsplit("-", 2)
        groups.setdefault((name, int(length)), []).append(json.loads(f.read_text()))
    for (name, length), recs in sorted(groups.items()):
        acc = [r["accuracy"] for r in recs]
        sd = f" ± {statistics.stdev(acc):.3f}" if len(acc) > 1 else ""
        lines.append(f"| {name} | {length:,} | {statistics.mean(acc):.3f}{sd} (n {len(acc)}) | "
                     f"{statistics.median(r['train_s'] for r in recs):.0f} | "
                     f"{statistics.median(r['eval_s'] for r in recs):.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--models", nargs="+", default=[], help="NAME=MODEL_DIR, each fine-tuned")
    ap.add_argument("--lengths", nargs="+", type=int, default=[512, 2048])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--words", type=int, default=1500)
    ap.add_argument("--per-book", type=int, default=12)
    ap.add_argument("--epochs", type=float, default=4)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "long-inputs")
    ap.add_argument("--table", action="store_true", help="print the table and stop")
    args = ap.parse_args()
    args.work = args.work.resolve()
    if args.table:
        print(table(args.work))
        return
    files = build_task(args.data / "pretrain_text" / "gutenberg", args.work / "task", args.words,
                       args.per_book)
    for spec in args.models:
        name, _, model = spec.partition("=")
        model = Path(model).resolve()
        for length in args.lengths:
            reads = declared(model, length, args.work)
            if reads is None:
                print(f"{name}: {length} tokens is past its position table: skipped")
                continue
            for seed in args.seeds:
                print(name, length, seed, run(name, reads, length, seed, files, args), flush=True)
    print(table(args.work))


if __name__ == "__main__":
    main()
