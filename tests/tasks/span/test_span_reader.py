"""Reading SQuAD files: the official nested JSON, the flat layouts, and bad input."""

import copy
import json

import pytest

from bertctl.errors import BertctlError
from bertctl.tasks.span.reader import SpanColumns, read_span_examples
from helpers import FIXTURES

SQUAD = FIXTURES / "squad"
V2 = SQUAD / "dev-v2.0-sample.json"
V1 = SQUAD / "dev-v1.1-sample.json"


def _doc(path=V2):
    return json.loads(path.read_text(encoding="utf-8"))


def _write(tmp_path, doc, name="data.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_nested_v2_and_v1():
    doc = _doc()
    qas = [(p["context"], q) for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
    ex = read_span_examples(V2, version_2=True)
    assert len(ex) == len(qas) == 58
    assert ex.is_impossible.sum() == sum(q["is_impossible"] for _, q in qas) == 32
    assert ex.ids == [q["id"] for _, q in qas]
    assert ex.contexts == [c for c, _ in qas]
    first = qas[1][1]
    assert ex.answer_texts[1] == [a["text"] for a in first["answers"]]
    assert ex.answer_starts[1] == [a["answer_start"] for a in first["answers"]]
    # plausible_answers of unanswerable questions are not answers
    i = int(ex.is_impossible.argmax())
    assert ex.answer_texts[i] == [] and qas[i][1]["plausible_answers"]
    assert ex.titles[0] == "Normans" and ex.where[0].startswith("article 1 'Normans', paragraph 1")
    v1 = read_span_examples(V1, version_2=False)
    assert len(v1) == 26 and not v1.is_impossible.any()
    assert v1.gold_answers() == {q: a for q, a in ex.gold_answers().items() if a}


def _flat_rows(doc):
    return [{"id": q["id"], "title": a["title"], "context": p["context"], "question": q["question"],
             "answers": {"text": [x["text"] for x in q["answers"]],
                         "answer_start": [x["answer_start"] for x in q["answers"]]}}
            for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]


def _same(a, b):
    for f in ("ids", "titles", "questions", "contexts", "answer_texts", "answer_starts"):
        assert getattr(a, f) == getattr(b, f), f
    assert (a.is_impossible == b.is_impossible).all()


def test_flat_layouts_read_like_nested(tmp_path):
    import datasets
    nested = read_span_examples(V2, version_2=True)
    rows = _flat_rows(_doc())
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _same(read_span_examples(jsonl, version_2=True), nested)
    ds = datasets.Dataset.from_list(rows)
    ds.to_parquet(str(tmp_path / "dev.parquet"))
    _same(read_span_examples(tmp_path / "dev.parquet", version_2=True), nested)
    ds.save_to_disk(str(tmp_path / "dev_arrow"))
    _same(read_span_examples(tmp_path / "dev_arrow", version_2=True), nested)
    # JSON lines named .json are a table too
    (tmp_path / "dev.json").write_text(jsonl.read_text(encoding="utf-8"), encoding="utf-8")
    _same(read_span_examples(tmp_path / "dev.json", version_2=True), nested)


def test_flat_generic_columns(tmp_path):
    rows = [{"qid": r["id"], "passage": r["context"], "query": r["question"],
             "spans": {"answer": r["answers"]["text"], "char": r["answers"]["answer_start"]}}
            for r in _flat_rows(_doc(V1))]
    path = tmp_path / "custom.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cols = SpanColumns(id="qid", context="passage", question="query", answers="spans",
                       answer_text="answer", answer_start="char")
    ex = read_span_examples(path, version_2=False, columns=cols)
    nested = read_span_examples(V1, version_2=False)
    nested.titles = [""] * len(nested)          # the custom file has no title column
    _same(ex, nested)
    with pytest.raises(BertctlError, match=r"custom.jsonl: column 'id' not found"):
        read_span_examples(path, version_2=False)


Q0 = r"article 1 'Normans', paragraph 1, question 56ddde6b9a695914005b9628"


def _edit(fn, src=V2):
    doc = copy.deepcopy(_doc(src))
    fn(doc)
    return doc


@pytest.mark.parametrize("edit, version_2, message", [
    (lambda d: d["data"][0]["paragraphs"][1]["qas"][2].pop("id"), True,
     r"article 1 'Normans', paragraph 2, question 3: missing field 'id'"),
    (lambda d: d["data"][1]["paragraphs"][0].pop("context"), True,
     r"article 2 'Computational_complexity_theory', paragraph 1: missing field 'context'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].pop("question"), True,
     Q0 + r": missing field 'question'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][1].pop("answer_start"), True,
     Q0 + r", answer 2: missing field 'answer_start'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start="159"),
     True, Q0 + r", answer 1: field 'answer_start' should be int, got str"),
    (lambda d: d["data"][0]["paragraphs"][2].update(context="  \n"), True,
     r"article 1 'Normans', paragraph 3, question \w+: empty passage"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][1].update(
        id=d["data"][0]["paragraphs"][0]["qas"][0]["id"]), True,
     Q0 + r": duplicate question id \(first at "
     r"article 1 'Normans', paragraph 1, question 56ddde6b9a695914005b9628\)"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][2].update(text=" "),
     True, Q0 + r": empty answer text"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(is_impossible=True), True,
     Q0 + r": is_impossible is true but the question has answers"),
    (lambda d: d.update(data={"Normans": []}), True, r"top level: field 'data' should be list"),
])
def test_nested_errors(tmp_path, edit, version_2, message):
    path = _write(tmp_path, _edit(edit))
    with pytest.raises(BertctlError, match=r"data.json: " + message):
        read_span_examples(path, version_2)


def test_v1_file_with_unanswerable_question(tmp_path):
    with pytest.raises(BertctlError, match=r"dev-v2.0-sample.json: article 1 'Normans', "
                       r"paragraph 1, question 5ad39d53604f3c001a3fe8d1: no answers"):
        read_span_examples(V2, version_2=False)


def test_flat_errors(tmp_path):
    rows = _flat_rows(_doc(V1))
    rows[3]["answers"] = {"text": ["a", "b"], "answer_start": [1]}
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(BertctlError, match=rf"bad.jsonl: row 4, question {rows[3]['id']}: "
                       r"2 answer texts but 1 answer starts"):
        read_span_examples(path, version_2=False)
    rows = _flat_rows(_doc(V1))
    rows[5]["context"] = ""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(BertctlError, match=r"row 6, question \w+: empty passage"):
        read_span_examples(path, version_2=False)
    with pytest.raises(BertctlError, match=r"nope.json: file not found"):
        read_span_examples(tmp_path / "nope.json", version_2=True)
