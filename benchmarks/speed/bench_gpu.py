"""The GPU check: one command on one NVIDIA GPU (an H100 or A100), under eight minutes.

    pip install torch --index-url https://download.pytorch.org/whl/cu128   # the CUDA build
    pip install -e '.[bench]'
    python benchmarks/speed/bench_gpu.py                      # the check
    python benchmarks/speed/bench_gpu.py --device cpu --quick # the same code, tiny: the suite runs it

Four parts, each a table printed as it is measured, the machine line first:
1. Training steps: tokens/s and MFU of bertctl's masked-LM models against transformers' of the
   same shape and weights (sdpa attention) on the same batches (full rows, no mask for either),
   forward + backward + fused AdamW, timed with CUDA events after warm-up: BERT base and large
   at 128 and 512 tokens, ModernBERT base at 1,024 and 8,192. MFU is the model FLOPs over the
   card's datasheet dense bf16 peak (`PEAK_BF16`; a card not in it: a measured matmul,
   named so). BERT-large's rows name NVIDIA's published anchor (DeepLearningExamples, one
   A100 80 GB, AMP): about 580 sequences/s at 128 tokens and 210 at 512.
2. The real `bertctl pretrain` loop (BERT base, 128 tokens, 200 steps on the shipped books):
   its tokens/s after the first interval, the host syncs a step makes (counted inside the
   steps: torch.cuda.set_sync_debug_mode on a GPU, the ops that wait on a CPU) and the peak
   memory against the plan's.
3. Fine-tuning steps on shipped data, each tool batching as it does (bertctl packs SST-2's
   short sentences; transformers pads each batch to its longest, as its Trainer's collator
   does): SST-2 sentences and SQuAD 384-token windows, examples/s.
4. Data-parallel scaling where two GPUs are there: the loop of part 2 under torchrun on two.
`--quick` shrinks every part (tiny presets, a few steps) to prove the script where no GPU is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402
from speed import summary
from speed.bench_architectures import batch_of, loss_of, models
from tools.common import machine
from bertctl.train.waits import HostWaits

ROOT = common.ROOT
EXAMPLES = ROOT / "examples"
SQUAD = ROOT / "tests" / "fixtures" / "squad" / "dev-v1.1-sample.json"
# Datasheet dense bf16 tensor-core peaks, TFLOP/s (SXM parts; no sparsity).
PEAK_BF16 = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 70.0,
             "L4": 121.0}
# NVIDIA DeepLearningExamples, BERT-Large pretraining, one A100 80 GB, AMP: sequences/s.
ANCHOR = {128: 580, 512: 210}


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


def peak_flops(device: torch.device, dtype: torch.dtype, quick: bool) -> tuple[float, str]:
    """(FLOP/s, where it comes from): the card's datasheet, or a measured matmul."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for card, tflops in PEAK_BF16.items():
            if card in name:
                return tflops * 1e12, f"{card} datasheet bf16"
    n, reps = (1024, 3) if quick else (8192, 20)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    a @ b
    return 2 * n ** 3 * reps / Clock(device)(lambda: a @ b, reps), "a measured matmul"


def step_rate(name: str, model, batch: dict, device, precision: str, steps: int,
              warmup: int) -> float:
    """Examples/s of forward + backward + AdamW on `batch`."""
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
    return batch["input_ids"].shape[0] * steps / Clock(device)(step, steps)


def steps_table(a, device, rows: list) -> None:
    peak, source = peak_flops(device, torch.bfloat16 if a.precision == "bf16" else torch.float32,
                              a.quick)
    print(f"\n1. training steps, {a.precision}; MFU over {peak / 1e12:,.0f} TFLOP/s ({source})")
    print(f"{'model':<18}{'seq':>6}{'batch':>6}{'ours tok/s':>12}{'hf tok/s':>11}{'ratio':>7}"
          f"{'ours MFU':>10}{'hf MFU':>8}  anchor")
    gen = torch.Generator().manual_seed(1234)
    for arch, preset, shapes in a.models:
        for seq, per_batch in shapes:
            pair = models(preset, a.vocab, max(512, seq), [arch])
            ours, hf = pair[arch].to(device), pair[f"hf-{arch}"].to(device)
            batch = {k: v.to(device) for k, v in batch_of(per_batch * seq, seq, a.vocab, gen
                                                          ).items() if k != "attention_mask"}
            rate = [step_rate(n, m, batch, device, a.precision, a.steps, a.warmup) * seq
                    for n, m in ((arch, ours), ("hf", hf))]
            flops = ours.config.matmul_flops(per_batch, seq) / (per_batch * seq)
            mfu = [r * flops / peak for r in rate]
            anchor = ANCHOR.get(seq) if (arch, preset) == ("bert", "large") else None
            label = f"{arch} {preset}"
            print(f"{label:<18}{seq:>6}{per_batch:>6}{rate[0]:>12,.0f}{rate[1]:>11,.0f}"
                  f"{rate[0] / rate[1]:>6.2f}x{mfu[0]:>10.1%}{mfu[1]:>8.1%}  " + (
                      f"NVIDIA A100 AMP {anchor} seq/s = {anchor * seq:,} tok/s"
                      if anchor else ""), flush=True)
            rows.append(summary.row("gpu", f"{a.where}: pretrain {label} {per_batch}x{seq} "
                                    f"{a.precision} vs transformers", rate[0], rate[1],
                                    "tokens/s", note=f"MFU {mfu[0]:.1%} vs {mfu[1]:.1%} "
                                    f"({source})"))
            del ours, hf, pair, batch
            if device.type == "cuda":
                torch.cuda.empty_cache()


