"""Late interaction (#64): a search reordered, and a bi-encoder taught, by an embedding model's
token vectors compared by MaxSim (ColBERT's). MaxSim and the teacher's scores against their
plain definitions; the reordered run and the written scores against ones built from
transformers' own hidden states of all-MiniLM-L6-v2 cut to two layers; the bad inputs."""

import json

import numpy as np
import pytest
import torch
from bertctl.search import late, ranking
from helpers import (EXAMPLES, beir_texts, loss_trained_on, one_line_error, read_run,
                      reranked_eval, tiny_embedder, write_manifest)
from tolerance import TINY_FP32, fp32_sum

TRAIN = EXAMPLES / "retrieval" / "train.tsv"
BEIR = EXAMPLES / "retrieval" / "beir"


def test_maxsim_equals_its_plain_definition():
    """Each query piece's largest dot product with a document piece, averaged over the
    query's pieces, for each document (float64 loops against the one product)."""
    g = torch.Generator().manual_seed(0)
    unit = lambda n: torch.nn.functional.normalize(torch.randn(n, 8, generator=g), dim=-1)
    query, docs = unit(5), [unit(3), unit(7), unit(1)]
    got = late.maxsim(query, docs)
    q = query.double().tolist()
    for k, doc in enumerate(docs):
        d = doc.double().tolist()
        want = sum(max(sum(a * b for a, b in zip(qi, dj)) for dj in d) for qi in q) / len(q)
        assert got[k].item() == pytest.approx(want, abs=1e-6)   # fp32 sums of 8 products


def test_teacher_scores_read_as_the_maxsim_distribution():
    """What mine writes for a MaxSim teacher, read back as the listwise KL reads a
    cross-encoder's (the logit of each score), is softmax(SCALE x MaxSim) over each row; the
    row's best is 0.5."""
    m = np.array([[0.9, 0.7, 0.75, 0.2], [0.4, 0.5, 0.45, 0.41]])
    p = late.teacher_scores(m)
    assert np.allclose(p.max(axis=1), 0.5)
    logits = np.log(p) - np.log1p(-p)
    got = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    want = np.exp(late.SCALE * m) / np.exp(late.SCALE * m).sum(1, keepdims=True)
    assert np.abs(got - want).max() < 1e-12


def test_the_late_term_equals_its_plain_definition():
    """late_info_nce: query i against every document of the batch (B rows x K columns), each
    scored 20 x MaxSim over the real pieces (unit length; padding neither a best nor in the
    mean), -log softmax at its own positive, averaged: float64 loops against the product."""
    from bertctl.tasks.retrieval.contrastive import late_info_nce

    g = torch.Generator().manual_seed(1)
    b, widths = 3, (4, 6, 5)                     # queries, positives, one negative column
    pieces = []
    for t in widths:
        mask = torch.zeros(b, t, dtype=torch.long)
        for i in range(b):
            mask[i, :int(torch.randint(1, t + 1, (1,), generator=g))] = 1
        pieces.append((torch.randn(b, t, 8, generator=g), mask))

    def real(c, i):
        h, m = pieces[c][0][i].double(), pieces[c][1][i].bool()
        return [(x / x.norm()).tolist() for x in h[m]]

    def ms(q, d):
        return sum(max(sum(a * b for a, b in zip(qi, dj)) for dj in d) for qi in q) / len(q)

    k = len(widths) - 1
    want = []
    for i in range(b):
        s = np.array([20 * ms(real(0, i), real(1 + c, j)) for j in range(b) for c in range(k)])
        want.append(-(s[i * k] - np.log(np.exp(s).sum())))
    got = late_info_nce(pieces, 20.0)
    # fp32 scores of size up to 20 summed over the batch's 6 candidates; each MaxSim's mean
    # of at most 4 fp32 cosines (8 products) is far inside it
    assert got.item() == pytest.approx(np.mean(want), abs=fp32_sum(b * k, 20))


