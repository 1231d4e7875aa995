"""Multi-label classification (#106): the figures are scikit-learn's, each label's tuned
threshold is the one with that label's best F1, the loss and logits are transformers' own
multi_label_classification on the same weights, and the family runs finetune to eval with its
thresholds stored and read back."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertctl import metrics
from bertctl.data.collate import pack_batch
from bertctl.distillation import soft_loss
from bertctl.errors import BertctlError
from bertctl.tasks import make_task_spec
from bertctl.tasks.multi_label import best_thresholds
from helpers import FAMILY_DATA, FIXTURES, one_line_error, read_examples

DATA = FIXTURES / "entity_types"
TASK = ["--family", "multi_label", "--text-column", "text", "--label-column", "labels"]


def _label_sets(seed: int, n: int = 60, num: int = 5):
    rng = np.random.default_rng(seed)
    y = rng.random((n, num)) < 0.3
    p = rng.random((n, num)) < 0.35
    y[:, -1] = False              # a label nobody has ...
    p[:, -1] = seed % 2 == 0      # ... predicted for everyone, or for nobody (F1 undefined: 0)
    return p, y


@pytest.mark.parametrize("seed", range(4))
def test_figures_are_scikit_learns(seed):
    skm = pytest.importorskip("sklearn.metrics")
    p, y = _label_sets(seed)
    ours = metrics.compute_metrics("multi_label", p, y)
    theirs = {
        "micro_f1": skm.f1_score(y, p, average="micro", zero_division=0),
        "macro_f1": skm.f1_score(y, p, average="macro", zero_division=0),
        "micro_precision": skm.precision_score(y, p, average="micro", zero_division=0),
        "micro_recall": skm.recall_score(y, p, average="micro", zero_division=0),
        "subset_accuracy": skm.accuracy_score(y, p),
        "hamming_loss": skm.hamming_loss(y, p)}
    assert ours == pytest.approx(theirs, abs=1e-12)   # the same counts, divided once
    assert metrics.main_metric("multi_label") == "micro_f1"
    with pytest.raises(BertctlError, match="0 examples"):
        metrics.multi_label_scores(np.zeros((0, 3)), np.zeros((0, 3)))


@pytest.mark.parametrize("seed", range(3))
def test_each_threshold_is_the_best_f1_of_its_label(seed):
    """Against the definition by brute force: every cut between the label's probabilities,
    scored with scikit-learn's F1; ours reaches the best, with the fewest labels predicted."""
    skm = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(seed)
    probabilities = np.round(rng.random((40, 4)), 2)   # rounded: ties that cannot be cut
    labels = (rng.random((40, 4)) < probabilities).astype(np.float32)
    labels[:, 3] = 0
    chosen = best_thresholds(probabilities, labels)
    assert chosen[3] == 0.5                            # no positives: nothing to tune
    for j in range(3):
        candidates = np.r_[np.unique(probabilities[:, j]), 1.01]
        scores = [skm.f1_score(labels[:, j], probabilities[:, j] >= t, zero_division=0)
                  for t in candidates]
        ours = skm.f1_score(labels[:, j], probabilities[:, j] >= chosen[j], zero_division=0)
        assert ours == pytest.approx(max(scores), abs=1e-12)
        best = max(t for t, s in zip(candidates, scores) if s == pytest.approx(max(scores)))
        assert (probabilities[:, j] >= chosen[j]).sum() == (probabilities[:, j] >= best).sum()