def bertctl(*args) -> None:
    """One bertctl command in this process (part 2 watches its steps); a failure stops the
    check with the command named."""
    from bertctl.cli import app

    code = app([str(x) for x in args], prog_name="bertctl", standalone_mode=False)
    if code:
        raise SystemExit(f"bertctl {' '.join(map(str, args[:2]))} failed ({code})")


def the_loop(a, device, work: Path, rows: list) -> Path:
    """Part 2: `bertctl pretrain` with its steps watched. Returns the model (part 3's)."""
    from bertctl.train import loop

    books = sorted((EXAMPLES / "corpus").glob("*.txt"))
    bertctl("tokenize", *books, "--vocab-size", str(a.vocab), "--out", work / "tok")
    bertctl("build-pretrain-data", work / "tok", *books, "--max-seq-length", "128",
            "--validation-fraction", "0.05", "--out", work / "data")
    seen = {"steps": 0, "syncs": 0, "peak": 0, "plan": 0}
    original = loop.Trainer.train_step

    def watched(self, *args, **kwargs):
        seen["plan"] = self.plan.memory.need_bytes
        if device.type == "cuda":
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    out = original(self, *args, **kwargs)
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            seen["syncs"] += sum("synchroniz" in str(w.message) for w in caught)
            seen["peak"] = max(seen["peak"], torch.cuda.max_memory_allocated(device))
        else:
            with HostWaits() as waits:
                out = original(self, *args, **kwargs)
            seen["syncs"] += len(waits.found)
        seen["steps"] += 1
        return out

    loop.Trainer.train_step = watched
    try:
        bertctl("pretrain", work / "data", "--model-size", a.preset, "--steps", a.loop_steps,
                "--batch-size", a.loop_batch, "--log-every", a.log_every, "--device", a.device,
                "--precision", a.precision, "--eval-batches", "2", "--out", work / "model")
    finally:
        loop.Trainer.train_step = original
    records = [json.loads(x) for x in (work / "model" / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in records if r.get("split") == "train"][1:]
    rate = sum(rates) / len(rates)
    peak = f"{seen['peak'] / 2**30:.1f} GB" if device.type == "cuda" else "(CUDA only)"
    print(f"\n2. the pretrain loop: BERT {a.preset}, {a.loop_batch}x128, {seen['steps']} steps")
    print(f"tokens/s {rate:,.0f} (after the first interval); host syncs per step "
          f"{seen['syncs'] / seen['steps']:.2f}; peak memory {peak} of the plan's "
          f"{seen['plan'] / 2**30:.1f} GB")
    rows.append(summary.row("gpu", f"{a.where}: bertctl pretrain loop {a.preset}", rate, None,
                            "tokens/s", note=f"{seen['syncs'] / seen['steps']:.2f} host syncs "
                            f"per step; peak {peak} of the plan's "
                            f"{seen['plan'] / 2**30:.1f} GB"))
    a.loop_rate = rate
    return work / "model"


def finetune_table(a, device, model_dir: Path, work: Path, rows: list) -> None:
    """Part 3: bertctl's finetune loop against transformers' model on its collator's padded
    batches, over the same examples."""
    import transformers

    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"),
                                               pad_token="[PAD]")
    sst = [line.split("\t")[0] for line in
           (EXAMPLES / "glue" / "SST-2" / "train.tsv").read_text().splitlines()[1:]]
    squad = [(q["question"], p["context"]) for article in json.loads(SQUAD.read_text())["data"]
             for p in article["paragraphs"] for q in p["qas"]]
    print(f"\n3. fine-tuning steps, batch {a.ft_batch}, {a.precision}")
    print(f"{'task':<8}{'ours ex/s':>11}{'hf ex/s':>10}{'ratio':>7}")
    for task, flags, encode, head in (
            ("SST-2", [EXAMPLES / "glue" / "SST-2", "--task", "glue/sst2"],
             lambda: tok(sst, truncation=True, max_length=128),
             transformers.BertForSequenceClassification),
            ("SQuAD", [SQUAD, "--task", "squad", "--max-seq-length", "384"],
             lambda: tok([q for q, _ in squad], [c for _, c in squad],
                         truncation="only_second", max_length=384, stride=128,
                         return_overflowing_tokens=True),
             transformers.BertForQuestionAnswering)):
        out = work / f"ft-{task}"
        bertctl("finetune", model_dir, *flags, "--steps", a.ft_steps, "--batch-size",
                a.ft_batch, "--log-every", a.log_every, "--device", a.device, "--precision",
                a.precision, "--out", out)
        records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        ours = [r["examples_per_s"] for r in records if r.get("split") == "train"]
        ours_rate = sum(ours[1:] or ours) / len(ours[1:] or ours)
        hf = head.from_pretrained(model_dir).to(device)
        enc = encode()
        collate = transformers.DataCollatorWithPadding(tok)
        n = len(enc["input_ids"])
        batches = []
        for i in range(0, a.ft_batch * (a.ft_steps + a.warmup), a.ft_batch):
            rows_ = [{"input_ids": enc["input_ids"][(i + j) % n]} for j in range(a.ft_batch)]
            b = collate(rows_)
            b = {k: v.to(device) for k, v in b.items()}
            if task == "SST-2":
                b["labels"] = torch.zeros(a.ft_batch, dtype=torch.long, device=device)
            else:
                b["start_positions"] = b["end_positions"] = torch.zeros(
                    a.ft_batch, dtype=torch.long, device=device)
            batches.append(b)
        hf_rate = a.ft_batch * a.ft_steps / hf_seconds(hf, batches, device, a)
        print(f"{task:<8}{ours_rate:>11,.1f}{hf_rate:>10,.1f}{ours_rate / hf_rate:>6.2f}x",
              flush=True)
        rows.append(summary.row("gpu", f"{a.where}: finetune {task} step vs transformers",
                                ours_rate, hf_rate, "examples/s"))
        del hf


