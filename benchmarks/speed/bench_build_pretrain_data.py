"""Benchmark: building BERT pretraining instances, bertctl against a plain implementation.

Three contenders on the same corpus (Google's format) and the same `tokenizers` WordPiece
tokenizer, each in a fresh subprocess so time and peak memory are its own:

  bertctl  bertctl.data.pretraining.build_pretraining_data (chunked, N worker processes,
           numpy masking, shards written as it goes), reading with bertctl.data.corpus
  plain    Google's create_pretraining_data.py algorithm written plainly in one Python process:
           every document in memory as token strings, per-token Python loops for packing and
           masking, every instance held until the end (as Google's script does). It tokenizes
           with the same tokenizer's batch call, which already runs on all cores: generous to it.
  floor    the tokenizers library alone encoding every sentence of the corpus in batches on all
           cores (no instances, nothing written): what no builder can beat.

Peak memory is the largest sum over a contender's process tree (parent and workers), sampled
every 20 ms from /proc: PSS (shared pages split between the processes sharing them, the fair
sum with forked workers) and RSS (shared pages counted in every process); the largest single
process (ru_maxrss) is shown too. Wall time and CPU time (user + system of the whole tree,
interpreter start-up excluded) are both shown: on a shared machine wall time is noisy.

    python benchmarks/speed/bench_build_pretrain_data.py                 # Gutenberg books x2 (~5 MB)
    python benchmarks/speed/bench_build_pretrain_data.py --repeat 20 --only bertctl   # ~50 MB
    python benchmarks/speed/bench_build_pretrain_data.py --memory-scaling # bertctl, 5 MB vs 50 MB
    python benchmarks/speed/bench_build_pretrain_data.py --repeat 40 --dupe-factor 1 --worker-scaling
                                               # 2 workers against 1, ~100 MB

Input books (raw Gutenberg text, paragraphs separated by blank lines) are converted once, outside
the timings, by `book_to_documents`; pass --sentence-per-line for corpora already in Google's
format.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402
from speed import summary

ROOT = common.ROOT
DEFAULT_BOOKS = sorted(Path("/work/shared/data/pretrain_text/gutenberg").glob("*.txt"))
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# ---- corpus preparation (not timed) ------------------------------------------------------------

_SENTENCE_END = re.compile(r"""(?<=[.!?])\s+(?=["'(\[A-Z])|(?<=[.!?]["'])\s+(?=["'(\[A-Z])""")


def book_to_documents(text: str, sentences_per_doc: int = 40):
    """Raw book text -> documents of sentences: paragraphs (blank-line separated) are unwrapped
    and split at sentence ends; consecutive paragraphs form a document of >= N sentences."""
    doc: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        if para:
            doc.extend(s for s in _SENTENCE_END.split(para) if s.strip())
        if len(doc) >= sentences_per_doc:
            yield doc
            doc = []
    if doc:
        yield doc


def prepare_corpus(paths: list[Path], repeat: int, sentence_per_line: bool, out: Path) -> int:
    with out.open("w", encoding="utf-8") as f:
        for _ in range(repeat):
            for p in paths:
                text = p.read_text(encoding="utf-8", errors="replace")
                if sentence_per_line:
                    f.write(text.rstrip("\n") + "\n\n")
                else:
                    for doc in book_to_documents(text):
                        f.write("\n".join(doc) + "\n\n")
    return out.stat().st_size


def train_tokenizer(corpus: Path, out: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train([str(corpus)], trainers.WordPieceTrainer(vocab_size=vocab_size,
                                                       special_tokens=SPECIALS))
    tok.save(str(out))


# ---- the plain implementation ------------------------------------------------------------------

def plain_build(corpus: Path, tokenizer_path: Path, out: Path, max_seq_length: int,
                dupe_factor: int, short_seq_prob: float, masked_lm_prob: float,
                max_predictions: int, seed: int) -> int:
    """Google's algorithm, straightforwardly, in one process. Returns the instance count."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tokenizer_path))
    rng = random.Random(seed)
    # Read the whole corpus: documents of tokenized sentences (lists of token strings).
    docs: list[list[list[str]]] = [[]]
    lines: list[str] = []
    breaks: list[bool] = []
    for line in corpus.open(encoding="utf-8"):
        line = line.strip()
        breaks.append(not line)
        if line:
            lines.append(line)
    tokens_iter = iter(e.tokens for e in tok.encode_batch(lines, add_special_tokens=False))
    for is_break in breaks:
        if is_break:
            docs.append([])
        else:
            toks = next(tokens_iter)
            if toks:
                docs[-1].append(toks)
    docs = [d for d in docs if d]
    rng.shuffle(docs)
    vocab = tok.get_vocab()
    words = [w for w, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    instances = []
    max_tokens = max_seq_length - 3
    for _ in range(dupe_factor):
        for d_index, doc in enumerate(docs):
            target = max_tokens
            if rng.random() < short_seq_prob:
                target = rng.randint(2, max_tokens)
            chunk: list[list[str]] = []
            size = 0
            i = 0
            while i < len(doc):
                chunk.append(doc[i])
                size += len(doc[i])
                if i == len(doc) - 1 or size >= target:
                    split = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                    first = [t for s in chunk[:split] for t in s]
                    second: list[str] = []
                    if len(chunk) == 1 or rng.random() < 0.5:
                        random_next = True
                        other = d_index
                        for _ in range(10):
                            other = rng.randint(0, len(docs) - 1)
                            if other != d_index:
                                break
                        odoc = docs[other]
                        for s in odoc[rng.randint(0, len(odoc) - 1):]:
                            second.extend(s)
                            if len(second) >= target - len(first):
                                break
                        i -= len(chunk) - split
                    else:
                        random_next = False
                        second = [t for s in chunk[split:] for t in s]
                    while len(first) + len(second) > max_tokens:
                        longer = first if len(first) > len(second) else second
                        if rng.random() < 0.5:
                            del longer[0]
                        else:
                            longer.pop()
                    tokens = ["[CLS]", *first, "[SEP]", *second, "[SEP]"]
                    segments = [0] * (len(first) + 2) + [1] * (len(second) + 1)
                    candidates = [k for k, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
                    rng.shuffle(candidates)
                    budget = min(max_predictions, max(1, int(round(len(tokens) * masked_lm_prob))))
                    output = list(tokens)
                    picked = sorted(candidates[:budget])
                    for k in picked:
                        if rng.random() < 0.8:
                            output[k] = "[MASK]"
                        elif rng.random() < 0.5:
                            output[k] = words[rng.randint(0, len(words) - 1)]
                    instances.append((output, segments, picked, [tokens[k] for k in picked],
                                      random_next))
                    chunk, size = [], 0
                i += 1
    rng.shuffle(instances)
    with out.open("wb") as f:
        for output, segments, picked, labels, random_next in instances:
            array("H", [vocab[t] for t in output]).tofile(f)
            array("H", segments).tofile(f)
            array("H", picked).tofile(f)
            array("H", [vocab[t] for t in labels]).tofile(f)
            array("H", [int(random_next)]).tofile(f)
    return len(instances)


# ---- contenders (run in a child process) --------------------------------------------------------

def run_one(args) -> dict:
    corpus, tok_path, out = Path(args.corpus), Path(args.tokenizer), Path(args.out)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = r0.ru_utime + r0.ru_stime  # the interpreter's start-up is not counted
    t0 = time.perf_counter()
    if args.run_one == "bertctl":
        sys.path.insert(0, str(ROOT))
        from tokenizers import Tokenizer

        from bertctl.data.corpus import iter_documents
        from bertctl.data.pretraining.build import PretrainingDataSettings, build_pretraining_data
        summary = build_pretraining_data(
            iter_documents([corpus]), Tokenizer.from_file(str(tok_path)), out,
            PretrainingDataSettings(max_seq_length=args.max_seq_length, dupe_factor=args.dupe_factor,
                                  seed=args.seed),
            workers=args.workers)
        n = summary["splits"]["train"]["stats"]["instances"]
    elif args.run_one == "plain":
        n = plain_build(corpus, tok_path, out / "plain.bin", args.max_seq_length,
                        args.dupe_factor, 0.1, 0.15, 20, args.seed)
    else:  # floor
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(tok_path))
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
        n, batch = 0, []
        with corpus.open(encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    batch.append(line)
                if len(batch) >= 20_000:
                    n += sum(len(e.ids) for e in encode(batch, add_special_tokens=False))
                    batch = []
        n += sum(len(e.ids) for e in encode(batch, add_special_tokens=False))
    seconds = time.perf_counter() - t0
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    return {"seconds": seconds, "cpu_seconds": cpu - cpu0, "count": n,
            "max_process_rss_mb": max(own.ru_maxrss, kids.ru_maxrss) / 1024}


def _tree_memory_kb(root: int) -> tuple[int, int]:
    """(RSS, PSS) summed over `root` and all its descendants, from /proc. PSS splits pages shared
    between processes (forked workers share the parent's) among them, so it is the fair sum."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    tree, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        for c, pp in parents.items():
            if pp == p and c not in tree:
                tree.add(c)
                frontier.append(c)
    rss = pss = 0
    for p in tree:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            continue
    return rss, pss


def measure(name: str, corpus: Path, tok: Path, args, workdir: Path, workers: int | None = None,
            env: dict | None = None, sample_memory: bool = True) -> dict:
    """One contender in a fresh process: its time, and its tree's peak memory sampled from
    /proc every 20 ms (reading smaps_rollup costs CPU: off where the cores are all busy and
    only time is asked)."""
    out = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=workdir))
    cmd = [sys.executable, __file__, "--run-one", name, "--corpus", str(corpus), "--tokenizer",
           str(tok), "--out", str(out), "--workers", str(workers or args.workers),
           "--seed", str(args.seed), "--max-seq-length", str(args.max_seq_length),
           "--dupe-factor", str(args.dupe_factor)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    peak = [0, 0]

    def sample():
        while sample_memory and proc.poll() is None:
            rss, pss = _tree_memory_kb(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, _ = proc.communicate()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"{name} failed with exit code {proc.returncode}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["peak_tree_rss_mb"] = peak[0] / 1024
    result["peak_tree_pss_mb"] = peak[1] / 1024
    result["output_mb"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**20
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return result


def worker_scaling(corpus: Path, tok: Path, args, work: Path) -> None:
    """bertctl with one worker and with --workers, one tokenizer thread each (else a single
    worker's tokenizer already takes every core), in alternating pairs, memory not sampled (the
    sampler's own CPU would be taken from the workers, not from the one worker)."""
    one_thread = {"RAYON_NUM_THREADS": "1"}
    ratios, times = [], collections.defaultdict(list)
    for run in range(args.runs):
        order = (1, args.workers) if run % 2 == 0 else (args.workers, 1)
        pair = {w: measure("bertctl", corpus, tok, args, work, w, one_thread,
                           sample_memory=False)["seconds"] for w in order}
        for w, t in pair.items():
            times[w].append(t)
        ratios.append(pair[1] / pair[args.workers])
        print(f"  pair {run + 1}: 1 worker {pair[1]:7.2f} s, {args.workers} workers "
              f"{pair[args.workers]:7.2f} s: {ratios[-1]:.2f}x", flush=True)
    ratio, goal = statistics.median(ratios), 0.9 * args.workers
    print(f"{args.workers} workers against 1: {ratio:.2f}x (median of {len(ratios)} pairs; "
          f"medians {statistics.median(times[1]):.2f} s and "
          f"{statistics.median(times[args.workers]):.2f} s); #86: >= {goal:.1f}x: "
          f"{'met' if ratio >= goal else 'missed'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="*", type=Path, help="corpus files (default: Gutenberg books)")
    ap.add_argument("--repeat", type=int, default=2, help="concatenate the corpus this many times")
    ap.add_argument("--sentence-per-line", action="store_true",
                    help="inputs are already one sentence per line, blank line between documents")
    ap.add_argument("--tokenizer", type=Path, help="tokenizer.json (default: train one, 30522)")
    ap.add_argument("--vocab-size", type=int, default=30522)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs", type=int, default=3, help="timed runs per contender (median shown)")
    ap.add_argument("--only", nargs="*", choices=["bertctl", "plain", "floor"],
                    default=["bertctl", "plain", "floor"])
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--dupe-factor", type=int, default=10)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--memory-scaling", action="store_true",
                    help="bertctl only: peak memory at --repeat and at 10x --repeat")
    ap.add_argument("--scaling", type=int, nargs="+", default=None, metavar="REPEAT",
                    help="bertctl only: time and peak memory at each of these --repeat values "
                    "(the scaling table: e.g. 1 10 100 for about 5, 50, 500 MB of books)")
    ap.add_argument("--worker-scaling", action="store_true",
                    help="bertctl only: --workers N against 1, one tokenizer thread each "
                    "(RAYON_NUM_THREADS=1), alternating, --runs pairs: #86 asks >= 0.9 N")
    ap.add_argument("--summary-json", default=None, help="append rows for run_all.py")
    ap.add_argument("--run-one", choices=["bertctl", "plain", "floor"], help=argparse.SUPPRESS)
    ap.add_argument("--corpus", dest="corpus_file", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run_one:
        args.corpus = args.corpus_file
        print(json.dumps(run_one(args)))
        return

    paths = args.corpus or DEFAULT_BOOKS
    with tempfile.TemporaryDirectory(prefix="bench-pretrain-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus.txt"
        size = prepare_corpus(paths, args.repeat, args.sentence_per_line, corpus)
        tok = args.tokenizer
        if tok is None:
            tok = work / "tokenizer.json"
            train_tokenizer(corpus, tok, args.vocab_size)
        print(f"corpus: {len(paths)} file(s) x{args.repeat} = {size / 1e6:.1f} MB; "
              f"max_seq_length {args.max_seq_length}, dupe_factor {args.dupe_factor}, "
              f"workers {args.workers}, cpus {os.cpu_count()}", flush=True)
        if args.scaling:
            rows, first = [], None
            for rep in args.scaling:
                c = work / f"corpus-x{rep}.txt"
                sz = prepare_corpus(paths, rep, args.sentence_per_line, c)
                r = measure("bertctl", c, tok, args, work)
                c.unlink()
                first = first or (sz, r)
                print(f"bertctl {sz / 1e6:8.1f} MB: {r['seconds']:8.2f} s wall "
                      f"({sz / 1e6 / r['seconds']:.2f} MB/s), CPU {r['cpu_seconds']:8.2f} s, "
                      f"peak PSS {r['peak_tree_pss_mb']:7.1f} MB, largest process "
                      f"{r['max_process_rss_mb']:6.1f} MB", flush=True)
                rows.append(summary.row(
                    "build_pretrain_data", f"scaling: {sz / 1e6:.0f} MB vs {first[0] / 1e6:.0f}"
                    f" MB, {args.workers} workers", r["peak_tree_pss_mb"],
                    first[1]["peak_tree_pss_mb"], "peak PSS MB", higher_is_better=False,
                    target_text="flat (>= 0.8x)", met=first[1]["peak_tree_pss_mb"] /
                    r["peak_tree_pss_mb"] >= 0.8,
                    note=f"{r['seconds']:.1f} s = {r['seconds'] / first[1]['seconds']:.1f}x the "
                    f"time for {sz / first[0]:.1f}x the text"))
            summary.append(args.summary_json, rows)
            return
        if args.worker_scaling:
            worker_scaling(corpus, tok, args, work)
            return
        if args.memory_scaling:
            big = work / "corpus10.txt"
            big_size = prepare_corpus(paths, args.repeat * 10, args.sentence_per_line, big)
            small_r = measure("bertctl", corpus, tok, args, work)
            big_r = measure("bertctl", big, tok, args, work)
            for label, sz, r in ((f"{size / 1e6:.0f} MB", size, small_r),
                                 (f"{big_size / 1e6:.0f} MB", big_size, big_r)):
                print(f"bertctl {label:>7}: {r['seconds']:7.2f} s  peak PSS "
                      f"{r['peak_tree_pss_mb']:7.1f} MB  peak RSS {r['peak_tree_rss_mb']:7.1f} MB"
                      f"  largest process "
                      f"{r['max_process_rss_mb']:6.1f} MB  ({r['count']} instances)")
            print(f"peak memory ratio (10x corpus): PSS "
                  f"{big_r['peak_tree_pss_mb'] / small_r['peak_tree_pss_mb']:.2f}, RSS "
                  f"{big_r['peak_tree_rss_mb'] / small_r['peak_tree_rss_mb']:.2f}, largest process "
                  f"{big_r['max_process_rss_mb'] / small_r['max_process_rss_mb']:.2f}")
            return
        results = collections.defaultdict(list)
        for run in range(args.runs):
            for name in (args.only if run % 2 == 0 else list(reversed(args.only))):
                r = measure(name, corpus, tok, args, work)
                results[name].append(r)
                print(f"  run {run + 1} {name:8s} {r['seconds']:7.2f} s  cpu {r['cpu_seconds']:7.2f} s"
                      f"  peak {r['peak_tree_pss_mb']:7.1f} MB", flush=True)
        med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
               for n, rs in results.items()}
        print(f"\n{'':8s} {'wall (median)':>14s} {'min':>8s} {'CPU (median)':>13s} "
              f"{'peak PSS':>11s} {'peak RSS':>11s} {'largest proc':>13s} {'output':>9s}")
        for n, m in med.items():
            print(f"{n:8s} {m['seconds']:12.2f} s {min(r['seconds'] for r in results[n]):7.2f}s "
                  f"{m['cpu_seconds']:11.2f} s {m['peak_tree_pss_mb']:8.1f} MB "
                  f"{m['peak_tree_rss_mb']:8.1f} MB {m['max_process_rss_mb']:10.1f} MB "
                  f"{m['output_mb']:7.1f} MB")
        if "bertctl" in med and "plain" in med:
            print(f"plain / bertctl time: {med['plain']['seconds'] / med['bertctl']['seconds']:.1f}x "
                  f"wall (target >= 5x), "
                  f"{med['plain']['cpu_seconds'] / med['bertctl']['cpu_seconds']:.1f}x CPU; "
                  f"peak PSS: bertctl {med['bertctl']['peak_tree_pss_mb']:.0f} MB vs "
                  f"plain {med['plain']['peak_tree_pss_mb']:.0f} MB")
        if "bertctl" in med and "floor" in med:
            print(f"bertctl / tokenize-only floor: "
                  f"{med['bertctl']['seconds'] / med['floor']['seconds']:.2f}x wall (#86: <= 1.25x),"
                  f" {med['bertctl']['cpu_seconds'] / med['floor']['cpu_seconds']:.2f}x CPU")
        what = f"build {size / 1e6:.0f} MB, dupe {args.dupe_factor}, {args.workers} workers"
        rows = []
        if "bertctl" in med and "plain" in med:
            rows.append(summary.row("build_pretrain_data", what + " vs a plain Python builder",
                                    med["bertctl"]["seconds"], med["plain"]["seconds"],
                                    "s wall", higher_is_better=False, target=5.0))
        if "bertctl" in med and "floor" in med:
            rows.append(summary.row("build_pretrain_data", what + " vs the tokenize-only floor",
                                    med["bertctl"]["cpu_seconds"], med["floor"]["cpu_seconds"],
                                    "s CPU", higher_is_better=False, target=0.8,
                                    target_text=">= 0.8x (<= 1.25x the floor)"))
        summary.append(args.summary_json, rows)


if __name__ == "__main__":
    main()
