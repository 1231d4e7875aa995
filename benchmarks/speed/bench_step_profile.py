"""Where a pretraining step's time goes (#66), per op class, from the PyTorch profiler: BERT
mini and small (MLM + NSP) and ModernBERT mini (MLM), a step being forward, backward and
bertctl's AdamW (the training loop's optimizer) on a 32 x 128 batch, in fp32 and bf16
(autocast, as the loop runs it).

    .venv/bin/python benchmarks/speed/bench_step_profile.py [--models bert-mini bert-small
        modernbert-mini] [--precisions fp32 bf16] [--steps 5] [--threads 2]

Each op's own time (self CPU time: a matmul inside a linear is counted once) goes to the
first class whose name pattern matches it:
- matmul: mm, addmm, bmm, matmul, linear, baddbmm and oneDNN's matmul kernels;
- attention: the fused kernel (scaled_dot_product / flash attention) and the written-out
  form's softmax;
- norm+act: layer norm, GELU / GeGLU, tanh, softmax elsewhere;
- dropout+mask: dropout, bernoulli, random draws, masked_fill, where;
- optimizer: the optimizer step and the foreach / fused AdamW kernels;
- casts: to, _to_copy, copy_ (autocast's casts of the weights each forward, mostly);
- other: the rest (views, embedding lookups and their backward, the loss, reductions).

The table: milliseconds a step, each class's share, the step's MFU (model FLOPs, as
bench_pretrain_step.py counts them, over the machine's measured matmul peak in that
precision), and `outside_mm`: 1 - the step's matmuls replayed alone / its time
(bench_pretrain_step.matmul_seconds). Printed with the machine line. The profiler's own work
per event slows the memory-bound ops 3-10x against the matmuls, so the class shares say which
ops, not how much of the step: `outside_mm` is measured without the profiler.
"""

from __future__ import annotations

import argparse
import json
import re
import time

import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)
from speed.bench_pretrain_step import make_batch, matmul_peak, matmul_seconds

# The profiler's names of matmul kernels.
MATMULS = (r"^aten::(mm|addmm|bmm|matmul|linear|baddbmm|_addmm_activation)$|onednn|"
           r"mkldnn_(matmul|linear)")

CLASSES = [
    ("matmul", MATMULS),
    ("attention", r"scaled_dot_product|flash_attention|_efficient_attention|"
                  r"^aten::_softmax$|^aten::_softmax_backward"),
    ("norm+act", r"layer_norm|gelu|tanh|softmax|glu|silu"),
    ("dropout+mask", r"dropout|bernoulli|rand|masked_fill|^aten::where$|uniform_"),
    ("optimizer", r"Optimizer|adam|_foreach|lerp|addcdiv|addcmul|sqrt"),
    ("casts", r"^aten::(to|_to_copy|copy_)$"),
]


def classify(name: str) -> str:
    for label, pattern in CLASSES:
        if re.search(pattern, name):
            return label
    return "other"


def build(name: str, vocab: int):
    from bertctl.model import BertConfig, build as build_model
    from bertctl.model.modernbert import ModernBertConfig

    arch, size = name.split("-")
    if arch == "bert":
        config = BertConfig.from_preset(size, vocab_size=vocab, max_position_embeddings=512)
        return build_model("pretraining", config), config, "pretraining"
    config = ModernBertConfig.from_preset(size, vocab_size=vocab)
    return build_model("masked_lm", config), config, "masked_lm"


def profile(name: str, precision: str, args) -> dict:
    from bertctl.train.optim import make_optimizer

    model, config, role = build(name, args.vocab)
    model.train()
    gen = torch.Generator().manual_seed(0)
    batch = make_batch(args.batch, args.seq, args.vocab, 0.15, gen)
    if not hasattr(config, "type_vocab_size"):
        batch = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask",
                                                         "labels")}
    optimizer = make_optimizer(model, 1e-4, 0.01, (0.9, 0.999), 1e-6, "adamw")
    cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def step():
        with cast:
            loss = model(**batch)["loss"]
        loss.float().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):   # warm-up: kernels, the attention timing of a bf16 first step
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = (time.perf_counter() - t0) / args.steps
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    shares: dict[str, float] = {}
    others: dict[str, float] = {}
    for event in prof.key_averages():
        label = classify(event.key)
        shares[label] = shares.get(label, 0.0) + event.self_cpu_time_total
        if label == "other":
            others[event.key] = event.self_cpu_time_total
    total = sum(shares.values()) or 1.0
    top = sorted(others.items(), key=lambda kv: -kv[1])[:5]
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    peak = matmul_peak(dtype)
    outside = 1 - matmul_seconds(step, dtype) / seconds
    return {"model": name, "precision": precision, "ms_per_step": round(1000 * seconds, 1),
            "mfu": round(config.matmul_flops(args.batch, args.seq, pooler=role == "pretraining")
                         / seconds / 1e9 / peak, 3),
            "peak_gflops": round(peak), "outside_mm": round(outside, 3),
            **{k: round(v / total, 3) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
            "other_top": {k: round(v / total, 3) for k, v in top}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["bert-mini", "bert-small", "modernbert-mini"])
    p.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(common.machine(), flush=True)
    rows = []
    for name in args.models:
        for precision in args.precisions:
            rows.append(profile(name, precision, args))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"machine": common.machine(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
