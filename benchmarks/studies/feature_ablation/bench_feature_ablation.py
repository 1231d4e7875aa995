"""The paper's feature-based ablation on CoNLL-2003 (BERT.md): fine-tuning against a BiLSTM
head on frozen features from various layers, all through bertctl's CLI.

    /work/main/.venv/bin/python benchmarks/studies/feature_ablation/bench_feature_ablation.py \
        [--max-train-sentences 2000] [--epochs 3] [--threads 2] [--seeds 0 1 2]

Rows (all-MiniLM-L6-v2, 6 layers, so "last four" are layers 3-6):
- fine-tuning (lr `--lr`, the whole model trained, linear token head);
- frozen, `--head bilstm` (lr `--feature-lr`): the embeddings layer (0), the second-to-last
  hidden layer (-2), the last (-1), a weighted sum of the last four, their concatenation, and a
  weighted sum of all layers.
Each trains on the same training file (the first `--max-train-sentences` sentences of
../shared/data/conll2003/train.txt, whole documents kept; the full file without the flag), scores
the full dev file (valid.txt) with `bertctl eval` (conlleval's entity F1), and reports the
training seconds (from the model's metrics.jsonl, evaluation excluded) and the dev F1; with
several seeds (the same for every row), the mean ± sd of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

_HERE = Path(__file__).resolve()
DEFAULT_DATA = common.ROOT.parent / "shared/data/conll2003"

ROWS = [("fine-tuning", None),
        ("embeddings (layer 0)", ("0", "concat")),
        ("second-to-last hidden", ("-2", "concat")),
        ("last hidden", ("-1", "concat")),
        ("weighted sum, last four", ("-1,-2,-3,-4", "weighted")),
        ("concat, last four", ("-1,-2,-3,-4", "concat")),
        ("weighted sum, all layers", ("all", "weighted"))]


def training_file(data: Path, n: int | None, work: Path) -> Path:
    """The head of train.txt up to the first document start after about n sentences."""
    if n is None:
        return data / "train.txt"
    out, blanks, lines = work / f"train-{n}.txt", 0, []
    for line in (data / "train.txt").read_text(encoding="utf-8").splitlines():
        if blanks >= n and line.startswith("-DOCSTART-"):
            break
        lines.append(line)
        blanks += not line.strip()
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def train_seconds(model_dir: Path, batch_size: int) -> float:
    """Training time from metrics.jsonl: each train record's steps at its examples/s (a clock
    paused for evaluation and checkpoints)."""
    total, prev = 0.0, 0
    for line in (model_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("split") == "train" and r.get("examples_per_s"):
            total += (r["step"] - prev) * batch_size / r["examples_per_s"]
            prev = r["step"]
    return total


def run(cmd: list[str], env: dict) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--model", default=None)
    p.add_argument("--max-train-sentences", type=int, default=2000)
    p.add_argument("--epochs", type=float, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--feature-lr", type=float, default=1e-3)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default="auto")
    p.add_argument("--work", type=Path, default=None)
    a = p.parse_args()
    import torch

    model = a.model or str(common.default_model())
    work = a.work or Path(tempfile.mkdtemp(prefix="bench_ablation_"))
    work.mkdir(parents=True, exist_ok=True)
    train = training_file(a.data, a.max_train_sentences, work)
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
    bertctl = [sys.executable, "-m", "bertctl"]
    print(f"machine: {torch.backends.cpu.get_cpu_capability()}, {a.threads} thread(s); "
          f"CoNLL-2003 {train.name}, all-MiniLM-L6-v2, {a.epochs} epochs, batch {a.batch_size}, "
          f"seeds {a.seeds}, precision {a.precision}, lr {a.lr} (fine-tuning) / {a.feature_lr} "
          "(frozen)")
    results = []
    for seed in a.seeds:
        for name, frozen in ROWS:
            slug = name.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
            out = work / f"{slug}-{seed}"
            cmd = [*bertctl, "finetune", model, str(train), "--dev", str(a.data / "valid.txt"),
                   "--task", "conll2003", "--out", str(out / "model"), "--epochs", str(a.epochs),
                   "--batch-size", str(a.batch_size), "--seed", str(seed), "--max-seq-length",
                   str(a.max_seq_length), "--precision", a.precision, "--eval-every",
                   "100000000", "--keep", "last", "--json", "--force"]
            if frozen is None:
                cmd += ["--lr", str(a.lr)]
            else:
                cmd += ["--lr", str(a.feature_lr), "--freeze-encoder", f"--features={frozen[0]}",
                        "--combine", frozen[1], "--head", "bilstm"]
            run(cmd, env)
            ev = run([*bertctl, "eval", str(out / "model"), str(a.data / "valid.txt"), "--out",
                      str(out / "dev"), "--json", "--force"], env)
            seconds = train_seconds(out / "model", a.batch_size)
            results.append({"row": name, "seed": seed, "dev_f1": ev["metrics"]["f1"],
                            "train_seconds": seconds})
            print(f"seed {seed} {name:28s} dev F1 {ev['metrics']['f1']:6.2f}  training "
                  f"{seconds:7.1f}s", flush=True)
    (work / "ablation.json").write_text(json.dumps(results, indent=2))
    print(f"\nresults: {work / 'ablation.json'}")
    print("row | dev F1 mean ± sd | training s (mean)")
    for name, _ in ROWS:
        f1 = [r["dev_f1"] for r in results if r["row"] == name]
        secs = [r["train_seconds"] for r in results if r["row"] == name]
        sd = f" ± {statistics.stdev(f1):.2f}" if len(f1) > 1 else ""
        print(f"{name} | {statistics.fmean(f1):.2f}{sd} ({len(f1)}) | {statistics.fmean(secs):.0f}")


if __name__ == "__main__":
    main()
