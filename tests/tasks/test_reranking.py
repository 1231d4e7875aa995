"""The reranking family (#64): a cross-encoder trained on a query's positive against its
negatives, saved as a sentence-transformers CrossEncoder, and a search's first stage reranked
by it in eval. The losses against their plain definitions, CrossEncoder.predict against
bertctl's scores, the reranked run against one built from CrossEncoder's own scores, and the
bad inputs."""

import json
import math

import numpy as np
import pytest
import torch

from bertctl.tasks.reranking.loss import RankingLoss, ranking_loss
from bertctl.search import ranking

from helpers import (EXAMPLES, beir_texts, loss_trained_on, one_line_error, read_run,
                      reranked_eval)

TRAIN = EXAMPLES / "retrieval" / "train.tsv"
BEIR = EXAMPLES / "retrieval" / "beir"


def test_the_losses_equal_their_plain_definitions():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 4, generator=g) * 3
    positive = torch.tensor([0, 2, 1, 0, 3])
    want = 0.0
    for row, p in zip(logits.tolist(), positive.tolist()):
        want += -(row[p] - math.log(sum(math.exp(x) for x in row)))
    assert ranking_loss(logits, positive, "listwise").item() == pytest.approx(want / 5, rel=1e-6)
    want = 0.0
    for row, p in zip(logits.tolist(), positive.tolist()):
        for j, x in enumerate(row):
            prob = 1 / (1 + math.exp(-x))
            want -= math.log(prob) if j == p else math.log(1 - prob)
    assert ranking_loss(logits, positive, "pointwise").item() == pytest.approx(want / 20,
                                                                               rel=1e-6)


