"""`bertctl search` (#64): the nearest documents of an embeddings artifact for each query, the
query embedded by the index's own model, as JSON lines; the same hits as a brute-force cosine
search over the index's vectors; an index of another model or of pooled hidden states, and
empty queries, refused in one line."""

import json

import numpy as np
import pytest

from helpers import EXAMPLES, one_line_error, run_bertctl, worked_example

CORPUS = EXAMPLES / "retrieval" / "beir" / "corpus.jsonl"
QUERIES = ["Who were the Normans?", "What is computational complexity theory?",
           "In what country is Normandy located?"]


@pytest.fixture
def index(example_index):
    return example_index


def test_the_hits_are_a_brute_force_cosine_search_over_the_index(cli, index, minilm_l2,
                                                                 tmp_path):
    """The queries embedded by `embed --prompt-name`-less own vectors (the model has no
    prompts) and every document's cosine by numpy: the same ids in the same order where two
    scores are not within float32 rounding of each other (1e-5: unit vectors of 384 values,
    fp32_sum(384) = 5e-5 worst case, about 2e-6 as seen), the same scores to 1e-5."""
    import pyarrow.parquet as pq

    args = [a for q in QUERIES for a in ("--query", q)]
    r = run_bertctl("search", index, *args, "--top-k", "5", "--precision", "fp32",
                    timeout=300)
    assert r.returncode == 0, r.stderr
    hits = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(hits) == 15 and set(hits[0]) == {"query", "rank", "id", "score", "text"}
    data = tmp_path / "q.txt"
    data.write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
    r2 = cli("embed", minilm_l2, data, "--precision", "fp32", "--out", tmp_path / "q")
    assert r2.exit_code == 0, r2.stderr
    q = np.load(tmp_path / "q" / "vectors-00000.npy")
    d = np.load(index / "vectors-00000.npy")
    ids = pq.read_table(index / "index.parquet").column("id").to_pylist()
    scores = q @ d.T
    for n, qid in enumerate(["q1", "q2", "q3"]):
        mine = [h for h in hits if h["query"] == qid]
        order = np.argsort(-scores[n])[:5]
        np.testing.assert_allclose([h["score"] for h in mine], scores[n][order], atol=1e-5)
        for h, j in zip(mine, order):
            if h["id"] != ids[j]:
                assert abs(scores[n][ids.index(h["id"])] - scores[n][j]) < 1e-5
    texts = {json.loads(x)["_id"]: json.loads(x)["text"] for x in CORPUS.read_text().splitlines()}
    assert all(h["text"] == texts[h["id"]] for h in hits)


def test_search_reads_only_the_row_groups_of_its_hits(cli, minilm_l2, index, tmp_path,
                                                      monkeypatch):
    """The index's ids, texts and stored pieces are read for the hits alone, from the row
    groups (one a chunk of embed's input) that hold them: a search of a large corpus never
    holds a whole column. Chunks of 16 rows make the example corpus's 173 eleven groups, and
    --shard-rows 40 (a shard closes after the chunk that reaches 40) four pairs of shards
    (vectors, pieces): the reordering over them is
    the one with the texts embedded again (an index of one shard and no pieces)."""
    import functools

    import pyarrow.parquet as pq

    from bertctl import frozen_features

    monkeypatch.setattr(frozen_features, "read_chunks",
                        functools.partial(frozen_features.read_chunks, rows=16))
    r = cli("embed", minilm_l2, CORPUS, "--text-column", "text", "--id-column", "_id",
            "--store-text", "--store-pieces", "--shard-rows", "40", "--precision", "fp32",
            "--out", tmp_path / "idx")
    assert r.exit_code == 0, r.stderr
    assert pq.ParquetFile(tmp_path / "idx" / "index.parquet").metadata.num_row_groups == 11
    assert len(list((tmp_path / "idx").glob("pieces-*.npy"))) == 4 == len(
        list((tmp_path / "idx").glob("vectors-*.npy")))   # 48, 48, 48 and 29 rows
    row_of = {d: i for i, d in enumerate(
        pq.read_table(tmp_path / "idx" / "index.parquet").column("id").to_pylist())}
    read = []
    original = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, g, **k: read.append(g) or original(self, g, **k))
    groups = {}
    for top, extra in ((2, []), (5, []), (2, ["--rerank-scoring", "maxsim", "--rerank-depth",
                                               "5"])):
        read.clear()
        r = cli("search", tmp_path / "idx", "--query", "Who were the Normans?", "--top-k",
                str(top), "--precision", "fp32", *extra)
        assert r.exit_code == 0, r.stderr
        groups[top, bool(extra)] = {row_of[json.loads(x)["id"]] // 16
                                    for x in r.stdout.splitlines()}
        # plain: the hits' ids and texts; reordered: the first five's pieces, then those
        assert set(read) == (groups[5, False] if extra else groups[top, bool(extra)])
    assert groups[2, True] <= groups[5, False]
    ask = ("--query", "Who were the Normans?", "--query", "What is computational complexity "
           "theory?", "--top-k", "3", "--rerank-scoring", "maxsim", "--rerank-depth", "40",
           "--precision", "fp32")
    stored = [json.loads(x) for x in cli("search", tmp_path / "idx", *ask).stdout.splitlines()]
    again = [json.loads(x) for x in cli("search", index, *ask, "--rerank", minilm_l2
                                        ).stdout.splitlines()]
    assert [h["id"] for h in stored] == [h["id"] for h in again] and len(stored) == 6
    # fp32 both, the same pieces computed in other batches: seen ~1e-6; hits keep 6 decimals
    assert max(abs(a["score"] - b["score"]) for a, b in zip(stored, again)) < 1e-5