def test_labels_are_read_from_text_and_list_cells(tmp_path):
    spec = make_task_spec(family="multi_label", text_columns=["text"], label_column="labels")
    train = read_examples(spec, DATA / "train.tsv", require_labels=True)
    assert train.label_list == ("LOC", "MISC", "ORG", "PER")
    assert train.labels.shape == (138, 4) and train.labels.dtype == np.float32
    assert train.labels[0].tolist() == [0, 1, 1, 0]          # "MISC,ORG"
    assert (train.labels.sum(1) == 0).sum() == 25             # sentences naming no entity
    rows = [{"text": "a", "labels": ["x", "y"]}, {"text": "b", "labels": []},
            {"text": "c", "labels": ["z"]}]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    listed = read_examples(spec, path, require_labels=True)
    assert listed.label_list == ("x", "y", "z")
    assert listed.labels.tolist() == [[1, 1, 0], [0, 0, 0], [0, 0, 1]]
    piped = make_task_spec(family="multi_label", text_columns=["text"], label_column="labels",
                           options={"label_separator": "|"})
    path = tmp_path / "piped.tsv"
    path.write_text("text\tlabels\none\ta | b\ntwo\t\nthree\tb\n")
    assert read_examples(piped, path).labels.tolist() == [[1, 1], [0, 0], [0, 1]]
    # a dev row with a label the training set never had: its row, its column
    path.write_text("text\tlabels\none\ta|b\ntwo\tc\n")
    with pytest.raises(BertctlError, match=r"piped.tsv: row 2, column 'labels': label 'c' is "
                                           r"not one of the training labels"):
        read_examples(piped, path, label_list=("a", "b"))
    path.write_text("text\tlabels\none\ta\ntwo\t\n")
    with pytest.raises(BertctlError, match="1 label in the file; a multi-label classifier "
                                           "needs at least 2"):
        read_examples(piped, path)


def test_label_sets_move_with_their_sequences_when_packed():
    batch = {"input_ids": torch.tensor([[2, 5, 3, 0], [2, 6, 7, 3], [2, 3, 0, 0]]),
             "token_type_ids": torch.zeros(3, 4, dtype=torch.long),
             "attention_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]]),
             "labels": torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])}
    packed = pack_batch(batch, capacity=8, pad_id=0)
    starts = packed["sequence_starts"].tolist()
    flat = packed["input_ids"].reshape(-1)
    for start, labels in zip(starts, packed["labels"].tolist()):
        original = next(i for i in range(3) if batch["input_ids"][i, 1] == flat[start + 1])
        assert labels == batch["labels"][original].tolist()


def test_distilling_label_sets_is_each_labels_binary_kl():
    gen = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(5, 3, generator=gen), torch.randn(5, 3, generator=gen)
    T = 2.0
    p, q = torch.sigmoid(teacher / T), torch.sigmoid(student / T)
    expected = (p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()).sum(-1).mean() * T * T
    assert soft_loss("labels", student, teacher, None, T).item() == pytest.approx(
        expected.item(), rel=1e-5)   # float32 logs of the same values by two routes
    assert soft_loss("labels", teacher, teacher, None, T).item() == pytest.approx(0, abs=1e-6)


@pytest.fixture(scope="module")
def multi_label_model(tmp_path_factory, tiny_pretrained):
    from helpers import invoke

    data, _ = FAMILY_DATA["multi_label"]
    out = tmp_path_factory.mktemp("multi") / "model"
    r = invoke("finetune", tiny_pretrained, *data, "--out", out, "--steps", "12",
               "--batch-size", "16", "--lr", "3e-3", "--eval-every", "6", "--device", "cpu",
               "--max-seq-length", "64")
    assert r.exit_code == 0, r.stderr
    return out


