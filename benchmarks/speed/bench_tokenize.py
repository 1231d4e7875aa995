"""bertctl tokenize against the `tokenizers` WordPiece trainer called directly.

Both train a 30522-token uncased vocabulary on the same files, alternating, several repeats;
prints the median times and the ratio (target: bertctl <= 1.1x the direct call).

    python benchmarks/speed/bench_tokenize.py [FILES...] [--repeats 3]

With no files it uses the seven Gutenberg books of ../shared/data/pretrain_text/gutenberg.
"""

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402

DEFAULT = common.ROOT.parent / "shared/data/pretrain_text/gutenberg"


def direct(files, vocab_size):
    """The trainer as its documentation shows it: Rust reads the files itself."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=2,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False)
    tok.train(files, trainer)
    return tok.get_vocab_size()


def bertctl_stage(files, vocab_size, out):
    from bertctl.contract.artifacts import Target
    from bertctl.stages.settings.tokenize import TokenizeSettings
    from bertctl.stages import tokenize

    outcome = tokenize.run(TokenizeSettings(vocab_size=vocab_size), Target(out),
                           list(files))
    return outcome.manifest.stats["tokenizer"]["vocab_size"]


def bertctl_cli(files, vocab_size, out):
    subprocess.run([sys.executable, "-m", "bertctl", "tokenize", *files, "--out", out,
                    "--vocab-size", str(vocab_size)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def timed(fn, *args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--summary-json", default=None, help="append a row for run_all.py")
    args = parser.parse_args()
    files = args.files or sorted(glob.glob(str(DEFAULT / "*.txt")))
    size = sum(os.path.getsize(f) for f in files)
    print(f"{len(files)} files, {size / 1e6:.1f} MB, vocab {args.vocab_size}, "
          f"{args.repeats} repeats, {os.cpu_count()} cores")
    times = {"direct": [], "stage": [], "cli": []}
    with tempfile.TemporaryDirectory() as tmp:
        # A new --out each time: an existing artifact with the same id would be up to date.
        outs = (str(Path(tmp) / f"tok{i}") for i in range(10 ** 6))
        bertctl_stage(files, args.vocab_size, next(outs))  # warm imports and caches for both
        direct(files, args.vocab_size)
        for _ in range(args.repeats):
            times["direct"].append(timed(direct, files, args.vocab_size))
            times["stage"].append(timed(bertctl_stage, files, args.vocab_size, next(outs)))
            times["cli"].append(timed(bertctl_cli, files, args.vocab_size, next(outs)))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'tokenizers trainer, direct':<44}{med['direct']:8.2f} s")
    print(f"{'bertctl tokenize (stage, in process)':<44}{med['stage']:8.2f} s   "
          f"ratio {med['stage'] / med['direct']:.2f}x")
    print(f"{'bertctl tokenize (CLI process, with startup)':<44}{med['cli']:8.2f} s   "
          f"ratio {med['cli'] / med['direct']:.2f}x")
    from speed import summary

    summary.append(args.summary_json, [summary.row(
        "tokenize", f"tokenize {size / 1e6:.1f} MB, vocab {args.vocab_size} (stage) vs the "
        "tokenizers trainer", med["stage"], med["direct"], "s", higher_is_better=False,
        target=1 / 1.1, target_text=">= 0.91x (<= 1.1x the trainer)",
        note=f"CLI process with start-up: {med['cli']:.2f} s")])


if __name__ == "__main__":
    main()
