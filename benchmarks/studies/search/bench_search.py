"""Search, round two (#64): what each step of the search recipe adds, over seeds.

    .venv/bin/python benchmarks/studies/search/bench_search.py --shared ../shared/data --out runs/bench-search \
        [--data DIR] [--model DIR] [--seeds 0 1 2 3 4] [--threads 2]
        [--steps baseline inbatch mined st-inbatch st-mined rerank distill again st-rerank
                 st-distill round2 round3 st-round2 st-round3 late-mined late-round3
                 round3+late head-mined head-round3] [--head-epochs 1]
        [--distill-loss kl]
        [--rerank-lr 5e-5 --rerank-epochs 1
        --rerank-negatives 3]

The set (built from `--shared`, the workplace's public data; bertctl never reads it): paraphrase
retrieval from GLUE's MRPC and STS-B. A query is a sentence of a paraphrase pair (MRPC label 1,
STS-B score 4 or more), its one relevant document the pair's other sentence; the corpus searched
is every distinct sentence of both tasks' train, dev and test files (about 23,000) but the
test queries themselves (a query is not its own answer, as BEIR's Quora), so the neighbours
are other sentences on the same news events and captions. Training pairs come from
the train files, test queries from the dev files; a training pair sharing a sentence with any
test pair is left out, and negatives are mined from the train files' sentences only.

Each arm is `bertctl finetune MODEL PAIRS --task retrieval` (one epoch, batch 32, lr 2e-5 or
--lr, 64 pieces) then `bertctl eval` on the set's BEIR directory; `mined` first runs `bertctl mine
MODEL train.tsv --corpus train_sentences.txt` (MINE_FLAGS: 3 negatives from the 50 best
ranks after the positives, each at most 95% of its positive's cosine) and fine-tunes MODEL on
its pairs (`--mine-with inbatch`: each seed mines with its own in-batch model, for a MODEL that is
no search model yet). nDCG@10 per seed, the mean
and sample sd, and each arm's difference from the one before with its standard error (Welch).
The peer rows (`st-inbatch`, `st-mined`) are sentence-transformers' own recipe on the same
pairs and settings: its mine_hard_negatives with the same guards (3 negatives, range_max 50,
relative_margin 0.05, top, n-tuple), its trainer with MultipleNegativesRankingLoss (one epoch,
batch 32, the same lr, 10% warm-up then linear, weight decay 0.01, 64 tokens, the same precision),
each scored by `bertctl eval` (its trainer needs accelerate: `.venv/bin/pip install
accelerate`). Each row's seconds are its fine-tuning process's wall time; every process's wall
time, CPU time (user + system) and peak resident memory go to results.json's "costs" per stage
and seed (not a bertctl stage that found its artifact up to date: it did no work), and the
costs table sets bertctl's stages beside the peer's (medians over the seeds).
The second stage (second_stage below): `rerank`, a reranker trained on the mined rows (or, with
--rerank-negatives, rows mined as they were with that many negatives) and the mined model's
search reranked by it (and `rerank_fused`, eval's fusion of the reranker's order with the
first stage's); `distill`, the mined model trained one more epoch on its
own mined candidates scored by that reranker (`mine --teacher`, then --distill-loss); `again`,
its control: the same rows and epoch with in-batch negatives and no teacher.
Rounds (`roundK`, `st-roundK`, K from 2; the `make -C pipelines search` ROUNDS): the model of
round K - 1 (round 1 is `mined`) mines its training queries again with the same guards, each
tool with its own miner, and is trained one more epoch on its rows with the same seed.
Late interaction (`late-X`, X a step run before: `late-mined`, `late-round3`): each seed's model
of step X reorders its own first 10 documents a query by MaxSim over its token vectors (`eval
--rerank` it `--rerank-scoring maxsim`), no second model trained; `head-X`, the same after a
late-interaction head (`finetune --late-dim 128`, the encoder frozen) is fitted to X's model
on X's rows, compared with `late-X`; `roundK+late`: round K with
the start's own MaxSim scores of its rows as the teacher (listwise KL plus in-batch negatives),
`roundK` its control.
Results go to OUT/results.json; the table to stdout, with the machine line.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from studies.search import search_data  # noqa: E402
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

BERTCTL = [sys.executable, "-m", "bertctl"]
# sentence-transformers' own recipe on the same data and settings, run in a fresh process.
ST = common.BENCHMARKS / "reference" / "st_search_recipe.py"
TRAIN_FLAGS = ["--epochs", "1", "--batch-size", "32", "--max-seq-length", "64"]   # + --lr
MINE_FLAGS = ["--negatives", "3", "--range-min", "0", "--range-max", "50",
              "--relative-margin", "0.05"]
# The reranker: a cross-encoder from the same checkpoint on the mined rows (listwise: the
# positive against its negatives), 32 rows a step as the peer's BCE batches; + --lr, --epochs
# (--rerank-epochs) and, with --rerank-negatives other than MINE_FLAGS's 3, rows of their own.
RERANK_FLAGS = ["--batch-size", "32", "--max-seq-length", "64"]
RERANK_DEPTH = "10"


def st(what: str, model: Path, pairs: Path, out: Path, seed: int, args, precision: str,
       log: Path, corpus: Path | None = None, negatives: int = 3) -> dict:
    """One of the peer's runs (the ST script's `what`; `mine` keeps `negatives` a row): its
    printed figures, and under "cost" what the process cost (common.measured)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as printed:
        cost = common.measured([sys.executable, str(ST), what, model, pairs, out, str(seed),
                                precision, str(args.threads), str(corpus or ""),
                                str(args.lr), str(args.rerank_lr), str(negatives),
                                str(args.rerank_epochs)], log, args.threads,
                               stdout=printed)
        printed.seek(0)
        return {**json.loads(printed.read().strip().splitlines()[-1]), "cost": cost}


