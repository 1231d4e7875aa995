"""Distillation: the quality a student keeps and the speed it gains (#25).

    .venv/bin/python benchmarks/studies/distill/bench_distill.py --data ../shared/data --work runs/distill
    .venv/bin/python benchmarks/studies/distill/bench_distill.py --work runs/distill --table

Teachers: all-MiniLM-L6-v2 fine-tuned by `bertctl finetune` on SST-2, MRPC, STS-B and
CoNLL-2003 with bench_export.py's recipe and subsets (SST-2: 4,000 training rows, MRPC: all,
STS-B: 3,000, CoNLL-2003: the first 3,000 sentences; the full dev sets); `--teachers DIR` takes
bench_export.py's models from its work directory instead of training them again.

Students, each built by `bertctl distill` and trained on the teacher's training file with the
teacher's epochs and learning rate, three seeds:

    L2            teacher layers 0,5 (the teacher's width, 384)
    L4            teacher layers 0,2,3,5
    mini-random   --student-size mini (4 layers of width 256, random weights: no narrower
                  pretrained model with MiniLM's vocabulary ships here)

each two ways: `direct` (--alpha 1: the student fine-tuned on the labels alone, the teacher not
run) and `distilled` (the defaults: temperature 2, alpha 0.5). The last weights are kept
(--keep last, no dev set during training, as for the teachers), then `bertctl eval DEV
--precision fp32` gives the dev metric. Speed: batched throughput and batch-1 latency of the
teacher and of each student (seed 1, distilled) on the dev set, 1 thread, fp32, each in a fresh
process with nothing else running (bench_export.py's measurement). Training time: the training
loop's elapsed seconds (at --jobs 2, two runs share the machine, one core each).

`--cache-timing` also distils the L4 student (seed 1) of each task twice, the teacher's
outputs cached once (`--teacher-cache on`) and the teacher run at every step (`off`), timing
each whole command; `--unlabelled ROWS` distils the 4-layer students on their task's first
ROWS training examples with the labels removed (the teacher labels them: SST-2 sentences,
STS-B pairs, CoNLL-2003 words; MRPC's subset is its whole set), against the direct students'
labelled subset; `--variants` distils them with other temperatures, the soft loss alone, or
hidden-state matching. `--students` picks the students: the teacher's own layers (L2, L4), a
random mini model, or the layers of the pretrained MiniLM the teacher started from (L2-pre,
L4-pre: DistilBERT's initialisation).

Results are kept per step under --work (a rerun does only what is missing); --table prints
the tables from them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from studies.export import bench_export  # noqa: E402  (the teachers' recipe, the data subsets, the measurement)
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

BERTCTL = [sys.executable, "-m", "bertctl"]
TASKS = ["SST-2", "MRPC", "STS-B", "CoNLL-2003"]
STUDENTS = {"L2": ["--student-layers", "0,5"], "L4": ["--student-layers", "0,2,3,5"],
            "mini-random": ["--student-size", "mini"],
            # The same layers of the pretrained MiniLM the teachers were fine-tuned from
            # (DistilBERT's initialisation): a student that holds none of the task yet.
            "L2-pre": ["--student-init", common.default_model, "--student-layers", "0,5"],
            "L4-pre": ["--student-init", common.default_model, "--student-layers", "0,2,3,5"]}
ARMS = {"direct": ["--alpha", "1"], "distilled": []}
# The 4-layer students distilled with other settings than the defaults (temperature 2, alpha 0.5):
# the temperature, the soft loss alone, and hidden-state matching (each student layer to the
# teacher layer it was copied from: student layers 1-4 are teacher layers 1, 3, 4, 6).
VARIANTS = {"T1": ["--temperature", "1"], "T4": ["--temperature", "4"],
            "soft": ["--alpha", "0"],
            "hidden": ["--hidden-loss", "1", "--layer-map", "1:1,2:3,3:4,4:6"]}
SEEDS = [1, 2, 3]


def run(cmd: list, log: Path, core: int | None) -> None:
    """bench_export's runner (one thread, logged, exit on failure), pinned to `core` if given."""
    bench_export.sh((["taskset", "-c", str(core)] if core is not None else []) + cmd, log, 1)


