"""Task files -> examples -> features -> batches, on real GLUE / SWAG subsets (tests/fixtures/glue)."""

import json

import numpy as np
import pytest
import torch

from bertctl import tasks
from bertctl.data.collate import length_grouped_batches
from bertctl.errors import BertctlError
from helpers import FIXTURES, ROOT, encode_examples, read_examples

FIX = FIXTURES / "glue"

# preset -> (fixture dir, header?, text column indices in the raw TSV, label column index)
GLUE = {
    "glue/sst2": ("SST-2", True, [0], 1),
    "glue/cola": ("CoLA", False, [3], 1),
    "glue/mrpc": ("MRPC", True, [3, 4], 0),
    "glue/rte": ("RTE", True, [1, 2], 3),
    "glue/sts-b": ("STS-B", True, [7, 8], 9),
    "glue/wnli": ("WNLI", True, [1, 2], 3),
}


@pytest.fixture(scope="module")
def model_dir(minilm_dir):
    return minilm_dir


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def raw_rows(path, header):
    """An independent parse of a GLUE TSV: BOM dropped, split on newlines and tabs, no quoting."""
    lines = path.read_bytes().decode("utf-8-sig").split("\n")
    if lines[-1] == "":
        lines.pop()
    rows = [line.split("\t") for line in lines]
    return rows[1:] if header else rows


def read(spec, path, **kw):
    return read_examples(tasks.make_task_spec(spec) if isinstance(spec, str) else spec, path, **kw)


# --- presets read their real files ---------------------------------------------------------------

@pytest.mark.parametrize("preset", sorted(GLUE))
@pytest.mark.parametrize("split", ["train", "dev"])
def test_glue_preset_reads_fixture(preset, split):
    d, header, text_idx, label_idx = GLUE[preset]
    path = FIX / d / f"{split}.tsv"
    ex = read(preset, path, require_labels=True)
    rows = raw_rows(path, header)
    assert len(ex) == len(rows)
    assert ex.text_a == [r[text_idx[0]] for r in rows]
    if len(text_idx) == 2:
        assert ex.text_b == [r[text_idx[1]] for r in rows]
    else:
        assert ex.text_b is None
    raw_labels = [r[label_idx] for r in rows]
    if preset == "glue/sts-b":
        assert ex.labels.dtype == np.float64 and ex.label_list is None
        np.testing.assert_array_equal(ex.labels, [float(x) for x in raw_labels])
    else:
        assert ex.labels.dtype == np.int64
        assert [ex.label_list[i] for i in ex.labels] == raw_labels