def test_what_search_cannot_answer_is_one_line(cli, index, minilm_l2, tiny_pretrained,
                                              tmp_path):
    pooled = tmp_path / "pooled"
    r = cli("embed", minilm_l2, CORPUS, "--text-column", "text", "--pool", "mean",
            "--out", pooled)
    assert r.exit_code == 0, r.stderr
    empty = tmp_path / "q.txt"
    empty.write_text("a query\n\n", encoding="utf-8")
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"a query\ncaf\xff\n")
    for args, words in (((pooled, "--query", "x"), "not an embedding model's own vectors"),
                        ((index, "--queries", latin), f"{latin}: line 2: not UTF-8 text"),
                        ((index, "--query", "x", "--model", tiny_pretrained),
                         "is not the model that built"),
                        ((index, "--queries", empty), "line 2: an empty query"),
                        ((index,), "give --query TEXT")):
        one_line_error(cli("search", *args), words)


def test_rank_fusion_is_its_plain_definition():
    from bertctl.search.lexical import RRF_K, fuse

    a = {"q": ["d1", "d2", "d3"]}
    b = {"q": ["d3", "d4", "d1"]}
    run, scores = fuse([a, b], 3)
    want = {"d1": 1 / (RRF_K + 1) + 1 / (RRF_K + 3), "d2": 1 / (RRF_K + 2),
            "d3": 1 / (RRF_K + 3) + 1 / (RRF_K + 1), "d4": 1 / (RRF_K + 2)}
    best = sorted(want.items(), key=lambda p: (-p[1], p[0]))[:3]
    assert run["q"] == [d for d, _ in best]
    assert scores["q"] == pytest.approx([s for _, s in best])
    # two orders of one list: d3 and d1 tie at the top (1/61 + 1/63 each, above d2's
    # 2/62), d1 first by id, d3 first in the first run
    one, other = {"q": ["d3", "d2", "d1"]}, {"q": ["d1", "d2", "d3"]}
    assert fuse([one, other], 3)[0]["q"] == ["d1", "d3", "d2"]
    assert fuse([one, other], 3, ties="first")[0]["q"] == ["d3", "d1", "d2"]


def test_eval_scores_bm25_and_the_hybrid_beside_the_model(cli, minilm_l2, tmp_path):
    """bm25/ is bm25s's own ranking of the BEIR texts (title and text, no prompt) scored by
    trec_eval's code (pytrec_eval): the reference, not our expectation."""
    bm25s = pytest.importorskip("bm25s")
    pytrec_eval = pytest.importorskip("pytrec_eval")
    beir = EXAMPLES / "retrieval" / "beir"
    r = cli("eval", minilm_l2, beir, "--bm25", "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    docs = [json.loads(x) for x in CORPUS.read_text().splitlines()]
    texts = [f"{d['title']} {d['text']}".strip() if d.get("title") else d["text"] for d in docs]
    qrels = {}
    for line in (beir / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = line.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    queries = [json.loads(x) for x in (beir / "queries.jsonl").read_text().splitlines()]
    queries = [q for q in queries if q["_id"] in qrels]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False),
                    show_progress=False)
    found, scores = retriever.retrieve(bm25s.tokenize([q["text"] for q in queries],
                                                      stopwords="en", show_progress=False),
                                       k=100, show_progress=False)
    run = {q["_id"]: {docs[j]["_id"]: float(s) for j, s in zip(f, sc)}
           for q, f, sc in zip(queries, found, scores)}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    assert metrics["bm25/ndcg@10"] == pytest.approx(
        np.mean([v["ndcg_cut_10"] for v in ref.values()]), abs=1e-6)
    assert 0 < metrics["hybrid/ndcg@10"] <= 1
    r = cli("eval", minilm_l2, EXAMPLES / "retrieval" / "train.tsv", "--task", "retrieval",
            "--bm25", "--out", tmp_path / "pairs")
    assert r.exit_code == 2 and "--bm25 scores a BEIR set" in r.stderr


