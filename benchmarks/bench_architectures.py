"""Architecture speed: `modernbert` against `bert` at matched sizes, and against transformers'
own ModernBertForMaskedLM at the same shape (#40).

    .venv/bin/python benchmarks/bench_architectures.py                # mini, 128/512/2048
    .venv/bin/python benchmarks/bench_architectures.py --preset small --seqs 128 512 --infer 8192

Three masked-LM models of one preset name (`--preset`): bertctl's BERT (BertForMaskedLM), bertctl's
ModernBERT (ModernBertForMaskedLM, a few more layers: about the same parameters) and
transformers' ModernBertForMaskedLM with bertctl's weights (sdpa attention, as it runs on a
CPU). A training step is forward + backward + AdamW on a batch of --tokens tokens (batch =
tokens / length) with 15% of the positions masked; inference is a forward pass of the encoder
without gradients. The models are timed in alternation (who goes first rotates each repeat),
the median of --repeats is reported as tokens/s, with the ratios: modernbert / bert (the
architecture's cost at a matched size; the local windows should make long inputs cheaper) and
bertctl / transformers for the same ModernBERT (the implementation's speed). Before timing, the
two ModernBERTs' masked-LM losses on the batch are printed: they must agree. --precision bf16
runs both under CPU autocast (where bf16 is native). The machine line is printed first.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import summary
from bertctl import hardware
from bertctl.model import ARCHITECTURES, build, save_model

MASK = 4


def batch_of(tokens: int, seq: int, vocab: int, gen: torch.Generator) -> dict:
    rows = max(1, tokens // seq)
    ids = torch.randint(5, vocab, (rows, seq), generator=gen)
    chosen = torch.rand(rows, seq, generator=gen) < 0.15
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    ids = torch.where(chosen, torch.full_like(ids, MASK), ids)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def models(preset: str, vocab: int, positions: int):
    configs = {name: ARCHITECTURES[name].config_class.from_preset(
        preset, vocab_size=vocab, max_position_embeddings=positions)
        for name in ("bert", "modernbert")}
    torch.manual_seed(0)
    ours = {name: build("masked_lm", config) for name, config in configs.items()}
    import tempfile

    import transformers

    with tempfile.TemporaryDirectory() as d:
        save_model(ours["modernbert"], d)
        hf = transformers.AutoModelForMaskedLM.from_pretrained(d, attn_implementation="sdpa")
    return {"bert": ours["bert"], "modernbert": ours["modernbert"], "hf-modernbert": hf}


def loss_of(name: str, model, batch: dict) -> torch.Tensor:
    if name.startswith("hf"):
        return model(**batch).loss
    return model(batch["input_ids"], None, batch["attention_mask"], batch["labels"])["loss"]


def encode(name: str, model, batch: dict) -> None:
    if name.startswith("hf"):
        model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    else:
        getattr(model, model.encoder_name)(batch["input_ids"], None, batch["attention_mask"])


def timed(fn, precision: str) -> float:
    ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
           else torch.autocast("cpu", enabled=False))
    with ctx:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start


def measure(all_models: dict, batch: dict, repeats: int, precision: str, train: bool
            ) -> dict[str, float]:
    optimizers = {n: torch.optim.AdamW(m.parameters(), lr=1e-4) for n, m in all_models.items()}

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
    return {n: tokens / statistics.median(t) for n, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="mini")
    ap.add_argument("--seqs", nargs="+", type=int, default=[128, 512, 2048])
    ap.add_argument("--infer", nargs="*", type=int, default=[8192],
                    help="lengths timed for inference only (beside --seqs)")
    ap.add_argument("--tokens", type=int, default=8192, help="tokens per batch")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--summary-json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    print(f"machine: {hardware.describe()}; cpu capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads; torch {torch.__version__}, transformers "
          f"{transformers.__version__}; {args.precision}; {args.tokens} tokens a batch, median "
          f"of {args.repeats}")
    positions = max([*args.seqs, *args.infer, 256])
    all_models = models(args.preset, args.vocab, positions)
    sizes = {n: sum(p.numel() for p in m.parameters()) for n, m in all_models.items()}
    print("parameters: " + ", ".join(f"{n} {v / 1e6:.2f}M" for n, v in sizes.items()))
    gen = torch.Generator().manual_seed(0)
    check = batch_of(512, 256, args.vocab, gen)
    with torch.no_grad():
        a = loss_of("modernbert", all_models["modernbert"].eval(), check).item()
        b = loss_of("hf-modernbert", all_models["hf-modernbert"].eval(), check).item()
    print(f"same weights, same batch: bertctl modernbert loss {a:.6f}, transformers {b:.6f}")
    assert abs(a - b) < 1e-4, (a, b)

    rows = []
    print(f"{'what':<10}{'seq':>6}{'bert':>10}{'modern':>10}{'hf-modern':>11}"
          f"{'modern/bert':>13}{'ours/hf':>9}   (tokens/s)")
    plan = [("train", s) for s in args.seqs] + [("infer", s) for s in args.seqs + args.infer]
    for what, seq in plan:
        batch = batch_of(args.tokens, seq, args.vocab, gen)
        speed = measure(all_models, batch, args.repeats, args.precision, what == "train")
        ratio_arch = speed["modernbert"] / speed["bert"]
        ratio_impl = speed["modernbert"] / speed["hf-modernbert"]
        print(f"{what:<10}{seq:>6}{speed['bert']:>10.0f}{speed['modernbert']:>10.0f}"
              f"{speed['hf-modernbert']:>11.0f}{ratio_arch:>13.2f}{ratio_impl:>9.2f}")
        rows.append(summary.row("architectures", f"{what} {seq} tokens: modernbert vs "
                                f"transformers' (same shape)", speed["modernbert"],
                                speed["hf-modernbert"], "tokens/s",
                                target=1.5 if what == "train" else None))
        rows.append(summary.row("architectures", f"{what} {seq} tokens: modernbert vs bert "
                                f"({args.preset})", speed["modernbert"], speed["bert"],
                                "tokens/s"))
    summary.append(args.summary_json, rows)


if __name__ == "__main__":
    main()
