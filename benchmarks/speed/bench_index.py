"""bertctl index (#64): an approximate index's recall@10 against exact search, its query latency
and its size, on a million random vectors and on a real corpus.

    .venv/bin/python benchmarks/speed/bench_index.py --out runs/bench-index [--n 1000000] [--dim 384]
        [--real runs/bench-search/data/beir] [--threads 2]

- random: N vectors of DIM values drawn from a standard normal, in .npy shards memory-mapped
  as an embeddings artifact's are. The hardest case there is: no clusters for IVF to use, and
  the nearest neighbours are barely nearer than the rest, so recall here is a floor. Each index
  is built by bertctl's own code (bertctl.search.approximate, what `bertctl index`
  runs) and measured as the stage measures it: --queries of the stored vectors as queries,
  each one's own row left out, recall@10 against exact search (ranking.search, what `bertctl
  search` runs without an index), milliseconds a query over the whole batch (faiss's threads),
  at a sweep of --probe (ivf) and --ef-search (hnsw) values.
- real: a BEIR directory (bench_search.py's paraphrase set by default: 22,919 sentences),
  embedded by all-MiniLM-L6-v2 with `bertctl embed`, then `bertctl index --exact-below 0` for
  each kind, and `bertctl search --queries` of its real test queries through the index and
  through the embeddings (exact): the share of exact search's first 10 the index returns.

Results go to OUT/results.json; the table to stdout, with the machine line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

sys.path.insert(0, str(common.ROOT))
from bertctl.search import approximate, ranking  # noqa: E402
KINDS = [("ivf", "none"), ("ivf", "int8"), ("ivf", "binary"), ("hnsw", "none"), ("hnsw", "int8"),
         ("hnsw", "binary")]
PROBES = [8, 32, 128]
EF_SEARCH = [32, 128, 512]


def random_set(out: Path, n: int, dim: int, shard: int = 250_000) -> list[np.ndarray]:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    blocks = []
    for i, a in enumerate(range(0, n, shard)):
        path = out / f"vectors-{i:05d}.npy"
        rows = min(shard, n - a)
        if not path.is_file() or np.load(path, mmap_mode="r").shape != (rows, dim):
            np.save(path, rng.standard_normal((rows, dim), dtype=np.float32))
        blocks.append(np.load(path, mmap_mode="r"))
    return blocks


def on_random(args) -> list[dict]:
    blocks = random_set(args.out / "random", args.n, args.dim)
    rows = []
    exact = approximate.recall(_Exact(blocks), blocks, 10, args.queries, seed=0)
    rows.append({"set": "random", "index": "exact", "recall@10": 1.0,
                 "ms_per_query": exact["exact_ms_per_query"],
                 "mb": round(args.n * args.dim * 4 / 2**20)})
    print(json.dumps(rows[-1]), flush=True)
    for kind, quantize in KINDS:
        if kind not in (args.random_kinds or args.kinds) or quantize not in args.random_quantize:
            continue
        started = time.perf_counter()
        index = approximate.build(blocks, kind, quantize, lists=None, m=args.m,
                                  ef_construction=args.ef_construction, seed=0,
                                  threads=args.threads)
        built = time.perf_counter() - started
        path = args.out / f"random-{kind}-{quantize}.index"
        approximate.write(index, path)
        for knob in (PROBES if kind == "ivf" else EF_SEARCH):
            approximate.tune(index, kind, knob, knob)
            measured = approximate.recall(index, blocks, 10, args.queries, seed=0)
            rows.append({"set": "random", "index": f"{kind} {quantize}",
                         ("probe" if kind == "ivf" else "ef_search"): knob,
                         "recall@10": measured["recall@10"],
                         "ms_per_query": measured["ms_per_query"],
                         "exact_ms_per_query": measured["exact_ms_per_query"],
                         "build_s": round(built, 1), "mb": round(path.stat().st_size / 2**20),
                         **({"lists": index.nlist} if kind == "ivf" else {"m": args.m})})
            print(json.dumps(rows[-1]), flush=True)
        path.unlink()
    return rows


class _Exact:
    """Exact search in approximate.recall's place: the exact side's own latency."""

    def __init__(self, blocks):
        self.blocks = blocks

    def search(self, q, k):
        return ranking.search(q, self.blocks, k)


def _ids(stdout: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        hit = json.loads(line)
        found.setdefault(hit["query"], []).append(hit["id"])
    return found


def on_real(args) -> list[dict]:
    import subprocess

    bertctl = [sys.executable, "-m", "bertctl"]
    log = args.out / "log.txt"
    emb = args.out / "real-embeddings"
    threads = ["--threads", str(args.threads)]
    common.sh([*bertctl, "embed", args.model, args.real / "corpus.jsonl", "--text-column",
               "text", "--id-column", "_id", "--out", emb, *threads], log, args.threads)

    def search(index: Path) -> tuple[dict[str, list[str]], float]:
        started = time.perf_counter()
        r = subprocess.run([*bertctl, "search", index, "--queries",
                            args.real / "queries.jsonl", "--top-k", "10", *threads],
                           capture_output=True, text=True, env=common.env(args.threads))
        if r.returncode:
            sys.exit(f"search failed: {r.stderr[-2000:]}")
        return _ids(r.stdout), time.perf_counter() - started

    truth, exact_s = search(emb)
    rows = []
    for kind, quantize in KINDS:
        if kind not in args.kinds:
            continue
        out = args.out / f"real-{kind}-{quantize}"
        common.sh([*bertctl, "index", emb, "--kind", kind, "--quantize", quantize,
                   "--out", out, "--force", *threads], log, args.threads)
        stats = json.loads((out / "artifact.json").read_text())["stats"]
        found, seconds = search(out)
        hits = sum(len(set(truth[q]) & set(found.get(q, []))) for q in truth)
        rows.append({"set": "real", "index": f"{kind} {quantize}", "vectors": stats["vectors"],
                     "recall@10 (stored vectors)": stats["recall@10"],
                     "recall@10 (test queries)": round(hits / (10 * len(truth)), 4),
                     "ms_per_query": stats["ms_per_query"],
                     "exact_ms_per_query": stats["exact_ms_per_query"],
                     "build_s": stats["build_seconds"], "mb": round(stats["bytes"] / 2**20, 1),
                     "search_s (exact)": round(exact_s, 1), "search_s": round(seconds, 1)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--m", type=int, default=32)
    p.add_argument("--ef-construction", type=int, default=200)
    p.add_argument("--kinds", nargs="+", default=["ivf", "hnsw"])
    p.add_argument("--random-kinds", nargs="+", default=None,
                   help="the random set's, where they differ (HNSW's build on a million "
                        "vectors takes long on two cores)")
    p.add_argument("--random-quantize", nargs="+", default=["none", "int8", "binary"],
                   choices=["none", "int8", "binary"],
                   help="the random set's quantisations (to add rows to an earlier run's)")
    p.add_argument("--real", type=Path, default=Path("runs/bench-search/data/beir"))
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sets", nargs="+", default=["random", "real"])
    args = p.parse_args()
    args.model = args.model or common.default_model()
    args.out.mkdir(parents=True, exist_ok=True)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    print(common.machine(args.threads), flush=True)
    rows = []
    if "real" in args.sets:
        rows += on_real(args)
    if "random" in args.sets:
        rows += on_random(args)
    (args.out / "results.json").write_text(json.dumps(
        {"machine": common.machine(args.threads), "n": args.n, "dim": args.dim, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