def test_the_late_head_trains_alone_on_the_frozen_states():
    """--late-dim: the loss is late_info_nce over the head's map of each column's last hidden
    states (the encoder's, padding and all: trimming changes no piece), without dropout (two
    passes give one loss), and its gradient reaches the map alone."""
    from bertctl.tasks.retrieval.contrastive import ContrastiveLoss, late_info_nce

    encoder = tiny_embedder(late_dim=8)
    for m in encoder.modules():       # dropout that a frozen encoder must not apply
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.3
    encoder.requires_grad_(False)
    encoder.own_head.late.requires_grad_(True)
    model = ContrastiveLoss(encoder, late_only=True).train()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, 60, (8, 3, 10), generator=g)
    mask = (torch.arange(10) < torch.randint(3, 11, (8, 3, 1), generator=g)).long()
    out = model(input_ids=ids, attention_mask=mask)
    out["loss"].backward()
    assert model(input_ids=ids, attention_mask=mask)["loss"].item() == out["loss"].item()
    grads = {k for k, p in encoder.named_parameters() if p.grad is not None}
    assert grads == {"sentence.late.weight"}
    encoder.eval()
    with torch.no_grad():
        w = encoder.own_head.late.weight
        columns = [(encoder.sequence(ids[:, c], None, mask[:, c]) @ w.T, mask[:, c])
                   for c in range(3)]
        want = late_info_nce(columns, 20.0).item()
    # the same float32 terms in another grouping, tiny-model sized (TINY_MODEL)
    assert out["loss"].item() == pytest.approx(want, abs=TINY_FP32["atol"])


def _hf_pieces(model_dir, late=None):
    """A text's unit-length last hidden states from transformers' own BertModel (mapped by
    `late`, a (dim, hidden) matrix, first)."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()

    def pieces(text):
        with torch.no_grad():
            enc = tok(text, return_tensors="pt", truncation=True, max_length=256)
            h = model(**enc).last_hidden_state[0]
        return torch.nn.functional.normalize(h if late is None else h @ late.T, dim=-1)
    return pieces


def _scores(path):
    scores = {}
    for line in path.read_text().splitlines():
        q, _, d, _, s, _ = line.split()
        scores.setdefault(q, {})[d] = float(s)
    return scores


@pytest.mark.slow
def test_a_search_is_reordered_by_its_own_token_vectors(cli, minilm_l2, tmp_path):
    """eval --rerank MODEL --rerank-scoring maxsim: the first stage's metrics unchanged, its
    first K documents a query scored by MaxSim over transformers' hidden states of the same
    model and put in that order, the rest below; the scoring recorded."""
    out, metrics, first = reranked_eval(minilm_l2, BEIR, tmp_path, "--rerank", minilm_l2,
                                        "--rerank-scoring", "maxsim", "--rerank-depth", "5")
    assert metrics["rerank/scoring"] == "maxsim" and metrics["rerank/depth"] == 5
    queries, docs = beir_texts(BEIR)
    got, scores = read_run(out / "rerank.trec"), _scores(out / "rerank.trec")
    pieces = _hf_pieces(minilm_l2)
    for q in list(first)[:40]:   # transformers one text at a time: a sample of the queries
        head = first[q][:5]
        want = late.maxsim(pieces(queries[q]), [pieces(docs[d]) for d in head]).numpy()
        # fp32 both sides, 2-layer encoders, a mean of cosines: seen ~1e-6; the run file
        # keeps 6 decimals
        assert np.abs(np.array([scores[q][d] for d in head]) - want).max() < 1e-5
    for q, ranked in first.items():   # each query's first 5 in its scores' order, the rest
        head = got[q][:5]             # below as the first stage ranked them
        assert sorted(head) == sorted(ranked[:5]) and got[q][5:] == ranked[5:]
        assert head == [d for d, _ in ranking.rank(head, [scores[q][d] for d in head])]
    qrels = {}
    for line in (BEIR / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = line.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    means, _ = ranking.evaluate(got, qrels)
    assert metrics["rerank/ndcg@10"] == pytest.approx(means["ndcg@10"], abs=1e-9)
    config = json.loads((out / "artifact.json").read_text())["config"]
    assert config["rerank_scoring"] == "maxsim"


@pytest.mark.slow
def test_a_late_head_is_fitted_and_read_by_the_reordering(cli, minilm_l2, tmp_path):
    """finetune --late-dim fits the head alone: the encoder's weights and the model's
    vectors (sentence-transformers' encode of the directory) are the first stage's; eval
    --rerank-scoring maxsim scores MaxSim over transformers' hidden states mapped by the
    fitted head (read from its own folder); the head's size and loss recorded."""
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer

    fitted = tmp_path / "late"
    r = cli("finetune", minilm_l2, TRAIN, "--task", "retrieval", "--late-dim", "32",
            "--steps", "3", "--batch-size", "8", "--lr", "1e-2", "--precision", "fp32",
            "--max-seq-length", "256", "--out", fitted)   # (where _hf_pieces truncates)
    assert r.exit_code == 0, r.stderr
    before = load_file(minilm_l2 / "model.safetensors")
    after = {k.removeprefix("bert."): v
             for k, v in load_file(fitted / "model.safetensors").items()}
    assert set(after) <= set(before)   # (the original also keeps position_ids, a buffer)
    assert all(torch.equal(before[k], after[k]) for k in after)
    w = load_file(fitted / "late_projection" / "model.safetensors")["weight"]
    assert w.shape == (32, 384) and not torch.equal(w, torch.eye(32, 384))   # it trained
    texts = ["a cat sat on the mat", "the stock market fell sharply today"]
    np.testing.assert_array_equal(SentenceTransformer(str(fitted), device="cpu").encode(texts),
                                  SentenceTransformer(str(minilm_l2), device="cpu").encode(texts))
    artifact = json.loads((fitted / "artifact.json").read_text())
    assert artifact["stats"]["loss"]["name"] == "late_infonce"
    assert json.loads((fitted / "config.json").read_text())["bertctl_embedding"]["late_dim"] == 32

    out, metrics, first = reranked_eval(fitted, BEIR, tmp_path, "--rerank", fitted,
                                        "--rerank-scoring", "maxsim", "--rerank-depth", "5")
    assert metrics["rerank/late_dim"] == 32
    queries, docs = beir_texts(BEIR)
    scores = _scores(out / "rerank.trec")
    pieces = _hf_pieces(minilm_l2, late=w)
    for q in list(first)[:20]:
        head = first[q][:5]
        want = late.maxsim(pieces(queries[q]), [pieces(docs[d]) for d in head]).numpy()
        # as the unmapped reordering's test, and one more fp32 product of 384 terms
        assert np.abs(np.array([scores[q][d] for d in head]) - want).max() < 1e-5
    # an index of it stores the head's map of each piece (embed --store-pieces)
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"_id": str(i), "text": t}) + "\n"
                            for i, t in enumerate(texts)))
    r = cli("embed", fitted, docs, "--text-column", "text", "--id-column", "_id",
            "--store-pieces", "--precision", "fp32", "--out", tmp_path / "idx")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "idx" / "artifact.json").read_text())["stats"]["piece_dim"] == 32
    block = np.load(tmp_path / "idx" / "pieces-00000.npy")
    want = torch.cat([pieces(t) for t in texts]).numpy()
    assert block.shape == want.shape and np.abs(block - want).max() < 1e-5   # as above


