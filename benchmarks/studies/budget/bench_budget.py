"""Time to quality: which pretraining buys the best model for a fixed wall-clock budget (#27).

    .venv/bin/python benchmarks/studies/budget/bench_budget.py --data ../shared/data --work runs/budget \
        --budget 20m --threads 1

Every row pretrains the same model shape (mini, L4/H256/A4) with the same tokenizer on the same
corpus (the Gutenberg books, WikiText-2 and Shakespeare of ../shared/data/pretrain_text, the
last --heldout of each file's lines held out) for the same wall-clock budget, then is fine-tuned
the same way on SST-2 (a 4,000-row subset), MRPC, STS-B (a 3,000-row subset) and CoNLL-2003
NER (1,000 sentences) with three seeds and scored on the full dev sets:

    hf       what transformers users run: BertForMaskedLM, DataCollatorForLanguageModeling
             (dynamic 15%), the text concatenated and cut into 128-token blocks as run_mlm.py
             does, a plain AdamW loop with the linear schedule laid over the budget's time
             (as bertctl's), fp32 as the Trainer runs on CPU
    paper    bertctl's defaults: MLM + NSP, Google's instances, static masks (dupe 10)
    mlm      bertctl --objective mlm on --packing concatenated, dynamic masks at --mask-rate
             (default 0.3); with --recipe, pretrain runs examples/configs/budget-pretrain.yaml
             as it ships (the mini model, the given budget) on data built from
             examples/configs/budget-data.yaml (without its validation split, as every row)
    electra  bertctl --objective electra on the same data, 15% masked, generator 1/4 wide
    modern   bertctl's ModernBERT recipe as it ships (examples/configs/
             budget-modern-pretrain.yaml: the mini ModernBERT, batch 16, lr 8e-4, 30% masks)
    hf-modern  its peer (#55): transformers' own ModernBertForMaskedLM of the same shape (the
             same config.json numbers), trained as a ModernBERT user writes run_mlm: batch 32,
             lr 8e-4, 30% dynamic masks, the hf row's loop and time-laid schedule, fp32

`--rows modern hf-modern --tasks CoNLL SST-2 --ft-lrs CoNLL=5e-4,1e-3,2e-3
SST-2=1e-4,3e-4,5e-4 --against hf-modern` is the comparison of #55 in one command. A further
pretraining run of a row: --pretrain-seed N, kept as ROW-seedN (a --name NAME-seedN is a run of
NAME); the table then also compares each row's runs together against the peer's.

Shared by all rows: batch 64 x 128 tokens, peak lr 5e-4, 6% warm-up, linear decay to 0 at the
budget, weight decay 0.01. The budget covers the training loop only (data preparation is
outside it for every row; it is printed). Each row then gets the masked-LM loss on the held-out
text (one static-masked `bertctl eval` data set shared by all rows; ELECTRA's discriminator has
no masked-LM head). Rows run one after another, each pinned by --threads; a results JSON per
row and per fine-tuning run is kept under --work, so a rerun only does what is missing, and
`--table` prints the table from them. Variants of a row side by side: --name (its directory and
label) with --build-args / --pretrain-args, --hf-layout blocks for the baseline, --tasks to
fine-tune a subset (e.g. SST-2 alone, the task that separates the rows at these budgets),
--tokenize-args for a row with a vocabulary of its own (trained on the same text at the same
--vocab-size; its held-out data built from it, so its masked-LM loss is over other pieces and
not comparable with the shared vocabulary's): `--rows mlm --recipe --name roberta-bpe
--tokenize-args "--model byte-level-bpe --cased" --pretrain-args "--architecture roberta"`
is a RoBERTa from byte-level BPE against the recipe's BERT from WordPiece. The
fine-tuning lr is 1e-4 for every row (CoNLL 1e-3); --ft-lrs tries several, for every task or
per task (TASK=LR,LR), and reports per row and task the one best on dev (a rate that suits one
architecture can hold another back).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from reference import mlm_pretrain  # noqa: E402
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

ROOT = common.ROOT
BERTCTL = [sys.executable, "-m", "bertctl"]
ROWS = ("hf", "paper", "mlm", "electra", "modern", "hf-modern")
RECIPE = ROOT / "examples" / "configs" / "budget-pretrain.yaml"
MODERN_RECIPE = RECIPE.with_name("budget-modern-pretrain.yaml")
DATA_RECIPE = RECIPE.with_name("budget-data.yaml")
BATCH, SEQ, LR, WARMUP = 64, 128, 5e-4, 0.06
TASKS = {  # name: (preset, train rows kept, epochs, metric)
    "SST-2": ("glue/sst2", 4000, 2, "accuracy"),
    "MRPC": ("glue/mrpc", None, 3, "f1"),
    "STS-B": ("glue/sts-b", 3000, 3, "pearson"),
    # NER separates pretraining quality at these budgets where SST-2 does not (docs/
    # benchmarks.md, "CoNLL-2003 NER from the same models"): bench_conll.py's sample of 1,000
    # training sentences, 5 epochs, entity F1 on the full dev set; its rate, 1e-3, was best for
    # both architectures there.
    "CoNLL": ("conll2003", 1000, 5, "f1"),
}
TASK_LR = {"CoNLL": 1e-3}   # a task's fine-tuning rate when --ft-lrs is not given


def prepare_corpus(data: Path, work: Path, heldout: float) -> tuple[Path, Path]:
    """train/ and heldout/ text files: the last `heldout` share of each source file's lines."""
    train, held = work / "corpus" / "train", work / "corpus" / "heldout"
    if (work / "corpus" / "done").exists():
        return train, held
    shutil.rmtree(work / "corpus", ignore_errors=True)
    train.mkdir(parents=True)
    held.mkdir(parents=True)
    src = data / "pretrain_text"
    files = sorted((src / "gutenberg").glob("pg*.txt")) + [
        src / "wikitext-2-v1-tokens" / "valid.txt", src / "wikitext-2-v1-tokens" / "test.txt",
        src / "tinyshakespeare_input.txt"]
    for f in files:
        lines = f.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n")
        cut = int(len(lines) * (1 - heldout))
        while cut < len(lines) and lines[cut].strip():   # at a document boundary
            cut += 1
        name = f"{f.parent.name}-{f.name}"
        (train / name).write_text("\n".join(lines[:cut]) + "\n", encoding="utf-8")
        (held / name).write_text("\n".join(lines[cut:]) + "\n", encoding="utf-8")
    (work / "corpus" / "done").write_text("")
    return train, held


