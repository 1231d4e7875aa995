"""`--out` never destroys an input (issue #26, item 1): an output that is, contains or lies inside
an input file or artifact of the run, or is the working directory or one of its parents, is
refused before any work with one line and exit 2, even with --force, and every input is left as
it was. Before the fix, `tokenize corp --out corp --force` exited 0 having deleted the corpus."""

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BOOK = FIXTURES / "pretrain" / "bert_sample_text.txt"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _refused(result, *words):
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def corpus(tmp_path):
    corp = tmp_path / "corp"
    corp.mkdir()
    shutil.copy(BOOK, corp / "book.txt")
    return corp


def test_out_that_is_the_corpus_directory(cli, corpus):
    before = _snapshot(corpus)
    _refused(cli("tokenize", corpus, "--out", corpus, "--force", "--vocab-size", "200"),
             "contains the input file", "book.txt")
    assert _snapshot(corpus) == before


def test_out_that_is_a_parent_of_the_input_and_the_working_directory(cli, corpus, monkeypatch):
    sub = corpus / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    before = _snapshot(corpus)
    _refused(cli("tokenize", "../book.txt", "--out", "..", "--force", "--vocab-size", "200"),
             "working directory")
    _refused(cli("tokenize", "../book.txt", "--out", ".", "--force", "--vocab-size", "200"),
             "working directory")
    assert _snapshot(corpus) == before


@pytest.mark.parametrize("out", ["/", ""])
def test_out_that_is_the_root_or_empty(cli, corpus, out):
    _refused(cli("tokenize", corpus, "--out", out, "--force", "--vocab-size", "200"), "--out")


def test_out_over_an_input_artifact(cli, corpus, small_tokenizer, tmp_path):
    tok = tmp_path / "tok"
    shutil.copytree(small_tokenizer, tok)
    before = _snapshot(tok)
    _refused(cli("build-pretrain-data", tok, corpus, "--out", tok, "--force",
                 "--max-seq-length", "32", "--dupe-factor", "1"), "is the input tokenizer")
    _refused(cli("build-pretrain-data", tok, corpus, "--out", tok / "inside", "--force",
                 "--max-seq-length", "32", "--dupe-factor", "1"), "lies inside the input")
    assert _snapshot(tok) == before


def test_out_over_the_model_or_the_data_of_a_training_run(cli, tiny_pretrained, pretrain_data,
                                                           tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_pretrained, model)
    data = tmp_path / "sst2"
    shutil.copytree(FIXTURES / "glue" / "SST-2", data)
    before = _snapshot(model), _snapshot(data)
    _refused(cli("finetune", model, data / "train.tsv", "--task", "glue/sst2", "--steps", "1",
                 "--out", model, "--force"), "is the input model")
    _refused(cli("finetune", model, data / "train.tsv", "--task", "glue/sst2", "--steps", "1",
                 "--out", data, "--force"), "contains the input file")
    _refused(cli("eval", model, pretrain_data, "--out", model / "ev", "--force"),
             "lies inside the input model")
    assert (_snapshot(model), _snapshot(data)) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_link_to_an_input_is_the_input(cli, corpus, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(corpus, target_is_directory=True)
    before = _snapshot(corpus)
    _refused(cli("tokenize", corpus / "book.txt", "--out", link, "--force", "--vocab-size",
                 "200"), "contains the input file")
    assert _snapshot(corpus) == before


def test_a_sibling_out_is_fine(cli, corpus, tmp_path):
    r = cli("tokenize", corpus, "--out", tmp_path / "tok", "--vocab-size", "200")
    assert r.exit_code == 0, r.stderr


def _data_dir(tmp_path, name, source):
    d = tmp_path / name
    shutil.copytree(source, d)
    return d


@pytest.mark.parametrize("stage", ["tokenize", "build-pretrain-data", "audit", "finetune",
                                   "eval-beir", "eval-task-dir"])
def test_out_inside_a_directory_given_as_input_is_refused(cli, tmp_path, stage, small_tokenizer,
                                                          tiny_pretrained, sst2_seed_runs):
    """#52 class 3: `tokenize DIR --out DIR/tok` exited 0 and put the artifact inside the
    corpus directory, spoiling every later read of it. Now: the one line, exit 2, nothing
    written, for the directory inputs of every stage (corpus, task, BEIR directories)."""
    root = Path(__file__).resolve().parents[2]
    corp = _data_dir(tmp_path, "corp", FIXTURES / "pretrain")
    sst2 = _data_dir(tmp_path, "sst2", FIXTURES / "glue" / "SST-2")
    beir = _data_dir(tmp_path, "beir", root / "examples" / "retrieval" / "beir")
    args = {
        "tokenize": ("tokenize", corp, "--vocab-size", "1000", "--out", corp / "tok"),
        "build-pretrain-data": ("build-pretrain-data", small_tokenizer, corp,
                                "--out", corp / "data"),
        "audit": ("audit", corp, "--against", sst2 / "dev.tsv", "--out", corp / "audit"),
        "finetune": ("finetune", tiny_pretrained, sst2, "--task", "glue/sst2", "--steps", "1",
                     "--out", sst2 / "model"),
        "eval-beir": ("eval", tiny_pretrained, beir, "--task", "retrieval",
                      "--out", beir / "ev"),
        "eval-task-dir": ("eval", sst2_seed_runs[0], sst2, "--task", "glue/sst2",
                          "--out", sst2 / "ev"),
    }[stage]
    before = {d: _snapshot(d) for d in (corp, sst2, beir)}
    r = cli(*args)
    assert r.exit_code == 2, r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and ("lies inside" in lines[0]), r.stderr
    assert {d: _snapshot(d) for d in (corp, sst2, beir)} == before