def test_known_rows():
    # CoLA: headerless, sentence at index 3, label at index 1; dev has no trailing newline.
    cola = read("glue/cola", FIX / "CoLA" / "dev.tsv")
    assert cola.text_a[0] == "The sailors rode the breeze clear of the rocks."
    assert cola.label_list[cola.labels[0]] == "1"
    assert cola.text_a[-1] == "I won't ask you to believe that he tried to force me to give her any money."
    # MRPC: the BOM is not part of the first column's name; the unbalanced quote stays in the text.
    mrpc = read("glue/mrpc", FIX / "MRPC" / "dev.tsv")
    assert mrpc.text_b[0] == '"The foodservice pie business does not fit our long-term growth strategy.'
    assert mrpc.label_list[mrpc.labels[0]] == "1"
    # RTE train index 2164 (row 165 of the subset) starts with a space and a bare quote.
    rte = read("glue/rte", FIX / "RTE" / "train.tsv")
    assert rte.text_a[164].startswith(' "That film wasn\'t too successful')
    assert rte.text_b[164] == 'The film "WarGames" was shot in 1983.'
    assert rte.label_list[rte.labels[164]] == "not_entailment"
    stsb = read("glue/sts-b", FIX / "STS-B" / "dev.tsv")
    assert (stsb.text_a[0], stsb.text_b[0], stsb.labels[0]) == (
        "A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0)
    sst = read("glue/sst2", FIX / "SST-2" / "train.tsv")
    assert sst.text_a[0] == "hide new secretions from the parental units "


def test_quoting_must_be_off_for_glue():
    # The same MRPC file read with quoting on: train fails to parse, dev silently loses a row.
    quoted = tasks.make_task_spec("glue/mrpc", quoting=True)
    # (a quote opened in row 78 swallows the next line: a field too few there)
    with pytest.raises(BertctlError, match=r"MRPC/train.tsv: row 78 \(line 79\) has 4 fields "
                                           r"where the header has 5"):
        read_examples(quoted, FIX / "MRPC" / "train.tsv")
    assert len(read_examples(quoted, FIX / "MRPC" / "dev.tsv")) == 99
    assert len(read("glue/mrpc", FIX / "MRPC" / "dev.tsv")) == 100


def test_swag_reads_as_multiple_choice():
    ex = read("swag", FIX / "swag" / "sample.jsonl", require_labels=True)
    rows = [json.loads(line) for line in (FIX / "swag" / "sample.jsonl").read_text().splitlines()]
    assert len(ex) == len(rows) == 10
    assert ex.text_a == [r["sent1"] for r in rows]
    assert ex.choices[1] == [f"{rows[1]['sent2']} {rows[1][f'ending{i}']}" for i in range(4)]
    assert ex.labels.tolist() == [r["label"] for r in rows]
    assert ex.label_list is None and ex.spec.num_choices == 4


def test_other_glue_presets_know_their_layouts(tmp_path):
    # QNLI, QQP and MNLI are not in the fixtures (too big to subset sensibly here): check their
    # columns against files with the original GLUE headers.
    (tmp_path / "qnli.tsv").write_text(
        "index\tquestion\tsentence\tlabel\n0\tWhat is it?\tIt is a test.\tentailment\n"
        "1\tWho?\tNobody.\tnot_entailment\n")
    (tmp_path / "qqp.tsv").write_text(
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t2\t3\tHow?\tWhy?\t0\n4\t5\t6\tA?\tA?\t1\n")
    (tmp_path / "mnli.tsv").write_text(
        "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
        "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\t"
        "label5\tgold_label\n"
        "0\t1\t1e\tfiction\t( x )\t( y )\t(ROOT x)\t(ROOT y)\tThe cat sat.\tA cat sat.\tentailment\t"
        "entailment\tneutral\tentailment\tentailment\tentailment\n"
        "1\t2\t2n\tfiction\t( x )\t( y )\t(ROOT x)\t(ROOT y)\tIt rained.\tIt was dry.\tcontradiction\t"
        "contradiction\tcontradiction\tcontradiction\tcontradiction\tcontradiction\n")
    qnli = read("glue/qnli", tmp_path / "qnli.tsv")
    assert qnli.text_b == ["It is a test.", "Nobody."] and qnli.labels.tolist() == [0, 1]
    qqp = read("glue/qqp", tmp_path / "qqp.tsv")
    assert qqp.text_a == ["How?", "A?"] and qqp.labels.tolist() == [0, 1]
    assert tasks.PRESETS["glue/qqp"].metric == "f1_accuracy"
    mnli = read("glue/mnli", tmp_path / "mnli.tsv")
    assert mnli.text_a == ["The cat sat.", "It rained."]
    assert mnli.label_list == ("contradiction", "entailment", "neutral")
    assert mnli.labels.tolist() == [1, 0]
    assert set(tasks.PRESETS["glue/mnli"].files) >= {"train", "dev_matched", "dev_mismatched"}
    (tmp_path / "dev_matched.tsv").write_text("x")
    assert tasks.PRESETS["glue/mnli"].split_files(tmp_path) == {"dev_matched": tmp_path / "dev_matched.tsv"}


def test_preset_metrics():
    assert {n: s.metric for n, s in tasks.PRESETS.items()} == {
        "glue/sst2": "accuracy", "glue/cola": "matthews", "glue/mrpc": "f1_accuracy",
        "glue/rte": "accuracy", "glue/wnli": "accuracy", "glue/qnli": "accuracy",
        "glue/qqp": "f1_accuracy", "glue/mnli": "accuracy", "glue/sts-b": "pearson_spearman",
        "swag": "accuracy", "squad": "squad", "squad_v2": "squad", "conll2003": "conlleval",
        "retrieval": "ndcg@10", "glue/sts-b-cosine": "spearman", "reranking": "ndcg@10"}


# --- other formats and custom tasks --------------------------------------------------------------

def test_custom_task_in_every_format(tmp_path):
    import datasets
    rows = [{"premise": "A man sleeps.", "hypothesis": "Someone rests.", "label": "yes"},
            {"premise": "NA", "hypothesis": "1.5", "label": "no"},        # stay text, not NaN / float
            {"premise": 'He said "hi, there".', "hypothesis": "x", "label": "yes"}]
    spec = tasks.make_task_spec(family="pair", text_columns=["premise", "hypothesis"])
    assert spec.metric == "accuracy" and spec.label_column == "label"
    ds = datasets.Dataset.from_list(rows)
    ds.to_csv(tmp_path / "d.csv", index=False)
    ds.to_json(tmp_path / "d.jsonl")
    ds.to_parquet(tmp_path / "d.parquet")
    ds.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": ds, "validation": ds}).save_to_disk(str(tmp_path / "dict"))
    for name in ["d.csv", "d.jsonl", "d.parquet", "saved", "dict/train"]:
        ex = read_examples(spec, tmp_path / name)
        assert ex.text_a == [r["premise"] for r in rows], name
        assert ex.text_b == [r["hypothesis"] for r in rows], name
        assert ex.label_list == ("no", "yes") and ex.labels.tolist() == [1, 0, 1], name
    with pytest.raises(BertctlError, match=r"dict: a DatasetDict of the splits train, validation"):
        read_examples(spec, tmp_path / "dict")


def test_headerless_and_numeric_labels(tmp_path):
    p = tmp_path / "h.tsv"
    p.write_text("a\t10\tgood film\nb\t2\tbad film\nc\t2\tok film")   # no trailing newline
    spec = tasks.make_task_spec(family="single", text_columns=[2], label_column=1, header=False)
    ex = read_examples(spec, p)
    assert ex.text_a == ["good film", "bad film", "ok film"]
    assert ex.label_list == ("2", "10")          # numeric labels sort numerically
    assert ex.labels.tolist() == [1, 0, 0]
    named = tasks.make_task_spec(family="single", text_columns=["text"], label_column="y",
                                 header=False, column_names=["id", "y", "text"])
    assert read_examples(named, p).text_a == ex.text_a


def test_json_labels_of_other_types(tmp_path):
    p = tmp_path / "j.jsonl"
    p.write_text("".join(json.dumps({"t": t, "label": y}) + "\n"
                         for t, y in [("a", 1), ("b", 0), ("c", 1)]))
    ex = read_examples(tasks.make_task_spec("glue/sst2", text_columns=["t"], format="json"), p)
    assert ex.label_list == ("0", "1") and ex.labels.tolist() == [1, 0, 1]


def test_file_without_labels_is_for_prediction(tmp_path):
    p = tmp_path / "test.tsv"
    p.write_text("index\tsentence\n0\tuneasy mishmash of styles .\n1\ta fine film .\n")
    ex = read("glue/sst2", p)
    assert ex.labels is None and ex.label_list == ("0", "1")
    with pytest.raises(BertctlError, match=r"test.tsv: column 'label' not found; the file has "
                                           r"columns 'index', 'sentence'"):
        read("glue/sst2", p, require_labels=True)


# --- bad input: one line naming file, row, column ------------------------------------------------

def test_missing_column_names_existing_ones():
    with pytest.raises(BertctlError) as e:
        read(tasks.make_task_spec("glue/rte", text_columns=["premise", "sentence2"]),
             FIX / "RTE" / "dev.tsv")
    assert str(e.value) == (f"{FIX / 'RTE' / 'dev.tsv'}: column 'premise' not found; the file has "
                            "columns 'index', 'sentence1', 'sentence2', 'label'")


def test_empty_text_cell(tmp_path):
    p = tmp_path / "e.tsv"
    p.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\t  \tentailment\n")
    with pytest.raises(BertctlError) as e:
        read("glue/rte", p)
    assert str(e.value) == f"{p}: row 2, column 'sentence2': empty text"
    p.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\n")   # short row
    with pytest.raises(BertctlError, match=r"row 2 \(line 3\) has 2 fields where the header "
                                           r"has 4: a field too few"):
        read("glue/rte", p)


def test_regression_label_not_a_number(tmp_path):
    p = tmp_path / "s.tsv"
    lines = (FIX / "STS-B" / "dev.tsv").read_text().splitlines()[:4]
    lines[3] = lines[3].rsplit("\t", 1)[0] + "\thigh"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(BertctlError) as e:
        read("glue/sts-b", p)
    assert str(e.value) == f"{p}: row 3, column 'score': regression label 'high' is not a (finite) number"


def test_dev_label_not_in_train(tmp_path):
    train = read("glue/rte", FIX / "RTE" / "train.tsv")
    p = tmp_path / "dev.tsv"
    p.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\td\tneutral\n")
    with pytest.raises(BertctlError) as e:
        read_examples(train.spec, p, label_list=train.label_list)
    assert str(e.value) == (f"{p}: row 2, column 'label': label 'neutral' is not one of the "
                            "training labels ['entailment', 'not_entailment']")
    # A custom task takes its labels from train: dev must not bring new ones.
    spec = tasks.make_task_spec(family="pair", text_columns=["sentence1", "sentence2"])
    tr = read_examples(spec, FIX / "RTE" / "train.tsv")
    assert tr.label_list == ("entailment", "not_entailment")
    with pytest.raises(BertctlError, match=r"row 2, column 'label': label 'neutral'"):
        read_examples(spec, p, label_list=tr.label_list)


def test_multiple_choice_missing_ending(tmp_path):
    rows = [json.loads(line) for line in (FIX / "swag" / "sample.jsonl").read_text().splitlines()]
    rows[2]["ending3"] = ""
    p = tmp_path / "swag.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(BertctlError) as e:
        read("swag", p)
    assert str(e.value) == f"{p}: row 3, column 'ending3': empty text"
    del rows[2]["ending3"]
    for r in rows:
        r.pop("ending3", None)
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(BertctlError, match=r"column 'ending3' not found; the file has columns"):
        read("swag", p)


def test_bad_choice_label_and_empty_file(tmp_path):
    rows = [json.loads(line) for line in (FIX / "swag" / "sample.jsonl").read_text().splitlines()]
    rows[4]["label"] = 4
    p = tmp_path / "swag.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(BertctlError, match=r"row 5, column 'label': label 4 is not a choice index 0..3"):
        read("swag", p)
    e = tmp_path / "empty.tsv"
    e.write_text("")
    with pytest.raises(BertctlError, match=r"empty.tsv: the file is empty"):
        read("glue/sst2", e)
    e.write_text("sentence\tlabel\n")
    with pytest.raises(BertctlError, match=r"empty.tsv: no data rows"):
        read("glue/sst2", e)
    with pytest.raises(BertctlError, match=r"nope.tsv: file not found"):
        read("glue/sst2", tmp_path / "nope.tsv")


def test_a_row_with_a_field_more_or_less_than_the_header_is_refused(tmp_path):
    """pandas reads a TSV whose rows all hold one field more than the header with the first
    field as an index (every column shifted left) and pads a short row: each is one line
    naming the file, the row and the line, for TSV and CSV, with a header or without."""
    for name, text, row, line in (
            ("shifted.tsv", "sentence\tlabel\ntext a\t1\t0\ntext b\t0\t1\n", 1, 2),
            ("one.tsv", "sentence\tlabel\ntext a\t1\n\ntext b\t0\t1\n", 2, 4),
            ("short.tsv", "sentence\tlabel\ntext a\t1\ntext b\n", 2, 3),
            ("shifted.csv", "sentence,label\n\"a, b\",1\nc,d,0\n", 2, 3)):
        p = tmp_path / name
        p.write_text(text)
        spec = tasks.make_task_spec(family="single", text_columns=["sentence"],
                                    label_column="label")
        with pytest.raises(BertctlError) as e:
            read_examples(spec, p)
        assert str(e.value).startswith(f"{p}: row {row} (line {line}) has "), str(e.value)
    cola = tmp_path / "cola.tsv"
    cola.write_text("src\t1\t\tA sentence.\nsrc\t0\t*\tAnother.\textra\n")
    with pytest.raises(BertctlError, match=r"row 2 \(line 2\) has 5 fields where row 1 has 4"):
        read_examples(tasks.make_task_spec("glue/cola"), cola)


def test_a_number_or_nan_in_a_json_text_column_is_named_with_its_row(tmp_path):
    """A number became "5" and a NaN an "empty text" reported at another row: each is named
    where it is, as JSON lines and as a JSON array."""
    spec = tasks.make_task_spec(family="single", text_columns=["sentence"], label_column="label")
    rows = [{"sentence": "good text", "label": 1}, {"sentence": "more", "label": 0},
            {"sentence": 5, "label": 1}, {"sentence": float("nan"), "label": 0}]
    lines = tmp_path / "mixed.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(BertctlError, match=r"mixed.jsonl: row 3, column 'sentence': int 5, "
                                           r"not text"):
        read_examples(spec, lines)
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows[:2] + rows[3:]))
    with pytest.raises(BertctlError, match=r"row 3, column 'sentence': NaN, not text"):
        read_examples(spec, lines)
    array = tmp_path / "rows.json"
    array.write_text(json.dumps(rows[:2] + [{"sentence": 7.5, "label": 1}]))
    with pytest.raises(BertctlError, match=r"row 3, column 'sentence': float 7.5, not text"):
        read_examples(spec, array)


