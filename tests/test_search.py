"""`bertctl search` (#64): the nearest documents of an embeddings artifact for each query, the
query embedded by the index's own model, as JSON lines; the same hits as a brute-force cosine
search over the index's vectors; an index of another model or of pooled hidden states, and
empty queries, refused in one line."""

import json

import numpy as np
import pytest

from conftest import EXAMPLES, one_line_error, run_bertctl

CORPUS = EXAMPLES / "retrieval" / "beir" / "corpus.jsonl"
QUERIES = ["Who were the Normans?", "What is computational complexity theory?",
           "In what country is Normandy located?"]


@pytest.fixture(scope="module")
def index(tmp_path_factory, minilm_dir):
    from conftest import invoke

    out = tmp_path_factory.mktemp("search") / "index"
    r = invoke("embed", minilm_dir, CORPUS, "--text-column", "text", "--id-column", "_id",
               "--store-text", "--precision", "fp32", "--out", out)
    assert r.exit_code == 0, r.stderr
    return out


def test_the_hits_are_a_brute_force_cosine_search_over_the_index(cli, index, minilm_dir,
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
    r2 = cli("embed", minilm_dir, data, "--precision", "fp32", "--out", tmp_path / "q")
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


def test_what_search_cannot_answer_is_one_line(cli, index, minilm_dir, tiny_pretrained,
                                              tmp_path):
    pooled = tmp_path / "pooled"
    r = cli("embed", minilm_dir, CORPUS, "--text-column", "text", "--pool", "mean",
            "--out", pooled)
    assert r.exit_code == 0, r.stderr
    empty = tmp_path / "q.txt"
    empty.write_text("a query\n\n", encoding="utf-8")
    for args, words in (((pooled, "--query", "x"), "not an embedding model's own vectors"),
                        ((index, "--query", "x", "--model", tiny_pretrained),
                         "is not the model that built"),
                        ((index, "--queries", empty), "line 2: an empty query"),
                        ((index,), "give --query TEXT")):
        one_line_error(cli("search", *args), words)
