"""Architecture speed: each architecture (`--architecture`: modernbert, roberta, deberta-v2, ...)
against `bert` at matched sizes, and against transformers' own masked LM of that architecture
with the same weights.

    .venv/bin/python benchmarks/speed/bench_architectures.py                # modernbert, mini
    .venv/bin/python benchmarks/speed/bench_architectures.py --architecture roberta deberta-v2 \
        --seqs 128 512 --infer

Masked-LM models of one preset name (`--preset`): bertctl's BERT (BertForMaskedLM), and for each
architecture bertctl's model and transformers' (`AutoModelForMaskedLM` on the directory bertctl
saved, sdpa attention where it has it, as it runs on a CPU). A training step is forward +
backward + AdamW on a batch of --tokens tokens (batch = tokens / length) with 15% of the
positions masked; inference is a forward pass of the encoder without gradients. The models are
timed in alternation (who goes first rotates each repeat), the median of --repeats is reported
as tokens/s, with the ratios: the architecture / bert (its cost at a matched size) and bertctl /
transformers for the same weights (the implementation's speed). Before timing, each pair's
masked-LM losses on one batch are printed: they must agree. --precision bf16 runs all under
CPU autocast (where bf16 is native). The machine line is printed first, with the CPU kind.

Each row also gives each model's MFU: its architecture's model FLOPs (`matmul_flops`: the
encoder, and in training the masked-LM head at the masked positions, backward twice the
forward) over the matmul peak measured in that precision just before the row; and for
bertctl's training steps the share outside matmuls (1 - the step's own matmuls replayed alone
/ its time, as bench_pretrain_step.py measures it). #86's MFU goals hold for mini and small at
32 x 128 (`--tokens 4096 --seqs 128`), the shape of its pretraining step.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from speed import summary
from speed.bench_pretrain_step import (MFU_TARGETS, autocast, cpu_kind, matmul_peak,
                                 matmul_seconds)
from bertctl import hardware
from bertctl.model import ARCHITECTURES, architectures, build, save_model

MASK = 4


def batch_of(tokens: int, seq: int, vocab: int, gen: torch.Generator) -> dict:
    rows = max(1, tokens // seq)
    ids = torch.randint(5, vocab, (rows, seq), generator=gen)
    chosen = torch.rand(rows, seq, generator=gen) < 0.15
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    ids = torch.where(chosen, torch.full_like(ids, MASK), ids)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def models(preset: str, vocab: int, positions: int, names: list[str]):
    """bertctl's BERT, and each architecture's bertctl model and transformers' ("hf-NAME");
    BERT's own transformers twin ("hf-bert") when `names` holds "bert"."""
    import tempfile

    import transformers

    out = {}
    for name in dict.fromkeys(["bert", *names]):
        arch = ARCHITECTURES[name]
        # RoBERTa's table has the padding id + 1 rows more than the longest input
        config = arch.config_class.from_preset(preset, vocab_size=vocab,
                                               max_position_embeddings=positions)
        if architectures.longest_input(config) < positions:
            config = arch.config_class.from_preset(
                preset, vocab_size=vocab, max_position_embeddings=2 * positions
                - architectures.longest_input(config))
        torch.manual_seed(0)
        out[name] = build("masked_lm", config)
        if name == "bert" and "bert" not in names:
            continue
        with tempfile.TemporaryDirectory() as d:
            save_model(out[name], d)
            try:
                hf = transformers.AutoModelForMaskedLM.from_pretrained(
                    d, attn_implementation="sdpa")
            except ValueError:   # no sdpa path (DeBERTa's attention is its own)
                hf = transformers.AutoModelForMaskedLM.from_pretrained(d)
        out[f"hf-{name}"] = hf
    return out


def loss_of(name: str, model, batch: dict) -> torch.Tensor:
    if name.startswith("hf"):
        return model(**batch).loss
    return model(batch["input_ids"], None, batch.get("attention_mask"), batch["labels"])["loss"]


def encode(name: str, model, batch: dict) -> None:
    if name.startswith("hf"):
        model.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    else:
        getattr(model, model.encoder_name)(batch["input_ids"], None, batch["attention_mask"])


def timed(fn, precision: str) -> float:
    with autocast(precision):
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start


