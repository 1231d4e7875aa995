"""`bertctl mine` (#64): hard negatives mined with the model itself. The selection against a
plain per-row reading of its definition (sentence-transformers' mine_hard_negatives' guards),
mined negatives never a judged positive, the output trained on, and the bad inputs."""

import json

import numpy as np
import pytest

from bertctl.tasks.retrieval import mining

from helpers import EXAMPLES, one_line_error

TRAIN = EXAMPLES / "retrieval" / "train.tsv"


def _plain(scores, candidates, positive, banned, g):
    """The guards row by row, as the module doc states them."""
    chosen, kept = [], []
    rng_rows = np.random.default_rng(g.seed).random(scores.shape)
    for r in range(len(scores)):
        allowed = [(c, s, i) for i, (c, s, b) in enumerate(zip(candidates[r], scores[r],
                                                                banned[r])) if not b]
        ranked = allowed[g.range_min:g.range_max]
        ok = [(c, s, i) for c, s, i in ranked
              if (g.max_score is None or s <= g.max_score)
              and (g.min_score is None or s >= g.min_score)
              and (g.margin is None or s <= positive[r] - g.margin)
              and (g.relative_margin is None or s <= positive[r] * (1 - g.relative_margin))]
        if g.sampling == "random":
            ok = sorted(ok, key=lambda t: rng_rows[r, t[2]])
        chosen.append([c for c, _, _ in ok[:g.negatives]])
        kept.append(len(ok) >= g.negatives)
    return chosen, kept


@pytest.mark.parametrize("guards", [
    mining.Guards(negatives=3),
    mining.Guards(negatives=2, range_min=3, range_max=12),
    mining.Guards(negatives=2, margin=0.1),
    mining.Guards(negatives=2, relative_margin=0.05, max_score=0.9, min_score=0.1),
    mining.Guards(negatives=4, sampling="random", seed=3, range_max=15),
], ids=["top", "ranks", "margin", "scores", "random"])
def test_the_selection_equals_its_plain_definition(guards):
    rng = np.random.default_rng(0)
    rows, width = 40, 20
    scores = -np.sort(-rng.uniform(-0.2, 1.0, (rows, width)), axis=1)
    candidates = np.stack([rng.permutation(100)[:width] for _ in range(rows)])
    positive = rng.uniform(0.3, 1.0, rows)
    banned = rng.random((rows, width)) < 0.1
    chosen, kept, counts = mining.select(scores, candidates, positive, banned, guards)
    want, want_kept = _plain(scores, candidates, positive, banned, guards)
    assert kept.tolist() == want_kept
    for r in np.flatnonzero(kept):
        assert chosen[r].tolist() == want[r], r
    assert counts["kept"] == sum(want_kept) and counts["removed_by"]["positives"] == banned.sum()


def test_mined_negatives_are_never_a_judged_positive_and_train(cli, minilm_l2, tmp_path):
    """The shipped pairs name several questions of one paragraph: every row's negatives are
    none of its query's positives (any row's), nor the query; finetune reads the negative
    columns as hard negatives without naming them."""
    out = tmp_path / "mined"
    r = cli("mine", minilm_l2, TRAIN, "--negatives", "2", "--range-min", "1",
            "--precision", "fp32", "--out", out)
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    positives: dict[str, set[str]] = {}
    for line in TRAIN.read_text().splitlines()[1:]:
        q, p = line.split("\t")
        positives.setdefault(q, set()).add(p)
    assert rows and set(rows[0]) == {"query", "positive", "negative_1", "negative_2"}
    for row in rows:
        negatives = {row["negative_1"], row["negative_2"]}
        assert len(negatives) == 2 and not negatives & positives[row["query"]]
        assert row["query"] not in negatives
    stats = json.loads((out / "artifact.json").read_text())["stats"]
    assert stats["kept"] == len(rows) and stats["rows"] == len(TRAIN.read_text().splitlines()) - 1
    assert stats["removed_by"]["positives"] > 0
    r = cli("finetune", minilm_l2, out / "pairs.jsonl", "--task", "retrieval", "--steps", "1",
            "--batch-size", "4", "--max-seq-length", "32", "--out", tmp_path / "ft")
    assert r.exit_code == 0, r.stderr
    # (the features of four texts a row: query, positive and the two negatives)
    assert "training features" not in r.stderr or "4" in r.stderr


def test_the_guards_leave_rows_out_and_say_so(cli, minilm_dir, tmp_path):
    """A floor near the positives' cosines leaves few candidates: the rows without enough
    are dropped and counted, none written with fewer negatives."""
    out = tmp_path / "mined"
    r = cli("mine", minilm_dir, TRAIN, "--negatives", "3", "--min-score", "0.4",
            "--precision", "fp32", "--out", out)
    assert r.exit_code in (0, 2), r.stderr
    if r.exit_code == 0:
        stats = json.loads((out / "artifact.json").read_text())["stats"]
        assert stats["dropped"] > 0 and stats["removed_by"]["min_score"] > 0
        lines = (out / "pairs.jsonl").read_text().splitlines()
        assert len(lines) == stats["kept"]
    else:
        assert "no row kept 3 negatives" in r.stderr and not out.exists()


