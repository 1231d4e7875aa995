"""Reading tagged sentences: the real CoNLL-2003 column files, tables, and one-line errors."""

import json

import numpy as np
import pytest

from bertctl.errors import BertctlError
from bertctl.tasks.tagging.reader import CONLL2003_COLUMNS, read_tagged

from helpers import FIXTURES

CONLL = FIXTURES / "conll2003"
NAMES = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_conll_column_file():
    path = CONLL / "train.txt"
    ex = read_tagged(path)
    lines = _lines(path)
    word_lines = [i for i, line in enumerate(lines, 1) if line and not line.startswith("-DOCSTART-")]
    starts = [i for i in word_lines if i == 1 or not lines[i - 2] or lines[i - 2].startswith("-D")]
    assert ex.num_sentences == len(starts) == 138 and ex.num_words == len(word_lines)
    assert ex.lines.tolist() == starts
    assert ex.words == [lines[i - 1].split()[0] for i in word_lines]
    assert ex.tags.tolist() == [lines[i - 1].split()[3] for i in word_lines]
    # Every word's file:line points at its own line.
    assert [ex.where(w) for w in (0, 9, ex.num_words - 1)] == [
        f"{path}:{word_lines[w]}" for w in (0, 9, ex.num_words - 1)]
    assert ex.words[:2] == ["EU", "rejects"] and ex.tags[:3].tolist() == ["B-ORG", "O", "B-MISC"]
    # -DOCSTART- lines delimit documents: as many distinct ids as documents, in file order.
    docs = sum(line.startswith("-DOCSTART-") for line in lines)
    assert len(np.unique(ex.doc_ids)) == docs and np.all(np.diff(ex.doc_ids) >= 0)


def test_columns_by_name_or_index():
    path = CONLL / "train.txt"
    by_name = read_tagged(path, token_column="token", tag_column="chunk",
                          column_names=CONLL2003_COLUMNS)
    by_index = read_tagged(path, token_column=0, tag_column=2)
    assert np.array_equal(by_name.tags, by_index.tags) and by_name.tags[0] == "B-NP"
    assert read_tagged(path, tag_column="-1").tags[0] == "B-ORG"
    with pytest.raises(BertctlError, match="needs column names"):
        read_tagged(path, tag_column="ner")
    with pytest.raises(BertctlError, match="no tag column 'tag'"):
        read_tagged(path, tag_column="tag", column_names=CONLL2003_COLUMNS)
    with pytest.raises(BertctlError, match=r":3: no tag column 7 \(the line has 4 columns\)"):
        read_tagged(path, tag_column=7)


def test_wrong_column_count_names_file_line(tmp_path):
    lines = _lines(CONLL / "train.txt")[:20]
    lines[12] = "Blackburn NNP I-PER"
    path = tmp_path / "bad.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BertctlError, match=rf"^{path}:13: 3 columns, expected 4"):
        read_tagged(path)


def test_empty_and_undecodable_files(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("-DOCSTART- -X- -X- O\n\n\n")
    with pytest.raises(BertctlError, match="no sentences"):
        read_tagged(empty)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"a NN B-NP O\n\nb\xe9 NN B-NP O\n")
    with pytest.raises(BertctlError, match=rf"^{latin}:3: not UTF-8"):
        read_tagged(latin)
    with pytest.raises(BertctlError, match="file not found"):
        read_tagged(tmp_path / "missing.txt")


def _rows():
    ex = read_tagged(CONLL / "valid.txt")
    return [(ex.words[a:b], ex.tags[a:b].tolist()) for a, b in zip(ex.offsets[:-1], ex.offsets[1:])]


def test_json_lines_with_string_tags(tmp_path):
    rows = _rows()[:20]
    path = tmp_path / "dev.jsonl"
    path.write_text("".join(json.dumps({"id": i, "words": w, "ner": t}) + "\n"
                            for i, (w, t) in enumerate(rows)))
    ex = read_tagged(path, token_column="words", tag_column="ner")
    assert ex.num_sentences == 20 and ex.line_kind == "row"
    assert ex.words == [w for ws, _ in rows for w in ws]
    assert ex.tags.tolist() == [t for _, ts in rows for t in ts]
    assert ex.where(int(ex.offsets[3])) == f"{path}: row 4"
    assert len(np.unique(ex.doc_ids)) == 20                    # each row its own document


