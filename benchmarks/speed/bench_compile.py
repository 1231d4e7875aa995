"""`--compile` (torch.compile of each encoder layer) against the eager model: pretraining steps.

    python benchmarks/speed/bench_compile.py [--presets mini small] [--precisions fp32 bf16]
        [--batch 32] [--seq 128] [--repeats 5] [--threads 2]

Two copies of bertctl's BertForPreTraining with the same weights, one with
`BertModel.compile_layers()` (what the training loop does under --compile), take the same
forward + backward + AdamW steps on the same batch (bench_pretrain_step.make_batch). The
compiled model's first steps (compilation) are timed apart and reported; then both are timed
in alternation, median step time over the repeats. Train-mode losses are compared on the first
step with dropout off (they must agree to rounding). The point is whether --compile pays on
this machine: the ratio eager / compiled step time above 1 says it does.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common
from speed import summary
from speed.bench_pretrain_step import autocast, make_batch, step_arguments
from bertctl.model import BertConfig, BertForPreTraining


def main() -> None:
    ap = step_arguments(__doc__)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"{common.machine()}; batch {a.batch} x seq {a.seq}; median "
          f"of {a.repeats}")
    print(f"{'preset':<7}{'prec':<6}{'eager s/step':>13}{'compiled':>10}{'ratio':>8}"
          f"{'compile s':>11}  {'loss eager':>11}{'compiled':>10}")
    gen = torch.Generator().manual_seed(1234)
    rows = []
    for preset in a.presets:
        config = BertConfig.from_preset(preset, vocab_size=a.vocab)
        batch = make_batch(a.batch, a.seq, a.vocab, 0.15, gen)
        for precision in a.precisions:
            torch.manual_seed(0)
            eager = BertForPreTraining(config)
            compiled = copy.deepcopy(eager)
            compiled.bert.compile_layers()
            losses = []
            for model in (eager, compiled):
                model.eval()
                with torch.no_grad(), autocast(precision):
                    losses.append(model(**batch)["loss"].item())
                model.train()
            steps = []
            for model in (eager, compiled):
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

                def step(model=model, opt=opt):
                    opt.zero_grad(set_to_none=True)
                    with autocast(precision):
                        loss = model(**batch)["loss"]
                    loss.backward()
                    opt.step()

                steps.append(step)
            t = time.perf_counter()
            steps[1]()
            steps[1]()
            compile_s = time.perf_counter() - t
            steps[0]()
            times: list[list[float]] = [[], []]
            for r in range(a.repeats):
                for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                    t = time.perf_counter()
                    steps[i]()
                    times[i].append(time.perf_counter() - t)
            te, tc = (statistics.median(x) for x in times)
            print(f"{preset:<7}{precision:<6}{te:>13.3f}{tc:>10.3f}{te / tc:>7.2f}x"
                  f"{compile_s:>11.1f}  {losses[0]:>11.5f}{losses[1]:>10.5f}", flush=True)
            rows.append(summary.row(
                "compile", f"--compile: pretrain step {preset} {a.batch}x{a.seq} {precision}, "
                f"{torch.get_num_threads()} thr vs eager", tc, te, "s/step",
                higher_is_better=False, target=1.1, target_text=">= 1.1x to be worth it",
                note=f"compiling: {compile_s:.0f} s; losses {losses[0]:.5f} / {losses[1]:.5f}"))
            del eager, compiled, steps
    summary.append(a.summary_json, rows)


if __name__ == "__main__":
    main()
