"""What feeds a training step, without the model: tokens a second per CPU core, and how
processes scale.

    python benchmarks/speed/bench_data_path.py [--seconds 3] [--processes 1 2] [--dupe-factor 5]

An H100 trains a BERT-base on 128-token rows at several hundred thousand tokens a second, and a
node has eight: a data path that keeps one busy needs about 1M tokens/s from a core. Measured,
each on one thread, as the training loop calls them (`batch(indices, epoch)` on a step's
sorted indices, 32 rows), counting real (non-pad) tokens:
- `pretrain`'s loader on a pretrain-data artifact of 128-token rows built from the shipped
  books: static masks (Google's), dynamic masks (drawn per epoch), dynamic whole-word masks;
- `finetune`'s loader on the shipped SST-2 sample: padded rows, and packed rows (`--pack`);
- the retrieval family's loader on the shipped (query, positive) pairs.
Then the pretraining loader in N processes at once (one per core, as DDP ranks load their own
micro-batches): their tokens/s summed over N times one process alone, the scaling the goal
asks to be at least 0.85. The machine line comes first.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402
from speed import summary
from tools.common import machine, sh

ROOT = common.ROOT
EXAMPLES = ROOT / "examples"
GOAL = 1_000_000    # tokens/s a core: what keeps a GPU fed (see above)
ROWS = 32


def bertctl(*args, log: Path) -> None:
    sh([sys.executable, "-m", "bertctl", *args], log)   # a failure names the log


def rate(source, seconds: float, seed: int = 0) -> float:
    """Real tokens a second of `source.batch` on random sorted batches of ROWS indices."""
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    n = len(source)
    source.batch(np.sort(rng.choice(n, ROWS, replace=False)), 1)   # warm the page cache
    tokens, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        batch = source.batch(np.sort(rng.choice(n, ROWS, replace=False)), 1)
        tokens += int((batch["attention_mask"] != 0).sum())   # (packed rows number their sequences)
    return tokens / elapsed


def _pretraining_rate(path: str, seconds: float, seed: int, out) -> None:
    from bertctl.data.pretraining.dataset import PretrainingDataset

    out.put(rate(PretrainingDataset(path, "train"), seconds, seed))


def in_processes(path: Path, n: int, seconds: float) -> float:
    """The summed tokens/s of n processes, each loading from its own copy of the dataset."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_pretraining_rate, args=(str(path), seconds, k, out))
             for k in range(n)]
    for p in procs:
        p.start()
    rates = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def task_sources(tok_dir: Path):
    """(name, source) for finetune's padded and packed SST-2 rows and retrieval's pairs."""
    from tokenizers import Tokenizer

    from bertctl import tasks
    from bertctl.data.collate import TaskData
    from bertctl.tasks import make_task_spec

    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))   # the tokenize artifact's
    sst2 = make_task_spec("glue/sst2")
    family = tasks.get(sst2.family)
    rows = family.read(sst2, EXAMPLES / "glue" / "SST-2" / "train.tsv")
    features = family.encode(rows, tok, 128, training=True)
    yield "finetune SST-2, padded", TaskData(features, False, 128, True)
    yield "finetune SST-2, packed", TaskData(features, True, 128, True)
    pairs = make_task_spec(family="retrieval", text_columns=["query", "positive"])
    family = tasks.get("retrieval")
    rows = family.read(pairs, EXAMPLES / "retrieval" / "train.tsv")
    yield "retrieval pairs", family.encode(rows, tok, 128, training=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    ap.add_argument("--processes", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--dupe-factor", type=int, default=5,
                    help="the pretraining data's copies of the books (more rows to draw from)")
    ap.add_argument("--summary-json", default=None, help="append rows for run_all.py")
    a = ap.parse_args()
    print(machine(1))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        work, log = Path(d), Path(d).parent / "bench_data_path.log"
        log.unlink(missing_ok=True)
        books = sorted((EXAMPLES / "corpus").glob("*.txt"))
        bertctl("tokenize", *books, "--vocab-size", "8000", "--out", work / "tok", log=log)
        kinds = {"static masks": [], "dynamic masks": ["--masking", "dynamic"],
                 "dynamic whole-word masks": ["--masking", "dynamic", "--whole-word-mask"]}
        for name, flags in kinds.items():
            bertctl("build-pretrain-data", work / "tok", *books, "--max-seq-length", "128",
                    "--dupe-factor", a.dupe_factor, "--validation-fraction", "0", *flags,
                    "--out", work / name.replace(" ", "-"), log=log)
        print(f"\n{'loader (one thread)':<34}{'tokens/s':>14}{'x goal':>9}")
        from bertctl.data.pretraining.dataset import PretrainingDataset

        for name in kinds:
            r = rate(PretrainingDataset(work / name.replace(" ", "-"), "train"), a.seconds)
            print(f"{'pretrain, ' + name:<34}{r:>14,.0f}{r / GOAL:>8.1f}x", flush=True)
            rows.append(summary.row("data_path", f"pretrain loader, {name}, one core", r, GOAL,
                                    "tokens/s", target=1.0, target_text=">= 1M tokens/s"))
        for name, source in task_sources(work / "tok"):
            r = rate(source, a.seconds)
            print(f"{name:<34}{r:>14,.0f}{r / GOAL:>8.1f}x", flush=True)
            rows.append(summary.row("data_path", f"{name} loader, one core", r, GOAL,
                                    "tokens/s", target=1.0, target_text=">= 1M tokens/s"))
        path = work / "dynamic-whole-word-masks"
        alone = in_processes(path, 1, a.seconds)
        print(f"\n{'processes (dynamic whole-word)':<34}{'tokens/s':>14}{'scaling':>9}")
        for n in a.processes:
            total = alone if n == 1 else in_processes(path, n, a.seconds)
            print(f"{n:<34}{total:>14,.0f}{total / (n * alone):>8.2f}x", flush=True)
            if n > 1:
                rows.append(summary.row("data_path", f"pretrain loader in {n} processes over "
                                        f"{n} x one", total / (n * alone), None, "scaling",
                                        target_text=">= 0.85", met=total / (n * alone) >= 0.85))
    summary.append(a.summary_json, rows)


if __name__ == "__main__":
    main()
