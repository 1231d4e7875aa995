"""bertctl glue-summary (bertctl/tasks/glue.py) on eval artifacts whose metrics and predictions the
tests choose, so every figure can be checked by hand: the mean +- sd per learning rate, the
dev-selected learning rate and run, and the submission files. tests/test_pipelines.py runs it
on real evals through the GLUE pipeline."""

import json
import statistics
import zipfile
from pathlib import Path

import pytest

from bertctl.tasks import glue
from bertctl.contract import artifacts

SST2_TEST = "index\tsentence\n7\ta fine film .\n9\tdull .\n\n12\tnot bad at all .\n"


def make_eval(root: Path, task: str, file: str, lr: float, seed: int, *, metrics=None,
              predictions=None, data_text="x\n", epochs=3) -> Path:
    """An eval artifact of `file` of GLUE task `task` (a preset name) by the model fine-tuned
    at lr/seed; `metrics` for a dev file, `predictions` (one per data row) for a test file."""
    data = root / "glue" / task.replace("/", "_") / file
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(data_text)
    model_dir = root / "models" / f"{task.replace('/', '_')}-{lr}-{seed}-{epochs}"
    config = {"task": task, "lr": lr, "seed": seed, "epochs": epochs}
    # The id its recorded settings give: readers check a lineage's ids against its settings.
    model = artifacts.InputRef(role="model", kind="model", id=artifacts.compute_id("model", config, []),
                               path=str(model_dir), config=config)
    from bertctl.tasks import PRESETS
    from bertctl.metrics import main_metric

    def build(tmp: Path) -> dict:
        values = predictions or []
        (tmp / "predictions.tsv").write_text(
            "index\tprediction\n" + "".join(f"{i}\t{v}\n" for i, v in enumerate(values)))
        return {"task": task, "main_metric": main_metric(PRESETS[task].metric) if metrics else None,
                "metrics": metrics or {}}

    out = root / "evals" / f"{task.replace('/', '_')}-{file}-{lr}-{seed}-{epochs}"
    artifacts.produce("eval", {"precision": "fp32"}, [model, artifacts.file_input(data, "data")], artifacts.Target(out), build)
    return out


@pytest.fixture
def sst2_grid(tmp_path):
    """SST-2 at two learning rates and two seeds; 3e-5 has the better mean (0.7 > 0.65) and
    its seed 2 the best run; each run also predicted the test file."""
    dev = {(5e-5, 1): 0.6, (5e-5, 2): 0.7, (3e-5, 1): 0.5, (3e-5, 2): 0.9}
    evals = []
    for (lr, seed), acc in dev.items():
        evals.append(make_eval(tmp_path, "glue/sst2", "dev.tsv", lr, seed,
                               metrics={"accuracy": acc, "macro_f1": acc - 0.1}))
        evals.append(make_eval(tmp_path, "glue/sst2", "test.tsv", lr, seed, data_text=SST2_TEST,
                               predictions=["1", "0", str(seed % 2)]))
    return tmp_path, evals, dev


def test_summary_mean_sd_selection_and_submission(sst2_grid, cli):
    root, evals, dev = sst2_grid
    r = cli("glue-summary", *evals, "--out", root / "summary", "--json")
    assert r.exit_code == 0, r.stderr
    m = r.json()
    summary = json.loads((root / "summary/summary.json").read_text())
    (t,) = summary["tasks"]
    assert (t["task"], t["metric"], t["select_on"]) == ("SST-2", "accuracy", "dev")
    rows = {row["lr"]: row for row in t["splits"]["dev"]}
    assert list(rows) == [5e-5, 3e-5]  # the paper's order, largest first
    for lr, row in rows.items():
        values = [dev[lr, 1], dev[lr, 2]]
        assert row["seeds"] == [1, 2] and [x["value"] for x in row["runs"]] == values
        assert row["metrics"]["accuracy"]["mean"] == pytest.approx(statistics.fmean(values))
        assert row["metrics"]["accuracy"]["sd"] == pytest.approx(statistics.stdev(values))
        assert row["metrics"]["macro_f1"]["mean"] == pytest.approx(statistics.fmean(values) - 0.1)
    s = t["selected"]
    assert (s["lr"], s["seed"], s["value"]) == (3e-5, 2, 0.9)
    assert s["mean"] == pytest.approx(0.7) and s["sd"] == pytest.approx(statistics.stdev([0.5, 0.9]))
    assert m["metrics"]["SST-2/accuracy/mean"] == pytest.approx(0.7)
    assert m["metrics"]["SST-2/accuracy/selected_run"] == 0.9
    assert sorted(summary["missing"]) == sorted(set(glue.SUBMISSION_FILES) - {"SST-2.tsv"})
    # The selected run's test predictions, under the test file's own index (blank line skipped).
    with zipfile.ZipFile(root / "summary/submission.zip") as z:
        assert z.namelist() == ["SST-2.tsv"]
        assert z.read("SST-2.tsv").decode() == "index\tprediction\n7\t1\n9\t0\n12\t0\n"
    page = (root / "summary/summary.md").read_text()
    assert "| SST-2 | dev | accuracy | 3e-05 **(selected)** | 2 | 0.7000 ± 0.2828 | 0.5000, 0.9000 |" in page
    # The same evals in another order are the same summary, already made.
    again = cli("glue-summary", *reversed(evals), "--out", root / "summary", "--json")
    assert again.exit_code == 0 and again.json()["id"] == m["id"]