def test_the_late_head_refuses_what_it_cannot_fit(cli, minilm_l2, tmp_path):
    """--late-dim above the hidden size; with a file of scored pairs or texts alone, a --loss,
    or --cache-negatives: one line naming the setting, nothing written."""
    scored = tmp_path / "scored.tsv"
    scored.write_text("query\tpositive\tscore\na cat\ta dog\t3.5\nthe sun\tthe moon\t1.0\n")
    texts = tmp_path / "texts.txt"
    texts.write_text("a cat sat\nthe moon rose\n")
    base = ("finetune", minilm_l2)
    cases = (
        ((TRAIN, "--late-dim", "385"), "--late-dim 385: at most the model's hidden size, 384"),
        ((scored, "--label-column", "score", "--late-dim", "8"), "scored pairs"),
        ((texts, "--late-dim", "8"), "texts alone"),
        ((TRAIN, "--late-dim", "8", "--loss", "infonce"), "drop --loss infonce"),
        ((TRAIN, "--late-dim", "8", "--cache-negatives", "4"), "drop --cache-negatives"),
    )
    for args, words in cases:
        r = cli(*base, *args, "--task", "retrieval", "--steps", "1", "--batch-size", "2",
                "--out", tmp_path / "out")
        one_line_error(r, words)
        assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_maxsim_teacher_teaches_the_bi_encoder(cli, minilm_l2, tmp_path, monkeypatch):
    """mine --teacher MODEL --teacher-scoring maxsim writes late.teacher_scores of MaxSim over
    transformers' hidden states of each row's candidates; finetune reads them (listwise KL).
    The miner teaching by its own vectors is loaded once."""
    from bertctl.stages.common import models
    loads = []
    load = models.load_task_model
    monkeypatch.setattr(models, "load_task_model",
                        lambda *a, **k: loads.append(a[0].path) or load(*a, **k))
    out = tmp_path / "mined"
    r = cli("mine", minilm_l2, TRAIN, "--negatives", "2", "--teacher", minilm_l2,
            "--teacher-scoring", "maxsim", "--precision", "fp32", "--out", out)
    assert r.exit_code == 0, r.stderr
    assert len(loads) == 1, loads
    rows = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    columns = ("positive", "negative_1", "negative_2")
    pieces = _hf_pieces(minilm_l2)
    some = rows[:6]
    m = np.array([late.maxsim(pieces(row["query"]), [pieces(row[c]) for c in columns]).numpy()
                  for row in some], np.float64)
    got = np.array([[row[f"score_{c}"] for c in columns] for row in some])
    # fp32 MaxSim (~1e-6) times SCALE 20 through a sigmoid of slope <= 1/4, rounded to 1e-7
    assert np.abs(got - late.teacher_scores(m)).max() < 1e-5
    assert loss_trained_on(rows, minilm_l2, tmp_path) == "kl"


