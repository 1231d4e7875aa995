"""Values that parse but mean nothing are refused in one line (#82's lows): a yes/no for a
number (YAML's true), a warm-up longer than the run, a judgement grade past any scale."""

import pytest

from bertctl.errors import BertctlError
from bertctl.stages.settings.mine import MineSettings
from bertctl.train.optim import warmup_steps

from helpers import one_line_error


@pytest.mark.parametrize("value", [True, False])
def test_a_yes_or_no_is_no_number(value):
    with pytest.raises(BertctlError, match=f"negatives: {str(value).lower()} is a yes/no"):
        MineSettings(negatives=value)
    assert MineSettings(negatives=2).negatives == 2


def test_yaml_true_for_a_number_is_one_line(cli, minilm_dir, tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text("negatives: true\n")
    train = tmp_path / "train.tsv"
    train.write_text("query\tpositive\nq one\tdoc one\nq two\tdoc two\n")
    r = cli("mine", minilm_dir, train, "--config", config, "--out", tmp_path / "out")
    one_line_error(r, "negatives: true is a yes/no")


def test_a_warmup_longer_than_the_run_is_refused():
    assert warmup_steps(0.1, 100) == 10 and warmup_steps(40, 100) == 40
    with pytest.raises(BertctlError, match=r"--warmup 1e\+30: more steps than the run's 100"):
        warmup_steps(1e30, 100)


def test_a_judgement_grade_past_any_scale_is_refused(tmp_path):
    from bertctl.tasks.retrieval.reader import read_qrels

    qrels = tmp_path / "test.tsv"
    for grade in ("100000000000000000000", "1e20"):
        qrels.write_text(f"query-id\tcorpus-id\tscore\nq\td\t{grade}\n")
        with pytest.raises(BertctlError, match="is not an integer grade"):
            read_qrels(qrels)


def test_an_unknown_rerank_scoring_is_named_as_such(cli, example_index):
    """--rerank-scoring bogus said the index 'stores none' (of pieces) though it was the
    scoring that was unknown."""
    r = cli("search", example_index, "--query", "x", "--rerank-scoring", "bogus")
    one_line_error(r, "--rerank-scoring bogus: must be one of cross, maxsim")


def test_a_rerank_deeper_than_the_corpus_records_the_depth_reranked(cli, minilm_dir, tmp_path):
    """--rerank-depth 50 over a corpus of 30 documents reranks (and records) 30."""
    import json
    import shutil

    from helpers import EXAMPLES

    beir = tmp_path / "beir"
    shutil.copytree(EXAMPLES / "retrieval" / "beir", beir)
    docs = (beir / "corpus.jsonl").read_text().splitlines()
    qrels = (beir / "qrels" / "test.tsv").read_text().splitlines()
    rows = qrels[1:21]
    judged = {x.split("\t")[1] for x in rows}
    ids = [json.loads(d)["_id"] for d in docs]
    kept = [d for d, i in zip(docs, ids) if i in judged]
    kept += [d for d, i in zip(docs, ids) if i not in judged][:30 - len(kept)]
    (beir / "corpus.jsonl").write_text("\n".join(kept) + "\n")
    (beir / "qrels" / "test.tsv").write_text("\n".join([qrels[0], *rows]) + "\n")
    (beir / "qrels" / "dev.tsv").unlink()
    r = cli("eval", minilm_dir, beir, "--task", "retrieval", "--rerank", minilm_dir,
            "--rerank-scoring", "maxsim", "--rerank-depth", "50", "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert metrics["rerank/depth"] == 30


def test_a_killed_reads_cache_is_swept_by_the_next_read(tmp_path, monkeypatch):
    """A table read converts a text file into Arrow files in a temporary directory; a SIGKILL
    skips its removal: the next read removes the directories of processes that are gone,
    never a live one's."""
    import os
    import subprocess
    import sys
    import tempfile

    from bertctl import tasks
    from helpers import read_examples

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f"bertctl-read-{gone}-abc"
    live = tmp_path / f"bertctl-read-{os.getppid()}-def"
    for d in (stale, live):
        d.mkdir()
        (d / "cache.arrow").write_text("x")
    table = tmp_path / "t.tsv"
    table.write_text("sentence\tlabel\na\t1\nb\t0\n")
    read_examples(tasks.make_task_spec(family="single", text_columns=["sentence"],
                                       label_column="label"), table)
    assert not stale.exists() and live.exists()


def test_an_out_ending_in_dotdot_is_refused_before_any_work(cli, tmp_path):
    """--out X/sub/.. --force ended in a raw OSError from the rename into place."""
    from helpers import EXAMPLES

    (tmp_path / "X").mkdir()
    (tmp_path / "X" / "keep.txt").write_text("mine")
    r = cli("split", EXAMPLES / "retrieval" / "train.tsv", "--out", tmp_path / "X" / "sub" / "..",
            "--force")
    one_line_error(r, "name the directory itself")
    assert (tmp_path / "X" / "keep.txt").read_text() == "mine"


def test_a_finished_run_removes_the_checkpoints_of_other_settings_for_its_out(
        cli, minilm_dir, tmp_path):
    """A rerun that changed the id left the old run's .OUT.run-ID (its checkpoints) forever;
    once an artifact is in place there, no rerun can resume into it."""
    from helpers import EXAMPLES

    stale = tmp_path / ".model.run-0123456789abcdef"
    (stale / "checkpoints").mkdir(parents=True)
    other = tmp_path / ".another.run-0123456789abcdef"
    other.mkdir()
    r = cli("finetune", minilm_dir, EXAMPLES / "retrieval" / "train.tsv", "--task", "retrieval",
            "--steps", "1", "--batch-size", "4", "--out", tmp_path / "model")
    assert r.exit_code == 0, r.stderr
    assert not stale.exists() and other.exists()   # another --out's run is its own
