"""`bertctl audit`: the streaming n-gram matcher against a plain definition of the rule (every
n-gram of every task text as a set, every corpus line's n-grams as a set, intersect), the
artifact's figures and locations, and bad input."""

import json
import random
import re
import unicodedata

import pytest

from bertctl.data import overlap

from helpers import ROOT

SST2_DEV = ROOT / "examples/glue/SST-2/dev.tsv"


def plain_words(text: str) -> list[str]:
    """The audit's words, written plainly: lowercase, accents stripped, letters and digits."""
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
    return re.findall(r"[^\W_]+", text)


def plain_audit(texts, lines, ngram, min_ngram) -> set[int]:
    def grams(ws, n):
        return {tuple(ws[i:i + n]) for i in range(len(ws) - n + 1)}

    corpus_words = [plain_words(line) for line in lines]
    found = set()
    for i, text in enumerate(texts):
        ws = plain_words(text)
        if len(ws) < min_ngram:
            continue
        n = min(ngram, len(ws))
        if any(grams(ws, n) & grams(cw, n) for cw in corpus_words):
            found.add(i)
    return found


def test_the_matcher_finds_what_the_plain_definition_finds():
    rows = SST2_DEV.read_text(encoding="utf-8").splitlines()[1:]
    texts = [r.split("\t")[0] for r in rows[:300]]
    books = (ROOT / "examples/corpus/alice.txt").read_text(encoding="utf-8").splitlines()
    rng = random.Random(0)
    lines = [line for line in books[:400] if line.strip()]
    # Plant pieces of task texts: whole, a 13-word window, 12 words (not enough), recased and
    # re-punctuated, accented, and two halves split over two lines (must not match).
    for i in rng.sample(range(300), 40):
        ws = texts[i].split()
        kind = i % 5
        if kind == 0:
            planted = [texts[i]]
        elif kind == 1:
            planted = ["And so " + " ".join(ws[:13]).upper() + " , she said"]
        elif kind == 2:
            planted = [" ".join(ws[:12]) + " xyzzy"]
        elif kind == 3:
            planted = [" ".join(w + ("," if j % 3 else "") for j, w in enumerate(ws))
                       .replace("e", "\u00e9")]
        else:
            half = len(ws) // 2
            planted = [" ".join(ws[:half]), " ".join(ws[half:])]
        at = rng.randrange(len(lines))
        lines[at:at] = planted
    index = overlap.TaskTexts.index(texts, 13, 8)
    batches = [lines[i:i + 37] for i in range(0, len(lines), 37)]
    got = {m.text for m in index.scan(iter(batches))}
    want = plain_audit(texts, lines, 13, 8)
    assert got == want and len(want) >= 20
    assert index.audited == sum(len(plain_words(t)) >= 8 for t in texts)


def test_matches_come_as_the_corpus_streams():
    index = overlap.TaskTexts.index(["one two three four five six seven eight nine ten"], 13, 8)

    def lines():
        yield ["one two three four five six seven eight nine ten"]
        raise RuntimeError("read past the batch that matched")

    assert next(index.scan(lines())).line == 0


@pytest.fixture
def corpus_files(tmp_path):
    rows = SST2_DEV.read_text(encoding="utf-8").splitlines()[1:]
    a = tmp_path / "corpus" / "a.txt"
    b = tmp_path / "corpus" / "b.txt"
    a.parent.mkdir()
    a.write_text("First line of a.\n\nSecond document of a.\n", encoding="utf-8")
    b.write_text("Nothing here.\n" + rows[2].split("\t")[0] + "\n\n" + rows[0].split("\t")[0]
                 + "\n", encoding="utf-8")
    return a, b


def test_the_artifact_names_each_overlap_and_where_it_is(cli, corpus_files, tmp_path):
    a, b = corpus_files
    out = tmp_path / "audit"
    r = cli("audit", a, b, "--against", SST2_DEV, "--out", out)
    assert r.exit_code == 0, r.stderr
    manifest = json.loads((out / "artifact.json").read_text())
    task = manifest["stats"]["tasks"][str(SST2_DEV)]
    assert task["columns"] == ["sentence"] and task["overlapping"] == 2
    assert task["examples"] == 400 and task["audited"] + task["too_short"] == 400
    assert task["share"] == round(2 / task["audited"], 6)
    found = [json.loads(line) for line in (out / "overlaps.jsonl").read_text().splitlines()]
    assert [(f["row"], f["corpus"], f["sentence"]) for f in found] == [
        (1, str(b), 3), (3, str(b), 2)]
    assert manifest["stats"]["rule"]["ngram"] == 13 and manifest["kind"] == "audit"