def test_a_grouped_batch_scores_each_candidate_as_alone(minilm_l2):
    """(B, G, T) candidates give the logits of the same B * G sequences one at a time."""
    from bertctl.model.hf import load_model

    model, _ = load_model(minilm_l2, "sequence_classification", num_labels=1,
                          problem_type="regression")
    model.eval()
    ids = torch.randint(1000, 2000, (2, 3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 2, 5:] = 0
    with torch.no_grad():
        grouped = model(input_ids=ids, attention_mask=mask)["logits"]
        alone = [model(input_ids=ids[b, c, :int(mask[b, c].sum())][None])["logits"].item()
                 for b in range(2) for c in range(3)]
        wrapped = RankingLoss(model, "listwise")(input_ids=ids, attention_mask=mask,
                                                 labels=torch.zeros(2, dtype=torch.long))
    assert grouped.shape == (2, 3)
    # fp32 (eval pins it): a 2-layer encoder's sums over 384 values, padding masked out
    assert np.allclose(grouped.reshape(-1).numpy(), alone, atol=1e-5)
    assert wrapped["loss"].item() == pytest.approx(
        ranking_loss(grouped, torch.zeros(2, dtype=torch.long), "listwise").item(), rel=1e-5)


@pytest.fixture(scope="module")
def reranker(tmp_path_factory, minilm_l2):
    """A reranker fine-tuned from all-MiniLM-L6-v2's first two layers on negatives mined with it."""
    from helpers import invoke as cli

    root = tmp_path_factory.mktemp("rerank")
    r = cli("mine", minilm_l2, TRAIN, "--negatives", "3", "--precision", "fp32",
            "--out", root / "mined")
    assert r.exit_code == 0, r.stderr
    rows = (root / "mined" / "pairs.jsonl").read_text().splitlines()[:48]
    (root / "pairs.jsonl").write_text("\n".join(rows) + "\n")
    r = cli("finetune", minilm_l2, root / "pairs.jsonl", "--task", "reranking", "--epochs", "1",
            "--batch-size", "8", "--lr", "1e-4", "--max-seq-length", "64",
            "--precision", "fp32", "--out", root / "reranker")
    assert r.exit_code == 0, r.stderr
    return root


@pytest.mark.slow
def test_crossencoder_predicts_bertctls_scores(cli, reranker, tmp_path):
    """The fine-tuned model is a CrossEncoder: its predict (the sigmoid of the logit, the
    pair truncated at the training length) equals bertctl's scores."""
    from sentence_transformers import CrossEncoder

    model = reranker / "reranker"
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    r = cli("eval", model, reranker / "pairs.jsonl", "--precision", "fp32", "--out",
            tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    ours = np.loadtxt(tmp_path / "ev" / "predictions.tsv", skiprows=1)[:, 1:]
    rows = [json.loads(x) for x in (reranker / "pairs.jsonl").read_text().splitlines()]
    columns = ["positive", "negative_1", "negative_2", "negative_3"]
    ce = CrossEncoder(str(model), device="cpu")
    assert ce.max_seq_length == 64
    theirs = ce.predict([(row["query"], row[c]) for row in rows for c in columns],
                        batch_size=16).reshape(len(rows), 4)
    # fp32 both; a 2-layer encoder, then one sigmoid: seen ~5e-7
    assert np.abs(ours - theirs).max() < 1e-5
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    want, _ = ranking.evaluate(
        {str(i): [d for d, _ in ranking.rank([f"c{j}" for j in range(4)], list(map(float, s)))]
         for i, s in enumerate(theirs)}, {str(i): {"c0": 1} for i in range(len(rows))})
    assert metrics["ndcg@10"] == pytest.approx(want["ndcg@10"], abs=1e-9)
    assert metrics["queries"] == len(rows)


@pytest.mark.slow
def test_a_search_is_reranked_as_crossencoder_orders_it(cli, minilm_l2, reranker,
                                                         tmp_path):
    """eval --rerank: the first stage's metrics unchanged, its first K documents a query in
    the order of CrossEncoder.predict's scores (ties as trec_eval), the rest below."""
    from sentence_transformers import CrossEncoder

    out, metrics, first = reranked_eval(minilm_l2, BEIR, tmp_path, "--rerank",
                                        reranker / "reranker", "--rerank-depth", "5")
    queries, docs = beir_texts(BEIR)
    ce = CrossEncoder(str(reranker / "reranker"), device="cpu")
    want = {}
    for q, ranked in first.items():
        s = ce.predict([(queries[q], docs[d]) for d in ranked[:5]]).tolist()
        want[q] = [d for d, _ in ranking.rank(ranked[:5], s)] + ranked[5:]
    got = read_run(out / "rerank.trec")
    assert got == want
    qrels = {}
    for line in (BEIR / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = line.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    means, _ = ranking.evaluate(want, qrels)
    assert metrics["rerank/ndcg@10"] == pytest.approx(means["ndcg@10"], abs=1e-9)
    assert metrics["rerank/depth"] == 5 and metrics["rerank/queries_per_second"] > 0
    # rerank_fused: reciprocal rank fusion (k 60) of the two orders of the first 5, ties in
    # the first stage's order, the rest below
    fused = {}
    for q, ranked in first.items():
        head = ranked[:5]
        score = {d: 1 / (60 + head.index(d) + 1) + 1 / (60 + want[q].index(d) + 1)
                 for d in head}
        fused[q] = sorted(head, key=lambda d: (-score[d], head.index(d))) + ranked[5:]
    assert read_run(out / "rerank_fused.trec") == fused
    means, _ = ranking.evaluate(fused, qrels)
    assert metrics["rerank_fused/ndcg@10"] == pytest.approx(means["ndcg@10"], abs=1e-9)
    inputs = json.loads((out / "artifact.json").read_text())["inputs"]
    assert [i["role"] for i in inputs][-1] == "reranker"


def test_a_crossencoder_saved_by_sentence_transformers_reranks(cli, minilm_l2, tmp_path):
    """A CrossEncoder as sentence-transformers saves one (a new head on the two-layer MiniLM) is
    read as a reranker, with CrossEncoder's own scores."""
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(str(minilm_l2), num_labels=1, max_length=48, device="cpu")
    ce.save(str(tmp_path / "ce"))
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("query\tpositive\tnegative\nwho wrote it\tan author wrote it\ta cat\n"
                     "where is paris\tparis is in france\tberlin is a city\n", encoding="utf-8")
    r = cli("eval", tmp_path / "ce", pairs, "--task", "reranking", "--precision", "fp32",
            "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    ours = np.loadtxt(tmp_path / "ev" / "predictions.tsv", skiprows=1)[:, 1:]
    theirs = ce.predict([("who wrote it", "an author wrote it"), ("who wrote it", "a cat"),
                         ("where is paris", "paris is in france"),
                         ("where is paris", "berlin is a city")]).reshape(2, 2)
    assert np.abs(ours - theirs).max() < 1e-5   # fp32, as above


def test_bad_reranking_input_is_one_line(cli, minilm_l2, tmp_path, reranker_stub):
    no_negatives = tmp_path / "pairs.tsv"
    no_negatives.write_text("query\tpositive\nq one\tdoc one\nq two\tdoc two\n", encoding="utf-8")
    cases = (
        (("finetune", minilm_l2, no_negatives, "--task", "reranking"),
         "the rows have none"),
        (("eval", reranker_stub, BEIR, "--task", "retrieval"),
         "a cross-encoder reranks a search: eval FIRST_STAGE"),
        (("eval", reranker_stub, BEIR, "--task", "reranking"),
         "a reranker scores (query, candidates) rows"),
        (("eval", minilm_l2, BEIR, "--task", "retrieval", "--rerank", minilm_l2),
         "a reranker is a sequence classifier with one output"),
        (("eval", minilm_l2, BEIR, "--task", "retrieval", "--rerank", reranker_stub,
          "--rerank-depth", "200"),
         "--rerank-depth 200: the search keeps 100"),
        (("eval", reranker_stub, no_negatives, "--task", "reranking", "--rerank",
          reranker_stub),
         "reorders a search's results"),
    )
    for args, words in cases:
        r = cli(*args, "--out", tmp_path / "out")
        one_line_error(r, words)
        assert not (tmp_path / "out").exists()


@pytest.fixture
def reranker_stub(tmp_path, minilm_l2):
    """A reranker with an untrained head, as a CrossEncoder saves one (no training needed to
    be refused)."""
    from sentence_transformers import CrossEncoder

    CrossEncoder(str(minilm_l2), num_labels=1, device="cpu").save(str(tmp_path / "stub"))
    return tmp_path / "stub"


def test_margin_mse_equals_its_plain_definition():
    from bertctl.tasks.retrieval.contrastive import margin_mse

    g = torch.Generator().manual_seed(2)
    q, d, t = torch.randn(3, 8, generator=g), torch.randn(3, 4, 8, generator=g), torch.rand(3, 4)
    want = 0.0
    for i in range(3):
        cos = [float(torch.dot(q[i], d[i, j]) / (q[i].norm() * d[i, j].norm())) for j in range(4)]
        want += sum(((cos[0] - cos[j]) - float(t[i, 0] - t[i, j])) ** 2 for j in range(1, 4))
    assert margin_mse(q, d, t).item() == pytest.approx(want / 9, rel=1e-5)


def test_listwise_kl_equals_its_plain_definition():
    """KL(teacher || student) over each row's candidates, averaged over rows: the teacher's
    distribution the softmax of its logits (the scores are their sigmoid), the student's the
    softmax of scale * cosine; computed here in float64 with scipy's rel_entr. Tolerance: the
    loss runs in float32 over 4 candidates (relative 1e-5)."""
    from scipy.special import logit, rel_entr, softmax

    from bertctl.tasks.retrieval.contrastive import listwise_kl

    g = torch.Generator().manual_seed(4)
    q, d = torch.randn(3, 8, generator=g), torch.randn(3, 4, 8, generator=g)
    t = torch.rand(3, 4, generator=g) * 0.98 + 0.01
    qn = q.double().numpy() / np.linalg.norm(q.double().numpy(), axis=-1, keepdims=True)
    dn = d.double().numpy() / np.linalg.norm(d.double().numpy(), axis=-1, keepdims=True)
    cos = np.einsum("bd,bkd->bk", qn, dn)
    teacher = softmax(logit(t.double().numpy()), axis=-1)
    student = softmax(20.0 * cos, axis=-1)
    want = rel_entr(teacher, student).sum() / 3
    assert listwise_kl(q, d, t, 20.0).item() == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="candidates"):   # never broadcast silently
        listwise_kl(q, d, t[:, :3], 20.0)


@pytest.mark.parametrize("name", ["margin_mse_infonce", "kl_infonce"])
def test_the_mixed_distillation_losses_are_the_sum_of_their_parts(name):
    """Each through the registry: the teacher's loss on its scores plus InfoNCE over the
    batch at the scale, each as defined above and in test_retrieval."""
    from bertctl.tasks.retrieval.contrastive import info_nce, listwise_kl, margin_mse
    from bertctl.tasks.retrieval.loss import LOSSES

    g = torch.Generator().manual_seed(3)
    # a query, its positive and a negative; the teacher scored the two candidates
    e, t = torch.randn(4, 3, 8, generator=g), torch.rand(4, 2, generator=g)
    got = LOSSES[name].compute(e, t, 20.0)
    teacher = (margin_mse(e[:, 0], e[:, 1:], t) if name == "margin_mse_infonce"
               else listwise_kl(e[:, 0], e[:, 1:], t, 20.0))
    want = teacher + info_nce(e[:, 0], e[:, 1:], 20.0)
    torch.testing.assert_close(got, want, atol=0, rtol=0)   # the same operations


@pytest.mark.slow
def test_the_reranker_teaches_the_bi_encoder(cli, minilm_l2, reranker, tmp_path):
    """mine --teacher writes the cross-encoder's score of each row's candidates (those of
    CrossEncoder.predict); finetune --task retrieval reads them and trains on them (listwise
    KL, the default for a file with a teacher's scores)."""
    from sentence_transformers import CrossEncoder

    out = tmp_path / "mined"
    r = cli("mine", minilm_l2, TRAIN, "--negatives", "2", "--teacher", reranker / "reranker",
            "--precision", "fp32", "--out", out)
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    assert set(rows[0]) >= {"score_positive", "score_negative_1", "score_negative_2"}
    ce = CrossEncoder(str(reranker / "reranker"), device="cpu")
    some = rows[:6]
    want = ce.predict([(row["query"], row[c]) for row in some
                       for c in ("positive", "negative_1", "negative_2")]).reshape(6, 3)
    got = np.array([[row[f"score_{c}"] for c in ("positive", "negative_1", "negative_2")]
                    for row in some])
    assert np.abs(got - want).max() < 1e-5   # fp32 both, as in the parity test
    inputs = json.loads((out / "artifact.json").read_text())["inputs"]
    assert "teacher" in [i["role"] for i in inputs]
    # the labels chose it, and the artifact says so
    assert loss_trained_on(rows, minilm_l2, tmp_path) == "kl"


def test_teacher_scores_are_whole_or_refused(cli, minilm_l2, tmp_path):
    part = tmp_path / "part.jsonl"
    part.write_text(json.dumps({"query": "q", "positive": "p", "negative": "n",
                                "score_positive": 0.9}) + "\n" +
                    json.dumps({"query": "r", "positive": "s", "negative": "m",
                                "score_positive": 0.8}) + "\n")
    one_line_error(cli("finetune", minilm_l2, part, "--task", "retrieval", "--out",
                       tmp_path / "o"), "need one for every candidate column: score_positive, "
                                        "score_negative")
    plain = tmp_path / "plain.tsv"
    plain.write_text("query\tpositive\tnegative\nq\tp\tn\nr\ts\tm\n")
    one_line_error(cli("finetune", minilm_l2, plain, "--task", "retrieval", "--loss",
                       "margin_mse", "--out", tmp_path / "o"), "the file has none")
    # A logit-scoring teacher's 8 and 3: KL reads probabilities (clamped, they would tie);
    # MarginMSE reads them as they are.
    logits = tmp_path / "logits.jsonl"
    logits.write_text("".join(json.dumps({"query": q, "positive": p, "negative": n,
                                          "score_positive": 8.0, "score_negative": 3.0}) + "\n"
                              for q, p, n in (("q", "p", "n"), ("r", "s", "m"))))
    for loss in (None, "kl", "kl_infonce"):
        one_line_error(cli("finetune", minilm_l2, logits, "--task", "retrieval",
                           *(("--loss", loss) if loss else ()), "--out", tmp_path / "o"),
                       "4 teacher scores outside [0, 1] (from 3 to 8)",
                       f"--loss {loss or 'kl'} reads a sigmoid's probabilities")
    assert not (tmp_path / "o").exists()
    r = cli("finetune", minilm_l2, logits, "--task", "retrieval", "--loss", "margin_mse",
            "--steps", "1", "--batch-size", "2", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.stderr


def test_a_two_label_classifier_is_no_reranker_whatever_its_config_says(cli, minilm_l2,
                                                                         tmp_path):
    """A two-label sequence classifier whose config.json names no label count (transformers 5
    writes neither num_labels nor id2label for two labels) is refused as a reranker and as a
    teacher, from its head's weights: its two logits are not two candidates' scores, and
    sigmoid(logit 0) ranks in reverse for a classifier whose label 1 means relevant."""
    import json

    from sentence_transformers import CrossEncoder

    out = tmp_path / "two"
    CrossEncoder(str(minilm_l2), num_labels=2, device="cpu").save(str(out))
    config = json.loads((out / "config.json").read_text())
    for key in ("num_labels", "id2label", "label2id"):
        config.pop(key, None)
    (out / "config.json").write_text(json.dumps(config))
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("query\tpositive\nwho wrote it\tan author wrote it\n"
                     "where is paris\tparis is in france\n", encoding="utf-8")
    for args in (("eval", minilm_l2, BEIR, "--task", "retrieval", "--rerank", out),
                 ("eval", out, pairs, "--task", "reranking"),
                 ("mine", minilm_l2, pairs, "--negatives", "1", "--teacher", out)):
        r = cli(*args, "--out", tmp_path / "ev")
        one_line_error(r, "a reranker has one output", "2-label classifier")
        assert not (tmp_path / "ev").exists()


def test_a_one_output_reranker_whose_config_lists_two_labels_reranks(cli, minilm_l2,
                                                                     tmp_path):
    """The weights decide: one output is a reranker, whatever labels its config lists
    (before: refused as a 2-label classifier)."""
    from sentence_transformers import CrossEncoder

    out = tmp_path / "one"
    CrossEncoder(str(minilm_l2), num_labels=1, device="cpu").save(str(out))
    config = json.loads((out / "config.json").read_text())
    config.pop("num_labels", None)
    config.update(id2label={"0": "LABEL_0", "1": "LABEL_1"}, label2id={"LABEL_0": 0,
                                                                       "LABEL_1": 1})
    (out / "config.json").write_text(json.dumps(config))
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("query\tpositive\nwho wrote it\tan author wrote it\n", encoding="utf-8")
    r = cli("eval", out, pairs, "--task", "reranking", "--out", tmp_path / "ev2")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("activation,key", [
    ("Identity", "st6"), ("Tanh", "st6"), ("Identity", "st4"), ("Identity", "old")])
def test_a_crossencoders_saved_activation_and_length_are_what_bertctl_scores_by(
        cli, minilm_l2, tmp_path, activation, key):
    """A CrossEncoder saved with another activation than the sigmoid, wherever its version
    wrote it (config_sentence_transformers.json as sentence-transformers 5 and 6 save it,
    config.json's sentence_transformers key as 4 did, the older
    sbert_ce_default_activation_function of the ms-marco cross-encoders), and a max_length of
    16: eval RERANKER PAIRS scores as CrossEncoder.predict does, fp32, to 1e-5 (a 384-wide
    reduction)."""
    import json

    import torch
    from sentence_transformers import CrossEncoder

    out = tmp_path / "ce"
    fn = getattr(torch.nn, activation)()
    CrossEncoder(str(minilm_l2), num_labels=1, max_length=16, device="cpu",
                 activation_fn=fn).save(str(out))
    name = f"{type(fn).__module__}.{type(fn).__name__}"
    if key != "st6":   # the older places, as those versions saved it
        st = json.loads((out / "config_sentence_transformers.json").read_text())
        st.pop("activation_fn")
        st.pop("model_type", None)
        (out / "config_sentence_transformers.json").write_text(json.dumps(st))
        config = json.loads((out / "config.json").read_text())
        if key == "st4":
            config["sentence_transformers"] = {"activation_fn": name}
        else:
            config["sbert_ce_default_activation_function"] = name
        (out / "config.json").write_text(json.dumps(config))
    ce = CrossEncoder(str(out), device="cpu")
    assert type(ce.activation_fn).__name__ == activation      # the reference reads it so
    pairs = [("who wrote the novel about the whale and the captain", "an author wrote it, a "
              "long book about a whale hunt on a ship in the nineteenth century"),
             ("who wrote the novel about the whale and the captain", "a cat sat on the mat")]
    table = tmp_path / "pairs.tsv"
    table.write_text("query\tpositive\tnegative\n" + f"{pairs[0][0]}\t{pairs[0][1]}\t"
                     f"{pairs[1][1]}\n", encoding="utf-8")
    r = cli("eval", out, table, "--task", "reranking", "--precision", "fp32",
            "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    ours = np.loadtxt(tmp_path / "ev" / "predictions.tsv", skiprows=1)[1:]
    theirs = ce.predict(pairs)
    assert np.abs(ours - theirs).max() < 1e-5, (ours, theirs)