def teacher(task: str, work: Path, files, teachers: Path | None, log: Path) -> Path:
    out = work / task / "teacher"
    if (out / "artifact.json").exists():
        return out
    if teachers is not None and (teachers / task / "model" / "artifact.json").exists():
        shutil.copytree(teachers / task / "model", out)
        return out
    preset, _, epochs, lr, extra = bench_export.TASKS[task]
    run(BERTCTL + ["finetune", common.default_model(), files[0], "--task", preset, "--out", out,
                   "--epochs", epochs, "--lr", lr, "--batch-size", 32, "--seed", 0,
                   "--threads", 1, *extra], log, None)
    return out


def student_cmds(task: str, work: Path, train: Path, dev: Path, out: Path, flags: list,
                 seed: int, record: Path | None = None) -> list:
    """The commands still to run for one student: `bertctl distill` from the task's teacher with
    the teacher's epochs and learning rate (timed into `record` if given), then its dev eval."""
    _, _, epochs, lr, _ = bench_export.TASKS[task]
    cmds: list = []
    if not (out / "model" / "artifact.json").exists():
        flags = [f() if callable(f) else f for f in flags]
        cmd = BERTCTL + ["distill", work / task / "teacher", train, "--out", out / "model",
                         *flags, "--epochs", epochs, "--lr", lr, "--batch-size", 32, "--seed",
                         seed, "--keep", "last", "--threads", 1]
        cmds.append(timed(cmd, record) if record is not None else cmd)
    if not (out / "eval" / "artifact.json").exists():
        cmds.append(BERTCTL + ["eval", out / "model", dev, "--out", out / "eval",
                               "--precision", "fp32", "--threads", 1])
    return cmds


def jobs(task: str, work: Path, files, students) -> list[list]:
    """The distillations and evals of one task not done yet, each a list of commands."""
    todo = []
    for student in students:
        flags = STUDENTS[student]
        for arm, arm_flags in ARMS.items():
            for seed in SEEDS:
                todo.append(student_cmds(task, work, *files,
                                         work / task / f"{student}-{arm}-seed{seed}",
                                         [*flags, *arm_flags], seed))
    t = work / task / "teacher"
    ev = t.parent / "teacher-eval"
    if not (ev / "artifact.json").exists():
        todo.append([BERTCTL + ["eval", t, files[1], "--out", ev, "--precision", "fp32",
                                "--threads", 1]])
    return [cmds for cmds in todo if cmds]


def run_all(todo: list[list], log: Path, parallel: int) -> None:
    """Each job's commands in order; `parallel` jobs at a time, each pinned to its own core."""
    free = list(range(parallel))

    def one(cmds):
        core = free.pop()
        try:
            for cmd in cmds:   # a command, or a step that takes the core (`timed`)
                if callable(cmd):
                    cmd(log, core if parallel > 1 else None)
                else:
                    run(cmd, log, core if parallel > 1 else None)
        finally:
            free.append(core)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(one, cmds) for cmds in todo]:
            future.result()


# ---- what the teacher cache saves, and distilling on unlabelled text ------------------------

def timed(cmd: list, record: Path):
    """A step that runs `cmd` and records its wall-clock seconds (the whole command: a cached
    teacher's pass happens before the training loop's clock starts)."""
    def step(log: Path, core: int | None) -> None:
        start = time.perf_counter()
        run(cmd, log, core)
        record.write_text(json.dumps({"seconds": round(time.perf_counter() - start, 1)}))
    return step


def cache_jobs(task: str, work: Path, files) -> list[list]:
    """The L4 student (seed 1) distilled with the teacher's outputs cached and with the teacher
    run at every step, each timed as a whole command, then scored."""
    todo = []
    for cache in ("on", "off"):
        out = work / task / f"cache-{cache}"
        if not (out / "time.json").exists():   # untimed leftovers are run again
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
        todo.append(student_cmds(task, work, *files, out,
                                 [*STUDENTS["L4"], "--teacher-cache", cache], 1,
                                 record=out / "time.json"))
    return [cmds for cmds in todo if cmds]


