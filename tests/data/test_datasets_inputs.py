"""Hugging Face datasets as inputs: a directory `save_to_disk` wrote (a Dataset, or one split
of a DatasetDict, named by its directory DIR/SPLIT), and bare Arrow files, read where text is
read (tokenize, build-pretrain-data, audit) and where task tables are (finetune, eval). Each
gives what the same rows give as JSON lines; the corpus stages read the Arrow files a record
batch at a time, and record each file as an input."""

import json

import pytest

from helpers import CORPUS, FIXTURES, one_line_error

datasets = pytest.importorskip("datasets")


def _documents():
    """alice.txt's documents (blank-line separated), each a row's text."""
    text = (CORPUS / "alice.txt").read_text(encoding="utf-8")
    return [d.strip() for d in text.split("\n\n") if d.strip()]


@pytest.fixture(scope="module")
def corpus_forms(tmp_path_factory):
    """The same documents as JSON lines, as a saved Dataset in three shards, as a saved
    DatasetDict and as one bare Arrow file."""
    root = tmp_path_factory.mktemp("hfdata")
    docs = _documents()
    with open(root / "docs.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"id": len(d), "text": d}) + "\n")
    ds = datasets.Dataset.from_dict({"id": [len(d) for d in docs], "text": docs})
    ds.save_to_disk(str(root / "saved"), num_shards=3)
    datasets.DatasetDict({"train": ds, "validation": ds.select(range(3))}).save_to_disk(
        str(root / "dict"))
    return root


def _tokenize(cli, source, out, *extra):
    r = cli("tokenize", source, "--text-column", "text", "--vocab-size", "600", "--out", out,
            "--json", *extra)
    assert r.exit_code == 0, r.stderr
    return r.json()


def test_a_saved_dataset_tokenizes_as_its_rows_do(corpus_forms, cli, tmp_path):
    ref = _tokenize(cli, corpus_forms / "docs.jsonl", tmp_path / "ref")
    saved = _tokenize(cli, corpus_forms / "saved", tmp_path / "saved")
    split = _tokenize(cli, corpus_forms / "dict" / "train", tmp_path / "split")
    ours = (tmp_path / "saved" / "tokenizer.json").read_text()
    assert ours == (tmp_path / "ref" / "tokenizer.json").read_text()
    assert ours == (tmp_path / "split" / "tokenizer.json").read_text()
    for m in (saved, split):
        assert m["stats"]["documents"] == ref["stats"]["documents"] > 10
        assert m["stats"]["sentences"] == ref["stats"]["sentences"]
    corpus_inputs = [i for i in saved["inputs"] if i["role"] == "corpus"]
    assert len(corpus_inputs) == 3 and all(i["path"].endswith(".arrow") for i in corpus_inputs)
    arrow = sorted((corpus_forms / "saved").glob("*.arrow"))[0]
    one = _tokenize(cli, arrow, tmp_path / "one")   # a bare Arrow file
    assert one["stats"]["documents"] < ref["stats"]["documents"]


def test_the_text_column_is_taken_by_default(corpus_forms, cli, tmp_path):
    """As transformers' run_mlm takes them: `text`, or a table's only column (before: "needs
    --text-column" for a saved dataset of text and id)."""
    _tokenize(cli, corpus_forms / "saved", tmp_path / "ref")
    r = cli("tokenize", corpus_forms / "saved", "--vocab-size", "600", "--out", tmp_path / "a")
    assert r.exit_code == 0, r.stderr
    one_column = tmp_path / "one.jsonl"
    one_column.write_text("".join(json.dumps({"body": d}) + "\n" for d in _documents()),
                          encoding="utf-8")
    r = cli("tokenize", one_column, "--vocab-size", "600", "--out", tmp_path / "b")
    assert r.exit_code == 0, r.stderr
    for out in ("a", "b"):
        assert (tmp_path / out / "tokenizer.json").read_text() == \
            (tmp_path / "ref" / "tokenizer.json").read_text()
    two = tmp_path / "two.jsonl"
    two.write_text('{"body": "some text", "id": 1}\n', encoding="utf-8")
    r = cli("tokenize", two, "--out", tmp_path / "c")
    assert r.exit_code == 2 and "no column named text" in r.stderr and "body, id" in r.stderr


def test_a_split_the_dataset_dict_lacks_lists_its_splits(corpus_forms, cli, tmp_path,
                                                        tiny_pretrained):
    """Before: "no such file or directory", the splits unnamed."""
    missing = corpus_forms / "dict" / "test"
    for args in (("tokenize", missing), ("embed", tiny_pretrained, missing),
                 ("finetune", tiny_pretrained, missing, "--family", "single",
                  "--text-column", "text")):
        r = cli(*args, "--out", tmp_path / "o")
        one_line_error(r, str(missing), "has no split 'test'", "its splits: train, validation")
    assert not (tmp_path / "o").exists()


def test_build_pretrain_data_and_audit_read_a_saved_dataset(corpus_forms, cli, tmp_path):
    _tokenize(cli, corpus_forms / "docs.jsonl", tmp_path / "tok")
    outs = {}
    for name, source in (("ref", corpus_forms / "docs.jsonl"), ("saved", corpus_forms / "saved")):
        r = cli("build-pretrain-data", tmp_path / "tok", source, "--text-column", "text",
                "--max-seq-length", "64", "--workers", "1", "--out", tmp_path / name, "--json")
        assert r.exit_code == 0, r.stderr
        outs[name] = r.json()["stats"]
    assert outs["saved"]["splits"] == outs["ref"]["splits"]
    assert outs["saved"]["splits"]["train"]["instances"] > 0
    dev = tmp_path / "dev.tsv"
    sentence = _documents()[5].splitlines()[0]
    dev.write_text(f"sentence\tlabel\n{sentence}\t1\nnothing of the kind here at all\t0\n",
                   encoding="utf-8")
    r = cli("audit", corpus_forms / "saved", "--text-column", "text", "--against", dev,
            "--out", tmp_path / "audit", "--json")
    assert r.exit_code == 0, r.stderr


def test_a_task_reads_a_split_of_a_saved_dataset_dict(tmp_path):
    """DIR/train reads as the TSV it came from; DIR alone is one line naming the splits."""
    from bertctl.errors import BertctlError
    from bertctl.tasks import make_task_spec
    from helpers import read_examples

    spec = make_task_spec("glue/sst2")
    rows = read_examples(spec, FIXTURES / "glue" / "SST-2" / "train.tsv")
    table = {"sentence": list(rows.text_a), "label": [int(x) for x in rows.labels]}
    ds = datasets.Dataset.from_dict(table)
    datasets.DatasetDict({"train": ds, "dev": ds.select(range(5))}).save_to_disk(
        str(tmp_path / "sst2"))
    split = read_examples(spec, tmp_path / "sst2" / "train")
    assert list(split.text_a) == list(rows.text_a) and list(split.labels) == list(rows.labels)
    with pytest.raises(BertctlError, match="a DatasetDict of the splits train, dev; give one "
                                           "of them, e.g. .*sst2/train"):
        read_examples(spec, tmp_path / "sst2")


@pytest.mark.parametrize("case, parts", [
    ("dict", ["a DatasetDict of the splits train, validation", "dict/train"]),
    ("column", ["has no column 'body'", "columns: id, text"]),
    ("not-arrow", ["not an Arrow file"]),
    ("state", ["state.json", "no list of data files"]),
])
def test_bad_datasets_are_one_line(case, parts, corpus_forms, cli, tmp_path):
    import shutil

    source, extra = corpus_forms / "dict", ["--text-column", "text"]
    if case == "column":
        source, extra = corpus_forms / "saved", ["--text-column", "body"]
    elif case == "not-arrow":
        source = tmp_path / "fake.arrow"
        source.write_text("not arrow at all\n")
    elif case == "state":
        source = tmp_path / "saved"
        shutil.copytree(corpus_forms / "saved", source)
        (source / "state.json").write_text(json.dumps({"_data_files": "x"}))
    r = cli("tokenize", source, *extra, "--vocab-size", "600", "--out", tmp_path / "t")
    one_line_error(r, *parts)
    assert not (tmp_path / "t").exists()


@pytest.fixture(scope="module")
def sst2_shards(tmp_path_factory):
    """SST-2's training rows as three parquet shards in a directory (as the hub keeps a split:
    data/train-0000N-of-00003.parquet), as three JSON lines shards and as three TSV shards."""
    from bertctl.tasks import make_task_spec
    from helpers import read_examples

    rows = read_examples(make_task_spec("glue/sst2"), FIXTURES / "glue" / "SST-2" / "train.tsv")
    texts, labels = list(rows.text_a), [int(x) for x in rows.labels]
    root = tmp_path_factory.mktemp("shards")
    (root / "parquet" / "data").mkdir(parents=True)
    ds = datasets.Dataset.from_dict({"sentence": texts, "label": labels})
    for i in range(3):
        part = ds.shard(3, i, contiguous=True)
        part.to_parquet(str(root / "parquet" / "data" / f"train-{i:05d}-of-00003.parquet"))
        part.to_json(str(root / f"train-{i}.jsonl"))
        with open(root / f"train-{i}.tsv", "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            f.writelines(f"{t}\t{y}\n" for t, y in zip(part["sentence"], part["label"]))
    return root, texts, labels


def test_a_task_reads_a_directory_or_a_glob_of_shards(sst2_shards):
    """Shards read as one table, in name order: the rows the single file holds."""
    from bertctl.tasks import make_task_spec
    from helpers import read_examples

    root, texts, labels = sst2_shards
    spec = make_task_spec("glue/sst2")
    for given in (root / "parquet" / "data", root / "parquet" / "data" / "train-*.parquet",
                  root / "train-*.jsonl", root / "train-*.tsv"):
        rows = read_examples(spec, given)
        assert list(rows.text_a) == texts, given
        assert [int(x) for x in rows.labels] == labels, given


@pytest.mark.parametrize("case, parts", [
    ("mixed", ["shards of one format expected, found json, tsv"]),
    ("nothing", ["pattern matches no files"]),
    ("header", ["train-1.tsv: its columns (text, label) are not those of", "(sentence, label)"]),
    ("empty", ["no table files in it", "not a directory written by save_to_disk"]),
    ("deeper", ["its subdirectories hold some (data)", "data/*"]),
])
def test_bad_shards_are_one_line(case, parts, sst2_shards, tiny_pretrained, cli, tmp_path):
    import shutil

    root, _, _ = sst2_shards
    given = tmp_path / "shards"
    given.mkdir()
    if case == "mixed":
        shutil.copy(root / "train-0.jsonl", given)
        shutil.copy(root / "train-1.tsv", given)
    elif case == "nothing":
        given = given / "train-*.parquet"
    elif case == "header":
        shutil.copy(root / "train-0.tsv", given)
        text = (root / "train-1.tsv").read_text(encoding="utf-8")
        (given / "train-1.tsv").write_text(text.replace("sentence\t", "text\t", 1),
                                           encoding="utf-8")
    elif case == "deeper":
        (given / "data").mkdir()
        shutil.copy(root / "train-0.tsv", given / "data")
    elif case == "empty":
        (given / "notes.md").write_text("not a table\n")
    r = cli("finetune", tiny_pretrained, given, "--family", "single", "--text-column",
            "sentence", "--steps", "1", "--out", tmp_path / "m")
    one_line_error(r, *parts)
    assert not (tmp_path / "m").exists()


def test_finetune_and_eval_take_shards_and_record_their_files(sst2_shards, tiny_pretrained,
                                                               cli, tmp_path):
    """A glob is recorded by its matches' hashes (kind "files"), a directory by its files'."""
    root, _, _ = sst2_shards
    fast = ["--batch-size", "8", "--max-seq-length", "32", "--device", "cpu"]
    r = cli("finetune", tiny_pretrained, root / "parquet" / "data" / "train-*.parquet",
            "--dev", root / "parquet" / "data", "--task", "glue/sst2", "--steps", "2", "--out",
            tmp_path / "m", *fast, "--json")
    assert r.exit_code == 0, r.stderr
    m = r.json()
    assert m["stats"]["train_examples"] == 200
    refs = {i["role"]: i for i in m["inputs"]}
    assert refs["train"]["kind"] == "files" and refs["train"]["path"].endswith("train-*.parquet")
    assert refs["dev"]["kind"] == "directory"
    r = cli("eval", tmp_path / "m", root / "train-*.jsonl", "--out", tmp_path / "e",
            "--json", "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    assert r.json()["stats"]["examples"] == 200


def test_embed_mine_and_distill_read_a_saved_dataset(minilm_dir, tiny_pretrained, cli,
                                                     tmp_path):
    """The stages that read a table beside a model: a saved Dataset gives what its rows as
    JSON lines give (embed: the same vectors, mine: the same pairs), and distill trains from
    one split of a saved DatasetDict."""
    import numpy as np

    from bertctl.tasks import make_task_spec
    from helpers import read_examples

    rows = [{"query": f"what is item {i}", "positive": f"item {i} is thing number {i}"}
            for i in range(24)]
    ds = datasets.Dataset.from_list(rows)
    ds.save_to_disk(str(tmp_path / "pairs"), num_shards=2)
    with open(tmp_path / "pairs.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    for name in ("pairs", "pairs.jsonl"):
        r = cli("embed", minilm_dir, tmp_path / name, "--text-column", "query", "--out",
                tmp_path / f"e-{name}", "--device", "cpu", "--precision", "fp32")
        assert r.exit_code == 0, r.stderr
        r = cli("mine", minilm_dir, tmp_path / name, "--out", tmp_path / f"m-{name}",
                "--device", "cpu", "--precision", "fp32")
        assert r.exit_code == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "e-pairs" / "vectors-00000.npy"),
                                  np.load(tmp_path / "e-pairs.jsonl" / "vectors-00000.npy"))
    assert ((tmp_path / "m-pairs" / "pairs.jsonl").read_text()
            == (tmp_path / "m-pairs.jsonl" / "pairs.jsonl").read_text())

    spec = make_task_spec("glue/sst2")
    sst2 = read_examples(spec, FIXTURES / "glue" / "SST-2" / "train.tsv")
    table = datasets.Dataset.from_dict({"sentence": list(sst2.text_a),
                                        "label": [int(x) for x in sst2.labels]})
    datasets.DatasetDict({"train": table, "dev": table.select(range(8))}).save_to_disk(
        str(tmp_path / "sst2"))
    fast = ["--batch-size", "8", "--max-seq-length", "32", "--device", "cpu"]
    r = cli("finetune", tiny_pretrained, tmp_path / "sst2" / "train", "--task", "glue/sst2",
            "--steps", "2", "--out", tmp_path / "teacher", *fast)
    assert r.exit_code == 0, r.stderr
    r = cli("distill", tmp_path / "teacher", tmp_path / "sst2" / "train", "--steps", "2",
            "--out", tmp_path / "student", "--json", *fast)
    assert r.exit_code == 0, r.stderr
    m = r.json()
    assert m["stats"]["train_examples"] == len(sst2.text_a)
    assert any(i["role"] == "train" and i["path"].endswith("sst2/train") for i in m["inputs"])


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".tsv", ".parquet", ".arrow"])
def test_one_reader_streams_a_column_as_it_reads_the_whole_table(suffix, tmp_path):
    """data/tables.py is the one tabular reader: a corpus's column streamed (`stream_column`)
    holds what the task reader's whole table (`read_table`) holds, in every format, an Arrow
    file (memory-mapped, for a task file too) included."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bertctl.data import tables

    texts = ["a first row", 'with "quotes"', "comma, inside", "ünïcode"]
    table = pa.table({"label": ["0", "1", "0", "1"], "text": texts})
    path = tmp_path / f"rows{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    elif suffix in (".csv", ".tsv"):
        sep = "," if suffix == ".csv" else "\t"
        quote = (lambda t: '"' + t.replace('"', '""') + '"') if suffix == ".csv" else str
        path.write_text("label" + sep + "text\n" + "".join(
            f"{r['label']}{sep}{quote(r['text'])}\n" for r in table.to_pylist()))
    elif suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    spec = tables.BY_NAME if suffix != ".tsv" else type(tables.BY_NAME)(
        format="auto", quoting=True, header=True, column_names=None)
    whole = tables.text_column(tables.read_table(spec, path), "text", path)
    assert whole == texts
    assert list(tables.stream_column(path, None)) == texts   # `text` picked by name
    assert list(tables.stream_column(path, "label")) == ["0", "1", "0", "1"]


def test_arrow_shards_are_one_table_and_a_shard_of_other_columns_is_one_line(tmp_path):
    import pyarrow as pa

    from bertctl.data import tables
    from bertctl.errors import BertctlError

    for i, cols in enumerate([{"text": ["a", "b"]}, {"text": ["c"]}, {"other": ["d"]}]):
        table = pa.table(cols)
        with pa.OSFile(str(tmp_path / f"part-{i}.arrow"), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    with pytest.raises(BertctlError, match=r"part-2\.arrow: its columns \(other\) are not those"):
        tables.read_table(tables.BY_NAME, tmp_path)
    (tmp_path / "part-2.arrow").unlink()
    assert tables.text_column(tables.read_table(tables.BY_NAME, tmp_path), "text",
                              tmp_path) == ["a", "b", "c"]
