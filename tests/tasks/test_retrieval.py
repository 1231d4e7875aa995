"""The retrieval family (#53): the losses against their plain definitions, cached negatives
against the uncached gradients, the model directory as sentence-transformers reads it (bert and
modernbert), every ranking metric against trec_eval (pytrec_eval) on a run with ties and
unjudged documents, the streamed search against a brute-force top-k, the worked example of the
README, and the bad inputs."""

import json
import math
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertctl.tasks.retrieval.contrastive import ContrastiveLoss, cosent, info_nce
from bertctl.tasks.retrieval.loss import LOSSES
from bertctl.search import ranking

from helpers import (EXAMPLES, FIXTURES, ROOT, TINY_MODEL, made, one_line_error,
                      tiny_embedder)
from tolerance import EPS32, TINY_FP32 as TINY_TOL, fp32_sum

RET = EXAMPLES / "retrieval"
TEXTS = ["The Normans gave their name to Normandy.", "A fox jumps over the lazy dog.",
         "short", "Computational complexity theory classifies problems by difficulty."]


# ---- the losses, against their definitions ---------------------------------------------------

def _cos(a, b):
    return float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))


def test_in_batch_negatives_equal_their_definition():
    """Query i against every document of the batch (B x K of them): -log softmax at its own
    positive, averaged; symmetric adds each positive against every query."""
    rng = np.random.default_rng(0)
    q, d = rng.normal(size=(4, 8)), rng.normal(size=(4, 3, 8))
    docs = d.reshape(12, 8)
    want = []
    for i in range(4):
        s = np.array([20 * _cos(q[i], x) for x in docs])
        want.append(-(s[3 * i] - math.log(np.exp(s).sum())))
    back = []
    for j in range(4):
        s = np.array([20 * _cos(q[i], d[j, 0]) for i in range(4)])
        back.append(-(s[j] - math.log(np.exp(s).sum())))
    got = info_nce(torch.tensor(q), torch.tensor(d), 20.0)
    sym = info_nce(torch.tensor(q), torch.tensor(d), 20.0, symmetric=True)
    # float32 similarities of size up to 20 summed over 12 candidates: fp32_sum(12, 20)
    assert got.item() == pytest.approx(np.mean(want), abs=fp32_sum(12, 20))
    assert sym.item() == pytest.approx((np.mean(want) + np.mean(back)) / 2, abs=fp32_sum(12, 20))


