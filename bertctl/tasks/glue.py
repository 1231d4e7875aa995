"""The GLUE benchmark over a grid of fine-tuning runs: which eval is which, the summary over
seeds and learning rates, and the test-set submission the benchmark's server takes.

The paper's procedure: fine-tune every task at each learning rate of a small grid (5e-5, 3e-5,
2e-5) with several seeds, pick the learning rate with the best dev score, and submit the test
predictions of the dev-selected run. Here each eval artifact says what it is through its lineage
(the task it scored, the data file by name, the fine-tuned model's lr and seed), so the summary
takes any set of eval artifacts, in any order, and refuses a set whose runs of a task differ in
anything but lr and seed.

Submission (gluebenchmark.com): one `NAME.tsv` per task at the root of a zip, a header
`index<TAB>prediction`, then one row per test example with the test file's own index and the
label as the task's files spell it: 0/1 (CoLA, SST-2, MRPC, QQP, WNLI), entailment/
not_entailment (QNLI, RTE), entailment/neutral/contradiction (MNLI-m, MNLI-mm and AX, the
diagnostic set, predicted by the MNLI model), a float (STS-B).
"""

from __future__ import annotations

import math
import statistics
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertctl import console

from bertctl.contract import lineage
from bertctl.contract.artifacts import Artifact, InputRef, sha256_file
from bertctl.errors import BertctlError
from bertctl.tasks import PRESETS


@dataclass(frozen=True)
class GlueTask:
    name: str                    # the benchmark's and the data directory's name
    preset: str                  # the bertctl task preset that reads its files
    dev: tuple[str, ...]         # dev splits summarised; the first one selects the run
    test: dict[str, str]         # test split -> submission file name