def test_stages_refuse_a_shifted_table_before_any_work(cli, minilm_dir, tmp_path):
    """The probe's cases: finetune of a single-sentence task and mine over (query, positive)
    rows with a third field each: exit 2, one line, nothing written."""
    from helpers import one_line_error

    single = tmp_path / "single.tsv"
    single.write_text("sentence\tlabel\n" + "".join(f"text {i}\t{i % 2}\t0\n" for i in range(8)))
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("query\tpositive\n" + "".join(f"q {i}\tp {i}\textra\n" for i in range(8)))
    for args in (("finetune", minilm_dir, single, "--family", "single", "--text-column",
                  "sentence", "--label-column", "label", "--steps", "1"),
                 ("mine", minilm_dir, pairs, "--negatives", "1"),
                 ("split", pairs, "--min-dev-queries", "10")):
        r = cli(*args, "--out", tmp_path / "out")
        one_line_error(r, "row 1 (line 2) has 3 fields where the header has 2")
        assert not (tmp_path / "out").exists()


def test_bad_specs():
    with pytest.raises(BertctlError, match="unknown task 'glue/sst3'"):
        tasks.make_task_spec("glue/sst3")
    with pytest.raises(BertctlError, match="'pair' task takes 2 text columns, got 1"):
        tasks.make_task_spec(family="pair", text_columns=["a"])
    with pytest.raises(BertctlError, match="unknown metric 'bleu'"):
        tasks.make_task_spec(family="single", text_columns=["a"], metric="bleu")
    with pytest.raises(BertctlError, match="needs context_column"):
        tasks.make_task_spec(family="multiple_choice", choice_columns=["a"])
    with pytest.raises(BertctlError, match="a preset name or a family"):
        tasks.make_task_spec(text_columns=["a"])
    with pytest.raises(BertctlError, match="task settings: labels"):
        tasks.make_task_spec(family="single", text_columns=["a"], labels=["x", "x"])
    with pytest.raises(BertctlError, match="task settings: unknown setting 'lable_column'"):
        tasks.make_task_spec(family="single", text_columns=["a"], lable_column="y")
    assert tasks.make_task_spec(family="regression", text_columns=["a", "b"]).metric == "pearson_spearman"