def test_nan_metric_ranks_last_and_one_seed_has_no_sd(tmp_path, cli):
    # CoLA's Matthews correlation is null (NaN) when a run predicts one class only.
    evals = [make_eval(tmp_path, "glue/cola", "dev.tsv", 5e-5, 1, metrics={"mcc": None}),
             make_eval(tmp_path, "glue/cola", "dev.tsv", 2e-5, 1, metrics={"mcc": -0.1})]
    r = cli("glue-summary", *evals, "--out", tmp_path / "s")
    assert r.exit_code == 0, r.stderr
    (t,) = json.loads((tmp_path / "s/summary.json").read_text())["tasks"]
    assert t["metric"] == "mcc" and t["selected"]["lr"] == 2e-5
    assert t["splits"]["dev"][0]["metrics"]["mcc"] == {"mean": None, "sd": None}
    assert t["selected"]["sd"] is None
    assert json.loads((tmp_path / "s/summary.json").read_text())["missing"]["CoLA.tsv"] == (
        "no eval of test by the selected CoLA run")


def test_mnli_matched_selects_and_feeds_three_files(tmp_path, cli):
    def test(n):  # distinct files (the same content would be the same eval)
        return f"index\tpromptID\tsentence1\tsentence2\n3\tp{n}\ta\tb\n4\tp\tc\td\n"

    evals = []
    for lr, m_acc, mm_acc in ((5e-5, 0.8, 0.1), (2e-5, 0.7, 0.9)):
        evals += [make_eval(tmp_path, "glue/mnli", "dev_matched.tsv", lr, 1, data_text="m\n",
                            metrics={"accuracy": m_acc}),
                  make_eval(tmp_path, "glue/mnli", "dev_mismatched.tsv", lr, 1, data_text="mm\n",
                            metrics={"accuracy": mm_acc}),
                  make_eval(tmp_path, "glue/mnli", "test_matched.tsv", lr, 1, data_text=test(1),
                            predictions=["neutral", "entailment"]),
                  make_eval(tmp_path, "glue/mnli", "test_mismatched.tsv", lr, 1, data_text=test(2),
                            predictions=["contradiction", "neutral"]),
                  make_eval(tmp_path, "glue/mnli", "diagnostic.tsv", lr, 1, data_text=test(3),
                            predictions=["entailment", "entailment"])]
    r = cli("glue-summary", *evals, "--out", tmp_path / "s")
    assert r.exit_code == 0, r.stderr
    (t,) = json.loads((tmp_path / "s/summary.json").read_text())["tasks"]
    assert t["select_on"] == "dev_matched" and t["selected"]["lr"] == 5e-5  # not mismatched's
    assert [row["metrics"]["accuracy"]["mean"] for row in t["splits"]["dev_mismatched"]] == [0.1, 0.9]
    assert set(t["submission"]) == {"MNLI-m.tsv", "MNLI-mm.tsv", "AX.tsv"}
    with zipfile.ZipFile(tmp_path / "s/submission.zip") as z:
        assert z.read("MNLI-mm.tsv").decode() == "index\tprediction\n3\tcontradiction\n4\tneutral\n"
        assert z.read("AX.tsv").decode() == "index\tprediction\n3\tentailment\n4\tentailment\n"