@pytest.mark.slow
def test_the_search_worked_example_runs_as_written(cli, minilm_l2, tmp_path):
    """docs/commands.md's second retrieval example, line by line ($MODEL and runs/ put where
    this test keeps them, and examples/retrieval/ cut to 60 test queries and 96 pairs: the
    lines' plumbing, at a quarter of the evaluations' cost)."""
    from test_pipelines import _small_search_set

    pytest.importorskip("bm25s")
    _small_search_set(EXAMPLES / "retrieval", tmp_path / "ret", queries=60, pairs=96)
    lines = worked_example("### Search, round two")
    searched = []
    assert [w[1] for w in lines] == ["mine", "finetune", "eval", "embed", "index", "search",
                                     "search", "finetune", "eval", "eval", "finetune", "eval",
                                     "mine", "finetune"]
    for words in lines:
        args = []
        for w in words[1:]:
            w = w.replace("$MODEL", str(minilm_l2))
            w = str(tmp_path / w[len("runs/"):]) if w.startswith("runs/") else w
            w = str(tmp_path / "ret" / w[len("examples/retrieval/"):]) if w.startswith(
                "examples/retrieval/") else w
            args.append(str(EXAMPLES.parent / w) if w.startswith("examples/") else w)
        r = cli(*args)
        assert r.exit_code == 0, (words, r.stderr)
        if words[1] == "search":
            hits = [json.loads(x) for x in r.stdout.splitlines()]
            assert len(hits) == 3
            searched.append(hits)
    plain, late = searched
    assert plain[0]["id"].startswith("Normans")
    r = cli("search", tmp_path / "hnsw", "--query", "Who were the Normans?", "--top-k", "10")
    ten = [json.loads(x)["id"] for x in r.stdout.splitlines()]
    assert {h["id"] for h in late} <= set(ten)   # the first ten, reordered: the best three
    assert [h["score"] for h in late] == sorted((h["score"] for h in late), reverse=True)
    metrics = json.loads((tmp_path / "search-mined-eval" / "metrics.json").read_text())
    assert {"ndcg@10", "dim128/ndcg@10", "bm25/ndcg@10", "hybrid/ndcg@10"} <= set(metrics)
    reranked = json.loads((tmp_path / "reranked" / "metrics.json").read_text())
    assert {"ndcg@10", "rerank/ndcg@10", "rerank/queries_per_second"} <= set(reranked)
    late = json.loads((tmp_path / "late" / "metrics.json").read_text())
    assert late["rerank/scoring"] == "maxsim" and "rerank/ndcg@10" in late
    head = json.loads((tmp_path / "late-head" / "metrics.json").read_text())
    assert head["ndcg@10"] == late["ndcg@10"]   # the first stage unchanged by its late head
    assert head["rerank/scoring"] == "maxsim"
    taught = (tmp_path / "taught" / "pairs.jsonl").read_text().splitlines()[0]
    assert "score_negative_1" in json.loads(taught)


def test_a_reader_that_stops_early_ends_search_quietly(example_index, tmp_path):
    """`bertctl search ... | head -1`: the pipe closed after the first line ends the command
    with exit 0 and no BrokenPipeError on stderr."""
    import subprocess
    import sys

    from helpers import ROOT

    queries = tmp_path / "q.txt"
    queries.write_text("".join(f"query {i} about the normans\n" for i in range(300)))
    proc = subprocess.Popen([sys.executable, "-m", "bertctl", "search", str(example_index),
                             "--queries", str(queries), "--top-k", "100"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                            env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert json.loads(first)["rank"] == 1
    assert "BrokenPipe" not in err and "Traceback" not in err


def test_hits_of_equal_score_are_in_evals_order(cli, minilm_l2, tmp_path):
    """Duplicate texts score alike: search prints them as eval ranks ties (the document id,
    descending), whatever order the index holds them in."""
    corpus = tmp_path / "corpus.jsonl"
    same = "The Normans were the people who gave their name to Normandy."
    rows = [("b-2", same), ("a-9", "A recipe for bread."), ("c-1", same), ("a-1", same),
            ("z-0", "Ships of the line.")]
    corpus.write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in rows))
    index = tmp_path / "index"
    assert cli("embed", minilm_l2, corpus, "--text-column", "text", "--id-column", "_id",
               "--precision", "fp32", "--out", index).exit_code == 0
    r = cli("search", index, "--query", "Who were the Normans?", "--top-k", "3")
    assert r.exit_code == 0, r.stderr
    hits = [json.loads(x) for x in r.stdout.splitlines()]
    assert len({h["score"] for h in hits}) == 1
    assert [h["id"] for h in hits] == ["c-1", "b-2", "a-1"]