def prepare_glue(data: Path, work: Path) -> dict[str, tuple[Path, Path]]:
    out = {}
    for task, (_, rows, _, _) in TASKS.items():
        if task == "CoNLL":
            out[task] = prepare_conll(data / "conll2003", work / "glue" / task, rows)
            continue
        d = work / "glue" / task
        d.mkdir(parents=True, exist_ok=True)
        src = data / "glue" / task
        lines = (src / "train.tsv").read_text(encoding="utf-8-sig").splitlines(keepends=True)
        if rows is not None:
            lines = lines[:1 + rows]
        if not (d / "dev.tsv").exists():   # written once: runs side by side read them
            (d / "train.tsv").write_text("".join(lines), encoding="utf-8")
            shutil.copy(src / "dev.tsv", d / "dev.tsv")
        out[task] = (d / "train.tsv", d / "dev.tsv")
    return out


def prepare_conll(src: Path, d: Path, sentences: int) -> tuple[Path, Path]:
    """bench_conll.py's seeded sample of the training sentences (the same file it trains on),
    and the whole dev file."""
    from studies.conll.bench_conll import training_file

    d.mkdir(parents=True, exist_ok=True)
    train = d / f"train-{sentences}.txt"
    if not train.exists():
        training_file(src, sentences, d)
    return train, src / "valid.txt"


# ---- the transformers baselines --------------------------------------------------------------

# The peer of bertctl's ModernBERT recipe: transformers' own ModernBertForMaskedLM of the same
# shape (bertctl's mini ModernBERT config, as config.json), trained the way a ModernBERT user
# writes run_mlm: batch 32, ModernBERT's peak lr 8e-4, 30% masks (its pretraining rate), fp32.
PEERS = {"hf": {"batch": BATCH, "lr": LR, "mlm_probability": 0.15},
         "hf-modern": {"batch": 32, "lr": 8e-4, "mlm_probability": 0.3}}


