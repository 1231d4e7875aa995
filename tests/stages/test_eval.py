"""`bertctl eval` and bertctl.evaluation: predictions checked against transformers, metrics
against scikit-learn / scipy, pretraining metrics against transformers' BertForPreTraining.

The models are tiny random BERTs (hidden 32, 2 layers) with the all-MiniLM vocabulary, so the
checks are about the plumbing (tokenization, batching, order, labels, metrics), not accuracy;
a large initializer range makes their predictions vary from example to example.
"""

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from bertctl import evaluation, tasks
from bertctl.contract import artifacts
from bertctl.tasks import PRESETS, make_task_spec
from bertctl.model import (BertConfig, BertForMultipleChoice, BertForPreTraining,
                           BertForSequenceClassification)
from bertctl.stages.common.models import write_model
from bertctl.stages.eval import task as task_eval

from helpers import FIXTURES
from tolerance import MODEL_FP32  # (each tolerance's reason)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

GLUE = FIXTURES / "glue"
TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64)


def tiny_config(initializer_range=0.5) -> BertConfig:
    return BertConfig(**TINY, initializer_range=initializer_range)


def make_model_artifact(out: Path, model: nn.Module, tokenizer_dir: Path, spec=None,
                        label_list=None, max_seq_length=128) -> Path:
    """A model artifact laid out as `bertctl finetune` writes one."""
    extra = {}
    if label_list:
        extra = {"id2label": {str(i): name for i, name in enumerate(label_list)},
                 "label2id": {name: i for i, name in enumerate(label_list)}}
    task = None
    if spec is not None:
        task = {"spec": spec.model_dump(mode="json"),
                "label_list": list(label_list) if label_list else None,
                "max_seq_length": max_seq_length}

    def build(tmp):
        write_model(model, tmp, tokenizer_dir, extra_config=extra, task=task)
        return {}

    artifacts.produce("model", {"test": out.name}, [], artifacts.Target(out), build)
    return out


def classifier(num_labels=2, problem_type="single_label_classification", seed=0):
    torch.manual_seed(seed)
    return BertForSequenceClassification(tiny_config(), num_labels=num_labels,
                                         problem_type=problem_type)


@pytest.fixture(scope="module")
def models(tmp_path_factory, minilm_dir):
    """Fine-tuned-style model artifacts for SST-2, CoLA, MRPC (2 labels) and STS-B (regression),
    and a transformers `save_pretrained` classifier directory without a task file."""
    root = tmp_path_factory.mktemp("models")
    made = {}
    for name, preset in [("sst2", "glue/sst2"), ("cola", "glue/cola"), ("mrpc", "glue/mrpc")]:
        spec = PRESETS[preset]
        made[name] = make_model_artifact(root / name, classifier(seed=len(made)), minilm_dir,
                                         spec, spec.labels)
    made["stsb"] = make_model_artifact(root / "stsb", classifier(1, "regression", seed=7),
                                       minilm_dir, PRESETS["glue/sts-b"])

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(3)
    hf_config = transformers.BertConfig(**TINY, initializer_range=0.5, num_labels=2)
    hf_model = transformers.BertForSequenceClassification(hf_config)
    hf_dir = root / "hf"
    hf_model.save_pretrained(hf_dir, safe_serialization=True)
    transformers.BertTokenizerFast.from_pretrained(minilm_dir).save_pretrained(hf_dir)
    made["hf"] = hf_dir
    return made


def read_tsv(path: Path, header=True):
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    rows = [line.split("\t") for line in lines if line]
    if not header:
        return None, rows
    return rows[0], rows[1:]


def column(path: Path, name, header=True):
    head, rows = read_tsv(path, header)
    i = head.index(name) if header else int(name)
    return [r[i] for r in rows]


def read_predictions(out: Path) -> list[str]:
    head, rows = read_tsv(out / "predictions.tsv")
    assert head == ["index", "prediction"]
    assert [int(r[0]) for r in rows] == list(range(len(rows)))
    return [r[1] for r in rows]


def read_metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