# --- features ------------------------------------------------------------------------------------

@pytest.mark.parametrize("max_len", [16, 48, 128])
@pytest.mark.parametrize("preset", ["glue/rte", "glue/mrpc", "glue/cola"])
def test_tokenization_matches_transformers(preset, max_len, tokenizer, model_dir):
    from transformers import BertTokenizerFast
    hf = BertTokenizerFast.from_pretrained(str(model_dir))
    d = GLUE[preset][0]
    ex = read(preset, FIX / d / "dev.tsv")
    before = (tokenizer.truncation, tokenizer.padding)
    feats = encode_examples(ex, tokenizer, max_len)
    assert (tokenizer.truncation, tokenizer.padding) == before   # the caller's tokenizer is untouched
    args = (ex.text_a, ex.text_b) if ex.text_b is not None else (ex.text_a,)
    ref = hf(*args, truncation="longest_first", max_length=max_len)
    for i in range(len(ex)):
        s, e = feats.offsets[i], feats.offsets[i + 1]
        assert feats.input_ids[s:e].tolist() == ref["input_ids"][i]
        assert feats.token_type_ids[s:e].tolist() == ref["token_type_ids"][i]
    assert feats.lengths.tolist() == [len(x) for x in ref["input_ids"]]
    assert feats.lengths.max() <= max_len


