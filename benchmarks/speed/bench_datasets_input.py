"""A corpus saved by `datasets` (save_to_disk) against the same text as a .txt file, through
`bertctl tokenize` and `bertctl build-pretrain-data`: time and peak memory side by side.

    /work/main/.venv/bin/python benchmarks/speed/bench_datasets_input.py [--mb 500] [--data ../shared/data]

Corpus: the shared pretraining text (books, WikiText-2, Shakespeare) written again and again
to `--mb` megabytes of Google's format (a sentence a line, a blank line between documents),
and the same documents as rows of a Dataset (`text`: a document's sentences joined by line
breaks) written by `Dataset.from_generator` and `save_to_disk` in 500 MB shards. Both corpora
give the same tokenizer and the same pretraining data (checked: the files' hashes); each run is
the real CLI in a fresh process, one worker, one thread, its wall time and peak resident memory.
Prints the ratios saved / text: near 1 in time, and a peak memory flat in the corpus's size.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

_HERE = Path(__file__).resolve()
DEFAULT_DATA = next((d / "shared/data" for d in (common.ROOT.parent, common.ROOT.parent.parent)
                     if (d / "shared/data").is_dir()), common.ROOT.parent / "shared/data")


def documents(data: Path):
    """The shared text's documents (blank-line separated), each a list of lines, endlessly."""
    texts = [p.read_text(encoding="utf-8", errors="replace")
             for p in sorted((data / "pretrain_text").rglob("*"))
             if p.is_file() and p.suffix in (".txt", ".tokens") and "LICENSE" not in p.name]
    docs = [[s.strip() for s in d.splitlines() if s.strip()]
            for t in texts for d in t.replace("\r\n", "\n").split("\n\n")]
    docs = [d for d in docs if d]
    while True:
        yield from docs


def write_corpora(data: Path, mb: int, work: Path) -> tuple[Path, Path]:
    import datasets

    text, n, written = work / "corpus.txt", 0, 0
    with open(text, "w", encoding="utf-8") as f:
        for doc in documents(data):
            block = "\n".join(doc) + "\n\n"
            f.write(block)
            written += len(block.encode("utf-8"))
            n += 1
            if written >= mb * 1_000_000:
                break

    def rows():
        for _, doc in zip(range(n), documents(data)):
            yield {"text": "\n".join(doc)}

    ds = datasets.Dataset.from_generator(rows, cache_dir=str(work / "hf-cache"))
    ds.save_to_disk(str(work / "saved"), max_shard_size="500MB")
    shutil.rmtree(work / "hf-cache", ignore_errors=True)
    return text, work / "saved"


def digest(directory: Path, names: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        if p.is_file() and (p.name in names or p.suffix in (".npy", ".bin")):
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=int, default=500)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--vocab-size", type=int, default=16000)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--json-out", type=Path, default=None)
    a = p.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="bench-datasets-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    text, saved = write_corpora(a.data, a.mb, work)
    bertctl = [sys.executable, "-m", "bertctl"]
    runs = {}
    for name, source, extra in (("text", text, []), ("saved", saved, ["--text-column", "text"])):
        runs[name] = {
            "tokenize": common.measured([*bertctl, "tokenize", source, *extra, "--vocab-size",
                                         a.vocab_size, "--out", work / f"tok-{name}", "--force"],
                                        log),
            "build-pretrain-data": common.measured(
                [*bertctl, "build-pretrain-data", work / "tok-text", source, *extra,
                 "--workers", "1", "--out", work / f"data-{name}", "--force"], log)}
    same_tok = digest(work / "tok-text", ("tokenizer.json",)) == \
        digest(work / "tok-saved", ("tokenizer.json",))
    same_data = digest(work / "data-text", ()) == digest(work / "data-saved", ())
    print(f"{common.machine(1)}; {a.mb} MB corpus; same tokenizer: {same_tok}; "
          f"same pretraining data: {same_data}")
    print("| stage | text: s | text: peak MB | saved dataset: s | saved: peak MB | time, saved / text |")
    print("|---|---|---|---|---|---|")
    for stage in ("tokenize", "build-pretrain-data"):
        t, s = runs["text"][stage], runs["saved"][stage]
        print(f"| {stage} | {t['wall_s']} | {t['peak_mb']} | {s['wall_s']} | {s['peak_mb']} | "
              f"{s['wall_s'] / max(t['wall_s'], 1e-9):.2f} |")
    if a.json_out:
        a.json_out.write_text(json.dumps({"machine": common.machine(1), "mb": a.mb,
                                          "same_tokenizer": same_tok, "same_data": same_data,
                                          "runs": runs}, indent=1) + "\n")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
