"""SQuAD span QA: `bertctl finetune/eval --task squad_v2` against a plain transformers run.

    /work/main/.venv/bin/python benchmarks/studies/squad/bench_squad.py [SQUAD_JSON] [--seeds 0,1]
        [--epochs 2] [--threads 1] [--only plain]

Data: SQUAD_JSON (default ../shared/data/squad/dev-v2.0.first5articles.json: 5 articles of the
SQuAD 2.0 dev set; the benchmark reads it, bertctl never does) is split by article: the first
`--train-articles` (3: Normans, Computational_complexity_theory, Southern_California; 950
questions) are the training file, the rest (Sky_(United_Kingdom), Victoria_(Australia); 457
questions) the dev file, both written in the official nested format into the work directory.
`--version 1` keeps only answerable questions and runs `--task squad` (v1.1).

Both fine-tune the real all-MiniLM-L6-v2 checkpoint with the same recipe: max length 384, doc
stride 128 (overlap of consecutive windows, as the transformers example), question cut to 64
tokens, lr 5e-5 with 10% linear warm-up then linear decay, AdamW (weight decay 0.01, not on
biases and LayerNorm), batch 32, clipping 1.0, the same seeds and epochs; post-processing with
n-best 20 and max answer length 30, each start token taken in its max-context window, the null
score the lowest [CLS] score over a question's windows.

- plain: `AutoModelForQuestionAnswering` (a new span head after `set_seed`), windows from the
  tokenizer's `return_overflowing_tokens` / `stride`, padded to 384, a plain training loop in a
  shuffled order, evaluation in file order, post-processing written plainly below. Its
  predictions use threshold 0.0; scored with `bertctl.tasks.span.metrics` (the official
  definitions, one implementation for both).
- bertctl: the real CLI. finetune tunes the null threshold on the dev file (here the same file
  eval scores, so compare `best_f1`, which is threshold-free, and see `f1` as an upper bound).

Timing (seconds, noisy on a shared machine: compare the ratios side by side). Training: the
training loop per epoch (bertctl: summed from its metrics.jsonl intervals, a clock paused during
evaluation and checkpoints, as benchmarks/speed/bench_finetune.py reads it; plain: the loop itself).
Evaluation: forward passes plus post-processing, no model loading or tokenization (bertctl: the
eval manifest's `seconds`). Each seed runs both tools in fresh processes, the first alternating.
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
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from reference import loop  # noqa: E402
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

DEFAULT_SQUAD = (common.ROOT.parent
                 / "shared/data/squad/dev-v2.0.first5articles.json")


def split_articles(src: Path, n_train: int, version: int, work: Path) -> tuple[Path, Path]:
    doc = json.loads(src.read_text(encoding="utf-8"))
    if version == 1:   # v1.1: answerable questions only, no is_impossible
        for article in doc["data"]:
            for par in article["paragraphs"]:
                par["qas"] = [{k: v for k, v in q.items() if k not in ("is_impossible",
                                                                       "plausible_answers")}
                              for q in par["qas"] if q["answers"]]
    paths = []
    for name, articles in (("train", doc["data"][:n_train]), ("dev", doc["data"][n_train:])):
        path = work / f"{name}.json"
        path.write_text(json.dumps({"version": doc.get("version"), "data": articles}),
                        encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def flat(path: Path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [dict(id=q["id"], question=q["question"], context=p["context"],
                 answers=[(a["text"], a["answer_start"]) for a in q["answers"]])
            for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]


# ---------------------------------------------------------------------------------------------
# The plain transformers implementation


def plain_windows(tok, rows, a, training):
    """Windows as the transformers QA example builds them, the question first cut to
    max_query_length tokens (at a token's end character)."""
    questions = []
    for r in rows:
        enc = tok(r["question"], add_special_tokens=False, return_offsets_mapping=True)
        q = r["question"]
        if len(enc["input_ids"]) > a.max_query_length:
            q = q[:enc["offset_mapping"][a.max_query_length - 1][1]]
        questions.append(q)
    enc = tok(questions, [r["context"] for r in rows], truncation="only_second",
              max_length=a.max_seq_length, stride=a.doc_stride, return_overflowing_tokens=True,
              return_offsets_mapping=True, padding="max_length")
    feats = []
    for i in range(len(enc["input_ids"])):
        ex = enc["overflow_to_sample_mapping"][i]
        seq = enc.sequence_ids(i)
        offsets = [o if s == 1 else None for o, s in zip(enc["offset_mapping"][i], seq)]
        f = dict(example=ex, input_ids=enc["input_ids"][i], token_type_ids=enc["token_type_ids"][i],
                 attention_mask=enc["attention_mask"][i], offsets=offsets)
        if training:
            f["start"] = f["end"] = 0
            answers = rows[ex]["answers"]
            if answers:
                text, start_char = answers[0]
                end_char = start_char + len(text)
                ctx = [k for k, o in enumerate(offsets) if o is not None]
                if offsets[ctx[0]][0] <= start_char and offsets[ctx[-1]][1] >= end_char:
                    s = next(k for k in ctx if offsets[k][1] > start_char)
                    e = max(k for k in ctx if offsets[k][0] < end_char)
                    f["start"], f["end"] = s, e
        feats.append(f)
    # Max context (Google's rule), written plainly. Consecutive windows of an example overlap
    # by `stride` passage tokens, which gives each window's first passage token index.
    by_example = {}
    for f in feats:
        by_example.setdefault(f["example"], []).append(f)
    for fs in by_example.values():
        best = {}                                  # passage token index -> (score, window)
        p0 = 0
        for w, f in enumerate(fs):
            idx = [k for k, o in enumerate(f["offsets"]) if o is not None]
            f["passage_tokens"] = {k: p0 + n for n, k in enumerate(idx)}
            for k, p in f["passage_tokens"].items():
                score = min(p - p0, p0 + len(idx) - 1 - p) + 0.01 * len(idx)
                if p not in best or score > best[p][0]:
                    best[p] = (score, w)
            p0 += len(idx) - a.doc_stride
        for w, f in enumerate(fs):
            f["max_context"] = {k for k, p in f["passage_tokens"].items() if best[p][1] == w}
    return feats


def plain_postprocess(rows, feats, starts, ends, a):
    import numpy as np

    by_example = {}
    for f, s, e in zip(feats, starts, ends):
        by_example.setdefault(f["example"], []).append((f, s, e))
    preds, null_odds = {}, {}
    for i, r in enumerate(rows):
        cands, null = [], None
        for f, s, e in by_example[i]:
            null_score = s[0] + e[0]
            if null is None or null_score < null:
                null = null_score
            for si in np.argsort(s)[::-1][:a.n_best]:
                for ei in np.argsort(e)[::-1][:a.n_best]:
                    if f["offsets"][si] is None or f["offsets"][ei] is None:
                        continue
                    if ei < si or ei - si + 1 > a.max_answer_length:
                        continue
                    if si not in f["max_context"]:
                        continue
                    text = r["context"][f["offsets"][si][0]:f["offsets"][ei][1]]
                    cands.append((s[si] + e[ei], text))
        best = max(cands) if cands else None
        if best is None:
            preds[r["id"]], null_odds[r["id"]] = "", 1e9
        else:
            null_odds[r["id"]] = float(null - best[0])
            preds[r["id"]] = "" if a.version == 2 and null_odds[r["id"]] > 0.0 else best[1]
    return preds, null_odds


def run_plain(a, train_path: Path, dev_path: Path) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from bertctl.tasks.span.metrics import squad_v1_metrics, squad_v2_metrics

    transformers.logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(a.model)
    train_rows, dev_rows = flat(train_path), flat(dev_path)
    train = plain_windows(tok, train_rows, a, training=True)
    dev = plain_windows(tok, dev_rows, a, training=False)
    transformers.set_seed(a.seed)
    model = AutoModelForQuestionAnswering.from_pretrained(a.model)
    steps_per_epoch = len(train) // a.batch_size
    total = int(steps_per_epoch * a.epochs)
    autocast = dict(device_type="cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16")

    def tensors(fs, keys):
        return {k: torch.tensor([f[k] for f in fs]) for k in keys}

    def loss_of(idx):
        fs = [train[j] for j in idx]
        batch = tensors(fs, ["input_ids", "token_type_ids", "attention_mask"])
        batch["start_positions"] = torch.tensor([f["start"] for f in fs])
        batch["end_positions"] = torch.tensor([f["end"] for f in fs])
        with torch.autocast(**autocast):
            return model(**batch).loss

    # Adam's eps is PyTorch's default here, and an epoch's short last batch is dropped.
    train_seconds = loop.fit(model, len(train), a.batch_size, total, a.lr, a.seed, loss_of,
                             eps=1e-8, drop_last=True)

    model.eval()
    t0 = time.perf_counter()
    starts, ends = [], []
    with torch.inference_mode(), torch.autocast(**autocast):
        for b in range(0, len(dev), 64):
            out = model(**tensors(dev[b:b + 64], ["input_ids", "token_type_ids", "attention_mask"]))
            starts += list(out.start_logits.float().numpy())
            ends += list(out.end_logits.float().numpy())
    preds, null_odds = plain_postprocess(dev_rows, dev, starts, ends, a)
    eval_seconds = time.perf_counter() - t0
    gold = {r["id"]: [t for t, _ in r["answers"]] for r in dev_rows}
    metrics = (squad_v2_metrics(gold, preds, null_odds) if a.version == 2
               else squad_v1_metrics(gold, preds))
    return {"metrics": metrics, "train_seconds": train_seconds, "epochs": a.epochs,
            "steps": total, "train_windows": len(train), "eval_seconds": eval_seconds,
            "dev_windows": len(dev)}


# ---------------------------------------------------------------------------------------------
# bertctl (the real CLI; needs the span family wired into finetune and eval)


def run_bertctl(a, train_path: Path, dev_path: Path) -> dict:
    task = "squad_v2" if a.version == 2 else "squad"
    ft = Path(a.work) / f"bertctl-ft-{a.seed}-{os.getpid()}"
    ev = Path(a.work) / f"bertctl-ev-{a.seed}-{os.getpid()}"
    shape = ["--max-seq-length", str(a.max_seq_length), "--doc-stride", str(a.doc_stride),
             "--max-query-length", str(a.max_query_length), "--n-best", str(a.n_best),
             "--max-answer-length", str(a.max_answer_length), "--precision", a.precision]
    commands = [
        [sys.executable, "-m", "bertctl", "finetune", str(a.model), str(train_path),
         "--dev", str(dev_path), "--task", task, "--out", str(ft), "--seed", str(a.seed),
         "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--lr", str(a.lr),
         "--keep", "last", "--eval-every", "100000000", "--json", "--force", *shape],
        [sys.executable, "-m", "bertctl", "eval", str(ft), str(dev_path), "--out", str(ev),
         "--json", "--force", *shape],
    ]
    manifests = []
    for cmd in commands:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"bertctl failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
        manifests.append(json.loads(proc.stdout))
    seconds, prev = 0.0, 0
    for line in (ft / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("split") == "train":
            seconds += (rec["step"] - prev) * a.batch_size / rec["examples_per_s"]
            prev = rec["step"]
    ft_stats, ev_stats = manifests[0]["stats"], manifests[1]["stats"]
    metrics = json.loads((ev / "metrics.json").read_text())
    shutil.rmtree(ft, ignore_errors=True)
    shutil.rmtree(ev, ignore_errors=True)
    return {"metrics": metrics, "train_seconds": seconds, "epochs": ft_stats["epochs"],
            "steps": ft_stats["step"], "eval_seconds": ev_stats["seconds"],
            "commands": [" ".join(c) for c in commands]}


# ---------------------------------------------------------------------------------------------
# Driver


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("squad", nargs="?", type=Path, default=DEFAULT_SQUAD)
    p.add_argument("--model", type=Path, default=None, help="default: all-MiniLM-L6-v2")
    p.add_argument("--train-articles", type=int, default=3)
    p.add_argument("--version", type=int, choices=[1, 2], default=2)
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0])
    p.add_argument("--epochs", type=float, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max-seq-length", type=int, default=384)
    p.add_argument("--doc-stride", type=int, default=128)
    p.add_argument("--max-query-length", type=int, default=64)
    p.add_argument("--n-best", type=int, default=20)
    p.add_argument("--max-answer-length", type=int, default=30)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--threads", type=int, default=None, help="torch/OpenMP threads per process")
    p.add_argument("--only", choices=["plain", "bertctl"], default=None,
                   help="run one side only (the plain side runs before the wiring lands)")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--json-out", type=Path, default=None)
    p.add_argument("--run-one", choices=["plain", "bertctl"], help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    a.model = a.model or common.default_model()
    if a.run_one:
        os.environ["HF_HUB_OFFLINE"] = "1"
        if a.threads:
            import torch
            torch.set_num_threads(a.threads)
        fn = run_plain if a.run_one == "plain" else run_bertctl
        print(json.dumps(fn(a, Path(a.work) / "train.json", Path(a.work) / "dev.json")))
        return

    work = a.work or Path(tempfile.mkdtemp(prefix="bench-squad-"))
    work.mkdir(parents=True, exist_ok=True)
    train, dev = split_articles(a.squad, a.train_articles, a.version, work)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    if a.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(a.threads)
    tools = [a.only] if a.only else ["bertctl", "plain"]
    print(f"{a.squad}: train {len(flat(train))} questions (first {a.train_articles} articles), "
          f"dev {len(flat(dev))}; SQuAD v{a.version}, {a.epochs:g} epochs, batch {a.batch_size}, "
          f"lr {a.lr:g}, {a.precision}, threads {a.threads or 'torch default'}", flush=True)
    forwarded = ["--model", str(a.model), "--version", str(a.version), "--epochs", str(a.epochs),
                 "--batch-size", str(a.batch_size), "--lr", str(a.lr), "--max-seq-length",
                 str(a.max_seq_length), "--doc-stride", str(a.doc_stride), "--max-query-length",
                 str(a.max_query_length), "--n-best", str(a.n_best), "--max-answer-length",
                 str(a.max_answer_length), "--precision", a.precision, "--work", str(work)]
    if a.threads:
        forwarded += ["--threads", str(a.threads)]
    results = []
    for i, seed in enumerate(a.seeds):
        row = {"seed": seed}
        for tool in (tools if i % 2 == 0 else tools[::-1]):
            cmd = [sys.executable, __file__, "--run-one", tool, "--seed", str(seed), *forwarded]
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
            if proc.returncode != 0:
                sys.exit(f"{tool} failed:\n{proc.stderr[-4000:]}")
            r = row[tool] = json.loads(proc.stdout.strip().splitlines()[-1])
            m = r["metrics"]
            print(f"  seed {seed} {tool}: exact {m['exact']:.2f} f1 {m['f1']:.2f}"
                  + (f" best_f1 {m['best_f1']:.2f}" if "best_f1" in m else "")
                  + f", {r['train_seconds'] / r['epochs']:.1f} s/epoch, eval "
                  f"{r['eval_seconds']:.1f} s", flush=True)
        results.append(row)
        if a.json_out:
            a.json_out.write_text(json.dumps(results, indent=1))
    if len(tools) == 2:
        for row in results:
            b, h = row["bertctl"], row["plain"]
            train_ratio = (h["train_seconds"] / h["epochs"]) / (b["train_seconds"] / b["epochs"])
            print(f"seed {row['seed']}: bertctl {train_ratio:.2f}x faster per training epoch, "
                  f"{h['eval_seconds'] / b['eval_seconds']:.2f}x at evaluation")
    if a.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