def hf_logits(model_dir: Path, text_a, text_b=None, max_length=128) -> np.ndarray:
    transformers = pytest.importorskip("transformers")
    tok = transformers.BertTokenizerFast.from_pretrained(model_dir)
    model = transformers.BertForSequenceClassification.from_pretrained(model_dir).eval()
    enc = tok(text_a, text_b, truncation="longest_first", max_length=max_length, padding=True,
              return_tensors="pt")
    with torch.no_grad():
        return model(**enc).logits.float().numpy()


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# ---------------------------------------------------------------------------------------------
# Predictions against transformers

@pytest.mark.parametrize("which", ["sst2", "hf"])
def test_predictions_equal_transformers_argmax(cli, models, tmp_path, which):
    data = GLUE / "SST-2" / "dev.tsv"
    flags = ["--task", "glue/sst2"] if which == "hf" else []
    r = cli("eval", models[which], data, "--out", tmp_path / "eval", "--batch-size", 16, *flags)
    assert r.exit_code == 0, r.stderr
    predicted = read_predictions(tmp_path / "eval")
    logits = hf_logits(models[which], column(data, "sentence"))
    assert predicted == [str(i) for i in logits.argmax(-1)]
    assert 0 < predicted.count("1") < len(predicted)  # a test that can tell orders apart


def test_pair_logits_equal_transformers(models, minilm_dir):
    """Core API: evaluation.predict's logits, in file order, equal transformers' on MRPC pairs
    (BOM, no quoting); the length-sorted batches are put back in example order."""
    from helpers import encode_examples, read_examples
    from bertctl.stages.common.models import open_model

    source = open_model(models["mrpc"])
    spec = PRESETS["glue/mrpc"]
    data = GLUE / "MRPC" / "dev.tsv"
    examples = read_examples(spec, data, label_list=spec.labels)
    features = encode_examples(examples, source.tokenizer()[0], 128)
    model, _ = source.load()
    out = evaluation.predict(model, evaluation.task_batches(features, 7, tasks.get("pair")), "cpu",
                             "fp32")
    expected = hf_logits(models["mrpc"], column(data, "#1 String"), column(data, "#2 String"))
    np.testing.assert_allclose(out["logits"], expected, **MODEL_FP32)


# ---------------------------------------------------------------------------------------------
# Metrics against scikit-learn and scipy, computed from predictions.tsv

def _labels_and_predictions(out: Path, data: Path, label_col, header=True):
    gold = np.array([int(x) for x in column(data, label_col, header)])
    pred = np.array([int(x) for x in read_predictions(out)])
    return gold, pred


@pytest.mark.parametrize("task,data,label_col,header", [
    ("sst2", GLUE / "SST-2" / "dev.tsv", "label", True),
    ("mrpc", GLUE / "MRPC" / "dev.tsv", "Quality", True),
    ("cola", GLUE / "CoLA" / "dev.tsv", "1", False),
])
def test_classification_metrics_equal_sklearn(cli, models, tmp_path, task, data, label_col,
                                              header):
    sk = pytest.importorskip("sklearn.metrics")
    out = tmp_path / "eval"
    r = cli("eval", models[task], data, "--out", out)
    assert r.exit_code == 0, r.stderr
    gold, pred = _labels_and_predictions(out, data, label_col, header)
    m = read_metrics(out)
    assert m["accuracy"] == pytest.approx(sk.accuracy_score(gold, pred))
    assert m["macro_f1"] == pytest.approx(sk.f1_score(gold, pred, average="macro"))
    assert m["confusion_matrix"] == {"labels": ["0", "1"],
                                     "matrix": sk.confusion_matrix(gold, pred, labels=[0, 1]).tolist()}
    if task == "mrpc":
        assert m["f1"] == pytest.approx(sk.f1_score(gold, pred))
    if task == "cola":
        assert m["mcc"] == pytest.approx(sk.matthews_corrcoef(gold, pred))
    manifest = artifacts.read_manifest(out)
    assert manifest.metrics == m
    assert manifest.stats["examples"] == len(gold) == 100
    assert manifest.stats["task"] == PRESETS[f"glue/{task}"].name