# Each task's in-domain text for the teacher to label: its training set with the labels removed,
# the teacher's rows among it and, where the benchmark's subset left rows out, those too.
UNLABELLED = {"SST-2": ["sentence"], "STS-B": ["sentence1", "sentence2"], "CoNLL-2003": None}


def unlabelled_file(task: str, data: Path, work: Path, rows: int) -> Path | None:
    """The training set's first `rows` examples without their labels (SST-2: sentences, STS-B:
    sentence pairs, CoNLL-2003: sentences as one word per line, no tags); None for MRPC, whose
    subset is its whole training set."""
    if task not in UNLABELLED:
        return None
    d = work / "data" / f"{task}-unlabelled-{rows}"
    if task == "CoNLL-2003":
        out = d / "train.txt"
        if not out.exists():
            d.mkdir(parents=True, exist_ok=True)
            words, n = [], 0
            for line in (data / "conll2003" / "train.txt").read_text(
                    encoding="utf-8").split("\n"):
                if line.strip():
                    words.append(line.split()[0] + "\n")
                elif words and words[-1] != "\n":
                    n += words[-1] != "-DOCSTART-\n"   # a document mark is no sentence
                    words.append("\n")
                    if n == rows:
                        break
            out.write_text("".join(words), encoding="utf-8")
        return out
    out = d / "train.tsv"
    if not out.exists():
        lines = (data / "glue" / task / "train.tsv").read_text(
            encoding="utf-8-sig").splitlines()
        head = lines[0].split("\t")
        columns = [head.index(c) for c in UNLABELLED[task]]
        d.mkdir(parents=True, exist_ok=True)
        out.write_text("".join("\t".join(line.split("\t")[c] for c in columns) + "\n"
                               for line in lines[:1 + rows]), encoding="utf-8")
    return out


def arm_jobs(task: str, work: Path, train: Path, dev: Path, student: str, arm: str,
             flags: list) -> list[list]:
    """`student` distilled on `train` with `flags` added, every seed, as runs `student-arm`."""
    todo = [student_cmds(task, work, train, dev, work / task / f"{student}-{arm}-seed{seed}",
                         [*STUDENTS[student], *flags], seed) for seed in SEEDS]
    return [cmds for cmds in todo if cmds]


def extra_table(work: Path) -> str:
    out = ["| task | teacher run every step: s, dev | outputs cached: s, dev | time cached / "
           "every step |", "|---|---|---|---|"]
    for task in TASKS:
        runs = {c: work / task / f"cache-{c}" for c in ("on", "off")}
        if not all((r / "time.json").exists() and _metric(r / "eval") for r in runs.values()):
            continue
        t = {c: json.loads((r / "time.json").read_text())["seconds"] for c, r in runs.items()}
        m = {c: _metric(r / "eval")[1] for c, r in runs.items()}
        out.append(f"| {task} | {t['off']:.0f}, {m['off']:.4f} | {t['on']:.0f}, {m['on']:.4f} | "
                   f"{t['on'] / t['off']:.2f} |")
    out += ["", "The 4-layer students' settings, each against the same student's `direct` (seeds "
            f"{', '.join(map(str, SEEDS))}; train s: the loop's, mean):", "",
            "| task | student | training examples | train s | dev metric | - direct (se) | "
            "kept of teacher |", "|---|---|---|---|---|---|---|"]
    for task, student in ((t, s) for t in TASKS for s in ("L4", "L4-pre")):
        tm = _metric(work / task / "teacher-eval")
        direct = _values(work / task, f"{student}-direct")
        for arm in ["direct", "distilled", *VARIANTS, "unlabelled"]:
            vals = _values(work / task, f"{student}-{arm}")
            if len(vals) < 2 or len(direct) < 2:
                continue
            times = [t for t in (_elapsed(work / task / f"{student}-{arm}-seed{s}" / "model")
                                 for s in SEEDS) if t]
            label = arm + (f" ({' '.join(VARIANTS[arm])})" if arm in VARIANTS else "")
            first = work / task / f"{student}-{arm}-seed{SEEDS[0]}" / "model"
            out.append(f"| {task} | {student} {label} | {_examples(first)} | "
                       f"{statistics.mean(times):.0f} | {statistics.mean(vals):.4f} +- "
                       f"{statistics.stdev(vals):.4f} | "
                       + (_versus(vals, direct) if arm != "direct" else "") + " | "
                       + (f"{100 * statistics.mean(vals) / tm[1]:.1f}%" if tm else "") + " |")
    return "\n".join(out)


