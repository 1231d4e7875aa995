"""Late interaction from stored pieces (#64): `bertctl search` reordering each query's first
K hits by MaxSim over the pieces its index stores (`embed --store-pieces`) against the same
reordering with the hits' texts embedded again (`--rerank MODEL`), at several depths: the
nDCG@10 of each search's output and what each costs.

    .venv/bin/python benchmarks/speed/bench_late_index.py --model MODEL --beir DIR --out DIR
        [--depths 10 30 100] [--threads 2] [--precision auto]

MODEL: an embedding model (a late-interaction head fitted to it, `finetune --late-dim`, or
not); DIR: a BEIR directory (bench_search.py's paraphrase set: runs/bench-search/data/beir).
Each process is measured alone (wall and CPU seconds, peak memory: common.measured): the two
indexes' builds (`embed --store-text`, and with `--store-pieces`), the first stage's search of
every test query (no reordering, --top-k 10), then for each depth the two reorderings. The
search's output is scored against the qrels with bertctl's metrics (trec_eval's, tested); the
two reorderings of one depth must agree to their scores' rounding. Results go to
OUT/results.json; the table to stdout, with the machine line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

sys.path.insert(0, str(common.ROOT))
from bertctl.search import ranking  # noqa: E402

BERTCTL = [sys.executable, "-m", "bertctl"]


def qrels_of(beir: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in (beir / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = line.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    return qrels


def searched(args, index: Path, name: str, extra: list, qrels) -> dict:
    """One `bertctl search` of every test query: its cost, its nDCG@10, its hits."""
    out = args.out / f"{name}.jsonl"
    with open(out, "w") as f:
        cost = common.measured([*BERTCTL, "search", index, "--queries",
                                args.beir / "queries.jsonl", "--top-k", "10", "--precision",
                                args.precision, "--threads", args.threads, *extra],
                               args.out / "log.txt", args.threads, stdout=f)
    run: dict[str, list[str]] = {}
    scores = {}
    for line in out.read_text().splitlines():
        hit = json.loads(line)
        run.setdefault(hit["query"], []).append(hit["id"])
        scores[hit["query"], hit["id"]] = hit["score"]
    means, _ = ranking.evaluate(run, qrels)
    return {**cost, "ndcg@10": round(means["ndcg@10"], 4), "queries": len(run),
            "qps": round(len(run) / cost["wall_s"], 1), "_scores": scores}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--beir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--depths", type=int, nargs="+", default=[10, 30, 100])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default="auto")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    qrels = qrels_of(args.beir)
    results = {"machine": common.machine(args.threads), "model": str(args.model),
               "beir": str(args.beir), "builds": {}, "searches": []}
    for name, extra in (("plain", []), ("pieces", ["--store-pieces"])):
        index = args.out / f"index-{name}"
        cost = common.measured([*BERTCTL, "embed", args.model, args.beir / "corpus.jsonl",
                                "--text-column", "text", "--id-column", "_id", "--store-text",
                                *extra, "--precision", args.precision, "--threads",
                                args.threads, "--out", index, "--force"],
                               args.out / "log.txt", args.threads)
        cost["mb_on_disk"] = round(sum(f.stat().st_size for f in index.iterdir()) / 2**20, 1)
        results["builds"][name] = cost
    first = searched(args, args.out / "index-plain", "first-stage", [], qrels)
    first.pop("_scores")
    results["searches"].append({"depth": 0, "how": "first stage", **first})
    for depth in args.depths:
        stored = searched(args, args.out / "index-pieces", f"stored-{depth}",
                          ["--rerank-scoring", "maxsim", "--rerank-depth", depth], qrels)
        again = searched(args, args.out / "index-plain", f"again-{depth}",
                         ["--rerank", args.model, "--rerank-scoring", "maxsim",
                          "--rerank-depth", depth], qrels)
        a, b = stored.pop("_scores"), again.pop("_scores")
        common_hits = set(a) & set(b)
        stored["agree"] = {"hits": f"{len(common_hits)}/{len(a)}",
                           "max_score_difference": round(max(
                               (abs(a[k] - b[k]) for k in common_hits), default=0.0), 6)}
        results["searches"] += [{"depth": depth, "how": "stored pieces", **stored},
                                {"depth": depth, "how": "texts embedded again", **again}]
    print(results["machine"])
    print("| index | wall s | CPU s | peak MB | MB on disk |\n|---|---|---|---|---|")
    for name, c in results["builds"].items():
        print(f"| {name} | {c['wall_s']} | {c['cpu_s']} | {c['peak_mb']} | {c['mb_on_disk']} |")
    print("\n| reordered | depth | nDCG@10 | wall s | CPU s | queries/s | peak MB |\n"
          "|---|---|---|---|---|---|---|")
    for s in results["searches"]:
        print(f"| {s['how']} | {s['depth'] or ''} | {s['ndcg@10']:.4f} | {s['wall_s']} | "
              f"{s['cpu_s']} | {s['qps']} | {s['peak_mb']} |")
    for depth in args.depths:
        st, ag = [s for s in results["searches"] if s["depth"] == depth]
        extra = lambda s: s["cpu_s"] - first["cpu_s"]
        print(f"depth {depth}: the reordering's own CPU s {extra(st):.1f} stored, "
              f"{extra(ag):.1f} embedded again ({extra(ag) / max(extra(st), 0.1):.1f}x); "
              f"hits agree {st['agree']}")
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