def test_regression_metrics_equal_scipy(cli, models, tmp_path):
    stats = pytest.importorskip("scipy.stats")
    data = GLUE / "STS-B" / "dev.tsv"
    out = tmp_path / "eval"
    r = cli("eval", models["stsb"], data, "--out", out)
    assert r.exit_code == 0, r.stderr
    pred = np.array([np.float32(x) for x in read_predictions(out)], dtype=np.float32)
    gold = np.array([float(x) for x in column(data, "score")])
    m = read_metrics(out)
    assert set(m) == {"pearson", "spearman"}
    assert m["pearson"] == pytest.approx(stats.pearsonr(pred, gold)[0], abs=1e-9)
    assert m["spearman"] == pytest.approx(stats.spearmanr(pred, gold)[0], abs=1e-9)
    assert len(np.unique(pred)) > 50  # varied scores, so the correlations mean something


def test_multiple_choice(cli, tmp_path, minilm_dir):
    sk = pytest.importorskip("sklearn.metrics")
    torch.manual_seed(0)
    spec = PRESETS["swag"]
    model_dir = make_model_artifact(tmp_path / "swag", BertForMultipleChoice(tiny_config()),
                                    minilm_dir, spec)
    data = GLUE / "swag" / "sample.jsonl"
    r = cli("eval", model_dir, data, "--out", tmp_path / "eval")
    assert r.exit_code == 0, r.stderr
    pred = [int(x) for x in read_predictions(tmp_path / "eval")]
    gold = [json.loads(line)["label"] for line in data.read_text().splitlines() if line]
    assert len(pred) == len(gold) == 10 and set(pred) <= {0, 1, 2, 3}
    assert read_metrics(tmp_path / "eval") == {"accuracy": pytest.approx(sk.accuracy_score(gold, pred))}


# ---------------------------------------------------------------------------------------------
# Prediction only, lineage, up to date, --json

def test_file_without_labels_is_only_predicted(cli, models, tmp_path):
    labelled = tmp_path / "labelled"
    r = cli("eval", models["sst2"], GLUE / "SST-2" / "dev.tsv", "--out", labelled)
    assert r.exit_code == 0, r.stderr
    unlabelled = tmp_path / "test.tsv"
    sentences = column(GLUE / "SST-2" / "dev.tsv", "sentence")
    unlabelled.write_text("sentence\n" + "".join(s + "\n" for s in sentences), encoding="utf-8")
    out = tmp_path / "predicted"
    r = cli("eval", models["sst2"], unlabelled, "--out", out)
    assert r.exit_code == 0, r.stderr
    assert read_metrics(out) == {}
    assert read_predictions(out) == read_predictions(labelled)
    manifest = artifacts.read_manifest(out)
    assert manifest.metrics == {} and manifest.stats["labelled"] is False


def test_lineage_up_to_date_and_json(cli, models, tmp_path):
    data = GLUE / "SST-2" / "dev.tsv"
    out = tmp_path / "eval"
    r = cli("eval", models["sst2"], data, "--out", out, "--json")
    assert r.exit_code == 0, r.stderr
    manifest = r.json()
    assert manifest["kind"] == "eval" and manifest["metrics"]["accuracy"] == read_metrics(out)["accuracy"]
    inputs = {i["role"]: i for i in manifest["inputs"]}
    model_manifest = artifacts.read_manifest(models["sst2"])
    assert inputs["model"]["kind"] == "model" and inputs["model"]["id"] == model_manifest.id
    assert inputs["data"]["kind"] == "file" and inputs["data"]["id"] == artifacts.sha256_file(data)
    assert set(manifest["files"]) == {"metrics.json", "predictions.tsv"}
    assert manifest["stats"]["model"] == str(models["sst2"])
    r = cli("eval", models["sst2"], data, "--out", out)
    assert r.exit_code == 0 and "up to date" in r.stdout
    # A plain Hugging Face directory is identified by its files' hashes.
    r = cli("eval", models["hf"], data, "--out", tmp_path / "hf", "--task", "glue/sst2", "--json")
    assert r.exit_code == 0, r.stderr
    assert {i["role"]: i["kind"] for i in r.json()["inputs"]} == {"model": "hf-model", "data": "file"}