def measure(task: str, work: Path, dev: Path, requests: int) -> None:
    d = work / task / "measure"
    d.mkdir(exist_ok=True)
    engines = {"teacher": work / task / "teacher",
               **{s: work / task / f"{s}-distilled-seed1" / "model" for s in STUDENTS}}
    for name, path in engines.items():
        if not (path / "artifact.json").exists():
            continue
        bench_export.measured(d / f"{name}.json", path, dev, 1, requests, "fp32", "0")


# ---- the table -------------------------------------------------------------------------------

def _metric(eval_dir: Path) -> tuple[str, float] | None:
    if not (eval_dir / "artifact.json").exists():
        return None
    m = json.loads((eval_dir / "artifact.json").read_text())
    key = m["stats"]["main_metric"]
    return key, float(m["metrics"][key])


def _elapsed(model: Path) -> float | None:
    path = model / "metrics.jsonl"
    if not path.exists():
        return None
    train = [json.loads(x) for x in path.read_text().splitlines()]
    train = [r for r in train if r.get("split") == "train" and "elapsed_s" in r]
    return train[-1]["elapsed_s"] if train else None


def _versus(vals: list[float], base: list[float]) -> str:
    """mean(vals) - mean(base), and in standard errors of that difference (each mean's own)."""
    se = (statistics.variance(vals) / len(vals) + statistics.variance(base) / len(base)) ** 0.5
    delta = statistics.mean(vals) - statistics.mean(base)
    return f"{delta:+.4f} ({delta / se:+.1f} se)" if se else f"{delta:+.4f}"


def _values(d: Path, name: str) -> list[float]:
    """The dev metrics of runs `name`-seedN that have one."""
    return [m[1] for m in (_metric(d / f"{name}-seed{s}" / "eval") for s in SEEDS) if m]


def _examples(model: Path):
    m = json.loads((model / "artifact.json").read_text())
    return m["stats"].get("train_examples", "?")


def _params(model: Path) -> int | None:
    m = json.loads((model / "artifact.json").read_text())
    return (m["stats"].get("distillation") or {}).get("student_parameters")


