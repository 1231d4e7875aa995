"""A reranker's scoring (#64, #66): bertctl's cross-encoder scoring (what `eval --rerank` and
`mine --teacher` run) against sentence-transformers' `CrossEncoder.predict` on the same
checkpoint and the same (query, document) pairs, side by side in one process, at each
precision, with the largest difference of their scores.

    .venv/bin/python benchmarks/speed/bench_rerank.py --reranker runs/bench-search/reranker-seed0 \
        --beir runs/bench-search/data/beir [--pairs 2000] [--repeats 3] [--threads 2]

The pairs: each test query of the BEIR set with documents drawn from its corpus (the same
draw for both tools). bf16 is each tool's own: bertctl's autocast (`--precision bf16`), and
CrossEncoder loaded with `torch_dtype=bfloat16` (its weights in bf16; it has no autocast).
Batch 32 both. The table: median seconds of `repeats` runs after a warm-up, pairs a second,
the ratio, and the scores' largest difference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

sys.path.insert(0, str(common.ROOT))


def pairs_of(beir: Path, n: int) -> tuple[list[str], list[str]]:
    queries = [json.loads(x)["text"] for x in (beir / "queries.jsonl").read_text().splitlines()
               if x.strip()]
    docs = []
    with open(beir / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                docs.append(" ".join(x for x in (row.get("title"), row["text"]) if x))
    rng = np.random.default_rng(0)
    q = rng.integers(0, len(queries), n)
    d = rng.integers(0, len(docs), n)
    return [queries[i] for i in q], [docs[j] for j in d]


def timed(fn, repeats: int) -> tuple[float, np.ndarray]:
    out = fn()                                   # warm-up (kernels, caches)
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds), np.asarray(out, np.float32)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reranker", type=Path, required=True)
    p.add_argument("--beir", type=Path, required=True)
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    args = p.parse_args()
    import torch
    from sentence_transformers import CrossEncoder

    from bertctl import hardware, tasks
    from bertctl.stages.common import cross, models

    torch.set_num_threads(args.threads)
    print(common.machine(), flush=True)
    queries, docs = pairs_of(args.beir, args.pairs)
    reranker = cross.open_reranker(args.reranker, tasks.get("retrieval"))
    device = torch.device("cpu")
    model = models.load_task_model(reranker.source, reranker.family.head).to(device)
    rows = []
    for precision in args.precisions:
        ours_s, ours = timed(lambda: cross.score_pairs(reranker, queries, docs, 32, device,
                                                       precision, model), args.repeats)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        ce = CrossEncoder(str(args.reranker), device="cpu",
                          model_kwargs={"torch_dtype": dtype})
        theirs_s, theirs = timed(lambda: ce.predict(list(zip(queries, docs)), batch_size=32,
                                                    show_progress_bar=False), args.repeats)
        rows.append({"precision": precision, "pairs": len(queries),
                     "bertctl_s": round(ours_s, 2), "crossencoder_s": round(theirs_s, 2),
                     "bertctl_pairs_per_s": round(len(queries) / ours_s, 1),
                     "crossencoder_pairs_per_s": round(len(queries) / theirs_s, 1),
                     "ratio": round(theirs_s / ours_s, 2),
                     "max_abs_diff": float(np.abs(ours - theirs).max())})
        print(json.dumps(rows[-1]), flush=True)
    print(f"(bertctl auto here: {hardware.auto_precision('cpu')})")


if __name__ == "__main__":
    main()