def test_cosent_equals_its_definition():
    """log(1 + sum over pairs (i, j) with gold_i > gold_j of exp(scale (cos_j - cos_i)))."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    gold = np.array([0.0, 1.5, 1.5, 3.0, 4.2, 5.0])
    cos = [_cos(x, y) for x, y in zip(a, b)]
    terms = [math.exp(20 * (cos[j] - cos[i])) for i in range(6) for j in range(6)
             if gold[i] > gold[j]]
    want = math.log(1 + sum(terms))
    got = cosent(torch.tensor(a), torch.tensor(b), torch.tensor(gold), 20.0)
    assert got.item() == pytest.approx(want, abs=fp32_sum(len(terms), 40))


@pytest.mark.parametrize("loss", ["infonce", "symmetric", "cosent"])
def test_cached_negatives_give_the_gradients_of_the_whole_batch(loss):
    """GradCache (micro-batches of 5 sequences of a batch of 8 x 3, sorted by length) against
    the batch in one pass, on texts of mixed lengths: the same loss and gradients. Tolerance:
    each gradient sums the same float32 terms in another grouping (5-sequence blocks),
    tiny-model sized (TINY_MODEL, 1e-5)."""
    model = ContrastiveLoss(tiny_embedder(), LOSSES[loss])
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(5, 60, (8, 3 if loss != "cosent" else 2, 10), generator=gen)
    mask = (torch.arange(10) < torch.randint(2, 11, ids.shape[:2], generator=gen)[..., None])
    mask = mask.long()
    labels = torch.rand(8) * 5 if loss == "cosent" else None

    def run(cache):
        model.zero_grad()
        model.cache_negatives = cache
        out = model.train()(input_ids=ids, attention_mask=mask, labels=labels)
        out["loss"].backward()
        return out["loss"].item(), {k: p.grad.clone() for k, p in model.named_parameters()
                                    if p.requires_grad}   # (not the frozen pooler)

    whole, cached = run(0), run(5)
    assert cached[0] == pytest.approx(whole[0], abs=TINY_TOL["atol"])
    for name, grad in whole[1].items():
        torch.testing.assert_close(cached[1][name], grad, **TINY_TOL, msg=name)


def test_cached_negatives_replay_the_dropout_of_their_first_pass():
    """With dropout on, the backward's second pass must see the masks of the first: the
    gradient then equals that of a loss on vectors computed with those very masks."""
    model = tiny_embedder()
    model.config.hidden_dropout_prob = 0.3
    for m in model.modules():
        if hasattr(m, "p") and isinstance(m.p, float):
            m.p = 0.3
    trained = ContrastiveLoss(model, LOSSES["infonce"], cache_negatives=4)
    ids = torch.randint(5, 60, (6, 2, 9))
    torch.manual_seed(3)
    out = trained.train()(input_ids=ids)
    out["loss"].backward()
    cached = {k: p.grad.clone() for k, p in model.named_parameters()
                                    if p.requires_grad}   # (not the frozen pooler)
    model.zero_grad()
    torch.manual_seed(3)   # the same masks, micro-batch by micro-batch, with graphs kept
    flat = ids.transpose(0, 1).reshape(-1, 9)   # (the model embeds column by column)
    vectors = torch.cat([model.own_head.embed(model, flat[i:i + 4]) for i in range(0, 12, 4)])
    vectors = vectors.reshape(2, 6, -1).transpose(0, 1)
    info_nce(vectors[:, 0], vectors[:, 1:], trained.scale).backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(cached[name], p.grad, **TINY_TOL, msg=name)


def test_cached_negatives_embed_the_last_micro_batch_once_and_free_it_first():
    """k micro-batches cost k - 1 extra forward passes: the last keeps its graph from the
    first pass, and the backward frees it before any other is embedded again (so the memory
    stays one micro-batch's graph)."""
    from bertctl.tasks.retrieval.cached import cached_encoding

    model = tiny_embedder().train()
    events, live = [], [0]

    class Saved:   # counts the first pass's saved activations still alive
        def __init__(self, t):
            self.t = t.detach()   # (a saved output with its grad_fn would be a cycle)
            live[0] += 1

        def __del__(self):
            live[0] -= 1

    def embed(ids):
        grad, backward = torch.is_grad_enabled(), events and events[-1] != "forward"
        events.append("replay" if backward else "forward")
        if backward:
            assert live[0] == 0, "a graph of the first pass is still held"
        out = model.own_head.embed(model, ids)
        if grad and not backward:
            out.register_hook(lambda g: events.append("last backward"))
        return out

    ids = torch.randint(5, 60, (13, 7))
    with torch.autograd.graph.saved_tensors_hooks(Saved, lambda s: s.t):
        vectors = cached_encoding(embed, [ids], 4)   # micro-batches of 4, 4, 4 and 1 rows
    assert live[0] > 0 and events == ["forward"] * 4
    (vectors ** 2).sum().backward()
    assert events == ["forward"] * 4 + ["last backward"] + ["replay"] * 3
    assert live[0] == 0


# ---- a column in runs of similar length -------------------------------------------------------

def test_length_runs_find_the_cheapest_split():
    """`length_runs` against every way to cut rows sorted by length into runs: the least total
    of each run's rows times its longest row's cost, plus the overhead a run. Integer costs
    below 2^53 are exact in float64, so the totals compare exactly."""
    import itertools

    from bertctl.data.collate import length_runs

    rng = np.random.default_rng(0)
    for _ in range(60):
        n = int(rng.integers(1, 10))
        cost = np.sort(rng.integers(1, 200, n)).astype(float)
        overhead = float(rng.choice([0, 5, 60, 10_000]))

        def total(runs):
            return sum((z - a) * cost[z - 1] + overhead for a, z in runs)

        cheapest = min(total(list(zip((0, *cuts), (*cuts, n))))
                       for k in range(n) for cuts in itertools.combinations(range(1, n), k))
        runs = length_runs(cost, overhead)
        assert runs[0][0] == 0 and runs[-1][1] == n
        assert all(a < z for a, z in runs) and all(runs[i][1] == runs[i + 1][0]
                                                   for i in range(len(runs) - 1))
        assert total(runs) == cheapest


def test_a_column_in_runs_gives_the_loss_and_gradients_of_one_batch(monkeypatch):
    """Queries and passages of mixed lengths: encoded in runs of similar length (on a CPU),
    the loss and every gradient equal those of each column in one padded batch. Tolerance: the
    same float32 products in other row blockings, tiny-model sized (TINY_FP32)."""
    from bertctl.tasks.retrieval import head

    model = ContrastiveLoss(tiny_embedder(), LOSSES["infonce"])
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 60, (12, 2, 30), generator=gen)
    lengths = torch.randint(2, 31, (12, 2), generator=gen)
    lengths[:, 0] = lengths[:, 0] // 4 + 2           # short queries, long and mixed passages
    mask = (torch.arange(30) < lengths[..., None]).long()
    ids = ids * mask
    calls = []
    embed = head.SentenceEmbedding.embed
    monkeypatch.setattr(head.SentenceEmbedding, "embed",
                        lambda self, m, *a: calls.append(a[0].shape) or embed(self, m, *a))

    def run(overhead):
        monkeypatch.setattr(head, "RUN_OVERHEAD", overhead)
        calls.clear()
        model.zero_grad()
        out = model.train()(input_ids=ids, attention_mask=mask)
        out["loss"].backward()
        return out["loss"].item(), len(calls), {
            k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}

    default = head.RUN_OVERHEAD
    whole, runs = run(10 ** 9), run(default)
    assert whole[1] == 2 and runs[1] > 2   # one batch a column; then several runs
    assert runs[0] == pytest.approx(whole[0], abs=TINY_TOL["atol"])
    for name, grad in whole[2].items():
        torch.testing.assert_close(runs[2][name], grad, **TINY_TOL, msg=name)


