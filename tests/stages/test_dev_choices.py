"""A dev set of the user's own data (bertctl split) and the choices made on it (bertctl
choose): the split by query and its refusals, and each rule against its definition, on
per-query files written here."""

import json
import math
import statistics
from pathlib import Path

import pytest
from helpers import EXAMPLES, one_line_error, worked_example

from bertctl.report import choices

TRAIN = EXAMPLES / "retrieval" / "train.tsv"


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _pairs_file(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("query\tpositive\n" + "".join(f"{q}\t{p}\n" for q, p in rows),
                    encoding="utf-8")
    return path


def test_a_held_out_split_is_by_query_and_covers_every_row(cli, tmp_path):
    """Every row of a query goes one way (a query with two positives here); the dev set is
    the share asked for, raised to the minimum; its qrels judge each dev query's positives
    among a corpus of every text of the table and of --corpus, each text once; the same
    seed gives the same split, another seed another one."""
    rows = [(f"question {i}?", f"passage {i % 70}.") for i in range(120)]
    rows.append(("question 3?", "another passage for three."))
    train = _pairs_file(tmp_path / "pairs.tsv", rows)
    extra = tmp_path / "more.txt"
    extra.write_text("passage 1.\nan extra document.\nan extra document.\n", encoding="utf-8")
    out = tmp_path / "split"
    r = cli("split", train, "--dev-share", "0.1", "--min-dev-queries", "20", "--corpus", extra,
            "--out", out)
    assert r.exit_code == 0, r.stderr
    kept = _rows(out / "train.jsonl")
    dev = {json.loads(x)["_id"]: json.loads(x)["text"]
           for x in (out / "dev" / "queries.jsonl").read_text().splitlines()}
    assert len(dev) == 20                                  # 10% of 120 is 12, raised to 20
    trained = {r["query"] for r in kept}
    assert not trained & set(dev.values())
    assert len(kept) + sum(1 for q, _ in rows if q in set(dev.values())) == len(rows)
    assert trained | set(dev.values()) == {q for q, _ in rows}
    corpus = {json.loads(x)["_id"]: json.loads(x)["text"]
              for x in (out / "dev" / "corpus.jsonl").read_text().splitlines()}
    texts = list(corpus.values())
    assert len(texts) == len(set(texts)) == 71 + 1          # 70 + 1 passages, 1 extra text
    qrels = (out / "dev" / "qrels" / "dev.tsv").read_text().splitlines()
    assert qrels[0] == "query-id\tcorpus-id\tscore"
    judged = {}
    for line in qrels[1:]:
        q, d, s = line.split("\t")
        judged.setdefault(dev[q], set()).add(corpus[d])
        assert s == "1"
    assert judged == {q: {p for qq, p in rows if qq == q} for q in dev.values()}
    pairs = _rows(out / "dev-pairs.jsonl")
    assert {(p["query"], p["positive"]) for p in pairs} == {
        (q, p) for q, p in rows if q in set(dev.values())}
    again = tmp_path / "again"
    assert cli("split", train, "--min-dev-queries", "20", "--corpus", extra,
               "--out", again).exit_code == 0
    assert (again / "dev" / "queries.jsonl").read_bytes() == \
        (out / "dev" / "queries.jsonl").read_bytes()
    other = tmp_path / "other"
    assert cli("split", train, "--min-dev-queries", "20", "--seed", "1",
               "--out", other).exit_code == 0
    assert (other / "dev" / "queries.jsonl").read_bytes() != \
        (out / "dev" / "queries.jsonl").read_bytes()


def test_a_dev_set_of_the_users_is_checked_and_taken(cli, tmp_path):
    """--dev: the example's dev judgements (another article's questions) are taken as they
    are, every TRAIN row trained on. Too few judged queries, a query shared with TRAIN (a
    dev set of three training queries; of eleven queries, one a training query), a dev set
    without a relevant document, a TRAIN too small to hold a dev split out of, --corpus
    beside --dev and rows with a teacher's scores (which train.jsonl would drop) are each one
    line, nothing written."""
    beir = EXAMPLES / "retrieval" / "beir"
    out = tmp_path / "split"
    r = cli("split", TRAIN, "--dev", beir / "qrels" / "dev.tsv", "--out", out)
    assert r.exit_code == 0, r.stderr
    assert len(_rows(out / "train.jsonl")) == len(TRAIN.read_text().splitlines()) - 1
    judged = {line.split("\t")[0] for line in
              (beir / "qrels" / "dev.tsv").read_text().splitlines()[1:]}
    assert len((out / "dev" / "queries.jsonl").read_text().splitlines()) == len(judged)
    assert (out / "dev" / "qrels" / "dev.tsv").read_text().count("\n") == \
        (beir / "qrels" / "dev.tsv").read_text().count("\n")

    # A dev set whose queries include training queries.
    shared = tmp_path / "shared"
    (shared / "qrels").mkdir(parents=True)
    first = [x.split("\t") for x in TRAIN.read_text().splitlines()[1:4]]
    (shared / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": q}) + "\n" for i, (q, _) in enumerate(first)))
    (shared / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "text": p}) + "\n" for i, (_, p) in enumerate(first)))
    (shared / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(3)))
    bad = tmp_path / "bad"
    r = cli("split", TRAIN, "--dev", shared, "--min-dev-queries", "10", "--out", bad)
    one_line_error(r, "3 queries with a relevant document", "at least 10")
    few = _pairs_file(tmp_path / "few.tsv", [(f"x {i}", f"y {i}") for i in range(30)])
    few_dev = tmp_path / "few-dev"
    (few_dev / "qrels").mkdir(parents=True)
    (few_dev / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": q}) + "\n"
        for i, q in enumerate([first[0][0]] + [f"new {i}" for i in range(10)])))
    (few_dev / "corpus.jsonl").write_text(json.dumps({"_id": "d0", "text": "a doc"}) + "\n")
    (few_dev / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td0\t1\n" for i in range(11)))
    r = cli("split", TRAIN, "--dev", few_dev, "--min-dev-queries", "10", "--out", bad)
    one_line_error(r, "1 of its 11 queries are training queries", str(TRAIN))
    (few_dev / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td0\t0\n" for i in range(11)))
    r = cli("split", few, "--dev", few_dev, "--min-dev-queries", "10", "--out", bad)
    one_line_error(r, "no judged query has a relevant document")
    r = cli("split", few, "--min-dev-queries", "20", "--out", bad)
    one_line_error(r, "30 distinct queries", "at least 20 queries needs 40", "DEV=")
    r = cli("split", few, "--dev", few_dev, "--corpus", few, "--out", bad)
    one_line_error(r, "--corpus adds documents to a dev set held out of TRAIN")
    taught = tmp_path / "taught.jsonl"
    taught.write_text("".join(json.dumps({"query": f"x {i}", "positive": f"y {i}",
                                          "score_positive": 0.9}) + "\n" for i in range(30)))
    r = cli("split", taught, "--min-dev-queries", "10", "--out", bad)
    one_line_error(r, "without a teacher's scores")
    assert not bad.exists()


def _eval_dir(path: Path, scores: dict[str, float], rerank: dict[str, float] | None = None):
    """An eval-like directory's per-query files (what choose reads), no manifest."""
    path.mkdir(parents=True)
    for name, values in (("per_query.tsv", scores), ("rerank_per_query.tsv", rerank)):
        if values is not None:
            (path / name).write_text("query\tndcg@10\n" + "".join(
                f"{q}\t{v}\n" for q, v in values.items()))
    return path


def _candidates(tmp_path, table: dict[str, list[float]]) -> list[choices.Candidate]:
    out = []
    for name, values in table.items():
        scores = {f"q{i}": v for i, v in enumerate(values)}
        out.append(choices.Candidate(name, _eval_dir(tmp_path / name, scores), "first", scores))
    return out


def test_best_takes_the_highest_mean_that_gains_over_the_baseline(tmp_path):
    """The gain and its standard error are the paired ones (statistics over the per-query
    differences); a candidate under or level with the baseline is never taken, and with
    none above it the baseline is."""
    table = {"original": [0.5, 0.6, 0.7, 0.8], "worse": [0.4, 0.5, 0.7, 0.6],
             "better": [0.6, 0.6, 0.8, 0.8], "best": [0.9, 0.6, 0.8, 0.9]}
    cands = _candidates(tmp_path, table)
    chosen, rows = choices.decide(cands, "best", 0.0)
    assert cands[chosen].name == "best" and [r["chosen"] for r in rows] == [0, 0, 0, 1]
    for row, (name, values) in zip(rows[1:], list(table.items())[1:]):
        d = [a - b for a, b in zip(values, table["original"])]
        assert row["versus"] == "original"
        assert row["gain"] == pytest.approx(statistics.fmean(d))
        assert row["se"] == pytest.approx(statistics.stdev(d) / math.sqrt(len(d)))
    chosen, _ = choices.decide(cands[:2], "best", 0.0)
    assert chosen == 0                                      # a loss on dev: not shipped
    level = _candidates(tmp_path / "level", {"a": [0.5, 0.7], "b": [0.7, 0.5]})
    assert choices.decide(level, "best", 0.0)[0] == 0        # a tie keeps the baseline
    assert choices.decide(cands, "best", 0.2)[0] == 0        # no gain above --min-gain 0.2


def test_chain_stops_at_the_first_step_that_does_not_gain(tmp_path):
    """Round 3 gains over round 2 but round 2 lost to round 1: the chain ends at round 1 and
    round 3 is not reached."""
    cands = _candidates(tmp_path, {"round-1": [0.5, 0.5, 0.5], "round-2": [0.4, 0.5, 0.5],
                                   "round-3": [0.9, 0.9, 0.9]})
    chosen, rows = choices.decide(cands, "chain", 0.0)
    assert chosen == 0
    assert [r.get("reached") for r in rows] == [None, True, False]
    gaining = _candidates(tmp_path / "g", {"round-1": [0.5, 0.5], "round-2": [0.6, 0.5],
                                           "round-3": [0.7, 0.6]})
    chosen, rows = choices.decide(gaining, "chain", 0.0)
    assert chosen == 2 and rows[2]["versus"] == "round-2"


@pytest.fixture(scope="module")
def dev_evals(tmp_path_factory, minilm_l2):
    """The two-layer MiniLM's first stage on the example's dev judgements, and its search
    reordered by its own token vectors, and its first stage on the test judgements."""
    from helpers import invoke

    tmp = tmp_path_factory.mktemp("dev-evals")
    beir = EXAMPLES / "retrieval" / "beir"
    made = {}
    for name, data, extra in (
            ("first", beir / "qrels" / "dev.tsv", ()),
            ("late", beir / "qrels" / "dev.tsv",
             ("--rerank", minilm_l2, "--rerank-scoring", "maxsim", "--rerank-depth", "10")),
            ("test", beir / "qrels" / "test.tsv", ())):
        r = invoke("eval", minilm_l2, data, "--task", "retrieval", "--precision", "fp32",
                   *extra, "--out", tmp / name)
        assert r.exit_code == 0, r.stderr
        made[name] = tmp / name
    return made


def test_choose_records_the_pick_its_model_and_every_candidates_dev_figures(cli, dev_evals,
                                                                           minilm_l2,
                                                                           tmp_path):
    """choice.json's figures are the per-query files' means and paired gains; chosen.txt and
    model.txt name what was taken (here the reordering, the model and its depth); another
    order of the same candidates is another choice (another id)."""
    out = tmp_path / "choice"
    first, late = dev_evals["first"], dev_evals["late"]
    r = cli("choose", f"none={first}", f"late={late}:rerank", "--out", out)
    assert r.exit_code == 0, r.stderr
    choice = json.loads((out / "choice.json").read_text())
    base = choices.gains.per_query(first / "per_query.tsv")
    reordered = choices.gains.per_query(late / "rerank_per_query.tsv")
    means = [statistics.fmean(base.values()), statistics.fmean(reordered.values())]
    assert [c["mean"] for c in choice["candidates"]] == pytest.approx(means)
    winner = "late" if means[1] > means[0] else "none"
    assert (out / "chosen.txt").read_text() == winner + "\n"
    assert Path((out / "model.txt").read_text().strip()) == Path(minilm_l2).resolve()
    assert choice["chosen"]["name"] == winner
    if winner == "late":
        assert choice["chosen"]["rerank_depth"] == 10
        assert choice["chosen"]["rerank_scoring"] == "maxsim"
    flipped = tmp_path / "flipped"
    assert cli("choose", f"late={late}:rerank", f"none={first}", "--out",
               flipped).exit_code == 0
    ids = [json.loads((d / "artifact.json").read_text())["id"] for d in (out, flipped)]
    assert ids[0] != ids[1]


def test_choose_refuses_what_it_cannot_compare(cli, dev_evals, tmp_path):
    """Evals of other data (the test judgements beside the dev ones: the test queries are
    never read for a choice), a run the eval has not, a candidate named twice, one candidate,
    a malformed candidate: one line each, nothing written."""
    out = tmp_path / "out"
    first, late, test = dev_evals["first"], dev_evals["late"], dev_evals["test"]
    for args, words in (
            ((f"dev={first}", f"test={test}"), ("evaluated on other data", "one dev set")),
            ((f"a={first}", f"b={first}:rerank"), ("no rerank_per_query.tsv",)),
            ((f"a={first}", f"a={late}:rerank"), ("candidate 'a' is named twice",)),
            ((f"a={first}",), ("two or more candidates",)),
            ((f"{first}", f"b={late}"), ("a candidate is NAME=EVAL",)),
            ((f"a={first}", f"b={tmp_path / 'none'}"), ("none",))):
        r = cli("choose", *args, "--out", out)
        one_line_error(r, *words)
        assert not out.exists()


@pytest.mark.slow
def test_the_dev_choice_worked_example_runs_as_written(cli, minilm_l2, tmp_path):
    """docs/commands.md's third retrieval example, line by line ($MODEL and runs/ put where
    this test keeps them): 50 questions held out, the choice the highest dev mean that gains
    over the original, or the original."""
    lines = worked_example("### Search, round three")
    assert [w[1] for w in lines] == ["split", "finetune", "eval", "eval", "eval", "choose"]
    for words in lines:
        args = []
        for w in words[1:]:
            w = w.replace("$MODEL", str(minilm_l2))
            w = w.replace("=runs/", f"={tmp_path}/")
            w = str(tmp_path / w[len("runs/"):]) if w.startswith("runs/") else w
            args.append(str(EXAMPLES.parent / w) if w.startswith("examples/") else w)
        r = cli(*args, "--precision", "fp32") if words[1] in ("finetune", "eval") else cli(*args)
        assert r.exit_code == 0, (words, r.stderr)
    assert len((tmp_path / "split" / "dev" / "queries.jsonl").read_text().splitlines()) == 50
    choice = json.loads((tmp_path / "choice" / "choice.json").read_text())
    means = {c["name"]: c["mean"] for c in choice["candidates"]}
    gaining = [n for n in means if n != "original" and means[n] > means["original"]]
    expected = max(gaining, key=means.get) if gaining else "original"
    assert (tmp_path / "choice" / "chosen.txt").read_text().strip() == expected