def test_parquet_with_integer_tags_and_label_list(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    rows = _rows()[:10]
    table = pa.table({"tokens": [w for w, _ in rows],
                      "ner_tags": [[NAMES.index(t) for t in ts] for _, ts in rows]})
    path = tmp_path / "dev.parquet"
    pq.write_table(table, path)
    ex = read_tagged(path, labels=tuple(NAMES))
    assert ex.tags.tolist() == [t for _, ts in rows for t in ts]
    with pytest.raises(BertctlError, match="integer tags; give the label list"):
        read_tagged(path)
    with pytest.raises(BertctlError, match=r"row 1, column 'ner_tags': tag \d+ is not an index"):
        read_tagged(path, labels=("O", "B-PER"))


def test_save_to_disk_with_class_labels(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = _rows()[:10]
    features = datasets.Features({
        "tokens": datasets.Sequence(datasets.Value("string")),
        "ner_tags": datasets.Sequence(datasets.ClassLabel(names=NAMES))})
    ds = datasets.Dataset.from_dict({"tokens": [w for w, _ in rows],
                                     "ner_tags": [[NAMES.index(t) for t in ts] for _, ts in rows]},
                                    features=features)
    ds.save_to_disk(str(tmp_path / "dev"))
    ex = read_tagged(tmp_path / "dev")             # the names come from the saved features
    assert ex.tags.tolist() == [t for _, ts in rows for t in ts]


def test_table_errors(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"tokens": ["a", "b"], "ner_tags": ["O", "O"]}) + "\n"
                    + json.dumps({"tokens": ["a", "b"], "ner_tags": ["O"]}) + "\n")
    with pytest.raises(BertctlError, match=rf"^{path}: row 2: 2 tokens but 1 tags"):
        read_tagged(path)
    path.write_text(json.dumps({"tokens": ["a"], "ner_tags": ["O"]}) + "\n"
                    + json.dumps({"tokens": [], "ner_tags": []}) + "\n")
    with pytest.raises(BertctlError, match=r"row 2: empty sentence"):
        read_tagged(path)
    with pytest.raises(BertctlError, match="no token column 'words'"):
        read_tagged(path, token_column="words")
    path.write_text(json.dumps({"tokens": ["a"], "ner_tags": ["O"]}) + "\n")
    with pytest.raises(BertctlError, match="a label list is for integer tags"):
        read_tagged(path, labels=("O", "B-PER"))


def test_untagged_words_are_read_only_where_allowed(tmp_path):
    """Text for a teacher to tag: a column file of the words alone, or a table without the tag
    column. Its words carry O placeholders and `labelled` is False; where tags are needed
    (untagged_ok unset) the file is refused by name."""
    tagged = read_tagged(CONLL / "train.txt")
    words = tmp_path / "words.txt"
    words.write_text("".join((line.split()[0] if line.strip() else "") + "\n"
                             for line in _lines(CONLL / "train.txt")), encoding="utf-8")
    table = tmp_path / "words.jsonl"
    table.write_text("".join(json.dumps({"tokens": tagged.words[a:b]}) + "\n" for a, b in
                             zip(tagged.offsets[:-1], tagged.offsets[1:])), encoding="utf-8")
    for path in (words, table):
        got = read_tagged(path, untagged_ok=True)
        assert not got.labelled and got.words == tagged.words
        assert set(got.tags.tolist()) == {"O"} and len(got.tags) == len(got.words)
        if path is words:
            np.testing.assert_array_equal(got.offsets, tagged.offsets)
            np.testing.assert_array_equal(got.doc_ids, tagged.doc_ids)
    assert read_tagged(CONLL / "train.txt", untagged_ok=True).labelled
    with pytest.raises(BertctlError, match=f"{words}: words without tags"):
        read_tagged(words)
    with pytest.raises(BertctlError, match="no tag column 'ner_tags'"):
        read_tagged(table)