def test_batch(tokenizer):
    ex = read("glue/rte", FIX / "RTE" / "dev.tsv")
    feats = encode_examples(ex, tokenizer, 64)
    idx = np.array([5, 0, 17])
    b = feats.batch(idx)
    assert set(b) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    width = int(feats.lengths[idx].max())
    for k in ("input_ids", "token_type_ids", "attention_mask"):
        assert b[k].shape == (3, width) and b[k].dtype == torch.long
    assert b["attention_mask"].sum(1).tolist() == feats.lengths[idx].tolist()
    assert (b["input_ids"][b["attention_mask"] == 0] == feats.pad_id).all()
    assert (b["input_ids"][:, 0] == tokenizer.token_to_id("[CLS]")).all()
    assert b["labels"].tolist() == ex.labels[idx].tolist() and b["labels"].dtype == torch.long
    # Every example lands in exactly one length-grouped batch.
    batches = length_grouped_batches(feats.lengths, 8, seed=0)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(ex)))


def test_regression_and_unlabelled_batches(tokenizer, tmp_path):
    ex = read("glue/sts-b", FIX / "STS-B" / "dev.tsv")
    b = encode_examples(ex, tokenizer, 64).batch([0, 1])
    assert b["labels"].dtype == torch.float32 and b["labels"].tolist() == [5.0, 4.75]
    p = tmp_path / "test.tsv"
    p.write_text("index\tsentence\n0\tuneasy mishmash of styles .\n")
    b = encode_examples(read("glue/sst2", p), tokenizer, 64).batch([0])
    assert "labels" not in b