def table(work: Path) -> str:
    import torch

    from bertctl import hardware

    out = [f"Machine: {hardware.describe()}; torch {torch.__version__}. Dev metric: accuracy "
           "(SST-2), F1 (MRPC), Spearman (STS-B), entity F1 (CoNLL-2003); mean +- sd over seeds "
           f"{', '.join(map(str, SEEDS))}.", "",
           "| task | model | parameters | direct | distilled | distilled - direct (se) | "
           "kept of teacher | throughput ex/s (x teacher) | batch-1 ms | train s (direct / "
           "distilled) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for task in TASKS:
        d = work / task
        if not d.is_dir():
            continue
        tm = _metric(d / "teacher-eval")
        speed = {p.stem: json.loads(p.read_text()) for p in (d / "measure").glob("*.json")} \
            if (d / "measure").is_dir() else {}
        ref = speed.get("teacher")
        if tm:
            tp = f"{_count(d / 'teacher'):,}"
            out.append(f"| {task} | teacher (L6, 384) | {tp} | | {tm[0]} {tm[1]:.4f} | | | "
                       f"{ref['throughput']:.0f} (1.00x) | {ref['median_ms']:.1f} | |"
                       if ref else f"| {task} | teacher (L6, 384) | {tp} | | {tm[0]} "
                       f"{tm[1]:.4f} | | | | | |")
        for student in STUDENTS:
            vals, times = {}, {}
            for arm in ARMS:
                runs = [d / f"{student}-{arm}-seed{s}" for s in SEEDS]
                vals[arm] = [m[1] for m in (_metric(r / "eval") for r in runs) if m]
                times[arm] = [t for t in (_elapsed(r / "model") for r in runs) if t]
            if not vals["distilled"]:
                continue
            params = _params(d / f"{student}-distilled-seed1" / "model")
            cells = []
            for arm in ARMS:
                v = vals[arm]
                cells.append(f"{statistics.mean(v):.4f} +- {statistics.stdev(v):.4f}"
                             if len(v) > 1 else (f"{v[0]:.4f}" if v else ""))
            diff = (_versus(vals["distilled"], vals["direct"])
                    if len(vals["direct"]) > 1 and len(vals["distilled"]) > 1 else "")
            kept = (f"{100 * statistics.mean(vals['distilled']) / tm[1]:.1f}%"
                    if tm and tm[1] else "")
            m = speed.get(student)
            thr = (f"{m['throughput']:.0f} ({m['throughput'] / ref['throughput']:.2f}x)"
                   if m and ref else "")
            lat = f"{m['median_ms']:.1f}" if m else ""
            train_s = " / ".join(f"{statistics.mean(times[a]):.0f}" if times[a] else "-"
                                 for a in ARMS)
            out.append(f"| {task} | {student} | {params:,} | {cells[0]} | {cells[1]} | {diff} | "
                       f"{kept} | {thr} | {lat} | {train_s} |")
    return "\n".join(out)


def _count(model: Path) -> int:
    from safetensors.torch import load_file

    return sum(t.numel() for t in load_file(str(model / "model.safetensors")).values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=bench_export.ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=bench_export.ROOT / "runs" / "distill")
    ap.add_argument("--teachers", type=Path, help="bench_export.py's work directory: take its "
                    "fine-tuned models as the teachers")
    ap.add_argument("--tasks", nargs="+", default=TASKS, choices=TASKS)
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time, one core each")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--no-measure", action="store_true",
                    help="train and evaluate only; measure the speed later on a quiet machine")
    ap.add_argument("--cache-timing", action="store_true", help="time the L4 student with the "
                    "teacher's outputs cached against the teacher run every step, per task")
    ap.add_argument("--students", nargs="+", default=list(STUDENTS), choices=list(STUDENTS))
    ap.add_argument("--unlabelled", type=int, metavar="ROWS", help="also distil the 4-layer "
                    "students (L4, L4-pre, of --students) on each task's first ROWS training "
                    "examples with the labels removed (SST-2, STS-B, CoNLL-2003; MRPC has no rows "
                    "beyond its labelled set)")
    ap.add_argument("--variants", nargs="+", default=[], choices=list(VARIANTS),
                    help="also distil the 4-layer students (L4, L4-pre, of --students) with "
                    "these settings")
    ap.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    ap.add_argument("--table", action="store_true", help="print the table and stop")
    args = ap.parse_args()
    SEEDS[:] = args.seeds
    work = args.work.resolve()
    if args.table:
        print(table(work) + "\n\n" + extra_table(work))
        return
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    files = bench_export.prepare(args.data.resolve(), work)
    started = time.monotonic()
    for task in args.tasks:
        teacher(task, work, files[task], args.teachers.resolve() if args.teachers else None, log)
    todo = [job for task in args.tasks for job in jobs(task, work, files[task], args.students)]
    if args.cache_timing:
        todo += [job for task in args.tasks for job in cache_jobs(task, work, files[task])]
    variant_students = [s for s in args.students if s.startswith("L4")]
    todo += [job for task in args.tasks for s in variant_students for name in args.variants
             for job in arm_jobs(task, work, *files[task], s, name, VARIANTS[name])]
    for task in args.tasks if args.unlabelled else []:
        path = unlabelled_file(task, args.data.resolve(), work, args.unlabelled)
        if path is not None:
            todo += [job for s in variant_students
                     for job in arm_jobs(task, work, path, files[task][1], s, "unlabelled", [])]
    print(f"{len(todo)} jobs", flush=True)
    run_all(todo, log, args.jobs)
    print(f"trained and evaluated in {time.monotonic() - started:.0f}s", flush=True)
    if not args.no_measure:
        for task in args.tasks:
            measure(task, work, files[task][1], args.requests)
    print(table(work) + "\n\n" + extra_table(work))


if __name__ == "__main__":
    main()