def test_a_model_not_trained_for_search_mines_with_a_warning(cli, minilm_l2, tiny_pretrained,
                                                             tmp_path):
    """A pretraining checkpoint mines (its negatives are valid rows) but says to mine with
    it fine-tuned; a sentence-transformers model does not draw the warning."""
    for model, warned in ((tiny_pretrained, True), (minilm_l2, False)):
        out = tmp_path / f"mined-{warned}"
        r = cli("mine", model, TRAIN, "--negatives", "1", "--precision", "fp32", "--out", out)
        assert r.exit_code == 0, r.stderr
        assert ("was not trained for search" in r.stderr) == warned, r.stderr
        assert (out / "pairs.jsonl").read_text().strip()


def test_bad_mining_input_is_one_line(cli, minilm_l2, tiny_pretrained, tmp_path):
    small = tmp_path / "small.tsv"
    small.write_text("query\tpositive\nq one\tdoc one\nq two\tdoc two\n", encoding="utf-8")
    for args, words in (
            ((minilm_l2, small, "--negatives", "3"), "fewer than a positive and --negatives 3"),
            ((minilm_l2, TRAIN, "--range-min", "5", "--range-max", "5"),
             "range_max 5 must be above range_min 5"),
            ((minilm_l2, TRAIN, "--corpus", tmp_path / "none.txt"), "no such corpus file"),
            ((minilm_l2, TRAIN, "--text-column", "query"), "give --text-column twice")):
        r = cli("mine", *args, "--out", tmp_path / "out")
        one_line_error(r, words)
        assert not (tmp_path / "out").exists()


def test_the_corpus_is_streamed_in_chunks_with_the_same_result(cli, minilm_l2, tmp_path,
                                                               monkeypatch):
    """A corpus read, embedded and looked up 7 documents at a time (its vectors in a file,
    searched memory-mapped) gives the same pairs as one pass; its duplicates, blank lines,
    texts equal to a positive and a query's own text are one document each or none, and the
    vectors' file is not left in the artifact."""
    lines = [x.split("\t") for x in TRAIN.read_text().splitlines()[1:]]
    corpus = tmp_path / "corpus.txt"
    extra = ["The Normans were Norse settlers.", "", "The Normans were Norse settlers.",
             lines[0][1], lines[0][0], "Computational complexity theory studies problems."]
    corpus.write_text("\n".join(extra * 3) + "\n", encoding="utf-8")
    pairs = mining.read_pairs(TRAIN, None, corpus)
    assert pairs.size == len(pairs.distinct) + 3        # the two new texts and the query
    assert pairs.own[lines[0][0]] == len(pairs.distinct) + 1
    assert [t for chunk in pairs.documents(4) for t in chunk][len(pairs.distinct):] == [
        extra[0], lines[0][0], extra[5]]
    assert pairs.texts_of([0, pairs.size - 1]) == {0: pairs.distinct[0], pairs.size - 1: extra[5]}
    args = ["--negatives", "2", "--corpus", corpus, "--precision", "fp32"]
    assert cli("mine", minilm_l2, TRAIN, *args, "--out", tmp_path / "whole").exit_code == 0
    monkeypatch.setattr(mining, "CHUNK", 7)
    r = cli("mine", minilm_l2, TRAIN, *args, "--out", tmp_path / "chunked")
    assert r.exit_code == 0, r.stderr
    whole, chunked = ([json.loads(x) for x in (tmp_path / d / "pairs.jsonl").read_text()
                       .splitlines()] for d in ("whole", "chunked"))
    assert [(r["query"], r["positive"]) for r in chunked] == \
        [(r["query"], r["positive"]) for r in whole]
    # A text embedded in another batch pads to another length, and fp32 kernels may round
    # its vector differently in the last bits: two candidates tied to 1e-7 may swap. None
    # did here; nearly all must agree anywhere.
    same = sum(a[k] == b[k] for a, b in zip(whole, chunked) for k in ("negative_1", "negative_2"))
    assert same >= 0.95 * 2 * len(whole)
    assert sorted(p.name for p in (tmp_path / "chunked").iterdir()) == [
        "artifact.json", "pairs.jsonl"]


def test_a_copy_the_model_cannot_tell_from_the_positive_is_never_its_negative(cli, minilm_l2,
                                                                           tmp_path):
    """The probe's case: a corpus holding each positive upper-cased (the same text to an uncased
    model) and as a BEIR document with a title before it: neither is mined as that row's
    negative (before, 28-29 of 80 were), and the stats count them."""
    rows = [line.split("\t") for line in TRAIN.read_text().splitlines()[1:41]]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(
        json.dumps({"_id": f"u{i}", "title": "", "text": p.upper()}) + "\n" +
        json.dumps({"_id": f"t{i}", "title": f"Title {i}", "text": p}) + "\n"
        for i, (_, p) in enumerate(rows)))
    train = tmp_path / "train.tsv"
    train.write_text("query\tpositive\n" + "".join(f"{q}\t{p}\n" for q, p in rows))
    out = tmp_path / "mined"
    r = cli("mine", minilm_l2, train, "--corpus", corpus, "--negatives", "2",
            "--precision", "fp32", "--out", out)
    assert r.exit_code == 0, r.stderr
    mined = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    assert mined
    positives_of = {}
    for q, p in rows:
        positives_of.setdefault(q, set()).add(p)

    def same(a: str, b: str) -> bool:
        return a.lower() == b.lower() or any(a == f"Title {i} {b}" for i in range(len(rows)))

    for row in mined:
        for k in ("negative_1", "negative_2"):
            assert not any(same(row[k], p) for p in positives_of[row["query"]]), row[k]
    stats = json.loads((out / "artifact.json").read_text())["stats"]
    assert stats["removed_by"]["copies"] > 0