def hf_config(row: str, vocab_size: int, tok):
    """transformers' config of a baseline row: BERT mini, or bertctl's ModernBERT mini as
    transformers reads it (the same numbers bertctl's modernbert row trains)."""
    if row == "hf":
        from transformers import BertConfig

        return BertConfig(vocab_size=vocab_size, hidden_size=256, num_hidden_layers=4,
                          num_attention_heads=4, intermediate_size=1024,
                          max_position_embeddings=512)
    from transformers import ModernBertConfig

    from bertctl.model import ARCHITECTURES

    ours = ARCHITECTURES["modernbert"].config_class.from_preset(
        "mini", vocab_size=vocab_size, max_position_embeddings=8192,
        pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id,
        sep_token_id=tok.sep_token_id)
    return ModernBertConfig(**ours.to_hf_dict())


def hf_pretrain(tokenizer_json: Path, corpus: Path, out: Path, budget: float, threads: int,
                seed: int, layout: str = "lines", row: str = "hf") -> dict:
    """A transformers row: reference/mlm_pretrain.py with this row's config and settings."""
    peer = PEERS[row]
    return mlm_pretrain.pretrain(tokenizer_json, corpus, out, budget, threads, seed,
                                 lambda tok: hf_config(row, len(tok), tok), seq=SEQ,
                                 warmup=WARMUP, batch_size=peer["batch"], lr=peer["lr"],
                                 mlm_probability=peer["mlm_probability"], layout=layout)


# ---- the bertctl rows ------------------------------------------------------------------------

def bertctl_row(row: str, tok: Path, corpus: Path, work: Path, budget: float, threads: int,
                seed: int, mask_rate: float, log: Path, recipe: Path | None = None,
                name: str | None = None, build_args: list[str] = (),
                pretrain_args: list[str] = ()) -> tuple[Path, dict]:
    name = name or row
    if row == "modern":   # the ModernBERT recipe as it ships (or the one given)
        row, recipe = "mlm", recipe or MODERN_RECIPE
    data = work / name / "data"
    if row == "paper":
        build = []
        train = ["--objective", "bert"]
    else:
        build = ["--no-nsp", "--masking", "dynamic", "--packing", "concatenated"]
        # ELECTRA's small and base models mask 15% (the paper); mlm takes --mask-rate.
        train = ["--objective", row, "--mask-rate", str(mask_rate if row == "mlm" else 0.15)]
    if row == "mlm" and recipe is not None:
        # The data recipe as it ships, read rather than restated here so the two cannot drift.
        build = ["--config", DATA_RECIPE, "--validation-fraction", 0]
    t0 = time.perf_counter()
    if not (data / "artifact.json").exists():
        common.sh(BERTCTL + ["build-pretrain-data", tok, corpus, "--out", data,
                      "--max-seq-length", SEQ, "--workers", 1, *build, *build_args], log,
           threads)
    prep_s = time.perf_counter() - t0
    model = work / name / "model"
    if row == "mlm" and recipe is not None:
        # The recipe as it ships (what `make -C pipelines budget` runs), on the shared budget.
        shape = ["--config", recipe, "--model-size", "mini"]
    else:
        shape = ["--model-size", "mini", "--max-position-embeddings", 512, "--batch-size",
                 BATCH, "--lr", LR, "--warmup", WARMUP, *train]
    common.sh(BERTCTL + ["pretrain", data, "--out", model, *shape, "--time-budget", budget,
                  "--seed", seed, "--threads", threads, "--log-every", 50,
                  "--checkpoint-every", 1000, *pretrain_args], log, threads)
    stats = json.loads((model / "artifact.json").read_text())["stats"]
    return model, {"steps": stats["step"], "tokens": stats.get("tokens"),
                   "elapsed_s": stats.get("elapsed_s"), "prep_s": round(prep_s, 1),
                   "final_train_loss": stats.get("final_train", {}).get("loss"),
                   "precision": "auto"}