def test_other_format_with_the_models_task(cli, models, tmp_path):
    """The model's task describes its TSV training file; a JSON lines file of the same columns
    is read as JSON lines, and a save_to_disk directory too."""
    datasets = pytest.importorskip("datasets")
    _, rows = read_tsv(GLUE / "SST-2" / "dev.tsv")
    records = [{"sentence": s, "label": int(y)} for s, y in rows]
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    reference = tmp_path / "ref"
    assert cli("eval", models["sst2"], GLUE / "SST-2" / "dev.tsv", "--out", reference).exit_code == 0
    r = cli("eval", models["sst2"], jsonl, "--out", tmp_path / "jsonl")
    assert r.exit_code == 0, r.stderr
    assert read_metrics(tmp_path / "jsonl") == read_metrics(reference)
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(records).save_to_disk(str(saved))
    r = cli("eval", models["sst2"], saved, "--out", tmp_path / "arrow", "--json")
    assert r.exit_code == 0, r.stderr
    assert read_predictions(tmp_path / "arrow") == read_predictions(reference)
    assert {i["role"]: i["kind"] for i in r.json()["inputs"]}["data"] == "directory"


def test_preset_directory_means_its_dev_file(cli, models, tmp_path):
    r = cli("eval", models["sst2"], GLUE / "SST-2", "--out", tmp_path / "e", "--json")
    assert r.exit_code == 0, r.stderr
    data = {i["role"]: i for i in r.json()["inputs"]}["data"]
    assert data["id"] == artifacts.sha256_file(GLUE / "SST-2" / "dev.tsv")
    r = cli("eval", models["sst2"], GLUE, "--out", tmp_path / "f")
    assert_one_line_error(r, "not a directory written by save_to_disk")


def test_bf16(cli, models, tmp_path):
    r = cli("eval", models["sst2"], GLUE / "SST-2" / "dev.tsv", "--out", tmp_path / "e",
            "--precision", "bf16")
    assert r.exit_code == 0, r.stderr
    assert set(read_metrics(tmp_path / "e")) == {"accuracy", "macro_f1", "confusion_matrix"}


# ---------------------------------------------------------------------------------------------
# Bad inputs: exit 2 with one line

# ---------------------------------------------------------------------------------------------
# Streaming: a file of any size in bounded memory (#26 item 11)

@pytest.mark.parametrize("task,data,label_col", [("sst2", GLUE / "SST-2" / "dev.tsv", "label"),
                                                 ("stsb", GLUE / "STS-B" / "dev.tsv", "score")])
def test_a_file_is_evaluated_a_part_at_a_time(cli, models, tmp_path, monkeypatch, task, data,
                                              label_col):
    """eval reads, encodes, predicts and writes a file a part at a time and keeps only the labels
    and predictions for scoring; the parts give what the whole file gives (regression scores up
    to float rounding: a part's batches are padded to other lengths)."""
    from bertctl.stages.eval import task as eval_task
    from bertctl.tasks.sequence import SequenceFamily

    whole = tmp_path / "whole"
    assert cli("eval", models[task], data, "--out", whole).exit_code == 0
    sizes = []
    encode = SequenceFamily.encode

    def counted(self, examples, *args, **kwargs):
        sizes.append(len(examples))
        return encode(self, examples, *args, **kwargs)

    monkeypatch.setattr(SequenceFamily, "encode", counted)
    monkeypatch.setattr(eval_task, "ROWS_PER_PART", 7)
    parts = tmp_path / "parts"
    r = cli("eval", models[task], data, "--out", parts)
    assert r.exit_code == 0, r.stderr
    assert sizes == [7] * 14 + [2]
    if task == "sst2":
        assert read_predictions(parts) == read_predictions(whole)
        assert read_metrics(parts) == read_metrics(whole)
    else:
        assert np.allclose(np.array(read_predictions(parts), float),
                           np.array(read_predictions(whole), float), atol=1e-5)
        assert read_metrics(parts) == pytest.approx(read_metrics(whole), abs=1e-6)
    assert artifacts.read_manifest(parts).stats["examples"] == 100

    # A bad label in a later part names its row in the file, and nothing is written.
    head, rows = read_tsv(data)
    rows[51][head.index(label_col)] = ""
    bad = tmp_path / "bad.tsv"
    bad.write_text("\t".join(head) + "\n" + "".join("\t".join(r) + "\n" for r in rows),
                   encoding="utf-8")
    r = cli("eval", models[task], bad, "--out", tmp_path / "e")
    assert_one_line_error(r, str(bad), "row 52", "empty label")
    assert not (tmp_path / "e").exists()


