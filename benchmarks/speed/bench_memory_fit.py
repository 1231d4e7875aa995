"""The memory plan against the memory a training step really takes (#52, #82;
bertctl/train/memory.py).

    .venv/bin/python benchmarks/speed/bench_memory_fit.py
        [--cases bert:mini:64:fp32:128 bert:tiny:2:fp32:4096 modernbert:base:32:bf16:128 ...]

For each case (architecture : size : micro-batch : precision : length [: ckpt]) a fresh process
builds the masked-LM model (BERT's 30,522-piece vocabulary), runs one real step (forward,
backward, AdamW) on `micro` rows of `length` random tokens (15% of them predicted), reading
the peak resident memory of that step (the kernel's high-water mark, reset before it:
/proc/self/clear_refs), and then takes the plan's measurement (`memory.step_envelope`: every moment
of a step at two sizes of a few rows, each extrapolated to the micro-batch). The table sets
what the plan predicts beyond the resident weights (the gradients and optimizer state, and
ACTIVATION_MARGIN times the measured step tensors) against what the step took, and their
ratio, which must stay at or below 1 on every row. Linux only; one thread each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

CASES = ["bert:mini:64:fp32:128", "bert:mini:64:bf16:128", "modernbert:mini:64:fp32:128",
         "modernbert:mini:64:bf16:128", "bert:base:32:fp32:128", "bert:base:32:fp32:128:ckpt",
         "modernbert:base:32:bf16:128", "bert:tiny:8:fp32:512", "bert:tiny:2:fp32:2048",
         "bert:tiny:2:fp32:4096", "bert:tiny:2:bf16:4096", "modernbert:tiny:2:fp32:4096",
         "modernbert:tiny:2:bf16:4096", "modernbert:tiny:1:bf16:8192"]

ONE_STEP = r"""
import json, sys, torch
from bertctl import hardware
from bertctl.model import ARCHITECTURES, build
from bertctl.train import memory
from bertctl.train.optim import make_optimizer
arch, size, micro, precision, length, ckpt = sys.argv[1:7]
micro, length, ckpt = int(micro), int(length), ckpt == "ckpt"
VOCAB = 30522

class Rows:
    # rows of `length` random pieces, 15% of them predicted
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, VOCAB, (n, length), generator=g)
        self.labels = torch.where(torch.rand(n, length, generator=g) < 0.15, self.ids, -100)
    def __len__(self):
        return len(self.ids)
    def batch(self, rows, epoch):
        ids = self.ids[rows]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "labels": self.labels[rows]}

extra = {"max_position_embeddings": max(512, length)}
config = ARCHITECTURES[arch].config_class.from_preset(size, vocab_size=VOCAB, **extra)
model = build("masked_lm", config)
for m in model.modules():
    if hasattr(m, "gradient_checkpointing"):
        m.gradient_checkpointing = ckpt
def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
data = Rows(max(micro, 3))
opt = make_optimizer(model, 1e-4)
batch = data.batch(list(range(micro)), 0)
open("/proc/self/clear_refs", "w").write("5")   # the high-water mark from here
before = rss("VmRSS:")
with hardware.autocast("cpu", precision):
    loss = model(**batch)["loss"]
loss.float().backward()
opt.step()
step = rss("VmHWM:") - before
opt.zero_grad(set_to_none=True)
del opt
fixed, per_row, _ = memory.step_envelope(model, data, torch.device("cpu"), precision, micro)
print(json.dumps({"state": memory.state_bytes(model),
                  "tensors": float((fixed + micro * per_row).max()),
                  "step": step}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="+", default=CASES,
                    help="architecture:size:micro:precision:length[:ckpt]")
    a = ap.parse_args()
    from bertctl import hardware
    from bertctl.train import memory

    print(f"{hardware.describe()}; ACTIVATION_MARGIN {memory.ACTIVATION_MARGIN}\n")
    print("| case | state | step tensors measured | planned | step took | took / planned |")
    print("|---|---|---|---|---|---|")
    for case in a.cases:
        arch, size, micro, precision, length, *rest = case.split(":")
        ckpt = "ckpt" if rest == ["ckpt"] else "-"
        out = subprocess.run([sys.executable, "-c", ONE_STEP, arch, size, micro, precision,
                              length, ckpt], capture_output=True, text=True,
                             env=common.env(1), check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        planned = r["state"] + memory.ACTIVATION_MARGIN * r["tensors"]
        print(f"| {case} | {r['state'] / 2**30:.2f} GB | {r['tensors'] / 2**30:.2f} GB | "
              f"{planned / 2**30:.2f} GB | {r['step'] / 2**30:.2f} GB | "
              f"{r['step'] / planned:.2f} |", flush=True)


if __name__ == "__main__":
    main()
