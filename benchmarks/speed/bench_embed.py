"""`bertctl embed` against a plain transformers loop: examples/s and the same vectors.

    /work/main/.venv/bin/python benchmarks/speed/bench_embed.py [--rows 4000] [--repeats 3]
        [--pool mean] [--layers -1,-2,-3,-4] [--precision fp32] [--threads 2]

Input: the sentences of GLUE SST-2's train file (default ../shared/data/glue/SST-2/train.tsv; the
benchmark reads it, bertctl never does), the first `--rows`, one per line in a text file:
real lengths, from a word to a paragraph.

- bertctl: the real CLI, `python -m bertctl embed MODEL texts.txt --pool P --layers L --force`;
  its time is the manifest's `seconds` (tokenization, batches, forward passes, pooling, writing;
  not model loading).
- transformers: `BertModel.from_pretrained` and `BertTokenizerFast` on the same directory,
  batches of `--batch-size` rows in file order padded to their longest row,
  `output_hidden_states=True`, the same layers concatenated and the same pooling (mean over the
  attention mask, or [CLS]); timed from tokenization to the pooled numpy arrays.

Both run in fresh processes, one after the other, the first alternating per repeat, with the
same thread count; the figure is the median ratio of examples/s. Vectors are compared in fp32
(max absolute difference). Timings on a shared machine are noisy: read the ratio.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

_HERE = Path(__file__).resolve()
DEFAULT_SST2 = common.ROOT.parent / "shared/data/glue/SST-2/train.tsv"


def write_texts(src: Path, rows: int, work: Path) -> Path:
    out = work / f"texts-{rows}.txt"
    with open(src, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for i, row in enumerate(reader):
            if i == rows:
                break
            g.write(" ".join(row["sentence"].split()) + "\n")
    return out


def run_plain(a) -> None:
    import numpy as np
    import torch
    from transformers import BertModel, BertTokenizerFast

    torch.set_num_threads(a.threads)
    layers = [int(x) for x in a.layers.split(",")]
    model = BertModel.from_pretrained(a.model).eval()
    tok = BertTokenizerFast.from_pretrained(a.model)
    texts = Path(a.texts).read_text(encoding="utf-8").splitlines()
    bf16 = a.precision == "bf16"
    started = time.perf_counter()
    out = []
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for i in range(0, len(texts), a.batch_size):
            enc = tok(texts[i:i + a.batch_size], padding=True, truncation=True,
                      max_length=512, return_tensors="pt")
            states = model(**enc, output_hidden_states=True).hidden_states
            h = torch.cat([states[j].float() for j in layers], dim=-1)
            if a.pool == "cls":
                out.append(h[:, 0].numpy())
            else:
                mask = enc["attention_mask"][:, :, None].float()
                out.append(((h * mask).sum(1) / mask.sum(1)).numpy())
    seconds = time.perf_counter() - started
    np.save(Path(a.work) / "plain.npy", np.concatenate(out))
    print(json.dumps({"seconds": seconds, "rows": len(texts)}))


def run_bertctl(a) -> None:
    import shutil

    out = Path(a.work) / "bertctl"
    shutil.rmtree(out, ignore_errors=True)   # an up-to-date artifact would not be rebuilt
    cmd = [sys.executable, "-m", "bertctl", "embed", a.model, a.texts, "--out", str(out),
           "--pool", a.pool, f"--layers={a.layers}", "--precision", a.precision,
           "--batch-size", str(a.batch_size), "--threads", str(a.threads), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"bertctl failed: {proc.stderr}")
    stats = json.loads(proc.stdout)["stats"]
    print(json.dumps({"seconds": stats["seconds"], "rows": stats["rows"]}))


def one(tool: str, a) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, __file__, "--run-one", tool, "--texts", a.texts, "--model", a.model,
           "--work", a.work, "--pool", a.pool, f"--layers={a.layers}", "--precision",
           a.precision, "--batch-size", str(a.batch_size), "--threads", str(a.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"{tool} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sst2", type=Path, default=DEFAULT_SST2)
    p.add_argument("--model", default=None)
    p.add_argument("--rows", type=int, default=4000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pool", choices=["mean", "cls"], default="mean")
    p.add_argument("--layers", default="-1,-2,-3,-4")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", default=None)
    p.add_argument("--texts", default=None)
    p.add_argument("--summary-json", default=None, help="append a row for run_all.py")
    p.add_argument("--run-one", choices=["plain", "bertctl"], default=None)
    a = p.parse_args()
    a.model = a.model or str(common.default_model())
    if a.run_one:
        (run_plain if a.run_one == "plain" else run_bertctl)(a)
        return
    import numpy as np
    import torch

    a.work = a.work or tempfile.mkdtemp(prefix="bench_embed_")
    a.texts = str(write_texts(a.sst2, a.rows, Path(a.work)))
    print(f"machine: {torch.backends.cpu.get_cpu_capability()}, {a.threads} thread(s); "
          f"{a.rows} SST-2 sentences, all-MiniLM-L6-v2, layers {a.layers}, pool {a.pool}, "
          f"{a.precision}, batch {a.batch_size}")
    ratios = []
    for r in range(a.repeats):
        order = ["bertctl", "plain"] if r % 2 == 0 else ["plain", "bertctl"]
        res = {tool: one(tool, a) for tool in order}
        eps = {t: res[t]["rows"] / res[t]["seconds"] for t in res}
        ratios.append(eps["bertctl"] / eps["plain"])
        print(f"repeat {r}: bertctl {eps['bertctl']:.1f} rows/s, transformers "
              f"{eps['plain']:.1f} rows/s, ratio {ratios[-1]:.2f}")
    ours = np.load(Path(a.work) / "bertctl" / "vectors-00000.npy")
    theirs = np.load(Path(a.work) / "plain.npy")
    print(f"median ratio (bertctl / transformers examples/s): {statistics.median(ratios):.2f} "
          f"over {a.repeats} repeat(s); max |vector difference| "
          f"{float(np.abs(ours.astype(np.float32) - theirs).max()):.2e}")
    from speed import summary

    summary.append(a.summary_json, [summary.row(
        "embed", f"embed {a.rows:,} SST-2 sentences, {a.precision}, {a.threads} thr vs a plain "
        "loop", statistics.median(ratios), 1.0, "x examples/s",
        note=f"max |vector diff| {float(np.abs(ours.astype(np.float32) - theirs).max()):.1e}")])


if __name__ == "__main__":
    main()
