"""`bertctl index` (#64): an embeddings artifact made searchable. Exact search stays the default
below the size threshold (no faiss file, the same hits as the embeddings searched directly);
above it a faiss index whose recorded recall@k is the definition's (the share of exact search's
first k among the index's first k, each query's own row left out), searched by `bertctl search`;
bad input refused in one line."""

import json

import numpy as np
import pytest

from helpers import EXAMPLES, one_line_error

faiss = pytest.importorskip("faiss", reason="pip install 'bertctl[search]'")
from bertctl.search import approximate, ranking  # noqa: E402
CORPUS = EXAMPLES / "retrieval" / "beir" / "corpus.jsonl"
QUERIES = ["--query", "Who were the Normans?", "--query", "What is computational complexity?"]


@pytest.fixture
def embedded(example_index):
    return example_index


def _hits(r):
    assert r.exit_code == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines()]


def _clusters(n=3000, dim=32, seed=0):
    """Vectors around 30 centres: structure an approximate index can use, as real ones have."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((30, dim))
    return (centres[rng.integers(0, 30, n)] + 0.3 * rng.standard_normal((n, dim))).astype(
        np.float32)


def test_exact_is_the_default_below_the_threshold(cli, embedded, tmp_path):
    r = cli("index", embedded, "--out", tmp_path / "ix")
    assert r.exit_code == 0, r.stderr
    manifest = json.loads((tmp_path / "ix" / "artifact.json").read_text())
    assert manifest["stats"]["index"] == "exact" and manifest["stats"]["vectors"] == 173
    assert not (tmp_path / "ix" / approximate.FILE).exists()
    direct = _hits(cli("search", embedded, *QUERIES, "--top-k", "5", "--precision", "fp32"))
    assert _hits(cli("search", tmp_path / "ix", *QUERIES, "--top-k", "5",
                     "--precision", "fp32")) == direct


def test_an_ivf_index_scanning_every_list_finds_what_exact_search_finds(cli, embedded,
                                                                        tmp_path):
    """IVF-flat probing all its lists scores every vector: exact search's hits, the scores to
    1e-5 (unit float32 vectors of 384 values: the same products summed in another order)."""
    r = cli("index", embedded, "--kind", "ivf", "--lists", "2", "--probe", "2",
            "--out", tmp_path / "ivf")
    assert r.exit_code == 0, r.stderr
    stats = json.loads((tmp_path / "ivf" / "artifact.json").read_text())["stats"]
    assert stats["index"] == "ivf" and stats["lists"] == 2 and stats["recall@10"] == 1.0
    direct = _hits(cli("search", embedded, *QUERIES, "--top-k", "5", "--precision", "fp32"))
    found = _hits(cli("search", tmp_path / "ivf", *QUERIES, "--top-k", "5",
                      "--precision", "fp32"))
    assert [h["id"] for h in found] == [h["id"] for h in direct]
    np.testing.assert_allclose([h["score"] for h in found], [h["score"] for h in direct],
                               atol=1e-5)


def test_a_binary_index_is_searched_and_rescored_through_the_cli(cli, embedded, tmp_path):
    """--quantize binary: written and read as faiss's binary index; search's scores are the
    documents' cosines as exact search gives them (rescored with the stored vectors), best
    first, the first hit exact search's (the rest where the 4 x k Hamming candidates held
    them: here one of the queries' second is not among them)."""
    r = cli("index", embedded, "--kind", "ivf", "--quantize", "binary", "--lists", "2",
            "--probe", "2", "--out", tmp_path / "bin")
    assert r.exit_code == 0, r.stderr
    stats = json.loads((tmp_path / "bin" / "artifact.json").read_text())["stats"]
    assert stats["quantize"] == "binary" and 0 < stats["recall@10"] <= 1
    every = _hits(cli("search", embedded, *QUERIES, "--top-k", "173", "--precision", "fp32"))
    exact = {(h["query"], h["id"]): h["score"] for h in every}
    found = _hits(cli("search", tmp_path / "bin", *QUERIES, "--top-k", "3",
                      "--precision", "fp32"))
    assert len(found) == 6
    np.testing.assert_allclose([h["score"] for h in found],
                               [exact[h["query"], h["id"]] for h in found], atol=1e-5)
    for q in ("q1", "q2"):
        mine = [h for h in found if h["query"] == q]
        assert [h["score"] for h in mine] == sorted((h["score"] for h in mine), reverse=True)
        assert mine[0]["id"] == next(h["id"] for h in every if h["query"] == q)