def hf_seconds(model, batches: list[dict], device, a) -> float:
    """Seconds of `a.ft_steps` steps of transformers' `model` over `batches`, after
    `a.warmup` steps (the first batches)."""
    it = iter(batches)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=device.type == "cuda")
    model.train()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(**next(it)).loss
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    return Clock(device)(step, a.ft_steps)


def scaling(a, model_data: Path, work: Path, rows: list) -> None:
    """Part 4: the loop of part 2 on two GPUs under torchrun, against one."""
    if a.device != "cuda" or torch.cuda.device_count() < 2:
        print("\n4. data-parallel scaling: one GPU here, not measured")
        return
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "-m", "bertctl", "pretrain", str(model_data), "--model-size", a.preset,
           "--steps", str(a.loop_steps), "--batch-size", str(2 * a.loop_batch), "--log-every",
           str(a.log_every), "--precision", a.precision, "--out", str(work / "model-2gpu")]
    subprocess.run(cmd, check=True, capture_output=True)
    records = [json.loads(x) for x in
               (work / "model-2gpu" / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in records if r.get("split") == "train"][1:]
    rate = sum(rates) / len(rates)
    print(f"\n4. two GPUs: {rate:,.0f} tokens/s, {rate / a.loop_rate:.2f}x one GPU")
    rows.append(summary.row("gpu", f"{a.where}: pretrain loop on 2 GPUs vs 1", rate,
                            a.loop_rate, "tokens/s", target=1.8))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--quick", action="store_true",
                    help="tiny presets, a few steps: the script end to end")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
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
    transformers.logging.set_verbosity_error()
    a.where = torch.cuda.get_device_name() if device.type == "cuda" else machine()
    if a.quick:
        a.models = [("bert", "tiny", [(32, 4), (64, 2)]), ("modernbert", "tiny", [(300, 2)])]
        a.vocab, a.steps, a.warmup, a.preset = 1024, 2, 1, "tiny"
        a.loop_steps, a.loop_batch, a.log_every, a.ft_steps, a.ft_batch = 4, 8, 2, 4, 8
    else:
        a.models = [("bert", "base", [(128, 64), (512, 16)]),
                    ("bert", "large", [(128, 64), (512, 16)]),
                    ("modernbert", "base", [(1024, 16), (8192, 2)])]
        a.vocab, a.steps, a.warmup, a.preset = 30522, 10, 3, "base"
        a.loop_steps, a.loop_batch, a.log_every, a.ft_steps, a.ft_batch = 200, 256, 50, 30, 32
    print(f"{a.where}; {a.precision}" + ("; quick" if a.quick else ""))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    rows: list = []
    steps_table(a, device, rows)
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        model = the_loop(a, device, work, rows)
        finetune_table(a, device, model, work, rows)
        scaling(a, work / "data", work, rows)
    summary.append(a.summary_json, rows)


if __name__ == "__main__":
    main()
