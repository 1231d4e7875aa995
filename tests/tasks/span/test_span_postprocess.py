"""Post-processing hand-built logits into answers, and the output files."""

import json

import numpy as np
import pytest

from bertctl.data.tokenizer.files import from_hf_directory
from bertctl.tasks.span.metrics import squad_v1_metrics, squad_v2_metrics
from bertctl.tasks.span.outputs import write_span_outputs
from bertctl.tasks.span.postprocess import NO_SPAN_ODDS, postprocess
from bertctl.tasks.span.reader import read_span_examples
from bertctl.tasks.span.windows import encode_windows
from helpers import FIXTURES

SQUAD = FIXTURES / "squad"
CONTEXT = ("Paris  is the CAPITAL of   France. It has the Eiffel Tower, built in 1889 for the "
           "World's Fair, and the Louvre.")
SMALL = dict(max_seq_length=24, doc_stride=6, max_query_length=8)


@pytest.fixture(scope="module")
def tok(minilm_dir):
    return from_hf_directory(minilm_dir)[0]


def _examples(tmp_path, version_2=True):
    qas = [{"id": "q1", "question": "What is Paris?", "answers": [
        {"text": "CAPITAL of   France", "answer_start": CONTEXT.index("CAPITAL")}]}]
    if version_2:
        qas.append({"id": "q2", "question": "Who built the moon?", "answers": [],
                    "is_impossible": True})
    doc = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [
        {"context": CONTEXT, "qas": qas}]}]}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return read_span_examples(path, version_2=version_2)


def _pos(w, j, text, which="start"):
    """Position in window j of the token starting (ending) at `text`'s first (last) character."""
    sl = slice(w.offsets[j], w.offsets[j + 1])
    at = CONTEXT.index(text)
    hits = (np.flatnonzero(w.char_starts[sl] == at) if which == "start"
            else np.flatnonzero(w.char_ends[sl] == at + len(text)))
    return int(hits[0]) if len(hits) else None


def _zeros(w, extra=0):
    width = int(w.lengths.max()) + extra
    return np.zeros((len(w), width)), np.zeros((len(w), width))


def test_answer_is_cut_from_the_original_characters(tmp_path, tok):
    ex = _examples(tmp_path, version_2=False)
    w = encode_windows(ex, tok, **SMALL)
    assert len(w) >= 2
    S, E = _zeros(w)
    S[0, _pos(w, 0, "CAPITAL")] = 5
    E[0, _pos(w, 0, "France", "end")] = 5
    # Question tokens and [CLS] score highest, but are no answer: even with n_best=1.
    q = slice(0, w.passage_offset[0])
    S[0, q] = E[0, q] = 50
    r = postprocess(ex, w, S, E, n_best=1)
    assert r.predictions == {"q1": "CAPITAL of   France"}
    assert r.null_odds is None
    assert r.nbest["q1"] == [{"text": "CAPITAL of   France", "probability": 1.0,
                              "start_logit": 5.0, "end_logit": 5.0}]
    assert squad_v1_metrics(ex.gold_answers(), r.predictions) == {"exact": 100.0, "f1": 100.0}


def test_length_order_and_padding(tmp_path, tok):
    ex = _examples(tmp_path, version_2=False)
    w = encode_windows(ex, tok, **SMALL)
    S, E = _zeros(w, extra=7)
    S[:] = E[:] = -20.0
    S[:, w.lengths.max():] = E[:, w.lengths.max():] = 1e6      # padding: never read
    for j in range(len(w)):
        if _pos(w, j, "built") is not None and _pos(w, j, "Fair", "end") is not None:
            S[j, _pos(w, j, "built")] = 9          # built ... Fair: 9 tokens, too long at 8
            E[j, _pos(w, j, "Fair", "end")] = 9
    j = 0
    S[j, _pos(w, j, "France")] = 3
    E[j, _pos(w, j, "Paris", "end")] = 8             # ends before the start: invalid
    E[j, _pos(w, j, "France", "end")] = 2
    r = postprocess(ex, w, S, E, max_answer_length=8)
    assert r.predictions["q1"] == "France"
    assert postprocess(ex, w, S, E, max_answer_length=9).predictions["q1"] == \
        "built in 1889 for the World's Fair"
    texts = [x["text"] for x in r.nbest["q1"]]
    assert len(texts) == len(set(texts)) and len(texts) <= 20
    probs = [x["probability"] for x in r.nbest["q1"]]
    assert probs == sorted(probs, reverse=True) and sum(probs) == pytest.approx(1.0)
    scores = [x["start_logit"] + x["end_logit"] for x in r.nbest["q1"]]
    assert scores == sorted(scores, reverse=True)
    assert len(postprocess(ex, w, S, E, n_best=3).nbest["q1"]) == 3


