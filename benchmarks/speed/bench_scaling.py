"""Scaling tables: pretraining tokens/s and peak memory per preset and sequence length, and
fine-tuning examples/s and peak memory against batch size.

    python benchmarks/speed/bench_scaling.py [--presets mini small base] [--seqs 128 512]
        [--tokens-per-batch 4096] [--finetune-batches 8 16 32 64] [--threads 2]

Every cell runs in a fresh process (peak memory is that process's ru_maxrss: weights, AdamW
state, activations and the allocator's slack), takes `--warmup` untimed steps and then the
median of `--steps` timed steps.

- pretraining: bertctl's BertForPreTraining from scratch, batches of `--tokens-per-batch`
  tokens (batch = tokens / sequence length) shaped like Google's data
  (bench_pretrain_step.make_batch), forward + backward + fused AdamW.
- fine-tuning: all-MiniLM-L6-v2 with a 2-label head on SST-2 training sentences (real lengths),
  random batches of each size packed as `finetune` packs them, forward + backward + AdamW.

The build side of the scaling table (time and memory against corpus size) is
bench_build_pretrain_data.py --scaling.
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

HERE = Path(__file__).resolve().parent
SST2 = HERE.parents[2] / "shared/data/glue/SST-2/train.tsv"


def _steps(step, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def one_pretrain(a) -> dict:
    import torch

    from speed.bench_pretrain_step import make_batch
    from bertctl.model import BertConfig, BertForPreTraining
    from bertctl.train.optim import make_optimizer

    config = BertConfig.from_preset(a.preset, max_position_embeddings=max(512, a.seq))
    batch_size = max(1, a.tokens_per_batch // a.seq)
    batch = make_batch(batch_size, a.seq, config.vocab_size, 0.15,
                       torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = BertForPreTraining(config).train()
    opt = make_optimizer(model, 1e-4, 0.01, (0.9, 0.999), 1e-6)

    def step():
        opt.zero_grad(set_to_none=True)
        model(**batch)["loss"].backward()
        opt.step()

    sec = _steps(step, a.warmup, a.steps)
    return {"tokens_per_s": batch_size * a.seq / sec, "batch": batch_size,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def one_finetune(a) -> dict:
    import csv

    import numpy as np
    import torch
    from transformers import BertTokenizerFast

    from bertctl.data.collate import pack_batch
    from bertctl.model import BertForSequenceClassification
    from bertctl.model.hf import load_model
    from bertctl.train.optim import make_optimizer

    model_dir = common.default_model()
    tok = BertTokenizerFast.from_pretrained(model_dir)
    with open(SST2, encoding="utf-8") as f:
        rows = [r["sentence"] for r, _ in zip(csv.DictReader(f, delimiter="\t",
                                                             quoting=csv.QUOTE_NONE),
                                               range(4096))]
    enc = tok(rows, truncation=True, max_length=128)
    model, _ = load_model(model_dir, BertForSequenceClassification, num_labels=2)
    model.train()
    opt = make_optimizer(model, 5e-5, 0.01, (0.9, 0.999), 1e-6)
    gen = np.random.default_rng(0)

    def step():
        idx = gen.choice(len(rows), a.batch, replace=False)
        b = tok.pad([{k: enc[k][i] for k in ("input_ids", "token_type_ids", "attention_mask")}
                     for i in idx], return_tensors="pt")
        b["labels"] = torch.from_numpy(gen.integers(0, 2, a.batch))
        b = pack_batch(dict(b), 128, tok.pad_token_id)
        opt.zero_grad(set_to_none=True)
        model(**b)["loss"].backward()
        opt.step()

    sec = _steps(step, a.warmup, a.steps)
    return {"examples_per_s": a.batch / sec,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", default=["mini", "small", "base"])
    p.add_argument("--seqs", nargs="+", type=int, default=[128, 512])
    p.add_argument("--tokens-per-batch", type=int, default=4096)
    p.add_argument("--finetune-batches", nargs="+", type=int, default=[8, 16, 32, 64])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--summary-json", default=None, help="append rows for run_all.py")
    p.add_argument("--one", choices=["pretrain", "finetune"], help=argparse.SUPPRESS)
    p.add_argument("--preset", help=argparse.SUPPRESS)
    p.add_argument("--seq", type=int, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        import torch

        torch.set_num_threads(a.threads)
        print(json.dumps(one_pretrain(a) if a.one == "pretrain" else one_finetune(a)))
        return

    sys.path.insert(0, str(HERE.parents[1]))
    from speed import summary
    from bertctl import hardware

    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parents[1]),
                                                       os.environ.get("PYTHONPATH")]))}

    def run(*args):
        cmd = [sys.executable, __file__, "--steps", str(a.steps), "--warmup", str(a.warmup),
               "--threads", str(a.threads), "--tokens-per-batch", str(a.tokens_per_batch),
               *map(str, args)]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    print(f"machine: {hardware.describe()}; {a.threads} thread(s), fp32; median of {a.steps} "
          f"steps after {a.warmup}")
    print(f"\npretraining, {a.tokens_per_batch} tokens per batch\n"
          f"{'preset':<7}{'seq':>5}{'batch':>6}{'tokens/s':>10}{'peak MB':>9}")
    rows = []
    for preset in a.presets:
        for seq in a.seqs:
            r = run("--one", "pretrain", "--preset", preset, "--seq", seq)
            print(f"{preset:<7}{seq:>5}{r['batch']:>6}{r['tokens_per_s']:>10,.0f}"
                  f"{r['peak_mb']:>9,.0f}", flush=True)
            rows.append(summary.row("scaling", f"pretrain {preset} x {seq} (batch {r['batch']})"
                                    f", fp32, {a.threads} thr", r["tokens_per_s"], None,
                                    "tokens/s", note=f"peak {r['peak_mb']:,.0f} MB"))
    print(f"\nfine-tuning all-MiniLM-L6-v2 on SST-2 sentences, packed\n"
          f"{'batch':>6}{'examples/s':>12}{'peak MB':>9}")
    for batch in a.finetune_batches:
        r = run("--one", "finetune", "--batch", batch)
        print(f"{batch:>6}{r['examples_per_s']:>12,.1f}{r['peak_mb']:>9,.0f}", flush=True)
        rows.append(summary.row("scaling", f"finetune MiniLM SST-2 batch {batch}, fp32, "
                                f"{a.threads} thr", r["examples_per_s"], None, "examples/s",
                                note=f"peak {r['peak_mb']:,.0f} MB"))
    summary.append(a.summary_json, rows)


if __name__ == "__main__":
    main()