TASKS: tuple[GlueTask, ...] = (
    GlueTask("CoLA", "glue/cola", ("dev",), {"test": "CoLA.tsv"}),
    GlueTask("SST-2", "glue/sst2", ("dev",), {"test": "SST-2.tsv"}),
    GlueTask("MRPC", "glue/mrpc", ("dev",), {"test": "MRPC.tsv"}),
    GlueTask("STS-B", "glue/sts-b", ("dev",), {"test": "STS-B.tsv"}),
    GlueTask("QQP", "glue/qqp", ("dev",), {"test": "QQP.tsv"}),
    GlueTask("MNLI", "glue/mnli", ("dev_matched", "dev_mismatched"),
             {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv", "ax": "AX.tsv"}),
    GlueTask("QNLI", "glue/qnli", ("dev",), {"test": "QNLI.tsv"}),
    GlueTask("RTE", "glue/rte", ("dev",), {"test": "RTE.tsv"}),
    GlueTask("WNLI", "glue/wnli", ("dev",), {"test": "WNLI.tsv"}),
)
BY_PRESET = {t.preset: t for t in TASKS}
SUBMISSION_FILES = tuple(name for t in TASKS for name in t.test.values())
# The diagnostic set: GLUE's download script saves it as diagnostic/diagnostic.tsv; the
# benchmark's own zip names it AX.tsv.
AX_FILES = ("diagnostic.tsv", "AX.tsv")
INDEX_COLUMNS = ("index", "id")  # QQP's test file calls its index column "id"
SUBMISSION_HEADER = "index\tprediction"
# Differences between runs of one task that the grid is made of (or that do not change results).
_GRID = ("settings.lr", "settings.seed")


@dataclass
class Evaluated:
    """One eval artifact placed in the grid: which task and split it scored, with which run."""

    artifact: Artifact
    task: GlueTask
    split: str
    model: InputRef
    data: InputRef

    @property
    def lr(self) -> float:
        return float(self.model.config["lr"])

    @property
    def seed(self) -> int:
        return int(self.model.config["seed"])

    @property
    def where(self) -> str:
        return str(self.artifact.path)


def _input(art: Artifact, role: str) -> InputRef:
    found = [i for i in art.manifest.inputs if i.role == role]
    if len(found) != 1:
        raise BertctlError(f"{art.path}: an eval artifact of task data has one {role} input, "
                           f"found {len(found)}")
    return found[0]


def place(art: Artifact) -> Evaluated:
    """Where an eval artifact belongs in the grid, read from its manifest."""
    if art.manifest.kind != "eval":
        raise BertctlError(f"{art.path}: is a {art.manifest.kind} artifact, not an eval")
    preset = art.manifest.stats.get("task")
    task = BY_PRESET.get(preset)
    if task is None:
        raise BertctlError(f"{art.path}: evaluates task {preset!r}, not a GLUE task "
                           f"({', '.join(BY_PRESET)})")
    model, data = _input(art, "model"), _input(art, "data")
    if model.kind != "model" or not model.config or "lr" not in model.config:
        raise BertctlError(f"{art.path}: its model {model.path} is not a bertctl fine-tuned model "
                           f"artifact (no learning rate and seed to place it in the grid)")

    name = Path(data.path).name
    splits = {file: split for split, file in PRESETS[preset].files.items() if split != "train"}
    if task.name == "MNLI":
        splits.update({file: "ax" for file in AX_FILES})
    if name not in splits:
        raise BertctlError(f"{art.path}: scored {name}, which is none of {task.name}'s files "
                           f"({', '.join(splits)})")
    return Evaluated(art, task, splits[name], model, data)


# ---------------------------------------------------------------------------------------------
# Summary

def mean_sd(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n - 1; None for one value), as `bertctl report`. A
    run without the value (a null metric: a correlation of constant predictions; a NaN) makes
    both NaN, which the tables show as n/a and the selection ranks last."""
    if not all(math.isfinite(v) for v in values):
        return math.nan, (math.nan if len(values) > 1 else None)
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def _value(e: Evaluated, metric: str) -> float:
    v = e.artifact.manifest.metrics.get(metric)
    return float(v) if isinstance(v, (int, float)) else math.nan  # null: NaN (e.g. constant)


def _check_same_runs(evals: list[Evaluated]) -> None:
    """Runs of one task and split may differ in lr and seed only."""
    first = evals[0]
    for e in evals[1:]:
        found = [d for d in lineage.differences(first.artifact.manifest, e.artifact.manifest)
                 if d.what not in _GRID and not d.what.startswith("environment.")
                 and d.what != "bertctl_version"]
        if found:
            raise BertctlError(f"{e.where}: its run of {first.task.name} differs from that of "
                               f"{first.where} in more than lr and seed: {found[0].line()}")


def _split_summary(evals: list[Evaluated], main: str) -> list[dict[str, Any]]:
    """Per learning rate (largest first, as the paper lists them): the seeds' runs and the
    mean +- sd of every metric."""
    rows = []
    for lr in sorted({e.lr for e in evals}, reverse=True):
        runs = sorted((e for e in evals if e.lr == lr), key=lambda e: e.seed)
        names = sorted(set.intersection(*(
            {k for k, v in e.artifact.manifest.metrics.items()
             if isinstance(v, (int, float, type(None))) and not isinstance(v, bool)}
            for e in runs)))
        metrics = {}
        for name in names:
            mean, sd = mean_sd([_value(e, name) for e in runs])
            metrics[name] = {"mean": mean, "sd": sd}
        rows.append({"lr": lr, "seeds": [e.seed for e in runs], "metrics": metrics,
                     "runs": [{"seed": e.seed, "value": _value(e, main), "eval": e.artifact.id,
                               "eval_path": e.where, "model": e.model.id,
                               "model_path": e.model.path} for e in runs]})
    return rows


def _best(items, key):
    """The item with the largest key, NaN counting as the smallest; ties go to the first."""
    best = None
    for item in items:
        k = key(item)
        k = -math.inf if math.isnan(k) else k
        if best is None or k > best[0]:
            best = (k, item)
    return best[1]


def summarize_task(task: GlueTask, evals: list[Evaluated]) -> dict[str, Any]:
    primary = [e for e in evals if e.split == task.dev[0]]
    if not primary:
        raise BertctlError(f"{task.name}: no eval of its {task.dev[0]} file among the artifacts "
                           f"given; the runs cannot be compared")
    main = primary[0].artifact.manifest.stats.get("main_metric")
    if not main:
        raise BertctlError(f"{primary[0].where}: {task.dev[0]} was scored without labels; the "
                           f"summary needs dev metrics")
    splits: dict[str, list[dict[str, Any]]] = {}
    for split in task.dev:
        these = [e for e in evals if e.split == split]
        if not these:
            continue
        seen: dict[tuple[float, int], Evaluated] = {}
        for e in these:
            if (e.lr, e.seed) in seen:
                raise BertctlError(f"{e.where}: {task.name} {split} at lr {e.lr:g}, seed "
                                   f"{e.seed} is also {seen[e.lr, e.seed].where}")
            seen[e.lr, e.seed] = e
        _check_same_runs(these)
        splits[split] = _split_summary(these, main)
    by_lr = splits[task.dev[0]]
    for e in primary:
        if not math.isfinite(_value(e, main)):
            console.log(f"note: {e.where}: its {main} is "
                        f"{e.artifact.manifest.metrics.get(main)!r} (no value): that run's "
                        f"learning rate ranks last")
    chosen_lr = _best(by_lr, lambda r: r["metrics"][main]["mean"])
    chosen = _best(chosen_lr["runs"], lambda r: r["value"])
    return {"task": task.name, "preset": task.preset, "metric": main, "select_on": task.dev[0],
            "splits": splits,
            "selected": {"lr": chosen_lr["lr"], "mean": chosen_lr["metrics"][main]["mean"],
                         "sd": chosen_lr["metrics"][main]["sd"], "n": len(chosen_lr["seeds"]),
                         **chosen}}


# ---------------------------------------------------------------------------------------------
# Submission

def read_index_column(path: Path) -> list[str]:
    """The test file's own index column, one value per data row (blank lines are not rows, as
    when eval read the file)."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BertctlError(f"{path}: cannot read: {exc}") from None
    rows = [line.split("\t") for line in lines if line.strip("\r\n")]
    if not rows:
        raise BertctlError(f"{path}: the file is empty")
    column = next((c for c in INDEX_COLUMNS if c in rows[0]), None)
    if column is None:
        raise BertctlError(f"{path}: no index column ({' or '.join(INDEX_COLUMNS)}) in its "
                           f"header; GLUE's test files have one")
    at = rows[0].index(column)
    for n, row in enumerate(rows[1:], 1):
        if len(row) <= at or not row[at].strip():
            raise BertctlError(f"{path}: row {n}: no {column}")
    return [row[at].strip() for row in rows[1:]]


def _allowed(e: Evaluated) -> tuple[str, ...] | None:
    """The labels the benchmark takes for this file (None: a float, STS-B)."""

    return PRESETS[e.task.preset].labels


def submission_rows(e: Evaluated) -> list[tuple[str, str]]:
    """(test index, prediction) per row of the test file `e` predicted."""
    test_file = Path(e.data.path)
    if not test_file.is_file():
        raise BertctlError(f"{e.where}: its test file {test_file} is gone; the submission takes "
                           f"the file's own index column")
    if sha256_file(test_file) != e.data.id:
        raise BertctlError(f"{test_file}: changed since {e.where} predicted it")
    index = read_index_column(test_file)
    pred_file = e.artifact.path / "predictions.tsv"
    lines = pred_file.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] != SUBMISSION_HEADER:
        raise BertctlError(f"{pred_file}: not eval's predictions (header {SUBMISSION_HEADER!r})")
    values = [line.split("\t")[1] if "\t" in line else "" for line in lines[1:]]
    if len(values) != len(index):
        raise BertctlError(f"{pred_file}: {len(values)} predictions for the {len(index)} rows "
                           f"of {test_file}")
    allowed = _allowed(e)
    for n, v in enumerate(values, 1):
        ok = v in allowed if allowed is not None else _is_float(v)
        if not ok:
            want = "/".join(allowed) if allowed is not None else "a number"
            raise BertctlError(f"{pred_file}: row {n}: prediction {v!r}; {e.task.name} takes "
                               f"{want}")
    return list(zip(index, values))