def heldout_loss(model: Path, heldout_data: Path, work: Path, row: str, threads: int,
                 log: Path, name: str) -> float | None:
    if row == "electra":
        return None
    out = work / name / "heldout-eval"
    if not (out / "artifact.json").exists():
        common.sh(BERTCTL + ["eval", model, heldout_data, "--out", out, "--threads", threads,
                      "--precision", "fp32", "--split", "train"], log, threads)
    return json.loads((out / "metrics.json").read_text())["mlm_loss"]


FT_LR = 1e-4   # the fine-tuning lr of every row before --ft-lrs


def lr_tag(lr: float) -> str:
    mantissa, exponent = f"{lr:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def finetune(row: str, model: Path, task: str, files, seed: int, lr: float, work: Path,
             threads: int, log: Path) -> float:
    preset, _, epochs, metric = TASKS[task]
    # Runs at the old single lr keep their old directories, so earlier results are reused.
    run = work / row / "glue" / (f"{task}-seed{seed}" if lr == FT_LR
                                 else f"{task}-lr{lr_tag(lr)}-seed{seed}")
    result = run / "result.json"
    if result.exists():
        return json.loads(result.read_text())["value"]
    shutil.rmtree(run, ignore_errors=True)
    common.sh(BERTCTL + ["finetune", model, files[0], "--task", preset, "--out", run / "model",
                  "--epochs", epochs, "--lr", lr, "--batch-size", 32, "--seed", seed,
                  "--max-seq-length", SEQ, "--threads", threads, "--warmup", 0.1], log, threads)
    common.sh(BERTCTL + ["eval", run / "model", files[1], "--out", run / "dev", "--threads", threads],
       log, threads)
    value = json.loads((run / "dev" / "metrics.json").read_text())[metric]
    result.write_text(json.dumps({"value": value}))
    return value


def results_by_lr(rec: dict) -> dict[str, dict[str, list[float]]]:
    """A row's fine-tuning results per rate; rows from before --ft-lrs ran at FT_LR only."""
    return rec.get("glue_by_lr") or ({lr_tag(FT_LR): rec["glue"]} if rec.get("glue") else {})


def task_rates(entries: list[str] | None, tasks, ap) -> dict[str, list[float]]:
    """--ft-lrs: plain rates for every task, TASK=LR,LR for one (its own replace the plain)."""
    shared: list[float] = []
    own: dict[str, list[float]] = {}
    for entry in entries or []:
        task, _, lrs = entry.rpartition("=")
        if task and task not in TASKS:
            ap.error(f"--ft-lrs {entry}: no task {task!r} (tasks: {', '.join(TASKS)})")
        try:
            rates = [float(lr) for lr in lrs.split(",")]
        except ValueError:
            ap.error(f"--ft-lrs {entry}: not a learning rate")
        (own.setdefault(task, []) if task else shared).extend(rates)
    return {t: own.get(t) or shared or [TASK_LR.get(t, FT_LR)] for t in tasks}


def select_lr(by_lr: dict[str, dict[str, list[float]]]) -> tuple[dict, dict]:
    """Each task's results at the lr whose mean over seeds is best on dev (as the paper picks
    its fine-tuning lr), and the lr chosen per task. Only lrs run with every seed compete."""
    chosen, values = {}, {}
    for task in {t for per_task in by_lr.values() for t in per_task}:
        runs = {lr: v[task] for lr, v in by_lr.items() if task in v}
        n = max(len(v) for v in runs.values())
        lr = max((lr for lr, v in runs.items() if len(v) == n),
                 key=lambda lr: statistics.mean(runs[lr]))
        chosen[task], values[task] = lr, runs[lr]
    return values, chosen