def test_recall_is_the_share_of_exact_searchs_first_k_found():
    """A stand-in index returning exact search's own lists with the last place emptied: every
    query finds k - 1 of exact search's first k (its own row, first in both, left out)."""
    v = _clusters(500)
    blocks = [v[:200], v[200:]]

    class Lossy:
        def search(self, q, k):
            s, i = ranking.search(q, blocks, k)
            i[:, -1] = -1
            return s, i

    measured = approximate.recall(Lossy(), blocks, 10, 50, seed=0)
    assert measured["recall@10"] == pytest.approx(9 / 10)
    assert measured["recall_queries"] == 50


@pytest.mark.parametrize("kind,quantize", [("ivf", "none"), ("ivf", "int8"), ("ivf", "binary"),
                                           ("hnsw", "none"), ("hnsw", "int8"),
                                           ("hnsw", "binary")])
def test_the_approximate_indexes_recall_on_clustered_vectors(kind, quantize):
    """Measured against this test's own exact search (numpy), with a search cut short (IVF
    probing 2 of its 46 lists, HNSW a beam of 12) so that some neighbours are missed: the
    recorded recall equals this count, and stays high on clustered vectors (0.94-0.99 seen;
    0.9 asked). Binary keeps 32 signs a vector here, whose Hamming ties the rescoring of
    4 x k candidates cannot undo (0.51-0.65 seen; 0.45 asked); its scores are the returned
    rows' true cosines, best first."""
    v = _clusters()
    blocks = [v[:1000], v[1000:]]
    index = approximate.build(blocks, kind, quantize, lists=None, m=16, ef_construction=100,
                              seed=0)
    approximate.tune(index, kind, 2, 12)
    measured = approximate.recall(index, blocks, 10, 200, seed=0)
    rows = np.sort(np.random.default_rng(1).choice(len(v), 200, replace=False))
    unit = v / np.linalg.norm(v, axis=1, keepdims=True)
    exact = np.argsort(-(unit[rows] @ unit.T), axis=1, kind="stable")[:, :11]
    _, found = approximate.nearest(index, unit[rows], 11, blocks)
    hits = sum(len(set([j for j in e if j != r][:10]) & set([j for j in f if j != r][:10]))
               for r, e, f in zip(rows, exact, found))
    assert measured["recall@10"] == pytest.approx(hits / 2000, abs=2e-3)   # ties at the 10th
    assert measured["recall@10"] >= (0.45 if quantize == "binary" else 0.9)
    if quantize == "binary":
        scores, found = approximate.nearest(index, v[rows], 10, blocks)
        assert (found >= 0).all() and (np.diff(scores, axis=1) <= 0).all()
        want = np.einsum("qd,qkd->qk", unit[rows], unit[found])
        np.testing.assert_allclose(scores, want, atol=1e-6)   # fp32 dots of 32 unit values


def test_bad_input_is_one_line(cli, embedded, tmp_path, minilm_l2):
    one_line_error(cli("index", minilm_l2, "--out", tmp_path / "a"), str(minilm_l2))
    one_line_error(cli("index", embedded, "--kind", "exact", "--quantize", "int8",
                       "--out", tmp_path / "b"), "--quantize")
    assert cli("index", embedded, "--out", tmp_path / "ix").exit_code == 0
    one_line_error(cli("search", tmp_path / "ix", *QUERIES, "--probe", "4"), "--probe")
    assert cli("index", embedded, "--kind", "hnsw", "--out", tmp_path / "h").exit_code == 0
    (tmp_path / "h" / approximate.FILE).write_bytes(b"not an index")
    one_line_error(cli("search", tmp_path / "h", *QUERIES), str(tmp_path / "h"))
    assert not any(p.name.startswith(("a", "b")) for p in tmp_path.iterdir())