_PEAK_RSS = """
import resource, runpy, sys
sys.argv = ["bertctl", *sys.argv[1:]]
try:
    runpy.run_module("bertctl", run_name="__main__")
except SystemExit as exc:
    assert not exc.code, exc.code
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.slow
def test_eval_memory_does_not_grow_with_the_file(models, tmp_path):
    """The previous code held every row's text, tokenizer encodings and features at once: about
    4 KB a row (1.7 GB at 300,000 rows). Peak memory of 10,000 and 40,000 rows, each in its own
    process, must differ by well under what 30,000 such rows would add (120 MB). Both files fill
    at least one whole part (ROWS_PER_PART), so the part's own working set (its texts, features
    and outputs: about 30 MB at 10,000 rows) is in both peaks and only growth with the file is
    left in the difference; a 2,000-row file, all of it one small part, left a 40-50 MB
    difference that was mostly the part size, too close to the bound on a loaded machine."""
    import subprocess
    import sys

    sentences = column(GLUE / "SST-2" / "dev.tsv", "sentence")
    peaks = {}
    assert task_eval.ROWS_PER_PART == 10_000   # the smaller file is one whole part
    for rows in (10_000, 40_000):
        data = tmp_path / f"rows{rows}.tsv"
        data.write_text("sentence\tlabel\n" + "".join(
            f"{sentences[i % len(sentences)]} {i}\t{i % 2}\n" for i in range(rows)))
        done = subprocess.run(
            [sys.executable, "-c", _PEAK_RSS, "eval", str(models["sst2"]), str(data), "--out",
             str(tmp_path / f"eval{rows}"), "--precision", "fp32", "--threads", "1"],
            capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        peaks[rows] = int(done.stdout.split()[-1]) / 1024   # ru_maxrss: KB on Linux
    assert peaks[40_000] - peaks[10_000] < 40, peaks


def test_label_the_model_does_not_know(cli, models, tmp_path):
    head, rows = read_tsv(GLUE / "SST-2" / "dev.tsv")
    rows[2][1] = "2"
    bad = tmp_path / "bad.tsv"
    bad.write_text("\t".join(head) + "\n" + "".join("\t".join(r) + "\n" for r in rows),
                   encoding="utf-8")
    r = cli("eval", models["sst2"], bad, "--out", tmp_path / "e")
    assert_one_line_error(r, str(bad), "row 3", "column 'label'", "'2'")
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("model,flags,fragment", [
    ("sst2", ["--task", "glue/mnli"], "2-label classifier but task glue/mnli has 3 labels"),
    ("stsb", ["--task", "glue/sst2"], "regression head"),
    ("sst2", ["--task", "glue/sts-b"], "is a regression but the model is a 2-label classifier"),
    ("sst2", ["--task", "swag"], "multiple choice"),
    ("hf", [], "no task file"),
    ("sst2", ["--labels", "neg", "--labels", "pos"], "disagree with the labels the model"),
    ("sst2", ["--split", "train"], "--split applies to pretrain-data"),
    ("sst2", ["--max-seq-length", "513"], "max_seq_length"),
])
def test_head_or_task_mismatch(cli, models, tmp_path, model, flags, fragment):
    r = cli("eval", models[model], GLUE / "SST-2" / "dev.tsv", "--out", tmp_path / "e", *flags)
    assert_one_line_error(r, fragment)


def test_missing_column(cli, models, tmp_path):
    data = GLUE / "SST-2" / "dev.tsv"
    r = cli("eval", models["sst2"], data, "--out", tmp_path / "e", "--text-column", "text")
    assert_one_line_error(r, str(data), "column 'text' not found", "'sentence'")


def test_bare_encoder_is_not_a_classifier(cli, minilm_dir, tmp_path):
    r = cli("eval", minilm_dir, GLUE / "SST-2" / "dev.tsv", "--out", tmp_path / "e",
            "--task", "glue/sst2")
    assert_one_line_error(r, "needs a sequence classification model", "BertModel")


# ---------------------------------------------------------------------------------------------
# Core API

class _Echo(nn.Module):
    """Per-example output = the sum of its input ids; also a batch-level scalar loss."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, input_ids, **_):
        assert not self.training and torch.is_inference_mode_enabled()
        return {"logits": input_ids.float().sum(-1, keepdim=True) * self.w,
                "loss": self.w * 0}