def measure(all_models: dict, batch: dict, repeats: int, precision: str, train: bool):
    """Each model's tokens/s (the median of `repeats`, timed in alternation), and its step."""
    # the fused kernel, bertctl's loop's optimizer, for all alike
    optimizers = {n: torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
                  for n, m in all_models.items()}

    def step(name):
        model = all_models[name]
        if train:
            model.train()
            loss_of(name, model, batch).backward()
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
        else:
            model.eval()
            with torch.no_grad():
                encode(name, model, batch)

    names = list(all_models)
    for name in names:      # warm-up
        timed(lambda: step(name), precision)
    times = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(timed(lambda: step(name), precision))
    tokens = batch["input_ids"].numel()
    return {n: tokens / statistics.median(t) for n, t in times.items()}, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="mini")
    ap.add_argument("--architecture", nargs="+", default=["modernbert"],
                    help="the architectures set beside bert and transformers' own")
    ap.add_argument("--seqs", nargs="+", type=int, default=[128, 512, 2048])
    ap.add_argument("--infer", nargs="*", type=int, default=[8192],
                    help="lengths timed for inference only (beside --seqs)")
    ap.add_argument("--tokens", type=int, default=8192, help="tokens per batch")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--hold-memory", action="store_true",
                    help="malloc as bertctl's stages set it (hardware.hold_freed_memory), for "
                         "all models alike: the MFU of bertctl's step as its loop runs it")
    ap.add_argument("--summary-json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.hold_memory and not hardware.hold_freed_memory():
        raise SystemExit("--hold-memory: not set here (not glibc, or malloc tuned already)")
    import transformers

    kind = cpu_kind()
    print(f"machine: {hardware.describe()}; kind {kind}; cpu capability "
          f"{torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads; torch "
          f"{torch.__version__}, transformers {transformers.__version__}; {args.precision}; "
          f"{args.tokens} tokens a batch, median of {args.repeats}; freed memory "
          f"{'held' if args.hold_memory else 'as glibc does'}")
    positions = max([*args.seqs, *args.infer, 256])
    names = args.architecture
    all_models = models(args.preset, args.vocab, positions, names)
    sizes = {n: sum(p.numel() for p in m.parameters()) for n, m in all_models.items()}
    print("parameters: " + ", ".join(f"{n} {v / 1e6:.2f}M" for n, v in sizes.items()))
    gen = torch.Generator().manual_seed(0)
    check = batch_of(512, 256, args.vocab, gen)
    for name in names:
        with torch.no_grad():
            a = loss_of(name, all_models[name].eval(), check).item()
            b = loss_of("hf", all_models[f"hf-{name}"].eval(), check).item()
        print(f"same weights, same batch: bertctl {name} loss {a:.6f}, transformers {b:.6f}")
        assert abs(a - b) < 1e-4, (name, a, b)

    rows = []
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    print(f"{'what':<8}{'seq':>6}{'architecture':>14}{'bert':>9}{'ours':>9}{'hf':>9}"
          f"{'ours/bert':>11}{'ours/hf':>9}   (tokens/s){'MFU ours':>10}{'hf':>7}{'bert':>7}"
          f"{'outside mm':>12}")
    plan = [("train", s) for s in args.seqs] + [("infer", s) for s in args.seqs + args.infer]
    for what, seq in plan:
        batch = batch_of(args.tokens, seq, args.vocab, gen)
        train = what == "train"
        # Before and after the timings, the best of both (bench_pretrain_step's reason).
        peak = matmul_peak(dtype, seconds=0.5)
        speed, step = measure(all_models, batch, args.repeats, args.precision, train)
        peak = max(peak, matmul_peak(dtype, seconds=0.5))
        batch_rows, masked = batch["input_ids"].shape[0], (batch["labels"] != -100).float().mean()

        def mfu(name, config):   # a transformers twin: its bertctl model's config
            flops = config.matmul_flops(batch_rows, seq, float(masked) if train else 0.0, train)
            return flops * speed[name] / (batch_rows * seq) / 1e9 / peak

        for name in names:
            ours, hf, bert = speed[name], speed[f"hf-{name}"], speed["bert"]
            config = all_models[name].config
            shares = [mfu(name, config), mfu(f"hf-{name}", config),
                      mfu("bert", all_models["bert"].config)]
            outside = (1 - matmul_seconds(lambda: timed(lambda: step(name), args.precision),
                                          dtype) * ours / (batch_rows * seq)) if train else None
            print(f"{what:<8}{seq:>6}{name:>14}{bert:>9.0f}{ours:>9.0f}{hf:>9.0f}"
                  f"{ours / bert:>11.2f}{ours / hf:>9.2f}{'':>13}{shares[0]:>10.1%}"
                  f"{shares[1]:>7.1%}{shares[2]:>7.1%}"
                  + (f"{outside:>12.1%}" if train else ""), flush=True)
            rows.append(summary.row("architectures", f"{what} {seq} tokens: {name} vs "
                                    f"transformers' (same shape)", ours, hf, "tokens/s",
                                    target=1.0 if train else None))
            rows.append(summary.row("architectures", f"{what} {seq} tokens: {name} vs bert "
                                    f"({args.preset})", ours, bert, "tokens/s"))
            if train:
                issue_shape = (batch_rows, seq) == (32, 128)
                floor = MFU_TARGETS.get((args.preset, args.precision, kind)) \
                    if issue_shape else None
                rows.append(summary.row(
                    "architectures", f"train {batch_rows}x{seq} {name} {args.preset} "
                    f"{args.precision} MFU", round(100 * shares[0], 1), None, "% of matmul peak",
                    target_text=f">= {floor:.0%}" if floor else "",
                    met=None if floor is None else shares[0] >= floor,
                    note=f"{kind}; transformers {shares[1]:.1%}; peak {peak:,.0f} GFLOP/s; "
                         f"{outside:.0%} of the step outside matmuls"))
    summary.append(args.summary_json, rows)


if __name__ == "__main__":
    main()