def test_refusals(sst2_grid, tmp_path, cli):
    root, evals, _ = sst2_grid
    out = tmp_path / "bad"
    # A run that differs in more than lr and seed (here epochs) is not part of the grid.
    other = make_eval(root, "glue/sst2", "dev.tsv", 5e-5, 3, metrics={"accuracy": 0.5}, epochs=2)
    r = cli("glue-summary", *evals, other, "--out", out)
    assert r.exit_code == 2 and "differs" in r.stderr and "settings.epochs: 3 -> 2" in r.stderr
    # The same run twice.
    twin = make_eval(root / "twin", "glue/sst2", "dev.tsv", 5e-5, 1, metrics={"accuracy": 0.1},
                     data_text="another dev file\n")
    r = cli("glue-summary", *evals, twin, "--out", out)
    assert r.exit_code == 2 and "seed 1 is also" in r.stderr
    # Not a GLUE task; not one of the task's files; not an eval.
    swag = make_eval(root, "swag", "val.csv", 5e-5, 1, metrics={"accuracy": 0.3})
    r = cli("glue-summary", *evals, swag, "--out", out)
    assert r.exit_code == 2 and "not a GLUE task" in r.stderr
    odd = make_eval(root, "glue/sst2", "extra.tsv", 5e-5, 1, metrics={"accuracy": 0.3})
    r = cli("glue-summary", odd, "--out", out)
    assert r.exit_code == 2 and "extra.tsv, which is none of SST-2's files" in r.stderr
    r = cli("glue-summary", root / "summary-missing", "--out", out)
    assert r.exit_code == 2
    assert not out.exists()


def test_refuses_predictions_the_benchmark_would_not_take(tmp_path, cli):
    dev = make_eval(tmp_path, "glue/sst2", "dev.tsv", 5e-5, 1, metrics={"accuracy": 0.5})
    bad = make_eval(tmp_path, "glue/sst2", "test.tsv", 5e-5, 1, data_text=SST2_TEST,
                    predictions=["1", "positive", "0"])
    r = cli("glue-summary", dev, bad, "--out", tmp_path / "s")
    assert r.exit_code == 2 and "row 2: prediction 'positive'; SST-2 takes 0/1" in r.stderr
    short = make_eval(tmp_path / "b", "glue/sst2", "test.tsv", 5e-5, 1, data_text=SST2_TEST,
                      predictions=["1", "0"])
    dev2 = make_eval(tmp_path / "b", "glue/sst2", "dev.tsv", 5e-5, 1, metrics={"accuracy": 0.5})
    r = cli("glue-summary", dev2, short, "--out", tmp_path / "s")
    assert r.exit_code == 2 and "2 predictions for the 3 rows" in r.stderr
    # The test file changed after it was predicted: its index column cannot be trusted.
    (tmp_path / "b/glue/glue_sst2/test.tsv").write_text(SST2_TEST + "13\tmore .\n")
    r = cli("glue-summary", dev2, short, "--out", tmp_path / "s")
    assert r.exit_code == 2 and "changed since" in r.stderr
    assert not (tmp_path / "s").exists()


def test_read_index_column(tmp_path):
    qqp = tmp_path / "qqp.tsv"
    qqp.write_text("id\tquestion1\tquestion2\r\n0\ta?\tb?\r\n\r\n5\tc?\td?\r\n")
    assert glue.read_index_column(qqp) == ["0", "5"]
    bom = tmp_path / "bom.tsv"
    bom.write_bytes("\ufeffindex\ts\n1\tx\n".encode())
    assert glue.read_index_column(bom) == ["1"]
    none = tmp_path / "none.tsv"
    none.write_text("sentence\tlabel\nx\t1\n")
    with pytest.raises(glue.BertctlError, match="no index column"):
        glue.read_index_column(none)


def test_zip_is_the_same_bytes_for_the_same_predictions(tmp_path):
    files = {"RTE.tsv": [("0", "entailment")], "CoLA.tsv": [("3", "1"), ("4", "0")]}
    glue.write_zip(tmp_path / "a.zip", files)
    glue.write_zip(tmp_path / "b.zip", dict(reversed(files.items())))
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "a.zip") as z:
        assert z.namelist() == ["CoLA.tsv", "RTE.tsv"]
        assert z.read("CoLA.tsv") == b"index\tprediction\n3\t1\n4\t0\n"


def test_every_preset_label_is_a_submission_label():
    """The submission writes the model's label names as they are: for every GLUE task they must
    be the strings the benchmark takes."""
    from bertctl.tasks import PRESETS

    expected = {"CoLA": {"0", "1"}, "SST-2": {"0", "1"}, "MRPC": {"0", "1"}, "QQP": {"0", "1"},
                "WNLI": {"0", "1"}, "QNLI": {"entailment", "not_entailment"},
                "RTE": {"entailment", "not_entailment"},
                "MNLI": {"entailment", "neutral", "contradiction"}, "STS-B": None}
    for task in glue.TASKS:
        labels = PRESETS[task.preset].labels
        assert (set(labels) if labels else None) == expected[task.name]
    assert len(glue.SUBMISSION_FILES) == 11