def test_predict_restores_example_order_and_mode():
    rng = np.random.default_rng(0)
    seqs = [rng.integers(1, 100, rng.integers(1, 9)) for _ in range(23)]
    from bertctl.data.collate import length_grouped_batches, pad_to_tensor
    batches = [(idx, {"input_ids": pad_to_tensor([seqs[i] for i in idx])})
               for idx in length_grouped_batches(np.array([len(s) for s in seqs]), 5, seed=None)]
    model = _Echo().train()
    out = evaluation.predict(model, reversed(batches), "cpu", "fp32")
    assert set(out) == {"logits"}
    np.testing.assert_array_equal(out["logits"][:, 0], [s.sum() for s in seqs])
    assert model.training
    with pytest.raises(ValueError, match="permutation"):
        evaluation.predict(model, batches[:-1] + [(batches[-1][0] + 1, batches[-1][1])], "cpu")


def test_evaluate_task_scores_and_json_safe():
    from types import SimpleNamespace

    from bertctl import tasks
    from bertctl.metrics import json_safe

    spec = make_task_spec("glue/sts-b")
    m = tasks.get("regression").score(np.zeros(4, dtype=np.float32),
                                      SimpleNamespace(labels=np.array([0.0, 1, 2, 3])), spec, None)
    assert np.isnan(m["pearson"])
    assert json_safe(m) == {"pearson": None, "spearman": None}
    spec = make_task_spec("glue/rte")
    m = tasks.get("pair").score(np.array([0, 0, 1, 1]), SimpleNamespace(labels=np.array([0, 1, 1, 1])),
                                spec, spec.labels)
    assert m["confusion_matrix"] == {"labels": ["entailment", "not_entailment"],
                                     "matrix": [[1, 0], [1, 2]]}
    assert m["accuracy"] == 0.75


# ---------------------------------------------------------------------------------------------
# Pretraining data

@pytest.fixture(scope="module")
def pretrain_data(tmp_path_factory, minilm_dir):
    from bertctl.data.pretraining import build as pretraining
    from bertctl.data.settings import PretrainingDataSettings
    from bertctl.data.corpus import iter_documents
    from bertctl.data.tokenizer.files import from_hf_directory
    from bertctl.stages.common.models import copy_tokenizer

    tok, _, _ = from_hf_directory(minilm_dir)
    root = tmp_path_factory.mktemp("pretrain")
    made = {}
    for name, corpus, fraction in [("data", "alice_in_wonderland.txt", 0.12),
                                   ("no_validation", "bert_sample_text.txt", 0.0)]:
        config = PretrainingDataSettings(max_seq_length=64, dupe_factor=1,
                                                   validation_fraction=fraction,
                                                   chunk_chars=40000, seed=3)

        def build(tmp, config=config, corpus=corpus):
            pretraining.build_pretraining_data(
                iter_documents([FIXTURES / "pretrain" / corpus]), tok, tmp, config, workers=1)
            copy_tokenizer(minilm_dir, tmp)
            return {}

        artifacts.produce("pretrain-data", config.to_dict(), [], artifacts.Target(root / name), build)
        made[name] = root / name
    torch.manual_seed(0)
    made["model"] = make_model_artifact(root / "model", BertForPreTraining(tiny_config(0.02)),
                                        minilm_dir)
    return made