def table(work: Path, against: str | None = None) -> str:
    names = [r for r in ROWS if (work / r / "row.json").exists()] + sorted(
        d.name for d in work.iterdir() if d.name not in ROWS and (d / "row.json").exists())
    recs = {row: json.loads((work / row / "row.json").read_text()) for row in names}
    # The tasks some row was fine-tuned on: #55's rows ran CoNLL and SST-2 alone.
    tasks = [t for t in TASKS if any(t in r.get("glue", {}) for r in recs.values())]
    every = tasks == list(TASKS)
    lines = ["| pretraining | steps | tokens seen | held-out MLM loss | " +
             " | ".join(f"{t} dev ({TASKS[t][3]})" for t in tasks) +
             (" | mean over tasks |" if every else " |"),
             "|---|---|---|---|" + "---|" * (len(tasks) + every)]
    for row, r in recs.items():
        cells, seed_means = [], []
        per_task = r.get("glue", {})
        for task in tasks:
            v = per_task.get(task, [])
            tried = sorted((lr for lr, runs in results_by_lr(r).items() if task in runs),
                           key=float)
            lr = (f", lr {r.get('ft_lr', {}).get(task, tried[0])}" +
                  (f" of {', '.join(tried)}" if len(tried) > 1 else "")) if tried else ""
            cells.append(f"{statistics.mean(v):.3f} ± {statistics.stdev(v):.3f} (n {len(v)}{lr})"
                         if len(v) > 1 else "–")
        if every:   # the mean over tasks, per seed, then mean ± sd (and se) over seeds
            n = min((len(v) for v in per_task.values()), default=0)
            if n > 1 and len(per_task) == len(TASKS):
                seed_means = [statistics.mean(per_task[t][i] for t in TASKS) for i in range(n)]
            cells.append(f"{statistics.mean(seed_means):.4f} ± {statistics.stdev(seed_means):.4f} "
                         f"(se {statistics.stdev(seed_means) / math.sqrt(n):.4f})"
                         if seed_means else "–")
        loss = r.get("heldout_mlm_loss")
        lines.append(f"| {row} | {r['steps']:,} | {r['tokens'] or 0:,} | "
                     f"{'n/a' if loss is None else f'{loss:.3f}'} | " + " | ".join(cells) + " |")
    if against in recs:
        lines += ["", f"Against {against} (difference of the means; its standard error, "
                  "sqrt(se1^2 + se2^2); and their ratio; each side at its best of the "
                  "fine-tuning rates both ran):", "",
                  "| row | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
        for row, mine in recs.items():
            if row != against:
                lines.append(f"| {row} | " + " | ".join(
                    _difference(*_at_shared_rates(mine, recs[against], t)) for t in tasks) + " |")
        lines += _over_runs_table(recs, tasks, against)
    return "\n".join(lines)


def run_of(name: str) -> str:
    """The row a directory is a pretraining run of: NAME-seedN is a further run of NAME."""
    base, sep, seed = name.rpartition("-seed")
    return base if sep and seed.isdigit() else name


def _over_runs_table(recs: dict[str, dict], tasks: list[str], against: str) -> list[str]:
    """Each row's runs together against the peer's, once some row was pretrained more than once:
    one pretraining run moves fine-tuning by more than its seeds' standard error says, so a lead
    is judged over runs (a row run once counts its seeds alone)."""
    groups: dict[str, list[dict]] = {}
    for row, rec in recs.items():
        groups.setdefault(run_of(row), []).append(rec)
    peer = groups[run_of(against)]
    if not any(len(runs) > 1 for runs in groups.values()):
        return []
    lines = ["", f"Over pretraining runs, against {run_of(against)}'s {len(peer)} (each side "
             "at one fine-tuning rate, its best mean over its runs of those every run of both "
             "ran; each run's mean over seeds, then the mean over runs; the standard error the "
             "larger of the runs' spread and the seeds'):", "",
             "| row (runs) | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for base, runs in groups.items():
        if base != run_of(against):
            lines.append(f"| {base} ({len(runs)}) | " + " | ".join(
                _runs_difference(runs, peer, t) for t in tasks) + " |")
    return lines


def _runs_difference(mine: list[dict], peer: list[dict], task: str) -> str:
    sides = [[{lr: v[task] for lr, v in results_by_lr(r).items() if task in v} for r in runs]
             for runs in (mine, peer)]
    everyone = [run for side in sides for run in side]
    n = max((len(v) for run in everyone for v in run.values()), default=0)
    shared = set.intersection(*({lr for lr, v in run.items() if len(v) == n}
                                for run in everyone)) if everyone and n > 1 else set()
    if not shared:
        return "–"
    stats = []
    for side in sides:
        lr = max(shared, key=lambda lr: statistics.mean(statistics.mean(r[lr]) for r in side))
        means = [statistics.mean(r[lr]) for r in side]
        # The variance of the mean over runs: from the runs' spread (which holds pretraining
        # noise, with one degree of freedom per further run) and from the seeds alone (a floor).
        by_seeds = sum(statistics.variance(r[lr]) / n for r in side) / len(side) ** 2
        by_runs = statistics.variance(means) / len(means) if len(means) > 1 else 0.0
        stats.append((statistics.mean(means), max(by_runs, by_seeds)))
    return _signed(stats[0][0] - stats[1][0], math.sqrt(stats[0][1] + stats[1][1]))


def _at_shared_rates(mine: dict, peer: dict, task: str) -> tuple[list[float], list[float]]:
    """Both rows' results for a task, each at its best rate among those both ran: a row tried
    at more rates would otherwise win by the trying."""
    def runs(rec):
        return {lr: v[task] for lr, v in results_by_lr(rec).items() if task in v}
    a, b = runs(mine), runs(peer)
    shared = a.keys() & b.keys()
    best = [select_lr({lr: {task: r[lr]} for lr in shared})[0].get(task, []) for r in (a, b)]
    return best[0], best[1]


def _difference(a: list[float], b: list[float]) -> str:
    if len(a) < 2 or len(b) < 2:
        return "–"
    return _signed(statistics.mean(a) - statistics.mean(b), math.hypot(
        statistics.stdev(a) / math.sqrt(len(a)), statistics.stdev(b) / math.sqrt(len(b))))


def _signed(d: float, se: float) -> str:
    """A difference with its standard error and their ratio."""
    return f"{d:+.4f} (se {se:.4f}, {d / se:+.1f} se)" if se > 0 else f"{d:+.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "budget")
    ap.add_argument("--budget", default="20m", help="pretraining wall-clock per row")
    ap.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mask-rate", type=float, default=0.3, help="the mlm row's, without "
                    "--recipe")
    ap.add_argument("--recipe", type=Path, nargs="?", const=RECIPE, default=None,
                    help="run the mlm row with this pretrain config (its lr, batch, dropout, "
                    "mask rate; the mini model) instead of the shared settings (bare: "
                    f"{RECIPE.relative_to(ROOT)})")
    ap.add_argument("--name", help="the row's directory and table label (one row; default: "
                    "the row), for variants of a row side by side")
    ap.add_argument("--build-args", default="", help="extra build-pretrain-data flags of a "
                    "bertctl row (one string), e.g. \"--packing full-sentences\"")
    ap.add_argument("--pretrain-args", default="", help="extra pretrain flags of a bertctl row")
    ap.add_argument("--tokenize-args", default="", help="a bertctl row's own vocabulary: "
                    "tokenize flags (one string), e.g. \"--model byte-level-bpe --cased\"")
    ap.add_argument("--pretrain-seed", type=int, default=0, help="the pretraining seed of every "
                    "row run, the peers' too: a second run of a row (kept as ROW-seedN) is "
                    "what tells a recipe's gain from one run's luck")
    ap.add_argument("--hf-layout", choices=("lines", "blocks"), default="lines",
                    help="the hf row's: lines as run_mlm.py (every line in [CLS] ... [SEP]), "
                    "or blocks (one [CLS] ... [SEP] per 128 tokens, as bertctl's concatenated)")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--ft-lrs", nargs="+", default=None, metavar="LR|TASK=LR,...",
                    help="fine-tune at each; a row's task reports the lr best on dev (mean "
                    "over the seeds), so architectures are not judged at one's best rate. "
                    "TASK=LR,LR sets one task's rates (e.g. CoNLL=1e-3 SST-2=1e-4,3e-4); "
                    f"a task without its own takes the plain ones (unset: {FT_LR:g}, CoNLL "
                    f"{TASK_LR['CoNLL']:g})")
    ap.add_argument("--heldout", type=float, default=0.03)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--pretrain-only", action="store_true")
    ap.add_argument("--table", action="store_true", help="print the table and stop")
    ap.add_argument("--against", help="a row the table compares every other row with "
                    "(difference and its standard error per task), e.g. hf-modern")
    args = ap.parse_args()
    if args.name and len(args.rows) != 1:
        ap.error("--name names one row")
    rates = task_rates(args.ft_lrs, args.tasks, ap)   # a mistyped rate fails before an hour's run
    work = args.work.resolve()
    if args.table:
        print(table(work, args.against))
        return
    names = {row: args.name or (f"{row}-seed{args.pretrain_seed}" if args.pretrain_seed else row)
             for row in args.rows}
    for name in names.values():   # a kept row is reused: it must be the run asked for
        kept = work / name / "row.json"
        seed = json.loads(kept.read_text()).get("pretrain_seed", 0) if kept.exists() else None
        if seed not in (None, args.pretrain_seed):
            ap.error(f"{kept}: pretrained with seed {seed}, not {args.pretrain_seed}: give "
                     "the run its own --name")
    from bertctl.train.settings import parse_duration

    budget = parse_duration(args.budget)
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    train_corpus, held_corpus = prepare_corpus(args.data.resolve(), work, args.heldout)
    glue = {t: f for t, f in prepare_glue(args.data.resolve(), work).items() if t in args.tasks}
    def vocabulary(where: Path, flags: list[str]) -> tuple[Path, Path]:
        """The tokenizer trained on the training text, and the held-out data built with it."""
        tok, heldout = where / "tokenizer", where / "heldout-data"
        if not (tok / "artifact.json").exists():
            common.sh(BERTCTL + ["tokenize", train_corpus, "--out", tok, "--vocab-size",
                                 args.vocab_size, *flags], log, args.threads)
        if not (heldout / "artifact.json").exists():
            common.sh(BERTCTL + ["build-pretrain-data", tok, held_corpus, "--out", heldout,
                                 "--no-nsp", "--packing", "concatenated", "--max-seq-length",
                                 SEQ, "--workers", 1], log, args.threads)
        return tok, heldout

    tok, heldout = vocabulary(work, [])
    import torch

    machine = {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
               "threads": args.threads, "budget_s": budget}
    for row in args.rows:
        name = names[row]
        rec_path = work / name / "row.json"
        rec = json.loads(rec_path.read_text()) if rec_path.exists() else None
        if rec is None:
            (work / name).mkdir(parents=True, exist_ok=True)
            if args.tokenize_args:
                if row in PEERS:
                    ap.error("--tokenize-args: the peers read the shared vocabulary")
                tok, heldout = vocabulary(work / name, args.tokenize_args.split())
            if row in PEERS:
                model = work / name / "model"
                rec = hf_pretrain(tok / "tokenizer.json", train_corpus, model, budget,
                                  args.threads, args.pretrain_seed, args.hf_layout, row)
            else:
                model, rec = bertctl_row(row, tok, train_corpus, work, budget, args.threads,
                                         args.pretrain_seed, args.mask_rate, log, args.recipe,
                                         name, args.build_args.split(),
                                         args.pretrain_args.split())
            rec.update(model=str(model), machine=machine,
                       heldout_mlm_loss=heldout_loss(model, heldout, work, row, args.threads,
                                                     log, name),
                       build_args=args.build_args, pretrain_args=args.pretrain_args,
                       tokenize_args=args.tokenize_args,
                       pretrain_seed=args.pretrain_seed)
            rec_path.write_text(json.dumps(rec, indent=1))
            print(name, json.dumps(rec), flush=True)
        if args.pretrain_only:
            continue
        by_lr = rec.setdefault("glue_by_lr", results_by_lr(rec))
        for task in glue:
            for lr in rates[task]:
                by_lr.setdefault(lr_tag(lr), {})[task] = []
        for seed in args.seeds:   # seed by seed: a run cut short leaves whole seeds
            for task, files in glue.items():
                for lr in rates[task]:
                    by_lr[lr_tag(lr)][task].append(finetune(
                        name, Path(rec["model"]), task, files, seed, lr, work, args.threads, log))
            rec["glue"], rec["ft_lr"] = select_lr(by_lr)
            rec_path.write_text(json.dumps(rec, indent=1))
        print(name, json.dumps(rec["glue"]), flush=True)
    print(table(work, args.against))


if __name__ == "__main__":
    main()
