"""The GPU check: one command for a machine with one NVIDIA GPU, under ten minutes.

    python benchmarks/bench_gpu.py                     # the check (needs CUDA)
    python benchmarks/bench_gpu.py --compile           # also bertctl with --compile
    python benchmarks/bench_gpu.py --device cpu --quick   # the same code, tiny: the tests run it

Three parts, each a table printed as it is measured:
1. Training steps: tokens/s and MFU of bertctl's masked-LM pretraining models against
   transformers' of the same shape and weights (sdpa attention), BERT base and large and
   ModernBERT base at 128 and 512 tokens, forward + backward + AdamW, timed with the device's
   clock after warm-up (CUDA events on a GPU). MFU is the model FLOPs over the device's matmul
   peak measured here (a large matmul of the run's dtype), not the datasheet's. Beside them,
   NVIDIA's published BERT-Large pretraining on an A100 with AMP (about 580 sequences/s at 512
   tokens, their DeepLearningExamples table) as the anchor.
2. One budget pretraining end to end through the CLI (tokenize, build-pretrain-data, pretrain
   for five minutes, eval) on the shipped books: its steps and held-out MLM loss, and
3. one SST-2 fine-tuning of that model end to end (finetune, eval) on the shipped GLUE
   sample: its seconds and dev accuracy. Nothing is downloaded.
The machine line comes first. `--quick` shrinks every part (tiny presets, a few steps, a
seconds budget) to prove the script end to end where no GPU is.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

import summary
from bench_architectures import batch_of, loss_of, models
from common import machine, measured

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# NVIDIA DeepLearningExamples, BERT-Large pretraining phase 2 (512 tokens), one A100 80GB,
# AMP: about 580 sequences/s.
ANCHOR = ("NVIDIA BERT-Large, A100, AMP, 512 tokens", 580 * 512)


class Clock:
    """Seconds of device work: CUDA events on a GPU (the queue drained), else wall time."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __call__(self, fn, reps: int) -> float:
        if self.cuda:
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return time.perf_counter() - start


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, reps: int) -> float:
    """GFLOP/s of an n x n matmul of `dtype` on `device` (its practical peak)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    return 2 * n ** 3 * reps / Clock(device)(lambda: a @ b, reps) / 1e9


def tokens_per_s(name: str, model, batch: dict, device, precision: str, steps: int,
                 warmup: int) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    model.train()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_of(name, model, batch)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    return batch["input_ids"].numel() * steps / Clock(device)(step, steps)


def steps_table(a, device, peak: float, rows: list) -> None:
    print(f"\n1. training steps, {a.precision}; matmul peak {peak:,.0f} GFLOP/s")
    print(f"{'model':<18}{'seq':>5}{'batch':>6}{'ours tok/s':>12}{'hf tok/s':>11}{'ratio':>7}"
          f"{'ours MFU':>10}{'hf MFU':>8}" + (f"{'compiled':>11}" if a.compile else ""))
    gen = torch.Generator().manual_seed(1234)
    for arch, preset in a.models:
        for seq, rows_per_batch in zip(a.seqs, a.batch):
            pair = models(preset, a.vocab, max(512, seq), [arch])
            ours, hf = pair[arch].to(device), pair[f"hf-{arch}"].to(device)
            batch = {k: v.to(device) for k, v in
                     batch_of(rows_per_batch * seq, seq, a.vocab, gen).items()}
            t = [tokens_per_s(n, m, batch, device, a.precision, a.steps, a.warmup)
                 for n, m in ((arch, ours), ("hf", hf))]
            config = ours.config
            per_token = config.matmul_flops(rows_per_batch, seq) / (rows_per_batch * seq)
            mfu = [x * per_token / 1e9 / peak for x in t]
            label = f"{arch} {preset}"
            line = (f"{label:<18}{seq:>5}{rows_per_batch:>6}{t[0]:>12,.0f}{t[1]:>11,.0f}"
                    f"{t[0] / t[1]:>6.2f}x{mfu[0]:>10.1%}{mfu[1]:>8.1%}")
            if a.compile:   # the encoder's layers, as pretrain --compile compiles them
                next(m for m in ours.modules() if hasattr(m, "compile_layers")).compile_layers()
                compiled = tokens_per_s(arch, ours, batch, device, a.precision, a.steps,
                                        a.warmup + 3)
                line += f"{compiled:>11,.0f}"
            print(line, flush=True)
            rows.append(summary.row("gpu", f"{a.where}: pretrain {label} {rows_per_batch}x{seq} "
                                    f"{a.precision} vs transformers", t[0], t[1], "tokens/s",
                                    note=f"MFU {mfu[0]:.1%} vs {mfu[1]:.1%}"))
            del ours, hf, pair, batch
            if device.type == "cuda":
                torch.cuda.empty_cache()
    print(f"{'anchor: ' + ANCHOR[0]:<52}{ANCHOR[1]:>12,.0f} tokens/s")


def bertctl(*args, log: Path) -> float:
    """One bertctl command's wall seconds, its output in `log` (a failure stops the check
    with a line naming it), on the threads this script has."""
    return measured([sys.executable, "-m", "bertctl", *args], log,
                    threads=torch.get_num_threads())["wall_s"]


def manifest(path: Path) -> dict:
    return json.loads((path / "artifact.json").read_text())


def end_to_end(a, work: Path, rows: list) -> None:
    """The budget pretraining, then SST-2 fine-tuned from its model (nothing downloaded). The
    commands' output goes to bench_gpu.log in the temporary directory's parent, kept."""
    log = work.parent / "bench_gpu.log"
    log.unlink(missing_ok=True)
    run = ["--device", a.device, "--precision", a.precision]
    print(f"\n2. budget pretraining end to end ({a.budget}, {a.preset}, the shipped books)")
    books = sorted((EXAMPLES / "corpus").glob("*.txt"))
    seconds = bertctl("tokenize", *books, "--vocab-size", "8000", "--out", work / "tok",
                      log=log)
    seconds += bertctl("build-pretrain-data", work / "tok", *books, "--max-seq-length", "128",
                       "--validation-fraction", "0.05", "--out", work / "data", log=log)
    seconds += bertctl("pretrain", work / "data", "--model-size", a.preset, "--time-budget",
                       a.budget, *run, "--out", work / "model", log=log)
    seconds += bertctl("eval", work / "model", work / "data", *run, "--out",
                       work / "model-eval", log=log)
    stats = manifest(work / "model")["stats"]
    steps, tokens_s = stats["step"], stats["tokens"] / stats["elapsed_s"]
    loss = manifest(work / "model-eval")["metrics"]["mlm_loss"]
    print(f"corpus to model {seconds:,.1f} s; {steps:,} steps, {tokens_s:,.0f} tokens/s over the "
          f"run; held-out MLM loss {loss:.3f}")
    rows.append(summary.row("gpu", f"{a.where}: budget pretraining {a.budget} {a.preset}",
                            tokens_s, None, "tokens/s",
                            note=f"{steps:,} steps; held-out MLM loss {loss:.3f}"))

    glue = EXAMPLES / "glue" / "SST-2"
    print("\n3. SST-2 fine-tuning end to end (from that model, the shipped sample)")
    seconds = bertctl("finetune", work / "model", glue / "train.tsv", "--task", "glue/sst2",
                      *a.finetune, *run, "--out", work / "sst2", log=log)
    seconds += bertctl("eval", work / "sst2", glue / "dev.tsv", *run, "--out",
                       work / "sst2-eval", log=log)
    accuracy = manifest(work / "sst2-eval")["metrics"]["accuracy"]
    print(f"finetune + eval {seconds:,.1f} s, dev accuracy {accuracy:.4f}")
    rows.append(summary.row("gpu", f"{a.where}: SST-2 finetune + eval", seconds, None, "s",
                            higher_is_better=False, note=f"dev accuracy {accuracy:.4f}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--quick", action="store_true",
                    help="tiny presets, a few steps, a seconds budget: the script end to end")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--compile", action="store_true", help="also time bertctl with --compile")
    ap.add_argument("--summary-json", default=None, help="append rows for run_all.py")
    a = ap.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (on a CPU: --device cpu --quick proves the "
              "script)")
        summary.append(a.summary_json, [summary.row("gpu", "GPU check: no CUDA device here",
                                                    None, None, "")])
        return
    import transformers

    transformers.logging.disable_progress_bar()
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        a.where = torch.cuda.get_device_name()
    else:
        a.where = machine()
    if a.quick:
        a.models, a.seqs, a.batch = [("bert", "tiny"), ("modernbert", "tiny")], [32, 64], [4, 2]
        a.vocab, a.steps, a.warmup = 1024, 2, 1
        a.finetune = ["--steps", "2", "--batch-size", "8", "--max-seq-length", "32"]
        a.preset, a.budget = "tiny", "5s"
    else:
        a.models = [("bert", "base"), ("bert", "large"), ("modernbert", "base")]
        a.seqs, a.batch, a.vocab, a.steps, a.warmup = [128, 512], [64, 16], 30522, 20, 3
        a.finetune = ["--epochs", "3"]
        a.preset, a.budget = "mini", "5m"
    print(f"{a.where}; {a.precision}" + ("; quick" if a.quick else ""))
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    peak = matmul_peak(device, dtype, 1024 if a.quick else 8192, 3 if a.quick else 20)
    rows: list = []
    steps_table(a, device, peak, rows)
    with tempfile.TemporaryDirectory() as d:
        end_to_end(a, Path(d), rows)
    summary.append(a.summary_json, rows)


if __name__ == "__main__":
    main()
