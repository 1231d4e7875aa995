"""`bertctl audit`: a large corpus against the GLUE dev sets, against a plain Python n-gram scan.

    /work/main/.venv/bin/python benchmarks/speed/bench_audit.py [--mb 1000] [--plain-mb 50]
        [--data ../shared/data] [--threads 2]

Corpus: the shared pretraining text (books, WikiText-2, Shakespeare) written again and again
into one file of `--mb` megabytes, with one GLUE dev sentence planted every ~200 KB, so the
audit has something to find. Task files: the dev sets of SST-2, MRPC, STS-B, RTE and
WNLI as shipped (`../shared/data/glue`; the benchmark reads them, bertctl only through its CLI).

- bertctl: the real CLI in a fresh process (`bertctl audit CORPUS --against DEV... --out`), its
  time the manifest's `seconds` (the corpus stream; the task files' index is read before) and
  its wall time, with the process's peak memory.
- plain: what one writes by hand, on the first `--plain-mb` of the same corpus: every task
  text's 13-grams (shorter texts whole, the same words and rule) in a Python set, then each
  corpus line's words by a regex and each window looked up. Same findings on that part (checked).

Prints MB/s of both, the ratio, and bertctl's time and peak memory for the whole corpus.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402

_HERE = Path(__file__).resolve()
ROOT = common.ROOT
TASKS = ("SST-2", "MRPC", "STS-B", "RTE", "WNLI")   # CoLA's dev file has no header row


def write_corpus(data: Path, mb: int, out: Path, planted: list[str]) -> int:
    texts = []
    for path in sorted((data / "pretrain_text").rglob("*")):
        if path.is_file() and path.suffix in (".txt", ".tokens", "") and "LICENSE" not in path.name:
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    block = "\n".join(texts)
    target, written, k = mb * 1_000_000, 0, 0
    with open(out, "w", encoding="utf-8") as f:
        while written < target:
            for start in range(0, len(block), 200_000):
                piece = block[start:start + 200_000] + "\n" + planted[k % len(planted)] + "\n"
                k += 1
                f.write(piece)
                written += len(piece.encode("utf-8"))
                if written >= target:
                    break
    return k


def dev_files(data: Path) -> list[Path]:
    files = [data / "glue" / t / "dev.tsv" for t in TASKS]
    return [f for f in files if f.exists()]


def words(text: str) -> list[str]:
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
    return re.findall(r"[^\W_]+", text)


def plain_audit(texts: list[str], corpus: Path, limit_bytes: int) -> tuple[set[int], float, int]:
    grams: dict[tuple[str, ...], list[int]] = {}
    sizes = set()
    for i, text in enumerate(texts):
        ws = words(text)
        if len(ws) < 8:
            continue
        n = min(13, len(ws))
        sizes.add(n)
        for j in range(len(ws) - n + 1):
            grams.setdefault(tuple(ws[j:j + n]), []).append(i)
    found: set[int] = set()
    started, read = time.perf_counter(), 0
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            read += len(line.encode("utf-8"))
            if read > limit_bytes:
                break
            ws = words(line)
            for n in sizes:
                for j in range(len(ws) - n + 1):
                    hit = grams.get(tuple(ws[j:j + n]))
                    if hit:
                        found.update(hit)
    return found, time.perf_counter() - started, read


def task_texts(files: list[Path]) -> list[tuple[str, int, str]]:
    """Every text cell the audit reads (the columns it picks: median cell of 4+ words), with
    its file and row (1 the first data row)."""
    texts = []
    for path in files:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        header, body = rows[0], rows[1:]
        for c, _ in enumerate(header):
            cells = [r[c] if c < len(r) else "" for r in body]
            lengths = sorted(len(x.split()) for x in cells if x)
            if lengths and lengths[len(lengths) // 2] >= 4:   # upper median, as statistics
                texts += [(str(path), r + 1, x) for r, x in enumerate(cells)]
    return texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1000)
    ap.add_argument("--plain-mb", type=int, default=50)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=None)
    a = ap.parse_args()

    import torch

    work = a.work or Path(tempfile.mkdtemp(prefix="bench-audit-"))
    work.mkdir(parents=True, exist_ok=True)
    files = dev_files(a.data)
    with open(files[0], encoding="utf-8") as f:
        planted = [row.split("\t")[0] for row in list(f)[1:] if len(row.split()) >= 10][:200]
    corpus = work / f"corpus-{a.mb}mb.txt"
    if not corpus.exists():
        write_corpus(a.data, a.mb, corpus, planted)
    size = corpus.stat().st_size
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads),
           "RAYON_NUM_THREADS": str(a.threads)}
    out = work / "audit"
    shutil.rmtree(out, ignore_errors=True)   # an up-to-date artifact would not be rebuilt
    cmd = [sys.executable, "-m", "bertctl", "audit", str(corpus), "--out", str(out), "--force",
           "--max-listed", "0"] + [x for p in files for x in ("--against", str(p))]
    started = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True,
                          env=env)
    wall = time.perf_counter() - started
    if proc.returncode:
        sys.exit(proc.stderr[-2000:])
    peak_mb = int(proc.stderr.strip().splitlines()[-1]) / 1024
    stats = json.loads((out / "artifact.json").read_text())["stats"]

    cells = task_texts(files)
    limit = a.plain_mb * 1_000_000
    plain_found, plain_s, plain_bytes = plain_audit([c[2] for c in cells], corpus, limit)
    # bertctl on the same part of the corpus must find the same examples
    part = work / "part.txt"
    with open(corpus, encoding="utf-8") as f, open(part, "w", encoding="utf-8") as g:
        read = 0
        for line in f:
            read += len(line.encode("utf-8"))
            if read > limit:
                break
            g.write(line)
    shutil.rmtree(work / "audit-part", ignore_errors=True)
    subprocess.run([*cmd[:4], str(part), "--out", str(work / "audit-part"), *cmd[7:]],
                   check=True, capture_output=True, env=env)
    ours_part = {(o["file"], o["row"]) for o in map(json.loads, (
        work / "audit-part" / "overlaps.jsonl").read_text(encoding="utf-8").splitlines())}
    plain_rows = {cells[i][:2] for i in plain_found}
    agree = "the same examples" if ours_part == plain_rows else (
        f"DIFFERENT: {len(ours_part - plain_rows)} only bertctl, {len(plain_rows - ours_part)} "
        f"only plain")
    ours = bertctl_mb_s = size / 1e6 / stats["seconds"]
    plain_mb_s = plain_bytes / 1e6 / plain_s
    machine = (f"{torch.backends.cpu.get_cpu_capability()}, {a.threads} threads, "
               f"{os.cpu_count()} cores")
    print(f"machine: {machine}")
    print(f"corpus: {size / 1e6:,.0f} MB, {stats['corpus']['sentences']:,} sentences; task "
          f"files: {', '.join(p.parent.name for p in files)}")
    for path, t in stats["tasks"].items():
        print(f"  {Path(path).parent.name}: {t['overlapping']} of {t['audited']} audited "
              f"overlap ({t['too_short']} too short)")
    print(f"bertctl audit: {stats['seconds']:.1f} s streaming ({ours:.1f} MB/s), {wall:.1f} s "
          f"wall, peak {peak_mb:,.0f} MB")
    print(f"plain Python scan (first {plain_bytes / 1e6:.0f} MB): {plain_s:.1f} s "
          f"({plain_mb_s:.1f} MB/s), {len(plain_rows)} examples found; bertctl on that part: "
          f"{agree}")
    print(f"ratio bertctl / plain, MB/s: {bertctl_mb_s / plain_mb_s:.1f}x")


if __name__ == "__main__":
    main()