def test_the_wrong_kind_of_scorer_is_one_line(cli, minilm_l2, tmp_path):
    """A cross-encoder given for late interaction, and an embedding model given as a
    cross-encoder, are refused before any work, each naming the other setting; a scoring
    without the model that scores is refused too (else it would be silently ignored)."""
    from sentence_transformers import CrossEncoder

    CrossEncoder(str(minilm_l2), num_labels=1, device="cpu").save(str(tmp_path / "ce"))
    cases = (
        (("eval", minilm_l2, BEIR, "--task", "retrieval", "--rerank", tmp_path / "ce",
          "--rerank-scoring", "maxsim"), "(a cross-encoder is --rerank-scoring cross"),
        (("eval", minilm_l2, BEIR, "--task", "retrieval", "--rerank", minilm_l2),
         "--rerank-scoring maxsim)"),
        (("mine", minilm_l2, TRAIN, "--teacher", tmp_path / "ce", "--teacher-scoring",
          "maxsim"), "(a cross-encoder is --teacher-scoring cross"),
        (("eval", minilm_l2, BEIR, "--task", "retrieval", "--rerank", minilm_l2,
          "--rerank-scoring", "colbert"), "colbert"),
        (("eval", minilm_l2, BEIR, "--task", "retrieval", "--rerank-scoring", "maxsim"),
         "--rerank-scoring maxsim: give --rerank MODEL"),
        (("mine", minilm_l2, TRAIN, "--teacher-scoring", "maxsim"),
         "--teacher-scoring maxsim: give --teacher MODEL"),
        (("eval", minilm_l2, BEIR, "--task", "retrieval", "--rerank-depth", "5"),
         "--rerank-depth 5: give --rerank MODEL"),
    )
    for args, words in cases:
        r = cli(*args, "--out", tmp_path / "out")
        one_line_error(r, words)
        assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_search_reorders_its_hits_by_the_reranker(cli, minilm_l2, example_index, tmp_path):
    """bertctl search --rerank: each query's --top-k hits (the same documents as the plain
    search's) in the order of the reranker's scores, which the hits carry: MaxSim over
    transformers' hidden states of the index's own model, or CrossEncoder.predict."""
    from sentence_transformers import CrossEncoder

    ask = ("search", example_index, "--query", "Who were the Normans?", "--query",
           "When was the French revolution?", "--top-k", "5", "--precision", "fp32")
    plain = [json.loads(x) for x in cli(*ask).stdout.splitlines()]
    r = cli(*ask, "--rerank", minilm_l2, "--rerank-scoring", "maxsim")
    assert r.exit_code == 0, r.stderr
    late_hits = [json.loads(x) for x in r.stdout.splitlines()]
    CrossEncoder(str(minilm_l2), num_labels=1, device="cpu").save(str(tmp_path / "ce"))
    r = cli(*ask, "--rerank", tmp_path / "ce")
    assert r.exit_code == 0, r.stderr
    cross_hits = [json.loads(x) for x in r.stdout.splitlines()]
    pieces = _hf_pieces(minilm_l2)
    ce = CrossEncoder(str(tmp_path / "ce"), device="cpu")
    queries = {"q1": "Who were the Normans?", "q2": "When was the French revolution?"}
    for hits, score in ((late_hits, lambda q, d: late.maxsim(pieces(q), [pieces(d)]).item()),
                        (cross_hits, lambda q, d: float(ce.predict([(q, d)])[0]))):
        for q, text in queries.items():
            mine = [h for h in hits if h["query"] == q]
            assert sorted(h["id"] for h in mine) == sorted(
                h["id"] for h in plain if h["query"] == q)
            assert [h["rank"] for h in mine] == [1, 2, 3, 4, 5]
            shown = [h["score"] for h in mine]
            assert shown == sorted(shown, reverse=True)
            want = [score(text, h["text"]) for h in mine]
            # fp32 both sides, 2-layer encoders: seen ~1e-6; the hits keep 6 decimals
            assert np.abs(np.array(shown) - np.array(want)).max() < 1e-5