def test_finetune_stores_a_threshold_per_label_and_eval_reads_them(multi_label_model, cli,
                                                                   tmp_path):
    model = multi_label_model
    config = json.loads((model / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    assert config["id2label"] == {"0": "LOC", "1": "MISC", "2": "ORG", "3": "PER"}
    task = json.loads((model / "bertctl_task.json").read_text())
    thresholds = task["calibration"]["thresholds"]
    assert set(thresholds) == {"LOC", "MISC", "ORG", "PER"}
    assert all(0 < t < 1 for t in thresholds.values())
    r = cli("eval", model, DATA / "dev.tsv", "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    figures = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert set(figures["per_label"]) == set(thresholds)
    assert sum(v["support"] for v in figures["per_label"].values()) == int(
        read_examples(make_task_spec(family="multi_label", text_columns=["text"],
                                     label_column="labels"),
                      DATA / "dev.tsv").labels.sum())
    # the dev figures at the stored thresholds are eval's on the same file
    assert figures["micro_f1"] == pytest.approx(
        task["calibration"]["dev_at_thresholds"]["micro_f1"], abs=1e-9)
    lines = (tmp_path / "ev" / "predictions.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction\tprobabilities" and len(lines) == 141
    names = ["LOC", "MISC", "ORG", "PER"]
    for line in lines[1:]:
        _, chosen, probabilities = line.split("\t")
        for name, p in zip(names, map(float, probabilities.split())):
            if abs(p - thresholds[name]) > 1e-5:       # printed to 6 digits
                assert (name in chosen.split(",")) == (p >= thresholds[name]), line
    # --threshold replaces the tuned ones: 1e-6 predicts every label for every sentence
    r = cli("eval", model, DATA / "dev.tsv", "--out", tmp_path / "all", "--threshold", "1e-6")
    assert r.exit_code == 0, r.stderr
    rows = (tmp_path / "all" / "predictions.tsv").read_text().splitlines()[1:]
    assert {row.split("\t")[1] for row in rows} == {"LOC,MISC,ORG,PER"}


def test_transformers_reads_the_model_with_the_same_logits_and_loss(multi_label_model):
    """transformers' BertForSequenceClassification with problem_type multi_label_classification
    on the saved weights: the same logits and BCE-with-logits loss. Tolerance: float32 sums
    in other orders."""
    transformers = pytest.importorskip("transformers")
    from bertctl.stages.common import models
    from tokenizers import Tokenizer

    hf = transformers.AutoModelForSequenceClassification.from_pretrained(multi_label_model)
    ours = models.open_model(multi_label_model, "model").load()[0].eval()
    hf.eval()
    tok = Tokenizer.from_file(str(multi_label_model / "tokenizer.json"))
    enc = tok.encode_batch(["EU rejects German call", "Peter Blackburn"])
    width = max(len(e.ids) for e in enc)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in enc])
    mask = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in enc])
    labels = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, labels=labels)
        mine = ours(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(mine["logits"], theirs.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mine["loss"], theirs.loss, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(mine["loss"], F.binary_cross_entropy_with_logits(
        theirs.logits, labels), rtol=1e-4, atol=1e-6)


def test_what_cannot_apply_is_one_line(multi_label_model, cli, tmp_path):
    r = cli("eval", multi_label_model, FIXTURES / "glue" / "SST-2" / "dev.tsv", "--task",
            "glue/sst2", "--out", tmp_path / "a")
    one_line_error(r, "task glue/sst2 is a classification but the model is a 4-label "
                      "multi-label classifier")
    assert not (tmp_path / "a").exists()
    data, _ = FAMILY_DATA["multi_label"]
    r = cli("finetune", multi_label_model, *data, "--out", tmp_path / "b", "--class-weights",
            "balanced")
    one_line_error(r, "--class-weights: a 'multi_label' task's loss has no classes to weigh")
    r = cli("finetune", multi_label_model, *data, "--out", tmp_path / "c", "--threshold", "0.3")
    assert r.exit_code == 2 and "--threshold" in r.stderr
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_the_fixture_is_what_the_script_makes(tmp_path):
    import importlib.util

    from helpers import ROOT

    path = ROOT / "benchmarks" / "studies" / "multi_label" / "entity_types.py"
    spec = importlib.util.spec_from_file_location("entity_types", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for conll, made in (("train.txt", "train.tsv"), ("valid.txt", "dev.tsv")):
        module.convert(FIXTURES / "conll2003" / conll, tmp_path / made)
        assert (tmp_path / made).read_bytes() == (DATA / made).read_bytes()
