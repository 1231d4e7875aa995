"""Matryoshka embeddings (#64): `--matryoshka-dims` trains the loss at each vector size (the
sum of the losses of the cut vectors, as sentence-transformers' MatryoshkaLoss), the model
records its sizes, and `eval --dims` scores the search with the vectors cut to each size,
equal to a search over the sliced vectors; sizes that cannot be are one line."""

import json

import numpy as np
import pytest
import torch

from bertctl.tasks.retrieval.contrastive import ContrastiveLoss, cosent, info_nce
from bertctl.tasks.retrieval.loss import LOSSES

from helpers import EXAMPLES, tiny_embedder
from tolerance import TINY_FP32

RET = EXAMPLES / "retrieval"


@pytest.mark.parametrize("loss", ["infonce", "cosent"])
def test_the_loss_is_the_sum_of_the_losses_of_the_cut_vectors(loss):
    """Tolerance: the same float32 operations on the same vectors, summed in another order
    (TINY_FP32)."""
    model = ContrastiveLoss(tiny_embedder(1, matryoshka_dims=[16, 8, 4]), LOSSES[loss]).train()
    k = 3 if loss == "infonce" else 2
    ids = torch.randint(5, 60, (6, k, 9))
    labels = torch.rand(6) * 5 if loss == "cosent" else None
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    e = out["embeddings"]
    want = sum(cosent(e[:, 0, :d], e[:, 1, :d], labels, model.scale) if labels is not None
               else info_nce(e[:, 0, :d], e[:, 1:, :d], model.scale) for d in (16, 8, 4))
    torch.testing.assert_close(out["loss"], want, **TINY_FP32)


def test_a_search_at_each_size_is_the_search_over_the_sliced_vectors():
    """The family's score at --dims equals the score of the vectors sliced by hand: the same
    numbers, exactly (one computation)."""
    from bertctl.tasks import get, make_task_spec

    family = get("retrieval")
    spec = make_task_spec("retrieval", options={"dims": "12,4"})
    plain = make_task_spec("retrieval")
    examples = family.read(plain, RET / "train.tsv")
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(len(examples), 2, 24)).astype(np.float32)
    scored = family.score(family.results(vectors, examples, spec), examples, spec, None)
    for d in (12, 4):
        sliced = np.ascontiguousarray(vectors[..., :d])
        cut = family.score(family.results(sliced, examples, plain), examples, plain, None)
        for metric in ("ndcg@10", "mrr@10", "recall@100", "map"):
            assert scored[f"dim{d}/{metric}"] == cut[metric], (d, metric)


def test_a_model_trained_at_several_sizes_records_them_and_eval_reports_each(
        cli, tiny_pretrained, tmp_path):
    out = tmp_path / "m"
    r = cli("finetune", tiny_pretrained, RET / "train.tsv", "--task", "retrieval", "--steps",
            "2", "--batch-size", "8", "--max-seq-length", "32", "--matryoshka-dims", "32,16,8",
            "--out", out)
    assert r.exit_code == 0, r.stderr
    record = json.loads((out / "config.json").read_text())["bertctl_embedding"]
    assert record["matryoshka_dims"] == [32, 16, 8]
    r = cli("eval", out, RET / "beir", "--dims", "16,8", "--out", tmp_path / "ev",
            "--expect", "dim8/ndcg@10>=0")
    assert r.exit_code == 0, r.stderr
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert {"ndcg@10", "dim16/ndcg@10", "dim8/ndcg@10", "dim8/recall@100"} <= set(metrics)


@pytest.mark.parametrize("flags,words", [
    (("--matryoshka-dims", "64,16"), "at most the model's 32 values"),
    (("--matryoshka-dims", "16,32"), "each below the one before"),
    (("--matryoshka-dims", "16,x"), "write sizes as"),
])
def test_sizes_that_cannot_be_are_refused(cli, tiny_pretrained, tmp_path, flags, words):
    r = cli("finetune", tiny_pretrained, RET / "train.tsv", "--task", "retrieval", "--steps",
            "1", "--batch-size", "4", *flags, "--out", tmp_path / "m")
    assert r.exit_code == 2, r.stderr
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and words in errors[0], r.stderr
    assert not (tmp_path / "m").exists()


def test_dims_above_the_vectors_are_refused_in_eval(cli, minilm_dir, tmp_path):
    r = cli("eval", minilm_dir, RET / "beir", "--dims", "512", "--out", tmp_path / "ev")
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "384 values" in errors[0], r.stderr
    assert not (tmp_path / "ev").exists()