def made(args: list, out: Path, log: Path, threads: int) -> dict | None:
    """A bertctl stage writing the artifact `out`, run as common.measured; its cost, or None
    when it found the artifact up to date (it did not write it again)."""
    def written() -> float | None:
        return (out / "artifact.json").stat().st_mtime_ns if (out / "artifact.json").exists() \
            else None

    before = written()
    cost = common.measured(args, log, threads=threads)
    return cost if written() != before else None


def fine_tune(start: Path, pairs: Path, seed: int, ft: Path, args, runtime: list, log: Path,
              *flags: str) -> dict | None:
    """bertctl's bi-encoder fine-tuning of every arm and round (TRAIN_FLAGS, --lr, the seed;
    `flags` more), run as `made`."""
    return made([*BERTCTL, "finetune", start, pairs, "--task", "retrieval", *flags,
                 *TRAIN_FLAGS, "--lr", str(args.lr), "--seed", str(seed), "--out", ft,
                 *runtime], ft, log, args.threads)


def _cost(results: dict, stage: str, seed, cost: dict | None) -> None:
    """Add a process's cost to a stage's for a seed (a stage of several processes, as
    distillation's scoring and training, sums their times and keeps the largest memory);
    None, a stage that did no work, is left out."""
    if cost is None:
        return
    at = results.setdefault("costs", {}).setdefault(stage, {})
    was = at.get(str(seed)) if (stage, str(seed)) in _COSTED else None
    _COSTED.add((stage, str(seed)))
    at[str(seed)] = {"wall_s": round(cost["wall_s"] + (was or {}).get("wall_s", 0), 1),
                     "cpu_s": round(cost["cpu_s"] + (was or {}).get("cpu_s", 0), 1),
                     "peak_mb": max(cost["peak_mb"], (was or {}).get("peak_mb", 0))}


# (stage, seed) costed in this run: an earlier run's figure is replaced by the first process
# of the stage, not added to.
_COSTED: set[tuple[str, str]] = set()


def ndcg(run: Path) -> float:
    return json.loads((run / "metrics.json").read_text())["ndcg@10"]