def test_multiple_choice_batch(tokenizer, model_dir):
    from transformers import BertTokenizerFast
    ex = read("swag", FIX / "swag" / "sample.jsonl")
    feats = encode_examples(ex, tokenizer, 32)
    assert feats.num_choices == 4 and len(feats) == 10
    b = feats.batch([3, 1])
    t = b["input_ids"].shape[2]
    for k in ("input_ids", "token_type_ids", "attention_mask"):
        assert b[k].shape == (2, 4, t)
    assert b["labels"].tolist() == [int(ex.labels[3]), int(ex.labels[1])]
    hf = BertTokenizerFast.from_pretrained(str(model_dir))
    ref = hf([ex.text_a[3]] * 4, ex.choices[3], truncation="longest_first", max_length=32)
    for c in range(4):
        n = int(b["attention_mask"][0, c].sum())
        assert b["input_ids"][0, c, :n].tolist() == ref["input_ids"][c]
        assert b["token_type_ids"][0, c, :n].tolist() == ref["token_type_ids"][c]
    assert t == max(len(x) for x in ref["input_ids"] + hf([ex.text_a[1]] * 4, ex.choices[1],
                    truncation="longest_first", max_length=32)["input_ids"])


def test_too_short_max_seq_length(tokenizer):
    ex = read("glue/rte", FIX / "RTE" / "dev.tsv")
    with pytest.raises(BertctlError, match="max_seq_length 2 is too short"):
        encode_examples(ex, tokenizer, 2)


def test_core_does_not_import_cli_libraries():
    import subprocess
    import sys
    code = ("import sys, bertctl.tasks, bertctl.metrics; "
            "print(sorted(m for m in ('typer', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("row", [0, 4])
def test_a_long_cell_reads_the_same_in_any_row(tmp_path, row):
    """#26 item 13: one rule for a 200 KB cell, whichever row holds it (the csv module's default
    limit refused it in the first rows only)."""
    long_text = "word " * 40_000
    rows = [f"short sentence {i}\t{i % 2}" for i in range(6)]
    rows[row] = f"{long_text.strip()}\t1"
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    ex = read("glue/sst2", path)
    assert len(ex.text_a) == 6 and len(ex.text_a[row]) == len(long_text.strip())


def test_presets_are_checked_when_asked_for_so_a_family_may_import_the_specs():
    """#54: PRESETS were validated when tasks/spec.py was imported, so a family module that
    imported it before the other families had registered broke the import. Each is checked
    by its family when first asked for; all of them hold once the registry is complete."""
    from bertctl.tasks import spec

    later = spec.Presets([dict(name="mine", family="not-registered-yet", label_column=None)])
    assert list(later) == ["mine"] and len(later) == 1   # made without its family
    with pytest.raises(ValueError, match="unknown family 'not-registered-yet'"):
        later["mine"]
    assert [p.name for p in spec.PRESETS.values()] == list(spec.PRESETS)