def test_a_conll_column_file_is_audited_sentence_by_sentence(cli, corpus_files, tmp_path):
    """A tagging task's dev file (CoNLL-2003's layout): each sentence its words joined, the
    third sentence planted in the corpus (with the text's own spacing, not the file's)."""
    a, _ = corpus_files
    conll = ROOT / "tests/fixtures/conll2003/valid.txt"
    planted = tmp_path / "news.txt"
    planted.write_text("Some other text.\nWest Indian all-rounder Phil Simmons took four for 38 "
                       "on Friday as Leicestershire beat Somerset by an innings and 39 runs in "
                       "two days to take over at the head of the county championship.\n",
                       encoding="utf-8")
    out = tmp_path / "audit"
    r = cli("audit", a, planted, "--against", conll, "--out", out)
    assert r.exit_code == 0, r.stderr
    task = json.loads((out / "artifact.json").read_text())["stats"]["tasks"][str(conll)]
    assert task["columns"] == ["tokens"] and task["overlapping"] == 1
    found = [json.loads(line) for line in (out / "overlaps.jsonl").read_text().splitlines()]
    assert [(f["row"], f["corpus"]) for f in found] == [(3, str(planted))]


def test_a_squad_file_is_audited_question_by_question(cli, corpus_files, tmp_path):
    """A nested SQuAD JSON file: each question with its passage; a passage in the corpus is
    found for every question asked of it."""
    a, _ = corpus_files
    squad = ROOT / "tests/fixtures/squad/dev-v1.1-sample.json"
    doc = json.loads(squad.read_text(encoding="utf-8"))
    first = doc["data"][0]["paragraphs"][0]
    wiki = tmp_path / "wiki.txt"
    wiki.write_text("The Normans\n" + first["context"].split(". ")[0] + ".\n", encoding="utf-8")
    out = tmp_path / "audit"
    r = cli("audit", a, wiki, "--against", squad, "--out", out)
    assert r.exit_code == 0, r.stderr
    task = json.loads((out / "artifact.json").read_text())["stats"]["tasks"][str(squad)]
    questions = sum(len(p["qas"]) for d in doc["data"] for p in d["paragraphs"])
    assert task["columns"] == ["context", "question"] and task["examples"] == questions
    assert task["overlapping"] == len(first["qas"])
    found = [json.loads(line) for line in (out / "overlaps.jsonl").read_text().splitlines()]
    assert sorted({f["row"] for f in found}) == list(range(1, len(first["qas"]) + 1))


def test_bad_input_is_one_line_and_writes_nothing(cli, corpus_files, tmp_path):
    a, b = corpus_files
    labels_only = tmp_path / "labels.tsv"
    labels_only.write_text("id\tlabel\n1\t0\n2\t1\n", encoding="utf-8")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    sst2 = SST2_DEV
    headerless = tmp_path / "cola_dev.tsv"   # CoLA's layout: source, label, mark, sentence
    headerless.write_text("gj04\t1\t\tOur friends won't buy this analysis, let alone the next "
                          "one we propose.\ngj04\t1\t\tOne more pseudo-generalization and I'm "
                          "giving up.\n", encoding="utf-8")
    cases = [
        ((a,), "no task files given"),
        ((a, "--against", tmp_path / "missing.tsv"), "missing.tsv: file not found"),
        ((a, "--against", labels_only), "no column with text to audit"),
        ((a, "--against", sst2, "--against-column", "review"), "column 'review' not found"),
        ((empty, "--against", sst2), "corpus holds no text"),
        ((a, "--against", sst2, "--min-ngram", "20"), "min_ngram 20 is above ngram 13"),
        ((a, "--against", headerless), "row 1, read as the header, has an empty column name"),
        ((a, "--against", b), "neither a table (.tsv, .csv, .jsonl, .parquet) nor a CoNLL "
         "column file"),
    ]
    for args, message in cases:
        out = tmp_path / "out"
        r = cli("audit", *args, "--out", out)
        assert r.exit_code == 2 and message in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not out.exists()


def test_report_shows_what_the_audit_found(cli, corpus_files, tmp_path):
    a, b = corpus_files
    r = cli("audit", a, b, "--against", SST2_DEV, "--out", tmp_path / "audit")
    assert r.exit_code == 0, r.stderr
    r = cli("report", tmp_path / "audit", "--out", tmp_path / "report")
    assert r.exit_code == 0, r.stderr
    page = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    table = page[page.index('<table class="audit">'):]
    table = table[:table.index("</table>")]
    assert f'data-file="{SST2_DEV}"' in table and 'data-value="2"' in table   # overlapping
    overlaps = page[page.index('<table class="overlaps">'):]
    assert "it s a charming and often affecting journey" in overlaps[:overlaps.index("</table>")]