def _is_float(v: str) -> bool:
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


def write_zip(path: Path, files: dict[str, list[tuple[str, str]]]) -> None:
    """The submission zip: every file at the root, fixed timestamps (the same predictions
    make the same bytes)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            body = "".join(f"{i}\t{p}\n" for i, p in files[name])
            z.writestr(info, f"{SUBMISSION_HEADER}\n{body}")


def summarize(evals: list[Evaluated]) -> tuple[dict[str, Any], dict[str, list[tuple[str, str]]]]:
    """The summary of every task present, and the submission files of the dev-selected runs."""
    tasks, files, missing = [], {}, {}
    for task in TASKS:
        mine = [e for e in evals if e.task is task]
        if not mine:
            missing.update({name: f"no {task.name} runs" for name in task.test.values()})
            continue
        summary = summarize_task(task, mine)
        chosen = summary["selected"]["model"]
        summary["submission"] = {}
        for split, name in task.test.items():
            found = [e for e in mine if e.split == split and e.model.id == chosen]
            if not found:
                what = (f"the diagnostic set ({' or '.join(AX_FILES)})" if split == "ax"
                        else f"{split}")
                missing[name] = f"no eval of {what} by the selected {task.name} run"
                continue
            files[name] = submission_rows(found[0])
            summary["submission"][name] = {"split": split, "rows": len(files[name]),
                                           "eval": found[0].artifact.id,
                                           "eval_path": found[0].where}
        tasks.append(summary)
    return {"tasks": tasks, "submission_files": sorted(files), "missing": missing}, files


# ---------------------------------------------------------------------------------------------
# Reading it

def fmt(v: float | None, digits: int = 4) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def markdown(summary: dict[str, Any]) -> str:
    """The summary as a page to read: per task and dev split, mean +- sd per lr, the selection."""
    out = ["# GLUE summary", "",
           "Per task: the dev metric's mean ± sample sd over seeds at each learning rate; the "
           "learning rate with the best mean is selected, and within it the best run, whose "
           "test predictions are submitted.", "",
           "| task | dev split | metric | lr | seeds | mean ± sd | runs |",
           "|---|---|---|---|---|---|---|"]
    for t in summary["tasks"]:
        for split, rows in t["splits"].items():
            for r in rows:
                m = r["metrics"].get(t["metric"], {"mean": None, "sd": None})
                mark = " **(selected)**" if (split == t["select_on"]
                                             and r["lr"] == t["selected"]["lr"]) else ""
                runs = ", ".join(fmt(run["value"]) for run in r["runs"])
                out.append(f"| {t['task']} | {split} | {t['metric']} | {r['lr']:g}{mark} | "
                           f"{len(r['seeds'])} | {fmt(m['mean'])} ± {fmt(m['sd'])} | {runs} |")
    out += ["", "## Dev-selected runs", "", "| task | lr | seed | dev | model |", "|---|---|---|---|---|"]
    for t in summary["tasks"]:
        s = t["selected"]
        out.append(f"| {t['task']} | {s['lr']:g} | {s['seed']} | {fmt(s['value'])} | "
                   f"`{s['model_path']}` |")
    out += ["", "## Submission", "",
            f"`submission.zip`: {', '.join(summary['submission_files']) or 'no files'}."]
    if summary["missing"]:
        out += ["", "Missing (the benchmark scores a submission only with all "
                f"{len(SUBMISSION_FILES)} files):", ""]
        out += [f"- {name}: {why}" for name, why in summary["missing"].items()]
    return "\n".join(out) + "\n"