def test_start_only_where_it_has_most_context(tmp_path, tok):
    ex = _examples(tmp_path, version_2=False)
    w = encode_windows(ex, tok, **SMALL)
    # A token in two windows: its start counts only in the window flagged max-context.
    shared = [t for t in ("has", "the Eiffel", "Eiffel", "Tower", "built")
              if _pos(w, 0, t) is not None and _pos(w, 1, t) is not None]
    assert shared
    t = shared[0]
    best = [j for j in (0, 1) if w.max_context[w.offsets[j] + _pos(w, j, t)]]
    assert len(best) == 1
    other = 1 - best[0]
    S, E = _zeros(w)
    S[other, _pos(w, other, t)] = 10
    E[other, _pos(w, other, t, "end")] = 10
    S[best[0], _pos(w, best[0], t)] = 4
    E[best[0], _pos(w, best[0], t, "end")] = 4
    r = postprocess(ex, w, S, E)
    assert r.nbest["q1"][0] == {"text": t, "probability": pytest.approx(r.nbest["q1"][0][
        "probability"]), "start_logit": 4.0, "end_logit": 4.0}


def test_v2_null_score_threshold_and_odds(tmp_path, tok):
    ex = _examples(tmp_path)
    w = encode_windows(ex, tok, **SMALL)
    q1 = np.flatnonzero(w.example_index == 0)
    q2 = np.flatnonzero(w.example_index == 1)
    S, E = _zeros(w)
    S[q1[0], 0], E[q1[0], 0] = 2.0, 2.0        # null 4 in the first window
    S[q1[1], 0], E[q1[1], 0] = -1.0, 0.5       # null -0.5 in the second: the lowest is used
    S[q1[0], _pos(w, q1[0], "CAPITAL")] = 1.0
    E[q1[0], _pos(w, q1[0], "France", "end")] = 2.0
    S[q2, 0] = E[q2, 0] = 6.0                  # q2: null 12 everywhere, spans score 0
    r = postprocess(ex, w, S, E)
    assert r.null_odds["q1"] == pytest.approx(-0.5 - 3.0)
    assert r.predictions == {"q1": "CAPITAL of   France", "q2": ""}
    assert r.best_spans["q1"] == "CAPITAL of   France" and r.best_spans["q2"] != ""
    assert r.null_odds["q2"] == pytest.approx(12.0 - 0.0)
    null = [x for x in r.nbest["q1"] if x["text"] == ""]
    assert null == [{"text": "", "probability": pytest.approx(null[0]["probability"]),
                     "start_logit": -1.0, "end_logit": 0.5}]
    assert r.nbest["q2"][0]["text"] == ""
    assert postprocess(ex, w, S, E, null_threshold=-4.0).predictions["q1"] == ""
    assert postprocess(ex, w, S, E, null_threshold=-3.5).predictions["q1"] != ""
    assert postprocess(ex, w, S, E, null_threshold=13.0).predictions["q2"] != ""
    # the null joins the n best when it ranks below them
    assert len(postprocess(ex, w, S, E, n_best=2).nbest["q1"]) == 3


def test_no_valid_span_never_crashes(tmp_path, tok):
    for version_2 in (False, True):
        ex = _examples(tmp_path, version_2)
        w = encode_windows(ex, tok, **SMALL)
        S, E = _zeros(w)
        r = postprocess(ex, w, S, E, max_answer_length=0)
        assert set(r.predictions.values()) == {""}
        for qid in ex.ids:
            assert [x["text"] for x in r.nbest[qid]] == [""]
            assert r.nbest[qid][0]["probability"] == 1.0
        if version_2:
            assert set(r.null_odds.values()) == {NO_SPAN_ODDS}
            assert postprocess(ex, w, S, E, max_answer_length=0,
                               null_threshold=2 * NO_SPAN_ODDS).predictions["q1"] == ""


def test_oracle_logits_on_real_rows_score_100(tok):
    """Logits that point at the training targets give back every gold answer."""
    for name, v2 in (("dev-v2.0-sample.json", True), ("dev-v1.1-sample.json", False)):
        ex = read_span_examples(SQUAD / name, version_2=v2)
        w = encode_windows(ex, tok, training=True, max_seq_length=96, doc_stride=31,
                           max_query_length=24)
        S, E = _zeros(w)
        rows = np.arange(len(w))
        S[rows, w.start_positions] = 10
        E[rows, w.end_positions] = 10
        r = postprocess(ex, w, S, E)
        gold = ex.gold_answers()
        assert r.predictions == {q: (a[0] if a else "") for q, a in gold.items()}
        if v2:
            m = squad_v2_metrics(gold, r.predictions, r.null_odds)
            assert (m["exact"], m["f1"], m["best_f1"]) == (100.0, 100.0, 100.0)
        else:
            assert squad_v1_metrics(gold, r.predictions) == {"exact": 100.0, "f1": 100.0}


def test_output_files(tmp_path, tok):
    for version_2 in (False, True):
        ex = _examples(tmp_path, version_2)
        w = encode_windows(ex, tok, **SMALL)
        S, E = _zeros(w)
        r = postprocess(ex, w, S, E, max_answer_length=0 if version_2 else 30)
        out = tmp_path / f"out{int(version_2)}"
        out.mkdir()
        names = write_span_outputs(out, r)
        assert sorted(p.name for p in out.iterdir()) == sorted(names)
        assert json.loads((out / "predictions.json").read_text()) == r.predictions
        assert json.loads((out / "nbest_predictions.json").read_text()) == r.nbest
        if version_2:
            assert json.loads((out / "null_odds.json").read_text()) == r.null_odds
        else:
            assert "null_odds.json" not in names