# ---- ranking ---------------------------------------------------------------------------------

def _random_run(seed=0):
    import random

    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(150)]
    qrels, run = {}, {}
    for q in range(30):
        judged = {d: rng.choice([0, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 12))}
        if q == 3:   # judgements but nothing relevant
            judged = dict.fromkeys(judged, 0)
        qrels[f"q{q}"] = judged
        # ties on purpose (five score values), and retrieved documents nobody judged
        run[f"q{q}"] = {d: rng.choice([0.1, 0.2, 0.3, 0.5, 0.9]) for d in rng.sample(docs, 120)}
    return qrels, run


def test_every_metric_equals_trec_eval_with_ties_and_unjudged_documents():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels, scores = _random_run()
    ranked = {q: ranking.rank(list(s), list(s.values())) for q, s in scores.items()}
    means, per_query = ranking.evaluate({q: [d for d, _ in r] for q, r in ranked.items()}, qrels)
    ref = pytrec_eval.RelevanceEvaluator(
        qrels, {"ndcg_cut.10", "recall.10", "recall.100", "map"}).evaluate(scores)
    # MRR@10 is trec_eval's recip_rank of the run cut to its first 10
    cut = {q: dict(r[:10]) for q, r in ranked.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
    pairs = [("ndcg@10", "ndcg_cut_10", ref), ("recall@10", "recall_10", ref),
             ("recall@100", "recall_100", ref), ("map", "map", ref), ("mrr@10", "recip_rank", rr)]
    for q in qrels:
        for ours, theirs, src in pairs:
            assert per_query[q][ours] == pytest.approx(src[q][theirs], abs=1e-6), (q, ours)
    for ours, theirs, src in pairs:
        assert means[ours] == pytest.approx(np.mean([src[q][theirs] for q in qrels]), abs=1e-6)
    assert per_query["q3"] == dict.fromkeys(ranking.METRICS, 0.0)


def test_the_streamed_search_equals_a_brute_force_top_k(monkeypatch):
    """Blocks of 7 documents and 3 queries, against every score sorted at once."""
    monkeypatch.setattr(ranking, "DOC_BLOCK", 7)
    monkeypatch.setattr(ranking, "QUERY_BLOCK", 3)
    rng = np.random.default_rng(2)
    q, d = rng.normal(size=(10, 6)), rng.normal(size=(50, 6))
    scores, idx = ranking.search(q, [d[:23], d[23:]], k=12)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)   # noqa: E731
    full = unit(q) @ unit(d).T
    want = np.argsort(-full, axis=1)[:, :12]
    np.testing.assert_array_equal(idx, want)
    # float32 cosines (6 terms) against float64's
    np.testing.assert_allclose(scores, np.take_along_axis(full, want, 1), atol=fp32_sum(6))
    assert ranking.search(q, [d[:5]], k=12)[1].shape == (10, 5)   # fewer documents than k


# ---- the stages --------------------------------------------------------------------------------

def _worked_example() -> list[list[str]]:
    """The bertctl lines of docs/commands.md's retrieval example, as written."""
    page = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    block = page.split("### Retrieval")[1].split("```sh")[1].split("```")[0]
    return [shlex.split(x) for x in block.splitlines() if x.startswith("bertctl ")]