def test_search_rerank_needs_the_texts_and_the_model(cli, minilm_l2, tmp_path):
    r = cli("embed", minilm_l2, BEIR / "corpus.jsonl", "--text-column", "text", "--id-column",
            "_id", "--precision", "fp32", "--out", tmp_path / "bare")
    assert r.exit_code == 0, r.stderr
    one_line_error(cli("search", tmp_path / "bare", "--query", "normans", "--rerank",
                       minilm_l2, "--rerank-scoring", "maxsim"),
                   "keeps no texts for --rerank to read")
    one_line_error(cli("search", tmp_path / "bare", "--query", "normans", "--rerank-scoring",
                       "maxsim"), "--rerank-scoring maxsim without --rerank",
                   "stores none (embed the documents with --store-pieces")


@pytest.mark.slow
def test_search_reorders_deeper_by_the_pieces_the_index_stores(cli, minilm_l2, example_index,
                                                                tmp_path):
    """embed --store-pieces keeps each document's pieces (transformers' last hidden states of
    the text, unit length) beside its vector; search --rerank-scoring maxsim reorders each
    query's first --rerank-depth hits by MaxSim over them (only the queries embedded) and
    prints the first --top-k: the best by MaxSim of the plain search's first 8, the same hits
    and scores as the texts embedded again (--rerank MODEL on an index without pieces)."""
    import pyarrow.parquet as pq

    stored = tmp_path / "stored"
    r = cli("embed", minilm_l2, BEIR / "corpus.jsonl", "--text-column", "text", "--id-column",
            "_id", "--store-text", "--store-pieces", "--precision", "fp32", "--out", stored)
    assert r.exit_code == 0, r.stderr
    stats = json.loads((stored / "artifact.json").read_text())["stats"]
    rows = pq.read_table(stored / "index.parquet").to_pylist()
    assert stats["piece_dim"] == 384 and stats["pieces_stored"] == sum(
        row["piece_count"] for row in rows)
    pieces = _hf_pieces(minilm_l2)
    block = np.load(stored / "pieces-00000.npy")
    for row in rows[:8]:
        want = pieces(row["text"]).numpy()
        got = block[row["piece_start"]:row["piece_start"] + row["piece_count"]]
        # fp32 both sides, 2-layer encoders, unit vectors: seen ~1e-6
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-5
    ask = ("--query", "Who were the Normans?", "--query", "When was the French revolution?",
           "--precision", "fp32")
    hits = lambda r: [json.loads(x) for x in r.stdout.splitlines()]
    first = hits(cli("search", example_index, *ask, "--top-k", "8"))
    r = cli("search", stored, *ask, "--top-k", "3", "--rerank-scoring", "maxsim",
            "--rerank-depth", "8")
    assert r.exit_code == 0, r.stderr
    deep = hits(r)
    again = hits(cli("search", example_index, *ask, "--top-k", "3", "--rerank", minilm_l2,
                     "--rerank-scoring", "maxsim", "--rerank-depth", "8"))
    assert [h["id"] for h in deep] == [h["id"] for h in again]
    assert np.abs(np.array([h["score"] for h in deep])
                  - np.array([h["score"] for h in again])).max() < 1e-5
    for q, text in (("q1", "Who were the Normans?"), ("q2", "When was the French revolution?")):
        candidates = [h for h in first if h["query"] == q]
        scored = {h["id"]: late.maxsim(pieces(text), [pieces(h["text"])]).item()
                  for h in candidates}
        mine = [h for h in deep if h["query"] == q]
        assert [h["rank"] for h in mine] == [1, 2, 3]
        assert [h["id"] for h in mine] == sorted(scored, key=lambda d: -scored[d])[:3]
        # as above: fp32 both sides; the hits keep 6 decimals
        assert max(abs(h["score"] - scored[h["id"]]) for h in mine) < 1e-5