def se_diff(a: list[float], b: list[float]) -> float:
    return math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shared", type=Path)
    p.add_argument("--data", type=Path, help="a set built elsewhere in this layout (train.tsv, "
                   "train_sentences.txt, beir/: bench_search_dev.py's), instead of --shared's "
                   "paraphrase set")
    p.add_argument("--out", type=Path, default=Path("runs/bench-search"))
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", nargs="+", default=["baseline", "inbatch", "mined"])
    p.add_argument("--head-epochs", type=int, default=1,
                   help="head-X: epochs of the late head's fitting (lr 3e-3)")
    p.add_argument("--precision", default="auto")
    p.add_argument("--lr", type=float, default=2e-5,
                   help="the bi-encoder's fine-tuning rate, both tools (all-MiniLM-L6-v2's)")
    p.add_argument("--rerank-lr", type=float, default=5e-5, help="the reranker's, both tools")
    p.add_argument("--rerank-epochs", type=int, default=1, help="the reranker's, both tools")
    p.add_argument("--rerank-negatives", type=int, default=3,
                   help="negatives a row of the reranker's training rows: 3 trains on the "
                        "mined arm's rows; another count mines rows of its own, with the same "
                        "model and guards (both tools)")
    p.add_argument("--mine-with", choices=["original", "inbatch"], default="original",
                   help="mine with the original model, once, or per seed with that seed's "
                        "in-batch model (each tool its own; for a model that is no search "
                        "model yet)")
    p.add_argument("--distill-loss", default="kl",
                   help="the loss the `distill` step trains with (kl, margin_mse, ...)")
    args = p.parse_args()
    model = args.model or common.default_model()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    data = args.data or out / "data"
    facts = {"data": str(data)} if args.data else search_data.build(args.shared, data)
    runtime = ["--precision", args.precision, "--threads", str(args.threads)]
    # Steps run before (another --steps) are kept: the peers may run after bertctl's rows.
    kept = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() \
        else {}
    # ... and a step run again replaces its earlier figures of the seeds run now: --seeds 3 4
    # adds two seeds to a step run with 0 1 2 before.
    results: dict = {**kept, "machine": common.machine(args.threads), "set": facts, "steps": {},
                     "rates": {"lr": args.lr, "rerank_lr": args.rerank_lr,
                               "rerank_epochs": args.rerank_epochs,
                               "rerank_negatives": args.rerank_negatives}}
    for name, step in kept.get("steps", {}).items():
        step = _without_seeds(step, args.seeds) if name in args.steps else step
        if step is not None:
            results["steps"][name] = step
    print(results["machine"], json.dumps(facts))

    def evaluate(m: Path, name: str) -> float:
        ev = out / f"eval-{name}"
        common.sh([*BERTCTL, "eval", m, data / "beir", "--task", "retrieval", "--out", ev,
                   *runtime], log, threads=args.threads)
        return ndcg(ev)

    if "baseline" in args.steps:
        results["steps"]["baseline"] = {"ndcg": [evaluate(model, "baseline")]}
    precision = args.precision
    if precision == "auto":
        from bertctl import hardware
        precision = hardware.auto_precision("cpu")

    def mined_rows(prefix: str, seed: int, negatives: int = 3) -> Path:
        """The mined rows a seed's `mined` arm trains on (mined once, with the original, or
        per seed, with that seed's in-batch model: --mine-with): mined when the arm runs now,
        else the rows an earlier run mined. Another count of `negatives` (the reranker's
        rows): mined apart, with the same model and guards, its cost the reranker's."""
        per_seed = args.mine_with == "inbatch"
        miner = out / f"ft-{prefix}inbatch-seed{seed}" if per_seed else model
        count = f"-n{negatives}" if negatives != 3 else ""
        tag = (f"-seed{seed}" if per_seed else "") + count
        rows = out / (f"st-mined{tag}.jsonl" if prefix else f"mined{tag}/pairs.jsonl")
        if rows.exists() and (rows in mined_now or f"{prefix}mined" not in args.steps):
            return rows
        started = time.monotonic()
        if prefix:
            cost = st("mine", miner, data / "train.tsv", rows, 0, args, precision, log,
                      data / "train_sentences.txt", negatives)["cost"]
        else:
            flags = [*MINE_FLAGS]
            flags[flags.index("--negatives") + 1] = str(negatives)
            cost = made([*BERTCTL, "mine", miner, data / "train.tsv", "--corpus",
                         data / "train_sentences.txt", *flags, "--out", rows.parent,
                         *runtime], rows.parent, log, args.threads)
        key = (str(seed) if per_seed else "original") + count
        _cost(results, f"{prefix}{'mine' if negatives == 3 else 'rerank'}",
              seed if per_seed else "original", cost)
        if not prefix:
            _keyed(results, "mine_stats")[key] = \
                json.loads((rows.parent / "artifact.json").read_text())["stats"]
        seconds = _keyed(results, "st_mine_seconds" if prefix else "mine_seconds")
        seconds[key] = round(time.monotonic() - started, 1)
        mined_now.add(rows)
        return rows

    mined_now: set[Path] = set()
    arms = {"inbatch": lambda seed: data / "train.tsv",
            "st-inbatch": lambda seed: data / "train.tsv",
            "mined": lambda seed: mined_rows("", seed),
            "st-mined": lambda seed: mined_rows("st-", seed)}

    def train(arm: str, pairs: Path, seed: int, ft: Path) -> None:
        if arm.startswith("st-"):
            cost = st("train", model, pairs, ft, seed, args, precision, log)["cost"]
        else:
            cost = fine_tune(model, pairs, seed, ft, args, runtime, log)
        _cost(results, arm, seed, cost)

    for arm in [a for a in args.steps if a in arms]:
        for seed in args.seeds:
            ft = out / f"ft-{arm}-seed{seed}"
            started = time.monotonic()
            train(arm, arms[arm](seed), seed, ft)
            _record(results["steps"], arm, seed, evaluate(ft, f"{arm}-seed{seed}"),
                    time.monotonic() - started)
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    for prefix in ("", "st-"):
        for x in sorted(x for x in args.steps if re.fullmatch(rf"{prefix}round[2-9]", x)
                        or (not prefix and re.fullmatch(r"round[2-9]\+late", x))):
            rounds(prefix, int(x[len(prefix) + 5]), args, out, data, runtime, precision,
                   results, log, evaluate, taught=x.endswith("+late"))
            (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    for prefix in ("", "st-"):
        if any(f"{prefix}{step}" in args.steps for step in ("rerank", "distill", "again")):
            second_stage(prefix, args, out, data, model, runtime, precision, results, log,
                         mined_rows)
            (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    def rows_of(step: str, seed: int) -> Path:
        """The rows step's model was trained on (its mined rows, or a round's)."""
        if step == "mined":
            return mined_rows("", seed)
        if re.fullmatch(r"round[2-9](\+late)?", step):
            return out / f"{step}-seed{seed}" / "pairs.jsonl"
        sys.exit(f"head-{step}: a late head is fitted on the rows of mined or a round")

    for step in [x for x in args.steps if x.startswith(("late-", "head-"))]:
        late(step, args, out, data, runtime, results, log, rows_of)
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n{results['machine']}; {facts['test_queries']} queries over "
          f"{facts['documents']:,} sentences, {facts['train_pairs']:,} training pairs")
    print("| step | nDCG@10 | runs | vs the step before | its fine-tuning, s |")
    print("|---|---|---|---|---|")
    steps = results["steps"]
    for name, r in steps.items():
        v = r["ndcg"]
        sd = f" ± {statistics.stdev(v):.4f}" if len(v) > 1 else ""
        before = BEFORE.get(name) or (name[len("late-"):] if name.startswith("late-") else
                                      "late-" + name[len("head-"):]
                                      if name.startswith("head-") else None)
        diff = (_diff(v, steps[before]["ndcg"]) + _paired(r, steps[before]) + f" (vs {before})"
                if before in steps else "")
        secs = f"{statistics.fmean(r['seconds']):.0f}" if r.get("seconds") else ""
        print(f"| {name} | {statistics.fmean(v):.4f}{sd} | {len(v)} | {diff} | {secs} |")
    if "distill" in steps and "again" in steps:
        print(f"distill ({steps['distill'].get('loss')}) - again (the same rows, no teacher): "
              f"nDCG@10 {_diff(steps['distill']['ndcg'], steps['again']['ndcg'])}"
              f"{_paired(steps['distill'], steps['again'])}")
    costs_table(results.get("costs", {}))
    for ours, theirs in (("inbatch", "st-inbatch"), ("mined", "st-mined"),
                         ("rerank", "st-rerank"), ("distill", "st-distill"),
                         *((f"round{k}", f"st-round{k}") for k in range(2, 10))):
        if ours in steps and theirs in steps:
            a, b = steps[ours], steps[theirs]
            print(f"bertctl {ours} - sentence-transformers: nDCG@10 "
                  f"{_diff(a['ndcg'], b['ndcg'])}; fine-tuning time "
                  f"{statistics.fmean(b['seconds']) / statistics.fmean(a['seconds']):.2f}x "
                  f"faster")


def costs_table(costs: dict) -> None:
    """Each stage's wall time, CPU time (user + system) and peak memory, bertctl's against the
    peer's, medians over the seeds run; then the sums over the stages both tools ran.
    search+rerank is `bertctl eval --rerank` in both columns (with each tool's reranker, which
    bertctl reads): shown, but no peer's figure."""
    if not costs:
        return
    print("\n| stage | bertctl: wall s, CPU s, peak MB | sentence-transformers | CPU time, "
          "s-t / bertctl |")
    print("|---|---|---|---|")
    total = {"": 0.0, "st-": 0.0}
    for stage in ("mine", "inbatch", "mined",
                  *(f"round{k}{t}" for k in range(2, 10) for t in ("", "+late")), "rerank",
                  "distill", "again", "search+rerank", "search+late"):
        cells = {}
        for prefix in ("", "st-"):
            runs = list(costs.get(prefix + stage, {}).values())
            cells[prefix] = {k: statistics.median(r[k] for r in runs)
                             for k in ("wall_s", "cpu_s", "peak_mb")} if runs else None
        if not cells[""] and not cells["st-"]:
            continue
        shown = [f"{c['wall_s']:.0f}, {c['cpu_s']:.0f}, {c['peak_mb']:,.0f}" if c else ""
                 for c in cells.values()]
        ratio = ""
        if cells[""] and cells["st-"] and not stage.startswith("search+"):
            ratio = f"{cells['st-']['cpu_s'] / cells['']['cpu_s']:.2f}x"
            for prefix in total:
                total[prefix] += cells[prefix]["cpu_s"]
        print(f"| {stage} | {shown[0]} | {shown[1]} | {ratio} |")
    if total[""]:
        print(f"| the stages both ran | CPU {total['']:.0f} s | {total['st-']:.0f} s | "
              f"{total['st-'] / total['']:.2f}x |")


def rounds(prefix: str, k: int, args, out: Path, data: Path, runtime: list, precision: str,
           results: dict, log: Path, evaluate, taught: bool = False) -> None:
    """Round k of mining and training for every seed: the model of round k - 1 (`mined`'s
    for k = 2, which must exist) mines the training queries with MINE_FLAGS (prefix "st-":
    sentence-transformers' mine_hard_negatives with the same guards) and trains one more epoch
    on its rows, the same seed; the stage's cost is the mining's and the training's.
    `taught` (`roundK+late`, bertctl's): the same rows with the start's own late-interaction
    scores beside them (`mine --teacher` it `--teacher-scoring maxsim`), trained on with
    listwise KL from them plus in-batch negatives (kl_infonce); `roundK` is its control."""
    step = f"{prefix}round{k}" + ("+late" if taught else "")
    for seed in args.seeds:
        before = prefix + ("mined" if k == 2 else f"round{k - 1}")
        start = out / f"ft-{before}-seed{seed}"
        if not (start / "config.json").exists():
            sys.exit(f"{step}: {start} is missing: run {before} for seed {seed} first")
        rows = out / (f"st-round{k}-seed{seed}.jsonl" if prefix
                      else f"{step}-seed{seed}/pairs.jsonl")
        teacher = ["--teacher", start, "--teacher-scoring", "maxsim"] if taught else []
        ft = out / f"ft-{step}-seed{seed}"
        started = time.monotonic()
        if prefix:
            _cost(results, step, seed, st("mine", start, data / "train.tsv", rows, 0, args,
                                          precision, log, data / "train_sentences.txt")["cost"])
            cost = st("train", start, rows, ft, seed, args, precision, log)["cost"]
        else:
            _cost(results, step, seed, made(
                [*BERTCTL, "mine", start, data / "train.tsv", "--corpus",
                 data / "train_sentences.txt", *MINE_FLAGS, *teacher, "--out", rows.parent,
                 *runtime], rows.parent, log, args.threads))
            cost = fine_tune(start, rows, seed, ft, args, runtime, log,
                             *(["--loss", "kl_infonce"] if taught else []))
        _cost(results, step, seed, cost)
        _record(results["steps"], step, seed, evaluate(ft, f"{step}-seed{seed}"),
                time.monotonic() - started)


def second_stage(prefix: str, args, out: Path, data: Path, model: Path, runtime: list,
                 precision: str, results: dict, log: Path, mined_rows) -> None:
    """Per seed, on that seed's mined model: a reranker trained on the mined rows and the
    mined model's search reranked (`rerank`), then the mined model trained further on its
    own mined candidates scored by that reranker, MarginMSE (`distill`); prefix "st-": the
    same with sentence-transformers' tools (its CrossEncoderTrainer with
    BinaryCrossEntropyLoss, its predict, its MarginMSELoss)."""
    steps = results["steps"]
    for seed in args.seeds:
        rows = mined_rows(prefix, seed, args.rerank_negatives)
        first = out / f"ft-{prefix}mined-seed{seed}"
        # Another recipe than the default writes apart (bertctl refuses to overwrite an
        # artifact of other settings), so both stay.
        recipe = "" if (args.rerank_negatives, args.rerank_epochs) == (3, 1) else \
            f"-n{args.rerank_negatives}-e{args.rerank_epochs}"
        rr = out / f"{prefix}reranker{recipe}-seed{seed}"
        started = time.monotonic()
        if prefix:
            cost = st("ce-train", model, rows, rr, seed, args, precision, log)["cost"]
        else:
            cost = made([*BERTCTL, "finetune", model, rows, "--task", "reranking",
                         *RERANK_FLAGS, "--epochs", str(args.rerank_epochs), "--lr",
                         str(args.rerank_lr), "--seed", str(seed),
                         "--out", rr, *runtime], rr, log, args.threads)
        _cost(results, f"{prefix}rerank", seed, cost)
        trained = time.monotonic() - started
        if f"{prefix}rerank" in args.steps:   # else only the teacher of the steps below
            ev = out / f"eval-{prefix}rerank{recipe}-seed{seed}"
            _cost(results, f"{prefix}search+rerank", seed, made(
                [*BERTCTL, "eval", first, data / "beir", "--task", "retrieval", "--rerank", rr,
                 "--rerank-depth", RERANK_DEPTH, "--out", ev, *runtime], ev, log,
                args.threads))
            metrics = json.loads((ev / "metrics.json").read_text())
            _record(steps, f"{prefix}rerank", seed, metrics["rerank/ndcg@10"], trained,
                    per_seed={"first_stage": metrics["ndcg@10"],
                              "qps": metrics["rerank/queries_per_second"]})
            if "rerank_fused/ndcg@10" in metrics:   # eval's since 2026-11-29
                _record(steps, f"{prefix}rerank_fused", seed, metrics["rerank_fused/ndcg@10"],
                        trained)
        if f"{prefix}distill" not in args.steps and f"{prefix}again" not in args.steps:
            continue
        started = time.monotonic()
        if prefix:
            student = out / f"ft-{prefix}distill{recipe}-seed{seed}"
            scored = out / f"st-scored{recipe}-seed{seed}.jsonl"
            for what, inputs in (("ce-score", (model, mined_rows(prefix, seed), scored)),
                                 ("train", (first, scored, student))):
                _cost(results, f"{prefix}distill", seed, st(
                    what, *inputs, seed, args, precision, log, rr if what == "ce-score"
                    else None)["cost"])
            _record(steps, f"{prefix}distill", seed, ndcg_of(out, student, data, runtime,
                                                            args.threads, log),
                    time.monotonic() - started)
            continue
        scored = out / f"scored{recipe}-seed{seed}"
        scoring_cost = made([*BERTCTL, "mine", first, data / "train.tsv", "--corpus",
                             data / "train_sentences.txt", *MINE_FLAGS, "--teacher", rr,
                             "--out", scored, *runtime], scored, log, args.threads)
        scoring = time.monotonic() - started
        # `distill`: the first stage trained on its own candidates with the teacher's scores
        # (--distill-loss); `again`, the control: the same rows and training, no teacher.
        for step_name, loss in (("distill", args.distill_loss), ("again", "infonce")):
            if step_name not in args.steps:
                continue
            student = out / f"ft-{step_name}-{loss}{recipe}-seed{seed}"
            started = time.monotonic()
            cost = fine_tune(first, scored / "pairs.jsonl", seed, student, args, runtime,
                             log, "--loss", loss)
            if step_name == "distill":
                _cost(results, "distill", seed, scoring_cost)
            _cost(results, step_name, seed, cost)
            spent = time.monotonic() - started + (scoring if step_name == "distill" else 0)
            _record(steps, step_name, seed, ndcg_of(out, student, data, runtime,
                                                    args.threads, log), spent, loss=loss)


def late(step: str, args, out: Path, data: Path, runtime: list, results: dict,
         log: Path, rows_of) -> None:
    """`late-X`: each seed's model of step X (`mined`, `round3`, `st-mined`, ...) reorders
    its own first RERANK_DEPTH documents a query by late interaction over its token vectors
    (`eval --rerank` itself `--rerank-scoring maxsim`): no second model; the cost is the
    eval's, the first stage's search included. `head-X`: the same after a late-interaction
    head is fitted to X's model on the rows X trained on (`rows_of`; `finetune --late-dim
    128`, the encoder frozen, --head-epochs at lr 3e-3), the head's fitting its own cost."""
    fitted = step.startswith("head-")
    first_step = step.split("-", 1)[1]
    for seed in args.seeds:
        first = out / f"ft-{first_step}-seed{seed}"
        if not (first / "config.json").exists():
            sys.exit(f"{step}: {first} is missing: run {first_step} for seed {seed} first")
        ev = out / f"eval-{step}-seed{seed}"
        started = time.monotonic()
        model = first
        if fitted:
            model = out / f"ft-{step}-seed{seed}"
            _cost(results, f"late head of {first_step}", seed, made(
                [*BERTCTL, "finetune", first, rows_of(first_step, seed), "--task",
                 "retrieval", "--late-dim", "128", "--epochs", str(args.head_epochs), "--lr",
                 "3e-3", *TRAIN_FLAGS[2:], "--seed", str(seed), "--out", model, *runtime],
                model, log, args.threads))
        _cost(results, "search+late", seed, made(
            [*BERTCTL, "eval", model, data / "beir", "--task", "retrieval", "--rerank", model,
             "--rerank-scoring", "maxsim", "--rerank-depth", RERANK_DEPTH, "--out", ev,
             *runtime], ev, log, args.threads))
        metrics = json.loads((ev / "metrics.json").read_text())
        _record(results["steps"], step, seed, metrics["rerank/ndcg@10"],
                time.monotonic() - started,
                per_seed={"first_stage": metrics["ndcg@10"],
                          "qps": metrics["rerank/queries_per_second"]})


def _record(steps: dict, name: str, seed: int, score: float, seconds: float,
            per_seed: dict | None = None, **facts) -> None:
    """A seed's figures of a step (`per_seed`: more lists beside ndcg and seconds), kept in
    the order of the seeds."""
    step = steps.setdefault(name, {"ndcg": [], "seconds": [], "seeds": [], **facts})
    if any(step.get(k) != v for k, v in facts.items()) or "seeds" not in step:
        # another loss, or figures without their seeds: a fresh row
        step.clear()
        step.update({"ndcg": [], "seconds": [], "seeds": [], **facts})
    values = {"ndcg": score, "seconds": seconds, **(per_seed or {})}
    at = sum(s < seed for s in step["seeds"])
    step["seeds"].insert(at, seed)
    for key, value in values.items():
        step.setdefault(key, []).insert(at, value)
    print(f"{name} seed {seed}: nDCG@10 {score:.4f} ({seconds:.0f}s)"
          + (f" {per_seed}" if per_seed else ""))


def _keyed(results: dict, key: str) -> dict:
    """results[key] as {miner: figure} (runs before --mine-with kept one figure there)."""
    if not isinstance(results.get(key), dict) or "rows" in results[key]:
        results[key] = {}
    return results[key]


def _without_seeds(step: dict, seeds: list[int]) -> dict | None:
    """A step's figures but those of `seeds` (None: nothing left, or figures recorded without
    their seeds, which cannot be told apart)."""
    have = step.get("seeds")
    if have is None:
        return None
    keep = [i for i, s in enumerate(have) if s not in seeds]
    if not keep:
        return None
    return {k: [v[i] for i in keep] if isinstance(v, list) and len(v) == len(have) else v
            for k, v in step.items()}


def ndcg_of(out: Path, m: Path, data: Path, runtime: list, threads: int, log: Path) -> float:
    ev = out / f"eval-{m.name}"
    common.sh([*BERTCTL, "eval", m, data / "beir", "--task", "retrieval", "--out", ev,
               *runtime], log, threads=threads)
    return ndcg(ev)


BEFORE = {"inbatch": "baseline", "mined": "inbatch", "st-inbatch": "baseline",
          "st-mined": "st-inbatch", "rerank": "mined", "distill": "mined", "again": "mined",
          "st-rerank": "st-mined", "st-distill": "st-mined", "rerank_fused": "mined",
          "st-rerank_fused": "st-mined",
          **{f"{p}round{k}": f"{p}{'mined' if k == 2 else f'round{k - 1}'}"
             for p in ("", "st-") for k in range(2, 10)},
          **{f"round{k}+late": f"round{k}" for k in range(2, 10)}}


def _diff(a: list[float], b: list[float]) -> str:
    d = statistics.fmean(a) - statistics.fmean(b)
    se = se_diff(a, b) if len(a) > 1 and len(b) > 1 else 0.0
    return f"{d:+.4f}" + (f" ({d / se:+.1f} se)" if se > 0 else "")


def _paired(a: dict, b: dict) -> str:
    """The mean difference over the seeds both steps ran, and its standard error as a paired
    one (the seed fixes the data order and the initial draws both steps share)."""
    common_seeds = sorted(set(a.get("seeds", [])) & set(b.get("seeds", [])))
    if len(common_seeds) < 2:
        return ""
    d = [a["ndcg"][a["seeds"].index(s)] - b["ndcg"][b["seeds"].index(s)] for s in common_seeds]
    se = statistics.stdev(d) / math.sqrt(len(d))
    return (f"; paired over seeds {common_seeds}: {statistics.fmean(d):+.4f}"
            + (f" ({statistics.fmean(d) / se:+.1f} se)" if se > 0 else ""))


if __name__ == "__main__":
    main()