def _as_written(words, model, runs):
    """A line of the example with $MODEL and runs/ put where this test keeps them."""
    out = []
    for w in words[1:]:
        w = w.replace("$MODEL", str(model))
        w = str(runs / w[len("runs/"):]) if w.startswith("runs/") else w
        out.append(str(ROOT / w) if w.startswith("examples/") else w)
    return out


@pytest.fixture(scope="module")
def minilm_search(tmp_path_factory, minilm_l2):
    """The docs' worked example: the two-layer MiniLM fine-tuned on the example pairs, by the
    example's own line."""
    from helpers import invoke

    runs = tmp_path_factory.mktemp("runs")
    finetune = _worked_example()[0]
    assert finetune[1] == "finetune"
    r = invoke(*_as_written(finetune, minilm_l2, runs))
    assert r.exit_code == 0, r.stderr
    return runs / "search"


@pytest.mark.slow
def test_the_worked_example_trains_and_is_scored_against_trec_eval(cli, minilm_search, tmp_path,
                                                                   minilm_l2):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    evaluate = _worked_example()[1]
    assert evaluate[1] == "eval"
    r = cli(*_as_written(evaluate, minilm_l2, minilm_search.parent))
    assert r.exit_code == 0, r.stderr
    out = minilm_search.parent / "search-eval"
    assert (out / "metrics.json").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["queries"] == 232 and metrics["documents"] == 173
    assert 0.3 < metrics["ndcg@10"] <= 1
    run: dict[str, dict[str, float]] = {}
    for line in (out / "run.trec").read_text().splitlines():
        q, _, d, rank, score, _ = line.split()
        run.setdefault(q, {})[d] = float(score)
    assert {len(v) for v in run.values()} == {100}
    qrels: dict[str, dict[str, int]] = {}
    for line in (RET / "beir" / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = line.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map", "recall.100"}).evaluate(run)
    for ours, theirs in (("ndcg@10", "ndcg_cut_10"), ("map", "map"), ("recall@100", "recall_100")):
        assert metrics[ours] == pytest.approx(np.mean([v[theirs] for v in ref.values()]), abs=1e-6)
    per_query = (out / "per_query.tsv").read_text().splitlines()
    assert per_query[0].split("\t") == ["query", *ranking.METRICS] and len(per_query) == 233


def _st_equals_embed(cli, model, tmp_path, atol):
    st = pytest.importorskip("sentence_transformers")
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    r = cli("embed", model, data, "--out", tmp_path / "emb", "--precision", "fp32")
    assert r.exit_code == 0, r.stderr
    ours = np.load(tmp_path / "emb" / "vectors-00000.npy")
    theirs = st.SentenceTransformer(str(model), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(ours, theirs, atol=atol, rtol=0)


@pytest.mark.slow
def test_a_fine_tuned_model_is_what_sentence_transformers_encodes(cli, minilm_search, tmp_path):
    """Tolerance: MiniLM (two layers) in float32 two ways (MODEL's reasoning) on unit vectors
    whose entries are about 0.05: 1e-5 absolute."""
    config = json.loads((minilm_search / "config.json").read_text())
    assert config["bertctl_embedding"] == {"pooling": "mean", "normalize": True}
    _st_equals_embed(cli, minilm_search, tmp_path, atol=1e-5)


def test_a_sentence_transformers_model_is_read_with_its_own_pooling(cli, minilm_l2, tmp_path):
    _st_equals_embed(cli, minilm_l2, tmp_path, atol=1e-5)


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
def test_both_architectures_train_cls_pooled_models_sentence_transformers_reads(
        cli, tmp_path, architecture, continuous_data, tiny_pretrained):
    if architecture == "modernbert":
        base = _made_modern(tmp_path, continuous_data)
    else:
        base = tiny_pretrained
    out = tmp_path / "ft"
    r = cli("finetune", base, RET / "train.tsv", "--task", "retrieval", "--steps", "2",
            "--batch-size", "8", "--max-seq-length", "64", "--pooling", "cls", "--no-normalize",
            "--out", out)
    assert r.exit_code == 0, r.stderr
    pooling = json.loads((out / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_cls_token"] and not pooling["pooling_mode_mean_tokens"]
    assert "2_Normalize" not in (out / "modules.json").read_text()
    # tiny models (TINY_MODEL's reasoning) on vectors of size about 1
    _st_equals_embed(cli, out, tmp_path, atol=TINY_TOL["atol"])


def _made_modern(tmp_path, data):
    from helpers import invoke

    out = tmp_path / "modern"
    r = invoke("pretrain", data, "--objective", "mlm", "--architecture", "modernbert",
               "--model-size", "tiny", "--hidden-size", "32", "--num-attention-heads", "2",
               "--intermediate-size", "48", "--max-position-embeddings", "256", "--steps", "2",
               "--batch-size", "8", "--out", out)
    assert r.exit_code == 0, r.stderr
    return out


def test_scored_pairs_train_cosent_and_score_like_sentence_transformers(cli, minilm_l2,
                                                                        tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    sts = FIXTURES / "glue" / "STS-B"
    r = cli("eval", minilm_l2, sts / "dev.tsv", "--task", "glue/sts-b-cosine",
            "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    ours = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    rows = [x.split("\t") for x in (sts / "dev.tsv").read_text().splitlines()]
    head = rows[0]
    cols = [head.index(c) for c in ("sentence1", "sentence2", "score")]
    a, b, s = zip(*[(x[cols[0]], x[cols[1]], float(x[cols[2]])) for x in rows[1:]])
    theirs = EmbeddingSimilarityEvaluator(list(a), list(b), list(s))(
        st.SentenceTransformer(str(minilm_l2), device="cpu"))
    # correlations of float32 cosines of 100 pairs: ranks agree; Pearson to float32's
    assert ours["spearman"] == pytest.approx(theirs["spearman_cosine"], abs=1e-6)
    assert ours["pearson"] == pytest.approx(theirs["pearson_cosine"], abs=100 * EPS32)
    r = cli("finetune", minilm_l2, sts, "--task", "glue/sts-b-cosine", "--steps", "2",
            "--batch-size", "8", "--out", tmp_path / "ft")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "ft" / "artifact.json").read_text())["config"]["task"] == \
        "glue/sts-b-cosine"


def test_simcse_from_a_plain_text_file(cli, tiny_pretrained, tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(TEXTS * 4) + "\n\n", encoding="utf-8")
    r = cli("finetune", tiny_pretrained, text, "--task", "retrieval", "--steps", "2",
            "--batch-size", "4", "--cache-negatives", "3", "--out", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    records = [json.loads(x) for x in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(x["loss"]) and x["loss"] > 0 for x in records if "loss" in x)


# ---- bad input ----------------------------------------------------------------------------

def _beir(tmp_path, edit):
    d = tmp_path / "beir"
    shutil.copytree(RET / "beir", d)
    edit(d)
    return d


def _append(path: Path, text: str):
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


BAD = {
    "unknown document": (lambda d: _append(d / "qrels" / "test.tsv", "56e16182e3433e1400422e28"
                                                                      "\tnope-1\t1\n"),
                         "test.tsv", "'nope-1' is not in"),
    "unknown query": (lambda d: _append(d / "qrels" / "test.tsv", "q-none\tNormans-0\t1\n"),
                      "test.tsv", "'q-none' is not in"),
    "duplicate document": (lambda d: _append(d / "corpus.jsonl", json.dumps(
        {"_id": "Normans-0", "text": "again"}) + "\n"), "corpus.jsonl", "appears twice"),
    "duplicate query": (lambda d: _append(d / "queries.jsonl", json.dumps(
        {"_id": "56ddde6b9a695914005b9628", "text": "again"}) + "\n"), "queries.jsonl",
                        "appears twice"),
    "empty text": (lambda d: _append(d / "corpus.jsonl", json.dumps(
        {"_id": "blank", "title": "", "text": "  "}) + "\n"), "corpus.jsonl", "has no text"),
    "no documents": (lambda d: (d / "corpus.jsonl").write_text(""), "corpus.jsonl",
                     "no documents"),
    "no corpus": (lambda d: (d / "corpus.jsonl").unlink(), "corpus.jsonl", "not found"),
    "bad judgement": (lambda d: _append(d / "qrels" / "test.tsv", "x\n"), "test.tsv",
                      "line 234"),
    # #63 class 4: judgements and ids exact or refused
    "an infinite score": (lambda d: _append(d / "qrels" / "test.tsv",
                                            "56e16182e3433e1400422e28\tNormans-1\tinf\n"),
                          "test.tsv: line 234", "'inf' is not an integer grade"),
    "a fractional score": (lambda d: _append(d / "qrels" / "test.tsv",
                                             "56e16182e3433e1400422e28\tNormans-1\t0.5\n"),
                           "test.tsv: line 234", "'0.5' is not an integer grade"),
    "an overflowing score": (lambda d: _append(d / "qrels" / "test.tsv",
                                               "56e16182e3433e1400422e28\tNormans-1\t1e30\n"),
                             "test.tsv: line 234", "'1e30' is not an integer grade"),
    "nothing relevant": (lambda d: _rewrite(d / "qrels" / "test.tsv",
                                            lambda t: t.replace("\t1\n", "\t0\n")),
                         "test.tsv", "no judged query has a relevant document"),
    "a trailing tab": (lambda d: _append(d / "qrels" / "test.tsv",
                                         "56e16182e3433e1400422e28\tNormans-1\t1\t\n"),
                       "test.tsv: line 234", "an empty field"),
    "a document id with a space": (lambda d: _append(d / "corpus.jsonl", json.dumps(
        {"_id": "two words", "text": "a text"}) + "\n"), "corpus.jsonl", "holds whitespace"),
    "a null id": (lambda d: _append(d / "corpus.jsonl", json.dumps(
        {"_id": None, "text": "a text"}) + "\n"), "corpus.jsonl", "not None"),
    "a number as text": (lambda d: _append(d / "corpus.jsonl", json.dumps(
        {"_id": "n-1", "text": 42}) + "\n"), "corpus.jsonl", "text must be a string"),
}


def _rewrite(path: Path, change):
    path.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")


def test_a_byte_order_mark_and_trec_qrels_are_read(cli, minilm_l2, tmp_path):
    """Harmless variants are accepted: a UTF-8 BOM before the corpus and the judgements, and
    TREC's four-field qrels (query, iteration, document, score): the same metrics, every
    query and document read (a BOM left in would be a JSON error or a lost first id)."""
    def edit(d):
        for name in ("corpus.jsonl", "qrels/test.tsv"):
            (d / name).write_bytes(b"\xef\xbb\xbf" + (d / name).read_bytes())
        lines = (d / "qrels" / "test.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
        (d / "qrels" / "trec.tsv").write_text("".join(
            "\t".join([q, "0", c, s]) + "\n" for q, c, s in (x.split("\t") for x in lines)))
    data = _beir(tmp_path, edit)
    figures = []
    for i, given in enumerate((data, data / "qrels" / "trec.tsv")):
        # (the two-layer model scores 0.44 here)
        r = cli("eval", minilm_l2, given, "--task", "retrieval", "--precision", "fp32",
                "--expect", "ndcg@10>=0.4", "--out", tmp_path / f"ev{i}")
        assert r.exit_code == 0, r.stderr
        figures.append(json.loads((tmp_path / f"ev{i}" / "metrics.json").read_text()))
    assert figures[0] == figures[1] and figures[0]["queries"] == 232   # (none lost to a BOM)


def test_an_eval_of_a_judgements_file_records_the_corpus_and_queries_it_reads(cli, minilm_l2,
                                                                              tmp_path):
    """eval MODEL BEIR/qrels/test.tsv reads the directory's corpus and queries too: each text
    replaced (the same judgements), the rerun is not "up to date" with the old metrics and a
    fresh --out gets another id."""
    data = _beir(tmp_path, lambda d: None)
    qrels = data / "qrels" / "test.tsv"
    first = tmp_path / "ev"
    r = cli("eval", minilm_l2, qrels, "--task", "retrieval", "--precision", "fp32",
            "--out", first)
    assert r.exit_code == 0, r.stderr
    before = json.loads((first / "artifact.json").read_text())
    assert {i["role"] for i in before["inputs"]} >= {"data", "data-corpus", "data-queries"}
    corpus = data / "corpus.jsonl"
    rows = [json.loads(x) for x in corpus.read_text().splitlines()]
    corpus.write_text("".join(json.dumps({**d, "text": "replaced " + d["text"][::-1]}) + "\n"
                              for d in rows))
    r = cli("eval", minilm_l2, qrels, "--task", "retrieval", "--precision", "fp32",
            "--out", first)
    assert r.exit_code == 2 and "--force" in r.stderr, r.stderr   # another artifact now
    fresh = tmp_path / "fresh"
    assert cli("eval", minilm_l2, qrels, "--task", "retrieval", "--precision", "fp32",
               "--out", fresh).exit_code == 0
    after = json.loads((fresh / "artifact.json").read_text())
    assert after["id"] != before["id"]
    assert after["metrics"]["ndcg@10"] != before["metrics"]["ndcg@10"]


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_beir_set_is_one_line_naming_the_file(cli, minilm_l2, tmp_path, case):
    edit, name, words = BAD[case]
    data = _beir(tmp_path, edit)
    r = cli("eval", minilm_l2, data, "--task", "retrieval", "--out", tmp_path / "ev")
    # one error line (the log of the model loaded may precede it: the files are read as they
    # are embedded, a part at a time), exit 2, nothing written
    assert r.exit_code == 2, r.stderr
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and name in errors[0] and words in errors[0], r.stderr
    assert not (tmp_path / "ev").exists()


def test_scores_given_to_the_in_batch_loss_are_refused(cli, minilm_l2, tmp_path):
    r = cli("finetune", minilm_l2, FIXTURES / "glue" / "STS-B", "--task", "glue/sts-b-cosine",
            "--loss", "infonce", "--steps", "1", "--out", tmp_path / "m")
    one_line_error(r, "infonce", "CoSENT")
    assert not (tmp_path / "m").exists()


def test_a_classifier_is_not_scored_as_a_retrieval_model(cli, tiny_pretrained, tmp_path):
    clf = made(tmp_path_factory_like(tmp_path), "clf", "finetune", tiny_pretrained,
                FIXTURES / "glue" / "SST-2", "--task", "glue/sst2", "--steps", "1",
                "--batch-size", "4", *[])
    r = cli("eval", clf, RET / "beir", "--task", "retrieval", "--out", tmp_path / "ev")
    one_line_error(r, str(clf), "retrieval reads an embedding model or an encoder")


def tmp_path_factory_like(tmp_path):
    class Factory:
        def mktemp(self, name):
            p = tmp_path / name
            p.mkdir()
            return p
    return Factory()


_ = TINY_MODEL   # (the tiny size flags, for reference: the fixtures' models use them)


@pytest.mark.slow
def test_an_export_is_evaluated_the_same_way(cli, minilm_search, tmp_path):
    """The ONNX graph embeds one text a row; its search scores as the PyTorch model's. The
    metrics are of rankings: float32 scores from two runtimes (MODEL's 1e-4 apart) may swap
    two documents whose cosines differ by less, so the figures agree to 0.01, not bitwise."""
    pytest.importorskip("onnxruntime")
    assert cli("export", minilm_search, "--out", tmp_path / "onnx").exit_code == 0
    figures = {}
    for name, model in (("onnx", tmp_path / "onnx"), ("torch", minilm_search)):
        r = cli("eval", model, RET / "beir", "--out", tmp_path / f"ev-{name}")
        assert r.exit_code == 0, r.stderr
        figures[name] = json.loads((tmp_path / f"ev-{name}" / "metrics.json").read_text())
    for metric in ranking.METRICS:
        assert figures["onnx"][metric] == pytest.approx(figures["torch"][metric], abs=0.01)


def test_a_batch_of_one_has_no_negatives_and_is_refused(cli, tiny_pretrained, tmp_path):
    r = cli("finetune", tiny_pretrained, RET / "train.tsv", "--task", "retrieval",
            "--batch-size", "1", "--steps", "2", "--out", tmp_path / "m")
    assert r.exit_code == 2, r.stderr
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "--batch-size 1" in errors[0], r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []   # no run directory left


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_a_model_saved_by_this_sentence_transformers_is_read_with_its_pooling(
        cli, minilm_l2, tmp_path, pooling):
    """The installed sentence-transformers' own save (6.x writes `pooling_mode`, earlier
    versions a flag per mode: all-MiniLM-L6-v2's files are the older form)."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers import models

    model = st.SentenceTransformer(str(minilm_l2), device="cpu")
    if pooling == "cls":   # its encoder with [CLS] pooling, no Normalize
        model = st.SentenceTransformer(modules=[model[0], models.Pooling(
            model[0].get_word_embedding_dimension(), pooling_mode="cls")], device="cpu")
    model.save(str(tmp_path / "st"))
    _st_equals_embed(cli, tmp_path / "st", tmp_path, atol=1e-5)


def test_simcse_needs_dropout(cli, tmp_path, continuous_data):
    """A ModernBERT has no dropout by default: its two views of a text would be one and the
    same, and SimCSE would learn nothing but to spread the vectors. Refused; --dropout gives
    the noise for training (the saved config keeps the architecture's rates)."""
    modern = _made_modern(tmp_path, continuous_data)
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(TEXTS * 4) + "\n", encoding="utf-8")
    args = ("finetune", modern, text, "--task", "retrieval", "--steps", "2", "--batch-size", "4")
    r = cli(*args, "--out", tmp_path / "m")
    assert r.exit_code == 2 and "--dropout" in r.stderr, r.stderr
    assert not (tmp_path / "m").exists()
    r = cli(*args, "--dropout", "0.1", "--out", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "m" / "config.json").read_text())["mlp_dropout"] == 0.0


@pytest.mark.slow
def test_embed_writes_what_a_search_index_needs(cli, minilm_search, tmp_path):
    """The corpus's vectors normalised (the model says so) and its ids beside them."""
    import pyarrow.parquet as pq

    out = tmp_path / "emb"
    r = cli("embed", minilm_search, RET / "beir" / "corpus.jsonl", "--text-column", "text",
            "--id-column", "_id", "--out", out)
    assert r.exit_code == 0, r.stderr
    index = pq.read_table(out / "index.parquet").to_pylist()
    ids = [json.loads(x)["_id"] for x in (RET / "beir" / "corpus.jsonl").read_text().splitlines()]
    assert [row["id"] for row in index] == ids
    vectors = np.load(out / "vectors-00000.npy")
    # unit vectors in float32: 384 squares summed, fp32_sum(384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=fp32_sum(384))
    r = cli("embed", minilm_search, RET / "beir" / "corpus.jsonl", "--text-column", "text",
            "--id-column", "nope", "--out", tmp_path / "bad")
    assert r.exit_code == 2 and "no column 'nope'" in r.stderr


def test_each_validation_pass_is_searched_anew():
    """The dev examples are the same object at every validation of a fine-tuning: each pass's
    search is made from its own predictions (a ranking once cached on the examples reported the
    first pass's again at every later one; #65 item 6: `results` returns it instead)."""
    from bertctl.tasks import get, make_task_spec

    family, spec = get("retrieval"), make_task_spec("retrieval")
    examples = family.read(spec, RET / "train.tsv")
    rng = np.random.default_rng(0)
    first = rng.normal(size=(len(examples), 2, 8)).astype(np.float32)
    # every query exactly its paragraph's vector (one vector a distinct paragraph): perfect
    paragraph = {k: rng.normal(size=8) for k in {row[1] for row in examples.keys}}
    second = np.stack([[paragraph[row[1]]] * 2 for row in examples.keys]).astype(np.float32)
    a, b = (family.score(family.results(p, examples, spec), examples, spec, None)
            for p in (first, second))
    assert a["ndcg@10"] < 0.5 and b["ndcg@10"] == pytest.approx(1.0)


def _cosine_mse(e, scores, scale):
    """sentence-transformers' CosineSimilarityLoss: the squared error between each pair's
    cosine and its score scaled to [0, 1] (STS-B's 0-5)."""
    cos = torch.nn.functional.cosine_similarity(e[:, 0].float(), e[:, 1].float(), dim=-1)
    _cosine_mse.calls += 1
    return torch.nn.functional.mse_loss(cos, scores.float().reshape(-1) / 5)


_cosine_mse.calls = 0


def test_a_loss_registered_from_a_test_module_trains_through_the_cli(cli, tiny_pretrained,
                                                                     tmp_path):
    """One `LOSSES.register` from outside bertctl: --loss takes its name, the job trains the
    model with it (its value the definition's, summed over no Matryoshka sizes), the manifest
    records it; an unknown name is one line naming the known ones."""
    from bertctl.tasks.retrieval.loss import Loss

    plugin = LOSSES.register(Loss("cosine_mse", "cosines onto scores / 5", _cosine_mse,
                                  "scores"))
    try:
        module = ContrastiveLoss(tiny_embedder(), plugin).train()
        ids = torch.randint(5, 60, (4, 2, 9))
        scores = torch.tensor([0.0, 1.5, 3.0, 5.0])
        out = module(input_ids=ids, labels=scores)
        e = out["embeddings"]
        cos = torch.nn.functional.cosine_similarity(e[:, 0], e[:, 1], dim=-1)
        torch.testing.assert_close(out["loss"], ((cos - scores / 5) ** 2).mean())
        r = cli("finetune", tiny_pretrained, FIXTURES / "glue" / "STS-B", "--task",
                "glue/sts-b-cosine", "--loss", "cosine_mse", "--steps", "2", "--batch-size",
                "4", "--max-seq-length", "32", "--out", tmp_path / "m")
        assert r.exit_code == 0, r.stderr
        assert _cosine_mse.calls >= 3
        assert json.loads((tmp_path / "m" / "artifact.json").read_text())["config"][
            "loss"] == "cosine_mse"
    finally:
        LOSSES.pop("cosine_mse")
    r = cli("finetune", tiny_pretrained, FIXTURES / "glue" / "STS-B", "--task",
            "glue/sts-b-cosine", "--loss", "cosine_mse", "--steps", "1", "--out", tmp_path / "x")
    one_line_error(r, "cosine_mse", "infonce")
    assert not (tmp_path / "x").exists()
