"""Class weights and label smoothing (#106): balanced weights are scikit-learn's, the loss is
torch's weighted, smoothed cross-entropy, the flags reach the manifest, and what cannot apply
is one line before any work."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertctl.errors import BertctlError
from bertctl.labels import IGNORE_INDEX
from bertctl.tasks import class_loss
from helpers import FAMILY_DATA, one_line_error


def test_balanced_weights_are_scikit_learns():
    utils = pytest.importorskip("sklearn.utils")
    classes = np.array([0, 0, 0, 1, 2, 2, 0, 1, 0, 0])
    ours = class_loss.class_weights("balanced", classes, ("a", "b", "c"))
    theirs = utils.class_weight.compute_class_weight("balanced", classes=np.arange(3), y=classes)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    with pytest.raises(BertctlError, match="no training example of c"):
        class_loss.class_weights("balanced", np.array([0, 1, 1]), ("a", "b", "c"))


def test_named_weights_inline_and_in_a_file(tmp_path):
    labels = ("neg", "pos", "neutral")
    np.testing.assert_array_equal(
        class_loss.class_weights("pos=3, neg=0.5", np.zeros(1, int), labels), [0.5, 3, 1])
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"neutral": 2}))
    np.testing.assert_array_equal(class_loss.class_weights(str(path), np.zeros(1, int), labels),
                                  [1, 1, 2])
    for bad, message in (("pos=3,mixed=1", "'mixed' not among the task's labels"),
                         ("pos=0", "the weight of 'pos' must be a positive number"),
                         ("pos=inf", "positive number"), ("pos", "give 'balanced'")):
        with pytest.raises(BertctlError, match=message):
            class_loss.class_weights(bad, np.zeros(1, int), labels)
    path.write_text("[1, 2]")
    with pytest.raises(BertctlError, match="must be a JSON object"):
        class_loss.class_weights(str(path), np.zeros(1, int), labels)


@pytest.mark.parametrize("shape", [(6,), (3, 7)])   # sequences; tokens with ignored ones
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_loss_is_torchs_cross_entropy(shape, weighted, smoothing):
    """The definition: torch's cross_entropy with weight, ignore_index, label_smoothing and its
    mean (the weighted terms over the targets' weights). Tolerance: the same float32 terms
    summed in another order."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(*shape, 4, generator=gen, requires_grad=True)
    labels = torch.randint(0, 4, shape, generator=gen)
    if len(shape) == 2:
        labels[:, -2:] = IGNORE_INDEX
    weights = torch.tensor([0.5, 2.0, 1.0, 3.0]) if weighted else None
    ours = class_loss.class_loss(logits, labels, weights, smoothing)
    theirs = F.cross_entropy(logits.reshape(-1, 4), labels.reshape(-1), weight=weights,
                             ignore_index=IGNORE_INDEX, label_smoothing=smoothing)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    mine, = torch.autograd.grad(ours, logits)
    want, = torch.autograd.grad(theirs, logits)
    torch.testing.assert_close(mine, want, rtol=1e-6, atol=1e-7)


def test_finetune_records_the_weights_it_trained_with(cli, tiny_pretrained, tmp_path):
    utils = pytest.importorskip("sklearn.utils")
    data, _ = FAMILY_DATA["single"]
    out = tmp_path / "m"
    r = cli("finetune", tiny_pretrained, *data, "--class-weights", "balanced",
            "--label-smoothing", "0.1", "--steps", "2", "--batch-size", "8", "--out", out,
            "--json")
    assert r.exit_code == 0, r.stderr
    stats = r.json()["stats"]
    labels = stats["label_list"]
    import csv

    with open(data[0] / "train.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    y = np.array([labels.index(row["label"]) for row in rows])
    want = utils.class_weight.compute_class_weight("balanced", classes=np.arange(len(labels)),
                                                   y=y)
    got = [stats["loss"]["class_weights"][label] for label in labels]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert stats["loss"]["label_smoothing"] == 0.1
    # the settings are recorded; a run without them keeps its id
    assert r.json()["config"]["class_weights"] == "balanced"
    from bertctl.settings import identity
    from bertctl.stages.settings.finetune import FinetuneSettings

    assert not {"class_weights", "label_smoothing"} & set(identity(FinetuneSettings(
        task="glue/sst2", precision="fp32")))


def test_what_cannot_apply_is_one_line_before_any_work(cli, tiny_pretrained, tmp_path):
    out = tmp_path / "out"
    regression, _ = FAMILY_DATA["regression"]
    one_line_error(cli("finetune", tiny_pretrained, *regression, "--class-weights", "balanced",
                       "--out", out), "--class-weights", "'regression' task's loss has no classes")
    span, _ = FAMILY_DATA["span"]
    one_line_error(cli("finetune", tiny_pretrained, *span, "--label-smoothing", "0.1",
                       "--out", out), "--label-smoothing", "'span' task's loss")
    choice, _ = FAMILY_DATA["multiple_choice"]
    one_line_error(cli("finetune", tiny_pretrained, *choice, "--class-weights", "balanced",
                       "--out", out), "'multiple_choice' task's loss has no classes to weigh")
    single, _ = FAMILY_DATA["single"]
    weights = tmp_path / "weights.json"
    weights.write_text(json.dumps({"0": 1.0, "surprise": 2.0}))
    one_line_error(cli("finetune", tiny_pretrained, *single, "--class-weights", weights,
                       "--steps", "1", "--out", out), "'surprise' not among the task's labels")
    one_line_error(cli("finetune", tiny_pretrained, *single, "--class-weights",
                       tmp_path / "missing.json", "--out", out), "missing.json",
                   "cannot read class weights")
    one_line_error(cli("finetune", tiny_pretrained, *single, "--label-smoothing", "1",
                       "--out", out), "label_smoothing")
    assert not out.exists()
    r = cli("finetune", tiny_pretrained, *choice, "--label-smoothing", "0.1", "--steps", "1",
            "--batch-size", "4", "--out", out)
    assert r.exit_code == 0, r.stderr
