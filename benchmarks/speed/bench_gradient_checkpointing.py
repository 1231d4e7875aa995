"""What --gradient-checkpointing trades: peak memory against step time, side by side.

    /work/main/.venv/bin/python benchmarks/speed/bench_gradient_checkpointing.py \
        [--size base] [--seq 512] [--batch 4] [--steps 3] [--threads 2] [--repeats 2]

Each mode (off / on) trains a randomly initialised `BertForPreTraining` of the preset for
`--steps` steps (MLM on 15% of positions + NSP, AdamW, fp32) on random token ids, in a fresh
process, through the same model code the training loop runs; the two modes alternate over
`--repeats`. Reported per mode: the median step time of the steps after the first (which
allocates) and the process's peak resident memory (ru_maxrss: weights, optimizer state and the
activations kept for the backward pass). Ratios: on/off for both.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402


def one(a) -> dict:
    import torch

    from bertctl.model import BertConfig, BertForPreTraining
    from bertctl.train.optim import make_optimizer

    torch.manual_seed(0)
    config = BertConfig.from_preset(a.size)
    model = BertForPreTraining(config).train()
    model.bert.gradient_checkpointing = a.mode == "on"
    opt = make_optimizer(model, 1e-4)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, config.vocab_size, (a.batch, a.seq), generator=g)
    labels = torch.full_like(ids, -100)
    masked = torch.rand(ids.shape, generator=g) < 0.15
    labels[masked] = ids[masked]
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids),
             "attention_mask": torch.ones_like(ids), "labels": labels,
             "next_sentence_label": torch.zeros(a.batch, dtype=torch.long)}
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = model(**batch)["loss"]
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mode": a.mode, "step_s": statistics.median(times[1:] or times),
            "peak_mb": peak_mb, "loss": float(loss)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="base")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--summary-json", default=None, help="append rows for run_all.py")
    p.add_argument("--mode", choices=["off", "on"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.mode:
        print(json.dumps(one(a)))
        return
    import torch

    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads),
           "PYTHONPATH": str(common.ROOT)}
    print(f"machine: torch CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{a.threads} thread(s); {a.size} x {a.seq}, batch {a.batch}, fp32, {a.steps} steps")
    runs = {"off": [], "on": []}
    for r in range(a.repeats):
        for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
            cmd = [sys.executable, __file__, "--mode", mode, "--size", a.size, "--seq",
                   str(a.seq), "--batch", str(a.batch), "--steps", str(a.steps)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            runs[mode].append(res)
            print(f"  {mode}: {res['step_s']:.2f} s/step, peak {res['peak_mb']:.0f} MB, "
                  f"loss {res['loss']:.4f}", flush=True)
    med = {m: (statistics.median(r["step_s"] for r in v), statistics.median(r["peak_mb"] for r in v))
           for m, v in runs.items()}
    print(f"\nmode | s/step | peak MB\noff | {med['off'][0]:.2f} | {med['off'][1]:.0f}\n"
          f"on | {med['on'][0]:.2f} | {med['on'][1]:.0f}\n"
          f"on/off: time {med['on'][0] / med['off'][0]:.2f}x, peak memory "
          f"{med['on'][1] / med['off'][1]:.2f}x")
    from speed import summary

    what = f"gradient checkpointing {a.size} x {a.seq}, batch {a.batch}, fp32, {a.threads} thr"
    summary.append(a.summary_json, [
        summary.row("grad_checkpointing", what + ": peak memory on vs off", med["on"][1],
                    med["off"][1], "MB", higher_is_better=False),
        summary.row("grad_checkpointing", what + ": step time on vs off", med["on"][0],
                    med["off"][0], "s/step", higher_is_better=False)])


if __name__ == "__main__":
    main()
