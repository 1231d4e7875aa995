"""Pretraining throughput on a CUDA GPU: tokens/s and MFU for base and large at 128 and 512.

    python benchmarks/bench_gpu.py [--presets base large] [--seqs 128 512] [--batch 64 16]
        [--precision bf16] [--steps 20] [--compile]

Written to be ready before a GPU is at hand: it runs bertctl's BertForPreTraining and
transformers' (sdpa) on the same weights and batch (bench_pretrain_step.make_batch), each step
forward + backward + fused AdamW on the device, timed with CUDA events over `--steps` steps
after warm-up, through bertctl's own optimizer factory (train.optim.make_optimizer). MFU is the
model FLOPs over the device's matmul peak measured here (a large bf16 or fp32 matmul), not the
datasheet's. On a machine without CUDA it says so and exits 0 (run_all.py reports it as a row).
"""

from __future__ import annotations

import argparse
import sys

import torch

import summary
from bench_pretrain_step import build_pair, make_batch
from bertctl.model import BertConfig, flops_per_token
from bertctl.train.optim import make_optimizer


def device_peak(dtype: torch.dtype, n: int = 8192, reps: int = 20) -> float:
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (start.elapsed_time(end) / 1e3) / 1e9


def tokens_per_s(model, batch, precision: str, steps: int, warmup: int = 3) -> float:
    opt = make_optimizer(model, 1e-4, 0.01, (0.9, 0.999), 1e-6)
    ctx = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16")

    def step():
        opt.zero_grad(set_to_none=True)
        with ctx:
            out = model(**batch)
            loss = out["loss"] if isinstance(out, dict) else out.loss
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    torch.cuda.synchronize()
    return batch["input_ids"].numel() * steps / (start.elapsed_time(end) / 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=["base", "large"])
    ap.add_argument("--seqs", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--batch", nargs="+", type=int, default=[64, 16],
                    help="batch size per sequence length, in the order of --seqs")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="also time bertctl with --compile")
    ap.add_argument("--summary-json", default=None, help="append rows for run_all.py")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (this script is for a GPU machine)")
        summary.append(a.summary_json, [summary.row("gpu", "GPU throughput: no CUDA device "
                                                    "here", None, None, "")])
        return
    if len(a.batch) != len(a.seqs):
        sys.exit("--batch needs one size per --seqs entry")
    torch.backends.cuda.matmul.allow_tf32 = True
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    peak = device_peak(dtype)
    name = torch.cuda.get_device_name()
    print(f"{name}; {a.precision}; measured matmul peak {peak / 1e3:,.0f} TFLOP/s; "
          f"{a.steps} steps after warm-up")
    print(f"{'preset':<7}{'seq':>5}{'batch':>6}{'ours tok/s':>12}{'hf tok/s':>11}{'ratio':>7}"
          f"{'ours MFU':>10}{'hf MFU':>8}" + (f"{'compiled tok/s':>16}" if a.compile else ""))
    rows = []
    gen = torch.Generator().manual_seed(1234)
    for preset in a.presets:
        for seq, bs in zip(a.seqs, a.batch):
            config = BertConfig.from_preset(preset, max_position_embeddings=max(512, seq))
            batch = {k: v.cuda() for k, v in
                     make_batch(bs, seq, config.vocab_size, 0.15, gen).items()}
            ours, hf = (m.cuda().train() for m in build_pair(config))
            t_ours = tokens_per_s(ours, batch, a.precision, a.steps)
            t_hf = tokens_per_s(hf, batch, a.precision, a.steps)
            per_token = flops_per_token(config, seq, 0.15)
            mfu = [t * per_token / 1e9 / peak for t in (t_ours, t_hf)]
            line = (f"{preset:<7}{seq:>5}{bs:>6}{t_ours:>12,.0f}{t_hf:>11,.0f}"
                    f"{t_ours / t_hf:>6.2f}x{mfu[0]:>10.1%}{mfu[1]:>8.1%}")
            if a.compile:
                ours.bert.compile_layers()
                line += f"{tokens_per_s(ours, batch, a.precision, a.steps, warmup=5):>16,.0f}"
            print(line, flush=True)
            rows.append(summary.row("gpu", f"{name}: pretrain {preset} {bs}x{seq} {a.precision}"
                                    " vs transformers", t_ours, t_hf, "tokens/s",
                                    note=f"MFU {mfu[0]:.1%} vs {mfu[1]:.1%}"))
            del ours, hf, batch
            torch.cuda.empty_cache()
    summary.append(a.summary_json, rows)


if __name__ == "__main__":
    main()
