"""Span QA through the CLI: tiny fine-tunes and evals of SQuAD v1.1 and v2.0 on real rows.

The model is the real all-MiniLM-L6-v2 encoder with a new span head, trained a few steps on short
windows so that many questions span several windows; the checks are about the plumbing
(windows, post-processing, calibration, the official outputs and metrics), not accuracy.
"""

import json

import pytest

from bertctl.tasks.span.metrics import squad_v1_metrics, squad_v2_metrics
from bertctl.tasks.span.reader import read_span_examples

from helpers import FIXTURES

pytestmark = pytest.mark.slow   # processes and real runs: seconds each


SQUAD = FIXTURES / "squad"
V1, V2 = SQUAD / "dev-v1.1-sample.json", SQUAD / "dev-v2.0-sample.json"
SHORT = ["--max-seq-length", "96", "--doc-stride", "32", "--max-query-length", "24"]


def _finetune(cli, minilm_dir, out, task, data, *extra):
    r = cli("finetune", minilm_dir, data, "--task", task, "--dev", data, "--out", out,
            "--steps", "4", "--batch-size", "8", "--lr", "1e-4", "--precision", "fp32",
            "--device", "cpu", *SHORT, *extra, "--json")
    assert r.exit_code == 0, r.stderr
    return r.json()


@pytest.fixture(scope="module")
def v2_model(tmp_path_factory, minilm_dir):
    from helpers import invoke as cli

    out = tmp_path_factory.mktemp("span") / "v2"
    return out, _finetune(cli, minilm_dir, out, "squad_v2", V2)


def test_v2_finetune_tunes_and_stores_the_threshold(v2_model):
    out, manifest = v2_model
    task = json.loads((out / "bertctl_task.json").read_text())
    assert task["spec"]["family"] == "span"
    assert task["spec"]["options"]["version_2_with_negative"] is True
    calibration = task["calibration"]
    assert set(calibration) == {"null_threshold", "dev_f1_at_threshold"}
    stats = manifest["stats"]["train_features"]
    assert stats["questions"] == 58 and stats["windows"] > 58  # long passages: several windows
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForQuestionAnswering"]


def test_v2_eval_outputs_are_official_and_their_metrics_match(v2_model, cli, tmp_path):
    model, _ = v2_model
    ev = tmp_path / "ev"
    r = cli("eval", model, V2, "--out", ev, "--json")
    assert r.exit_code == 0, r.stderr
    predictions = json.loads((ev / "predictions.json").read_text())
    null_odds = json.loads((ev / "null_odds.json").read_text())
    nbest = json.loads((ev / "nbest_predictions.json").read_text())
    examples = read_span_examples(V2, version_2=True)
    assert set(predictions) == set(examples.ids) == set(null_odds) == set(nbest)
    for qid, text in predictions.items():
        context = examples.contexts[examples.ids.index(qid)]
        assert text == "" or text in context  # cut from the original passage characters
    # metrics.json is what the official script computes from these very files
    metrics = json.loads((ev / "metrics.json").read_text())
    assert metrics == pytest.approx(squad_v2_metrics(examples.gold_answers(), predictions,
                                                     null_odds))
    for key in ("exact", "f1", "total", "HasAns_exact", "NoAns_f1", "best_f1", "best_f1_thresh"):
        assert key in metrics
    assert metrics["total"] == 58
    # the stored threshold is used; --null-threshold overrides it (a new artifact)
    task = json.loads((model / "bertctl_task.json").read_text())
    threshold = task["calibration"]["null_threshold"]
    expected = {q: "" if null_odds[q] > threshold else t for q, t in predictions.items()}
    assert predictions == expected
    r = cli("eval", model, V2, "--out", tmp_path / "all-null", "--null-threshold", "-1e12")
    assert r.exit_code == 0, r.stderr
    assert set(json.loads((tmp_path / "all-null" / "predictions.json").read_text()).values()) \
        == {""}


def test_v1_finetune_and_eval(cli, minilm_dir, tmp_path):
    out = tmp_path / "v1"
    manifest = _finetune(cli, minilm_dir, out, "squad", V1)
    assert "calibration" not in json.loads((out / "bertctl_task.json").read_text())
    assert manifest["stats"]["selection"] == "best f1"
    r = cli("eval", out, V1, "--out", tmp_path / "ev", "--json")
    assert r.exit_code == 0, r.stderr
    ev = tmp_path / "ev"
    predictions = json.loads((ev / "predictions.json").read_text())
    assert not (ev / "null_odds.json").exists()
    assert all(p for p in predictions.values())  # v1.1 always answers
    examples = read_span_examples(V1, version_2=False)
    assert json.loads((ev / "metrics.json").read_text()) == pytest.approx(
        squad_v1_metrics(examples.gold_answers(), predictions))


def test_bad_input_is_one_line(cli, minilm_dir, tmp_path):
    bad = tmp_path / "bad.json"
    doc = json.loads(V1.read_text())
    doc["data"][0]["paragraphs"][0]["qas"][0].pop("question")
    bad.write_text(json.dumps(doc))
    r = cli("finetune", minilm_dir, bad, "--task", "squad", "--out", tmp_path / "m", "--steps",
            "1", *SHORT)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert str(bad) in r.stderr and "question" in r.stderr
    assert not (tmp_path / "m").exists()
    r = cli("finetune", minilm_dir, V2, "--task", "squad", "--out", tmp_path / "m", "--steps",
            "1", *SHORT)  # a v2.0 file read as v1.1: its unanswerable questions are an error
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