def test_stored_pieces_refuse_what_they_cannot_serve(cli, minilm_l2, example_index, tmp_path):
    """--store-pieces beside pooled hidden states; a reordering depth without a reordering,
    or below --top-k; an index whose rows point past its pieces, or whose pieces shard is
    gone: one line, nothing written."""
    one_line_error(cli("embed", minilm_l2, BEIR / "corpus.jsonl", "--text-column", "text",
                       "--pool", "mean", "--store-pieces", "--out", tmp_path / "out"),
                   "--store-pieces keeps an embedding model's pieces")
    assert not (tmp_path / "out").exists()
    ask = ("search", example_index, "--query", "normans")
    one_line_error(cli(*ask, "--rerank-depth", "20"),
                   "--rerank-depth: the hits a reranker reorders")
    one_line_error(cli(*ask, "--top-k", "5", "--rerank-depth", "3", "--rerank-scoring",
                       "maxsim"), "--rerank-depth 3: below --top-k 5")
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"_id": "a", "text": "the normans came from normandy"}\n'
                    '{"_id": "b", "text": "a prime number has two divisors"}\n')
    r = cli("embed", minilm_l2, docs, "--text-column", "text", "--id-column", "_id",
            "--store-pieces", "--out", tmp_path / "idx")
    assert r.exit_code == 0, r.stderr
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = tmp_path / "idx" / "index.parquet"
    table = pq.read_table(rows)
    pq.write_table(table.set_column(table.schema.get_field_index("piece_start"), "piece_start",
                                    pa.array([10**9, 10**9], pa.int64())), rows)
    one_line_error(cli("search", tmp_path / "idx", "--query", "normans", "--rerank-scoring",
                       "maxsim"), "index.parquet: changed since it was written")
    # Past the checksum limit only its size is checked: the rows' own bounds still hold. (The
    # manifest's entry rewritten as a file of that size would pass.)
    import json

    from bertctl.contract.artifacts import sha256_file

    manifest = json.loads((tmp_path / "idx" / "artifact.json").read_text())
    manifest["files"]["index.parquet"] = {"sha256": sha256_file(rows),
                                          "size": rows.stat().st_size}
    write_manifest(tmp_path / "idx", manifest)
    one_line_error(cli("search", tmp_path / "idx", "--query", "normans", "--rerank-scoring",
                       "maxsim"), "index.parquet: its rows' pieces", "not in the artifact's")
    (tmp_path / "idx" / "pieces-00000.npy").unlink()
    one_line_error(cli("search", tmp_path / "idx", "--query", "normans", "--rerank-scoring",
                       "maxsim"), "pieces-00000.npy")


def test_the_report_names_how_a_search_was_reordered(tmp_path):
    """The report's gains table labels a reranked run by its scorer: a cross-encoder's
    "reranked", MaxSim over the model's own states "reordered by its own token vectors", over
    its fitted head's map (rerank/late_dim) "reordered by its late-interaction head". An eval
    of another model whose search scored every query the same (the head's model: its search
    unchanged) adds no first-stage row of its own; one that scored differently does, and so
    does a plain eval (an export's) that scored the same. The head's row is compared with the
    own-vector reordering of the same search as well."""
    from types import SimpleNamespace

    from bertctl.report import gains

    runs = []
    for name, model, metrics, first in (
            ("cross", "a", {"rerank/scoring": "cross"}, "0.5"),
            ("own", "a", {"rerank/scoring": "maxsim"}, "0.5"),
            ("head", "b", {"rerank/scoring": "maxsim", "rerank/late_dim": 128}, "0.5"),
            ("other", "c", {"rerank/scoring": "maxsim"}, "0.25"),
            ("export", "d", {}, "0.25")):
        path = tmp_path / name
        path.mkdir()
        (path / "per_query.tsv").write_text(f"query\tndcg@10\nq1\t{first}\nq2\t1.0\n")
        if metrics:
            (path / "rerank_per_query.tsv").write_text("query\tndcg@10\nq1\t0.75\nq2\t1.0\n")
        (path / "metrics.json").write_text(json.dumps(metrics))
        manifest = SimpleNamespace(inputs=[SimpleNamespace(id=model)])
        runs.append(SimpleNamespace(artifact=SimpleNamespace(path=path, kind="eval",
                                                             manifest=manifest)))
    assert [(label, base, versus) for label, _, base, versus in gains.steps(runs)] == [
        ("cross", None, None), ("cross, reranked", 0, None),
        ("own, reordered by its own token vectors", 0, None),
        ("head, reordered by its late-interaction head", 0, 2), ("other", 0, None),
        ("other, reordered by its own token vectors", 4, None), ("export", 4, None)]
    # each per-query file gives q1 0.75 reordered: the head's row is level with the own row's
    assert ("+0.1250 ± 0.1250 (+1.0 se) over cross; +0.0000 ± 0.0000 over own, reordered by "
            "its own token vectors") in gains.table(runs, str)
