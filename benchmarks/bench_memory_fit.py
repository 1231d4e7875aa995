"""The memory plan against the memory a training step really takes (#52, bertctl/train/memory.py).

    .venv/bin/python benchmarks/bench_memory_fit.py [--work runs/memory-fit]
        [--cases bert:mini:64:fp32 modernbert:base:32:bf16 ...]

For each case (architecture : size : micro-batch : precision [: checkpointing]) a fresh process
builds the masked-LM model, takes the plan's measurement (`memory.measure`: the tensors saved
for backward on the 2 and 4 longest rows, the line through them) and then runs one real step
(forward, backward, AdamW) on `micro` rows of 128 tokens, reading the peak resident memory of
that step (the kernel's high-water mark, reset before it: /proc/self/clear_refs). The table
sets what the plan predicts for the activations against what the step took beyond the
gradients and optimizer state, and their ratio, which ACTIVATION_MARGIN (and, with
checkpointing, CHECKPOINTED_SHARE) must cover on every row. Linux only; one thread each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import common  # noqa: E402  (benchmarks/common.py)

ROOT = Path(__file__).resolve().parents[1]
BERTCTL = [sys.executable, "-m", "bertctl"]
CASES = ["bert:mini:64:fp32", "bert:mini:64:bf16", "modernbert:mini:64:fp32",
         "modernbert:mini:64:bf16", "bert:base:32:fp32", "bert:base:64:fp32",
         "modernbert:base:32:fp32", "modernbert:base:32:bf16", "bert:base:32:fp32:ckpt"]

ONE_STEP = r"""
import json, sys, torch
from pathlib import Path
from bertctl import hardware, objectives
from bertctl.data.collate import without_full_mask
from bertctl.data.pretraining_dataset import PretrainingDataset
from bertctl.model import ARCHITECTURES, build
from bertctl.train import memory
from bertctl.train.optim import make_optimizer
data_dir, arch, size, micro, precision, ckpt = sys.argv[1:7]
micro, ckpt = int(micro), ckpt == "ckpt"
data = PretrainingDataset(Path(data_dir), "train")
config = ARCHITECTURES[arch].config_class.from_preset(size, vocab_size=data.info.vocab_size)
model = build(objectives.get("mlm").head, config)
fixed, per_row, _ = memory.measure(model, data, torch.device("cpu"), precision)
for m in model.modules():
    if hasattr(m, "gradient_checkpointing"):
        m.gradient_checkpointing = ckpt
def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
opt = make_optimizer(model, 1e-4)
batch = hardware.to_device(without_full_mask(data.batch(list(range(micro)), 0)), "cpu")
open("/proc/self/clear_refs", "w").write("5")   # the high-water mark from here
before = rss("VmRSS:")
with hardware.autocast("cpu", precision):
    loss = model(**batch)["loss"]
loss.float().backward()
opt.step()
print(json.dumps({"state": memory.state_bytes(model), "activations": fixed + micro * per_row,
                  "step": rss("VmHWM:") - before}))
"""


def data(work: Path, log: Path) -> Path:
    """Pretraining data of 128-token rows from the example corpus (dynamic masks, no NSP)."""
    tok, out = work / "tokenizer", work / "data"
    if not (out / "artifact.json").exists():
        common.sh(BERTCTL + ["tokenize", ROOT / "examples" / "corpus", "--vocab-size", 2000,
                             "--out", tok, "--force"], log)
        common.sh(BERTCTL + ["build-pretrain-data", tok, ROOT / "examples" / "corpus",
                             "--no-nsp", "--masking", "dynamic", "--max-seq-length", 128,
                             "--workers", 1, "--out", out, "--force"], log)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "memory-fit")
    ap.add_argument("--cases", nargs="+", default=CASES,
                    help="architecture:size:micro:precision[:ckpt]")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    pretrain_data = data(a.work, a.work / "log.txt")
    from bertctl import hardware
    from bertctl.train import memory

    print(f"{hardware.describe()}; ACTIVATION_MARGIN {memory.ACTIVATION_MARGIN}, "
          f"CHECKPOINTED_SHARE {memory.CHECKPOINTED_SHARE}\n")
    print("| case | planned activations | step beyond state | ratio | covered |")
    print("|---|---|---|---|---|")
    for case in a.cases:
        arch, size, micro, precision, *rest = case.split(":")
        ckpt = "ckpt" if rest == ["ckpt"] else "-"
        out = subprocess.run([sys.executable, "-c", ONE_STEP, str(pretrain_data), arch, size,
                              micro, precision, ckpt], capture_output=True, text=True,
                             env=common.env(1), check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        taken = r["step"] - r["state"]
        share = memory.CHECKPOINTED_SHARE if ckpt == "ckpt" else 1
        planned = memory.ACTIVATION_MARGIN * share * r["activations"] + memory.RESERVE_BYTES
        ratio = taken / (share * r["activations"])
        print(f"| {case} | {r['activations'] / 2**30:.2f} GB | {taken / 2**30:.2f} GB | "
              f"{ratio:.2f} | {'yes' if planned >= taken else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
