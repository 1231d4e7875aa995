"""Attention on a CPU: PyTorch's fused kernel against the written-out product (model.attention).

    python benchmarks/speed/bench_attention.py [--lengths 128 256 512 1024] [--precisions bf16 fp32]
        [--batch-tokens 2048] [--mask packed|padding] [--heads 4] [--head-dim 64] [--repeats 5]
        [--threads 1] [--varlen]

One layer's attention at each length, the batch holding about --batch-tokens tokens (16 x 128
by default, the budget recipe's batch), each row packed with sequences of random lengths (a
block-diagonal mask, as packed pretraining and fine-tuning batches have; --mask padding: one
sequence a row, padded, the (B, 1, 1, T) mask of an unpacked batch): the training
form (forward and backward, `model.attention.time_both`, the timing `attend` makes itself) and
the inference form (forward alone, no gradients), each the median of --repeats, the two kernels
in alternation. The ratio is fused / written: above 1 the written form is faster. The last
column is what `attend` takes for a training step of that shape (written only past a clear win,
`CLEAR_WIN`; never for inference, fp32 or beyond `WRITTEN_MAX_LENGTH`).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common
from speed import summary
from bertctl.model.attention import clearly_faster, time_both, worth_timing, written_attention
from bertctl.model import varlen
from bertctl.model.shared import attention_bias

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def row_mask(kind: str, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """The (batch, length) attention mask of a batch: 1 = token, or a packed row's sequence
    numbers (0 = padding)."""
    if kind == "padding":
        lengths = torch.randint(length // 2, length + 1, (batch,), generator=gen)
        lengths[0] = length
        return (torch.arange(length)[None] < lengths[:, None]).long()
    # Each row: sequences of 8 to length/2 positions back to back, numbered 1, 2, ...; the
    # last few positions padding (0), as a packer leaves them.
    sizes = torch.randint(8, max(9, length // 2), (batch, length), generator=gen)
    ends = sizes.cumsum(1)
    seq = (torch.arange(length)[None, :, None] >= ends[:, None, :]).sum(-1) + 1
    seq[:, length - length // 16:] = 0
    return seq


def varlen_seconds(q, k, v, sequences, repeats: int) -> float:
    """Forward and backward of the variable-length path (model.varlen: on a CPU its
    one-sequence-at-a-time form), the median of `repeats`."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    times = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        varlen.attend(q, k, v, sequences).sum().backward()
        times.append(time.perf_counter() - t)
    return statistics.median(times[1:])


def inference_times(q, k, v, mask, repeats: int) -> tuple[float, float]:
    def fused():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def written():
        return written_attention(q, k, v, mask)

    times: list[list[float]] = [[], []]
    with torch.no_grad():
        for fn in (fused, written):
            fn()
        for r in range(repeats):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                t = time.perf_counter()
                (fused, written)[i]()
                times[i].append(time.perf_counter() - t)
    return statistics.median(times[0]), statistics.median(times[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024])
    ap.add_argument("--precisions", nargs="+", choices=sorted(DTYPES), default=["bf16", "fp32"])
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--mask", choices=["packed", "padding"], default="packed")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--varlen", action="store_true",
                    help="also time the variable-length path's CPU form (model.varlen)")
    ap.add_argument("--summary-json", help="append the comparison rows to this JSON list")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"{common.machine()}; {a.heads} heads of {a.head_dim}, about "
          f"{a.batch_tokens} tokens a batch, {a.mask} rows; ms, median of {a.repeats}")
    print(f"{'length':>7}{'batch':>6}  {'prec':<5}{'train fused':>12}{'written':>9}{'ratio':>7}"
          f"{'infer fused':>13}{'written':>9}{'ratio':>7}  attend takes")
    gen = torch.Generator().manual_seed(0)
    rows = []
    for length in a.lengths:
        batch = max(1, a.batch_tokens // length)
        raw = row_mask(a.mask, batch, length, gen)
        mask = attention_bias(raw, packed=a.mask == "packed")
        sequences = varlen.Sequences.of(raw, a.mask == "packed", batch, length,
                                        torch.device("cpu")) if a.varlen else None
        for precision in a.precisions:
            q, k, v = (torch.randn(batch, a.heads, length, a.head_dim, generator=gen)
                       .to(DTYPES[precision]) for _ in range(3))
            runs = [time_both(q, k, v, mask, repeats=1) for _ in range(a.repeats)]
            tf, tw = (statistics.median(r[i] for r in runs) for i in (0, 1))
            inf_f, inf_w = inference_times(q, k, v, mask, a.repeats)
            takes = ("written" if worth_timing(q.dtype, length) and clearly_faster(tf, tw)
                     else "fused")
            tv = varlen_seconds(q, k, v, sequences, a.repeats) if a.varlen else None
            print(f"{length:>7}{batch:>6}  {precision:<5}{tf * 1e3:>12.1f}{tw * 1e3:>9.1f}"
                  f"{tf / tw:>6.2f}x{inf_f * 1e3:>13.1f}{inf_w * 1e3:>9.1f}{inf_f / inf_w:>6.2f}x"
                  f"  {takes}" + (f"  varlen {tv * 1e3:.1f} ms, fused/varlen {tf / tv:.2f}x"
                                  if a.varlen else ""), flush=True)
            if a.varlen:
                rows.append(summary.row(
                    "attention", f"variable-length attention (CPU form): training "
                    f"{batch}x{length} {precision} {a.mask} vs fused", tv, tf, "s",
                    higher_is_better=False))
            rows.append(summary.row(
                "attention", f"written-out attention: training {batch}x{length} {precision}, "
                f"{torch.get_num_threads()} thr vs fused", tw, tf, "s", higher_is_better=False,
                note=f"attend takes {takes}; inference fused/written {inf_f / inf_w:.2f}x"))
    summary.append(a.summary_json, rows)


if __name__ == "__main__":
    main()