def test_pretraining_metrics_equal_transformers(cli, pretrain_data, tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertctl.data.pretraining.dataset import PretrainingDataset

    out = tmp_path / "eval"
    r = cli("eval", pretrain_data["model"], pretrain_data["data"], "--out", out,
            "--batch-size", 32)
    assert r.exit_code == 0, r.stderr
    m = read_metrics(out)
    assert set(m) == {"mlm_loss", "mlm_accuracy", "perplexity", "nsp_loss", "nsp_accuracy"}

    dataset = PretrainingDataset(pretrain_data["data"], "validation")
    hf = transformers.BertForPreTraining.from_pretrained(pretrain_data["model"]).eval()
    losses, correct, nsp_right = [], 0, 0
    assert len(dataset) > 40
    for start in range(0, len(dataset), 32):
        batch = dataset.batch(np.arange(start, min(start + 32, len(dataset))))
        with torch.no_grad():
            o = hf(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                   attention_mask=batch["attention_mask"])
        where = batch["labels"] != -100
        logits, targets = o.prediction_logits[where], batch["labels"][where]
        losses.append(torch.nn.functional.cross_entropy(logits, targets, reduction="none"))
        correct += int((logits.argmax(-1) == targets).sum())
        nsp_right += int((o.seq_relationship_logits.argmax(-1)
                          == batch["next_sentence_label"]).sum())
    losses = torch.cat(losses)
    assert m["mlm_loss"] == pytest.approx(float(losses.mean()), rel=1e-4)
    assert m["perplexity"] == pytest.approx(math.exp(float(losses.mean())), rel=1e-4)
    assert m["mlm_accuracy"] == pytest.approx(correct / len(losses))
    assert m["nsp_accuracy"] == pytest.approx(nsp_right / len(dataset))
    manifest = artifacts.read_manifest(out)
    assert manifest.stats["examples"] == len(dataset) and manifest.stats["split"] == "validation"
    assert manifest.stats["masked_tokens"] == len(losses)
    assert {i.role: i.kind for i in manifest.inputs} == {"model": "model", "data": "pretrain-data"}
    assert not (out / "predictions.tsv").exists()


def test_pretraining_bad_inputs(cli, pretrain_data, models, minilm_dir, tmp_path):
    data = pretrain_data["data"]
    r = cli("eval", pretrain_data["model"], pretrain_data["no_validation"], "--out", tmp_path / "a")
    assert_one_line_error(r, "validation split is empty", "--split train")
    r = cli("eval", pretrain_data["model"], pretrain_data["no_validation"], "--out",
            tmp_path / "a", "--split", "train")
    assert r.exit_code == 0, r.stderr
    assert artifacts.read_manifest(tmp_path / "a").stats["split"] == "train"
    r = cli("eval", minilm_dir, data, "--out", tmp_path / "b")
    assert_one_line_error(r, "no masked-LM head")
    r = cli("eval", models["sst2"], data, "--out", tmp_path / "c")
    assert_one_line_error(r, "no masked-LM head")
    r = cli("eval", pretrain_data["model"], data, "--out", tmp_path / "d", "--task", "glue/sst2")
    assert_one_line_error(r, "--task", "task settings apply to task data files")
    # The same vocabulary size with two tokens swapped: the ids would mean other words.
    swapped = tmp_path / "swapped"
    shutil.copytree(pretrain_data["model"], swapped)
    for name in ("tokenizer.json", "artifact.json"):
        (swapped / name).unlink()
    vocab = (swapped / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab[2000], vocab[2001] = vocab[2001], vocab[2000]
    (swapped / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    r = cli("eval", swapped, data, "--out", tmp_path / "e")
    assert_one_line_error(r, "differ in 2 tokens", "id 2000")
