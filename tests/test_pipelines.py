"""Miniatures of the paper's pipelines (pipelines/pretrain.mk, pipelines/glue.mk), run through
`make` as a user runs them, so no recipe rots: a tiny model, a few steps, small real subsets.

The pretraining miniature runs both phases under torchrun (2 processes) on the fixture books;
its phase-2 model is then the model the GLUE miniature fine-tunes on the six GLUE tasks of
tests/fixtures/glue and on an MNLI built here (the shared data has no MNLI; see `_mnli`).
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import forkserver
from helpers import FIXTURES, ROOT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("make") is None, reason="needs make")]

PIPELINES = ROOT / "pipelines"
# bertctl through the fork server's client (tests/forkserver.py): the same command, without
# its 4 s of imports each time.
BERTCTL = " ".join(forkserver.command("-m", "bertctl"))
TORCHRUN = f"{sys.executable} -m torch.distributed.run"
TINY = "--hidden-size 32 --num-attention-heads 2 --intermediate-size 64 --max-position-embeddings 128"
PRETRAIN_VARS = {"CORPUS": str(FIXTURES / "pretrain"), "MODEL_SIZE": "tiny", "MODEL_FLAGS": TINY,
                 "STEPS": "10", "BATCH": "8", "SEQ1": "64", "PRED1": "10", "SEQ2": "128",
                 "PRED2": "20", "DUPE": "1", "VOCAB_SIZE": "2000", "VALIDATION": "0.1",
                 "DATA_FLAGS": "--workers 1", "PRETRAIN_FLAGS": "--log-every 1 --device cpu"}
FIXTURE_TASKS = ["CoLA", "SST-2", "MRPC", "STS-B", "RTE", "WNLI"]
BINARY = {"0", "1"}
NLI2 = {"entailment", "not_entailment"}
NLI3 = {"entailment", "neutral", "contradiction"}
FORMATS = {"CoLA.tsv": BINARY, "SST-2.tsv": BINARY, "MRPC.tsv": BINARY, "WNLI.tsv": BINARY,
           "RTE.tsv": NLI2, "MNLI-m.tsv": NLI3, "MNLI-mm.tsv": NLI3, "AX.tsv": NLI3,
           "STS-B.tsv": None}


def _environment() -> dict[str, str]:
    return forkserver.environment({**os.environ, "PYTHONPATH": str(ROOT),
                                   "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})


def make(target, variables, *flags, makefile, start=None):
    """make -C pipelines as a user runs it; `start`: the directory they typed it in (its PWD),
    for relative paths (default: the test's own)."""
    env = {**_environment(), **({"PWD": str(start)} if start else {})}
    args = [f"{k}={v}" for k, v in {"BERTCTL": BERTCTL, "TORCHRUN": TORCHRUN, **variables}.items()]
    chosen = ["-f", makefile] if makefile else []
    return subprocess.run(["make", "-C", str(PIPELINES), *chosen, *flags, target, *args],
                          capture_output=True, text=True, env=env, timeout=900, cwd=start)


def manifest(path: Path) -> dict:
    return json.loads((path / "artifact.json").read_text())


def mtimes(root: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in root.rglob("artifact.json")}


def history(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    runs = tmp_path_factory.mktemp("pretrain") / "runs"
    variables = {**PRETRAIN_VARS, "RUNS": str(runs), "NPROC": "2"}
    r = make("pretrain", variables, makefile="pretrain.mk")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return runs, variables, r


def test_pretrain_pipeline_two_phases_under_torchrun(pretrained):
    runs, variables, first = pretrained
    assert "torch.distributed.run --nnodes=1 --nproc-per-node=2 --standalone" in first.stdout
    tok, data1, data2 = (manifest(runs / n) for n in ("tokenizer", "data1", "data2"))
    p1, p2 = manifest(runs / "phase1"), manifest(runs / "phase2")
    # Phase 1: short sequences, 90% of the steps, on the schedule of all of them.
    assert (data1["config"]["max_seq_length"], data1["config"]["max_predictions_per_seq"]) == (64, 10)
    assert (data2["config"]["max_seq_length"], data2["config"]["max_predictions_per_seq"]) == (128, 20)
    assert data1["inputs"][0]["id"] == data2["inputs"][0]["id"] == tok["id"]
    assert {i["role"]: i["id"] for i in p1["inputs"]} == {"data": data1["id"]}
    assert (p1["stats"]["step"], p1["stats"]["total_steps"]) == (9, 10)
    # Phase 2: long sequences, phase 1's weights, the schedule continued to its end.
    assert {i["role"]: i["id"] for i in p2["inputs"]} == {"data": data2["id"], "init": p1["id"]}
    assert p2["config"]["continue_schedule"] is True and p2["config"]["steps"] == 1
    assert (p2["stats"]["step"], p2["stats"]["total_steps"]) == (10, 10)
    train1 = [r for r in history(runs / "phase1") if r.get("split", "train") == "train"]
    train2 = [r for r in history(runs / "phase2") if r.get("split", "train") == "train"]
    assert [r["step"] for r in train1] == list(range(1, 10)) and [r["step"] for r in train2] == [10]
    assert 0 < train2[0]["lr"] < train1[-1]["lr"]
    # A second make finds everything up to date and runs nothing.
    before = mtimes(runs)
    again = make("pretrain", variables, makefile="pretrain.mk")
    assert again.returncode == 0 and BERTCTL not in again.stdout and "torch" not in again.stdout
    assert mtimes(runs) == before


def test_modern_pipeline_extends_the_context_between_stable_and_decay(tmp_path):
    """ModernBERT's three phases in miniature: a WSD stable phase on short rows at rotary base
    10,000; the context extension continuing its schedule and optimizer on longer rows,
    declaring their length with the base raised; the decay on the same rows to the
    schedule's end."""
    runs = tmp_path / "runs"
    variables = {"CORPUS": str(FIXTURES / "pretrain"), "RUNS": str(runs), "MODEL_SIZE": "tiny",
                 "MODEL_FLAGS": "--hidden-size 32 --num-attention-heads 2 --intermediate-size 48",
                 "STEPS": "6", "EXTEND": "2", "DECAY": "2", "BATCH": "8", "SEQ1": "64",
                 "SEQ2": "128", "VOCAB_SIZE": "2000", "LR": "2e-3", "VALIDATION": "0.1",
                 "DATA_FLAGS": "--workers 1", "PRETRAIN_FLAGS": "--log-every 1 --device cpu"}
    r = make("modern", variables, makefile="modern.mk")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    phases = {n: manifest(runs / n) for n in ("data1", "data2", "stable", "extended", "model")}
    configs = {n: json.loads((runs / n / "config.json").read_text())
               for n in ("stable", "extended", "model")}
    stable, extended, model = phases["stable"], phases["extended"], phases["model"]
    assert (stable["stats"]["step"], stable["stats"]["total_steps"]) == (2, 6)
    assert {i["role"]: i["id"] for i in extended["inputs"]} == {
        "data": phases["data2"]["id"], "init": stable["id"]}
    assert {i["role"]: i["id"] for i in model["inputs"]} == {
        "data": phases["data2"]["id"], "init": extended["id"]}
    assert [p["stats"]["step"] for p in (stable, extended, model)] == [2, 4, 6]
    assert extended["stats"]["optimizer_from"] == model["stats"]["optimizer_from"] == "init"
    assert "optimizer.pt" in extended["files"] and "optimizer.pt" not in model["files"]
    assert [c["max_position_embeddings"] for c in configs.values()] == [64, 128, 128]
    assert [c["rope_parameters"]["full_attention"]["rope_theta"] for c in configs.values()] == [
        10000, 160000, 160000]
    rates = [[x["lr"] for x in history(runs / n) if x.get("split", "train") == "train"]
             for n in ("stable", "extended", "model")]
    # warm-up 6% of 6 steps is none; stable at the peak to step 4, then linear to 0 at 6
    assert rates == [[2e-3, 2e-3], [2e-3, 2e-3], pytest.approx([2e-3, 1e-3])]
    before = mtimes(runs)
    again = make("modern", variables, makefile="modern.mk")
    assert again.returncode == 0 and BERTCTL not in again.stdout
    assert mtimes(runs) == before


def test_pretrain_pipeline_across_nodes_dry_run(tmp_path):
    variables = {**PRETRAIN_VARS, "RUNS": str(tmp_path), "NPROC": "4", "NNODES": "2",
                 "NODE_RANK": "1", "RDZV_ENDPOINT": "node0:29400", "STEPS": "1000"}
    r = make("pretrain", variables, "-n", makefile="pretrain.mk")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if "pretrain " in line and "-m bertctl" in line]
    assert len(lines) == 2
    for line in lines:
        assert line.startswith(f"{TORCHRUN} --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d "
                               f"--rdzv-endpoint=node0:29400 --rdzv-id=bertctl-pretrain -m bertctl")
    assert "--steps 900" in r.stdout and "--total-steps 1000" in r.stdout
    assert "--continue-schedule --steps 100" in r.stdout
    # Node 1 builds neither tokenizer nor data: it waits for node 0's.
    assert "build-pretrain-data" not in r.stdout and " tokenize " not in r.stdout
    assert r.stdout.count("waiting for") == 3


# --- GLUE ------------------------------------------------------------------------------------

def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    return lines[0].split("\t"), [line.split("\t") for line in lines[1:] if line]


def _mnli(glue: Path) -> None:
    """MNLI's file layout (columns, split files, a diagnostic file for AX) holding real RTE
    sentence pairs: the shared data has no MNLI. Labels: entailment stays; not_entailment
    becomes contradiction or neutral by row, so all three classes occur. The test files' index
    runs from 500 so a submission must take it from the file."""
    _, train = _rows(FIXTURES / "glue/RTE/train.tsv")
    _, test = _rows(FIXTURES / "glue/RTE/test.tsv")
    parse = ["promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
             "sentence1_parse", "sentence2_parse"]

    def label(row, n):
        return row[3] if row[3] == "entailment" else ("contradiction", "neutral")[n % 2]

    def write(name, header, rows):
        (glue / "MNLI" / name).write_text("\n".join("\t".join(r) for r in [header, *rows]) + "\n")

    (glue / "MNLI").mkdir()
    filler = ["1", "1e", "fiction", "( a )", "( b )", "(ROOT a)", "(ROOT b)"]
    write("train.tsv", ["index", *parse, "sentence1", "sentence2", "label1", "gold_label"],
          [[str(n), *filler, r[1], r[2], label(r, n), label(r, n)] for n, r in enumerate(train[:64])])
    for name, rows in (("dev_matched.tsv", train[64:96]), ("dev_mismatched.tsv", train[96:128])):
        write(name, ["index", *parse, "sentence1", "sentence2", *[f"label{i}" for i in range(1, 6)],
                     "gold_label"],
              [[str(n), *filler, r[1], r[2], *[label(r, n)] * 5, label(r, n)]
               for n, r in enumerate(rows)])
    for name, rows in (("test_matched.tsv", test[:10]), ("test_mismatched.tsv", test[10:])):
        write(name, ["index", *parse, "sentence1", "sentence2"],
              [[str(500 + n), *filler, r[1], r[2]] for n, r in enumerate(rows)])
    (glue / "diagnostic").mkdir()
    write("../diagnostic/diagnostic.tsv", ["index", "sentence1", "sentence2"],
          [[str(500 + n), r[1], r[2]] for n, r in enumerate(test[:12])])


@pytest.fixture(scope="module")
def glue_runs(tmp_path_factory, pretrained):
    root = tmp_path_factory.mktemp("glue")
    glue = root / "glue"
    glue.mkdir()
    for task in FIXTURE_TASKS + ["swag"]:  # swag: not a GLUE task, to be left alone
        (glue / task).symlink_to(FIXTURES / "glue" / task)
    _mnli(glue)
    variables = {"GLUE": str(glue), "MODEL": str(pretrained[0] / "phase2"),
                 "RUNS": str(root / "runs"), "SEEDS": "1", "LRS": "1e-3",
                 "SEEDS_RTE": "1 2", "LRS_RTE": "1e-3 5e-4", "EPOCHS": "1", "MAX_SEQ": "64",
                 "FINETUNE_FLAGS": "--device cpu --log-every 5", "EVAL_FLAGS": "--device cpu"}
    r = make("glue", variables, "-j2", makefile="glue.mk")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return glue, root / "runs", variables, r


def _evals(runs: Path, task: str, split: str) -> dict[tuple[str, int], dict]:
    """(lr as in the directory name, seed) -> the eval manifest of that run's split."""
    out = {}
    for d in sorted((runs / task).glob("lr*-seed*")):
        lr, seed = d.name[2:].split("-seed")
        out[lr, int(seed)] = {**manifest(d / split), "dir": d / split}
    return out


def test_glue_pipeline_summary_matches_the_evals(glue_runs):
    glue, runs, _, first = glue_runs
    summary_dir = runs / "summary"
    m = manifest(summary_dir)
    summary = json.loads((summary_dir / "summary.json").read_text())
    tasks = {t["task"]: t for t in summary["tasks"]}
    assert list(tasks) == ["CoLA", "SST-2", "MRPC", "STS-B", "MNLI", "RTE", "WNLI"]
    assert m["stats"]["tasks"] == list(tasks)
    assert "# GLUE summary" in first.stdout  # `make glue` shows summary.md
    # Every run is its own directory with its model and evals (MNLI: two dev, two test, AX).
    assert sorted(p.name for p in (runs / "RTE").iterdir()) == [
        "lr1e-3-seed1", "lr1e-3-seed2", "lr5e-4-seed1", "lr5e-4-seed2"]
    assert sorted(p.name for p in (runs / "MNLI/lr1e-3-seed1").iterdir()) == [
        "ax", "dev_matched", "dev_mismatched", "model", "test_matched", "test_mismatched"]
    n_evals = sum(1 for _ in runs.glob("*/lr*-seed*/*/artifact.json")) - sum(
        1 for _ in runs.glob("*/lr*-seed*/model/artifact.json"))
    assert len(m["inputs"]) == m["stats"]["evals"] == n_evals == 5 * 2 + 4 * 2 + 5

    for name, t in tasks.items():
        for split, rows in t["splits"].items():
            evals = _evals(runs, name, split)
            main = next(iter(evals.values()))["stats"]["main_metric"]
            assert t["metric"] == main
            for row in rows:
                mine = {seed: e for (lr, seed), e in evals.items() if float(lr) == row["lr"]}
                values = [mine[s]["metrics"][main] for s in sorted(mine)]
                assert [r["value"] for r in row["runs"]] == values
                assert [r["eval"] for r in row["runs"]] == [mine[s]["id"] for s in sorted(mine)]
                assert row["metrics"][main]["mean"] == pytest.approx(statistics.fmean(values))
                sd = row["metrics"][main]["sd"]
                assert sd is None if len(values) == 1 else sd == pytest.approx(statistics.stdev(values))
    # RTE's grid: the lr with the best mean over seeds, then its best seed.
    rte = tasks["RTE"]
    evals = _evals(runs, "RTE", "dev")
    means = {lr: statistics.fmean(e["metrics"]["accuracy"] for (l2, _), e in evals.items() if l2 == lr)
             for lr in ("1e-3", "5e-4")}
    best_lr = max(means, key=lambda lr: (means[lr], float(lr)))
    assert rte["selected"]["lr"] == float(best_lr)
    seeds = {s: e["metrics"]["accuracy"] for (lr, s), e in evals.items() if lr == best_lr}
    assert rte["selected"]["seed"] == max(sorted(seeds), key=lambda s: seeds[s])
    assert rte["selected"]["model"] == manifest(evals[best_lr, rte["selected"]["seed"]]["dir"])[
        "inputs"][0]["id"]
    assert m["metrics"]["RTE/accuracy/mean"] == pytest.approx(means[best_lr])
    assert m["metrics"]["RTE/accuracy/selected_run"] == seeds[rte["selected"]["seed"]]
    assert set(summary["missing"]) == {"QQP.tsv", "QNLI.tsv"}


def test_glue_pipeline_submission_zip(glue_runs):
    glue, runs, _, _ = glue_runs
    summary = json.loads((runs / "summary/summary.json").read_text())
    tests = {"MNLI-m.tsv": glue / "MNLI/test_matched.tsv", "MNLI-mm.tsv": glue / "MNLI/test_mismatched.tsv",
             "AX.tsv": glue / "diagnostic/diagnostic.tsv",
             **{f"{t}.tsv": glue / t / "test.tsv" for t in FIXTURE_TASKS}}
    with zipfile.ZipFile(runs / "summary/submission.zip") as z:
        assert sorted(z.namelist()) == sorted(tests)  # every file at the root
        files = {n: z.read(n).decode() for n in z.namelist()}
    selected = {t["task"]: t["selected"] for t in summary["tasks"]}
    for name, test_file in tests.items():
        lines = files[name].splitlines()
        assert lines[0] == "index\tprediction"
        rows = [line.split("\t") for line in lines[1:]]
        header, test_rows = _rows(test_file)
        assert [r[0] for r in rows] == [r[header.index("index")] for r in test_rows]
        assert rows[0][0] != "0"  # the file's own index (100.., 500..), not a row count
        allowed = FORMATS[name]
        if allowed is None:
            assert all(0 <= float(r[1]) < 100 for r in rows)  # STS-B: a float score
        else:
            assert {r[1] for r in rows} <= allowed
        # The predictions are those of the dev-selected run's eval of this test file.
        task = "MNLI" if name in ("MNLI-m.tsv", "MNLI-mm.tsv", "AX.tsv") else name[:-4]
        split = {"MNLI-m.tsv": "test_matched", "MNLI-mm.tsv": "test_mismatched",
                 "AX.tsv": "ax"}.get(name, "test")
        s = selected[task]
        run = runs / task / f"lr{'1e-3' if s['lr'] == 1e-3 else '5e-4'}-seed{s['seed']}"
        assert manifest(run / "model")["id"] == s["model"]
        _, predicted = _rows(run / split / "predictions.tsv")
        assert [r[1] for r in rows] == [p[1] for p in predicted]
    # The CoLA test file has a header its train file lacks: all 20 rows predicted.
    assert len(files["CoLA.tsv"].splitlines()) == 21


def test_glue_pipeline_second_make_does_nothing(glue_runs):
    _, runs, variables, _ = glue_runs
    before = mtimes(runs)
    r = make("glue", variables, makefile="glue.mk")
    assert r.returncode == 0, r.stderr
    assert BERTCTL not in r.stdout
    assert mtimes(runs) == before
    # A new seed for one task: only that run is made, and the summary again.
    r = make("glue", {**variables, "SEEDS_WNLI": "1 2"}, "-n", makefile="glue.mk")
    made = [line[len(BERTCTL):].split()[0] for line in r.stdout.splitlines()
            if line.startswith(BERTCTL)]
    assert made == ["finetune", "eval", "eval", "glue-summary"], r.stdout
    outs = [line.split("--out ")[1].split()[0] for line in r.stdout.splitlines() if "--out " in line]
    run = runs / "WNLI/lr1e-3-seed2"
    assert outs == [str(run / "model"), str(run / "dev"), str(run / "test"), str(runs / "summary")]


# --- SQuAD and CoNLL-2003 (pipelines/finetune.mk) -------------------------------------------------

@pytest.mark.parametrize("task,files,flags", [
    ("conll2003", {"DATA": str(FIXTURES / "conll2003")}, "--max-seq-length 32"),
    ("squad", {"TRAIN": str(FIXTURES / "squad" / "dev-v1.1-sample.json"),
               "DEV": str(FIXTURES / "squad" / "dev-v1.1-sample.json")},
     "--max-seq-length 96 --doc-stride 32 --max-query-length 24"),
])
def test_finetune_pipeline(tmp_path, minilm_dir, task, files, flags):
    runs = tmp_path / "runs"
    variables = {"TASK": task, "MODEL": str(minilm_dir), "RUNS": str(runs), "SEEDS": "1 2",
                 "LRS": "1e-4", "BATCH": "8", "STEPS": "2",
                 "FINETUNE_FLAGS": f"--device cpu {flags}", **files}
    r = make("finetune-summary", variables, makefile="finetune.mk")
    assert r.returncode == 0, r.stdout + r.stderr
    splits = ["dev", "model", "test"] if task == "conll2003" and (
        FIXTURES / "conll2003" / "test.txt").exists() else ["dev", "model"]
    for seed in ("1", "2"):
        run = runs / f"lr1e-4-seed{seed}"
        assert sorted(p.name for p in run.iterdir()) == splits
        model = manifest(run / "model")
        assert model["config"]["seed"] == int(seed) and model["config"]["lr"] == 1e-4
        assert manifest(run / "dev")["stats"]["task"] == task
    summary = manifest(runs / "summary")
    assert summary["kind"] == "report"
    assert len(summary["stats"]["seed_groups"]) == 1            # the two seeds, one lr
    assert len(summary["stats"]["seed_groups"][0]) == 2
    before = mtimes(runs)
    r = make("finetune-summary", variables, makefile="finetune.mk")
    assert r.returncode == 0 and mtimes(runs) == before        # a second make does nothing


# --- the time-budget recipe (pipelines/budget.mk) ------------------------------------------------

def test_budget_pipeline(tmp_path):
    """The recipe end to end in miniature: pretrain for a budget with the shipped recipe (a tiny
    model), fine-tune three GLUE tasks with two seeds, one report over all of it; a second make
    makes nothing."""
    shutil.copytree(FIXTURES / "pretrain", tmp_path / "books")
    shutil.copytree(FIXTURES / "glue", tmp_path / "glue")
    runs = tmp_path / "runs"
    variables = {"CORPUS": "books", "BUDGET": "6s", "RUNS": "runs", "GLUE": "glue", "SEEDS": "1 2", "EPOCHS": "1", "LR": "1e-3",
                 "VOCAB_SIZE": "2000", "MODEL_SIZE": "tiny",
                 "DATA_FLAGS": "--workers 1 --max-seq-length 64 --validation-fraction 0.1",
                 "PRETRAIN_FLAGS": f"{TINY} --device cpu --eval-every 20 --eval-batches 2 "
                                   f"--batch-size 8 --log-every 5",
                 "FINETUNE_FLAGS": "--device cpu --max-seq-length 64 --batch-size 8",
                 "EVAL_FLAGS": "--device cpu"}
    r = make("budget", variables, makefile=None, start=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    model = manifest(runs / "model")
    data = manifest(runs / "data")
    assert model["stats"]["objective"] == "mlm" and model["stats"]["time_budget_s"] == 6
    assert model["config"]["mask_rate"] == 0.15 and model["config"]["time_budget"] == 6
    assert data["config"]["packing"] == "full-sentences" and data["config"]["no_nsp"]
    # The budget was spent, not a step count; the history has the wall-clock time.
    assert 5 <= model["stats"]["elapsed_s"] < 30
    assert all("elapsed_s" in rec for rec in history(runs / "model"))
    report = manifest(runs / "report")
    shown = {i["id"] for i in report["inputs"]}
    devs = sorted((runs / "glue").glob("*/lr*-seed*/dev"))
    assert [d.parts[-3] for d in devs] == ["MRPC"] * 2 + ["SST-2"] * 2 + ["STS-B"] * 2
    assert shown == {model["id"], *(manifest(d)["id"] for d in devs)}
    html = (runs / "report" / "report.html").read_text()
    assert 'id="curve-time-pretraining-train-loss"' in html
    assert 'id="curve-time-pretraining-validation-mlm_loss"' in html
    before = mtimes(runs)
    r = make("budget", variables, makefile=None, start=tmp_path)
    assert r.returncode == 0, r.stderr
    assert mtimes(runs) == before


# --- distillation (pipelines/distill.mk) ----------------------------------------------------------

def test_distill_pipeline(tmp_path, minilm_dir):
    """A teacher fine-tuned for two steps, distilled into its every-second-layer student, both
    evaluated on the dev rows and compared on one report page (metrics, size, speed)."""
    teacher = tmp_path / "teacher"
    r = subprocess.run([sys.executable, "-m", "bertctl", "finetune", str(minilm_dir),
                        str(FIXTURES / "glue" / "SST-2"), "--task", "glue/sst2", "--out",
                        str(teacher), "--steps", "2", "--batch-size", "8", "--device", "cpu"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    runs = tmp_path / "runs"
    shutil.copytree(FIXTURES / "glue" / "SST-2", tmp_path / "sst2")
    variables = {"TEACHER": "teacher", "DATA": "sst2", "RUNS": "runs", "STEPS": "2", "BATCH": "8",
                 "DISTILL_FLAGS": "--device cpu"}
    r = make("distill", variables, makefile=None, start=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    student = manifest(runs / "student")
    assert student["stats"]["distillation"]["student_layers"] == 3      # of the teacher's 6
    assert manifest(runs / "eval-student")["stats"]["examples"] == \
        manifest(runs / "eval-teacher")["stats"]["examples"]
    page = (runs / "report" / "report.html").read_text()
    assert "model MB" in page and "eval examples/s" in page
    before = mtimes(runs)
    r = make("distill", variables, makefile=None, start=tmp_path)
    assert r.returncode == 0 and mtimes(runs) == before        # a second make does nothing


@pytest.mark.parametrize("budget", ["junk", "30x", "m30"])
def test_budget_pipeline_checks_its_budget_before_the_first_stage(tmp_path, budget):
    """A BUDGET that is no duration stops make before the tokenizer is built (it used to build
    the tokenizer and the data, then fail in pretrain)."""
    runs = tmp_path / "runs"
    r = make("budget", {"CORPUS": str(FIXTURES / "pretrain"), "BUDGET": budget,
                        "RUNS": str(runs)}, makefile="budget.mk")
    assert r.returncode != 0 and f"BUDGET={budget} is not a duration" in r.stderr
    assert not runs.exists()


# --- domain adaptation (pipelines/adapt.mk) -------------------------------------------------------

@pytest.mark.parametrize("variable", ["BUDGET", "HEAD_BUDGET"])
def test_adapt_pipeline_checks_its_budgets_before_the_first_stage(tmp_path, minilm_dir,
                                                                  variable):
    """#52 class 5: BUDGET=junk fine-tuned and evaluated the original seeds and built the
    data before pretrain refused it; now make stops when it reads the file."""
    runs = tmp_path / "runs"
    sst2 = FIXTURES / "glue" / "SST-2"
    r = make("adapt", {"MODEL": str(minilm_dir), "CORPUS": str(FIXTURES / "pretrain"),
                       "TRAIN": str(sst2 / "train.tsv"), "DEV": str(sst2 / "dev.tsv"),
                       "TASK": "glue/sst2", variable: "junk", "RUNS": str(runs)},
             makefile="adapt.mk")
    assert r.returncode != 0 and f"{variable}=junk is not a duration" in r.stderr
    assert not runs.exists()


def test_adapt_pipeline_from_relative_paths(tmp_path, minilm_l2):
    """The real checkpoint continued on the fixture books (its vocabulary grown by 20 words,
    the masked-LM head it was saved without trained alone first), both it and the original
    fine-tuned with two seeds, one report comparing the two groups; the paths given relative
    to the directory make is started from, as a user types them."""
    work = tmp_path / "work"
    shutil.copytree(FIXTURES / "glue" / "SST-2", work / "sst2")
    shutil.copytree(FIXTURES / "pretrain", work / "books")
    variables = {"BERTCTL": BERTCTL, "MODEL": str(minilm_l2), "CORPUS": "books",
                 "TASK": "glue/sst2", "TRAIN": "sst2", "DEV": "sst2/dev.tsv", "BUDGET": "4s",
                 "HEAD_BUDGET": "2s", "SEEDS": "1 2", "EPOCHS": "1", "EXTEND": "20", "RUNS": "runs",
                 "DATA_FLAGS": "--workers 1 --max-seq-length 64 --validation-fraction 0.1",
                 "PRETRAIN_FLAGS": "--device cpu --batch-size 8 --eval-batches 1 --log-every 5",
                 "FINETUNE_FLAGS": "--device cpu --max-seq-length 64 --batch-size 16",
                 "EVAL_FLAGS": "--device cpu"}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PWD": str(work)}
    cmd = ["make", "-C", str(PIPELINES), "adapt", *(f"{k}={v}" for k, v in variables.items())]
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = work / "runs"
    adapted = manifest(runs / "model")
    assert adapted["config"]["lr"] == 1e-4 and adapted["stats"]["time_budget_s"] == 4
    head = manifest(runs / "head")   # the vocabulary grew there; the continued run reads it so
    assert head["config"]["train_only"] == "new" and head["config"]["lr"] == 1e-3
    assert head["stats"]["vocabulary_grown"]["to"] == 30542
    assert json.loads((runs / "model" / "config.json").read_text())["vocab_size"] == 30542
    assert [i["id"] for i in adapted["inputs"] if i["role"] == "init"] == [head["id"]]
    data = manifest(runs / "data")
    assert "excluded" in data["stats"]
    assert "exclude" in [i["role"] for i in data["inputs"]]
    report = manifest(runs / "report")
    groups = report["stats"]["seed_groups"]
    assert [len(g) for g in groups] == [2, 2]
    html = (runs / "report" / "report.html").read_text()
    assert 'class="group-comparison"' in html and 'data-metric="accuracy"' in html
    before = mtimes(runs)
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and mtimes(runs) == before, r.stderr[-2000:]


def test_adapt_pipeline_names_a_missing_path_and_where_it_looked(tmp_path):
    env = {**os.environ, "PWD": str(tmp_path)}
    r = subprocess.run(["make", "-C", str(PIPELINES), "adapt", "MODEL=nowhere", "CORPUS=books",
                        "TRAIN=t", "DEV=d.tsv"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert f"MODEL={tmp_path}/nowhere: no such file or directory (paths are read from {tmp_path})" \
        in r.stderr


# --- paths as a user types them ----------------------------------------------------------------

DRY_RUNS = {  # target: (variables with paths relative to the start, paths the commands must use)
    "glue": ({"GLUE": "glue", "MODEL": "model", "TASKS": "SST-2", "SEEDS": "1", "LRS": "1e-4",
              "RUNS": "out"}, ["model", "glue/SST-2", "out/SST-2/lr1e-4-seed1/model"]),
    "budget-model": ({"CORPUS": "books", "RUNS": "out"}, ["books", "out/tokenizer", "out/model"]),
    "distill": ({"TEACHER": "model", "DATA": "glue/SST-2", "RUNS": "out"},
                ["model", "glue/SST-2", "out/student"]),
    "pretrain": ({"CORPUS": "books", "RUNS": "out", "STEPS": "10"}, ["books", "out/phase1"]),
    "conll2003": ({"CONLL": "conll", "MODEL": "model", "RUNS": "out"},
                  ["model", "conll/train.txt", "out/lr5e-5-seed1/model"]),
    "demo": ({"RUNS": "out"}, ["out/tokenizer", "out/eval-sst2"]),
}


@pytest.fixture
def user_dir(tmp_path):
    """A directory a user works in, holding their data under relative names."""
    shutil.copytree(FIXTURES / "glue", tmp_path / "glue")
    shutil.copytree(FIXTURES / "pretrain", tmp_path / "books")
    shutil.copytree(FIXTURES / "conll2003", tmp_path / "conll")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return tmp_path


@pytest.mark.parametrize("target", DRY_RUNS)
def test_every_pipeline_reads_paths_from_where_make_was_started(user_dir, target):
    """`make -n` from the user's directory, through the top Makefile: every command names the
    user's files by their absolute paths (none read from pipelines/), and RUNS lands there too."""
    variables, paths = DRY_RUNS[target]
    r = make(target, variables, "-n", makefile=None, start=user_dir)
    assert r.returncode == 0, r.stderr
    for p in paths:
        assert f"{user_dir}/{p}" in r.stdout, (p, r.stdout[-2000:])
    assert f"{PIPELINES}/out/" not in r.stdout and f"{PIPELINES}/glue/" not in r.stdout


def test_pipelines_read_paths_from_the_repository_root_too():
    """The issue's example, typed at the repository root: examples/ resolves there."""
    r = make("budget-model", {"CORPUS": "examples/corpus", "BUDGET": "60s", "RUNS": "runs/x"},
             "-n", makefile=None, start=ROOT)
    assert r.returncode == 0, r.stderr
    assert f"tokenize {ROOT}/examples/corpus" in r.stdout and f"{ROOT}/runs/x/model" in r.stdout


@pytest.mark.parametrize("target,variables,named", [
    ("budget-model", {"CORPUS": "nowhere"}, "CORPUS"),
    ("distill", {"TEACHER": "nowhere", "DATA": "glue/SST-2"}, "TEACHER"),
    ("glue", {"GLUE": "glue", "MODEL": "nowhere"}, "MODEL"),
    ("pretrain", {"CORPUS": "books", "VOCAB": "nowhere"}, "VOCAB"),
])
def test_a_missing_path_names_its_variable_and_where_it_was_read_from(user_dir, target,
                                                                        variables, named):
    r = make(target, variables, "-n", makefile=None, start=user_dir)
    assert r.returncode != 0
    assert (f"{named}={user_dir}/nowhere: no such file or directory (paths are read from "
            f"{user_dir})") in r.stderr


def test_retrieval_pipeline_from_relative_paths(tmp_path, minilm_dir):
    """all-MiniLM-L6-v2 fine-tuned on the example pairs, it, its original and its int8 export
    scored on the example BEIR set (cut as the search pipeline's), one report; paths relative
    to where make was typed."""
    pytest.importorskip("onnxruntime")
    _small_search_set(ROOT / "examples" / "retrieval", tmp_path / "ret", queries=60, pairs=96)
    variables = {"MODEL": str(minilm_dir), "TRAIN": "ret/train.tsv", "BEIR": "ret/beir",
                 "RUNS": "runs", "STEPS": "2", "BATCH": "8"}
    r = make("retrieval", variables, makefile=None, start=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = tmp_path / "runs"
    figures = {e: manifest(runs / f"eval-{e}")["metrics"] for e in ("original", "model", "export")}
    assert all(f["queries"] == 60 and 0 < f["ndcg@10"] <= 1 for f in figures.values())
    assert manifest(runs / "export")["stats"]["onnx"]["quantize"] == "int8"
    assert (runs / "report" / "report.html").is_file()
    assert "retrieval: " in r.stdout
    before = mtimes(runs)
    r = make("retrieval", variables, makefile=None, start=tmp_path)
    assert r.returncode == 0 and mtimes(runs) == before        # a second make does nothing


def _small_search_set(source: Path, out: Path, queries: int, pairs: int) -> None:
    """The shipped retrieval example cut to its first `queries` judged test queries (the
    corpus whole) and `pairs` training pairs: the recipe's plumbing and its table's arithmetic
    at a quarter of the evaluations' cost."""
    (out / "beir" / "qrels").mkdir(parents=True)
    shutil.copy(source / "beir" / "corpus.jsonl", out / "beir" / "corpus.jsonl")
    lines = (source / "beir" / "qrels" / "test.tsv").read_text().splitlines()
    kept_ids = list(dict.fromkeys(line.split("\t")[0] for line in lines[1:]))[:queries]
    kept = [line for line in lines[1:] if line.split("\t")[0] in set(kept_ids)]
    (out / "beir" / "qrels" / "test.tsv").write_text("\n".join([lines[0], *kept]) + "\n")
    wanted = set(kept_ids)
    (out / "beir" / "queries.jsonl").write_text("".join(
        x + "\n" for x in (source / "beir" / "queries.jsonl").read_text().splitlines()
        if json.loads(x)["_id"] in wanted))
    rows = (source / "train.tsv").read_text().splitlines()
    (out / "train.tsv").write_text("\n".join(rows[:pairs + 1]) + "\n")
