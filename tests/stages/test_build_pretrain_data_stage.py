"""`bertctl build-pretrain-data` as a stage: the artifact, its id, slices and bad input.
(The instance builder itself is tested in test_pretraining_data.py.)"""

import json

import pytest

from helpers import CORPUS, one_line_error

BOOK = CORPUS / "alice.txt"


@pytest.fixture(scope="module")
def built(tmp_path_factory, small_tokenizer):
    from typer.testing import CliRunner

    from bertctl.cli import app

    out = tmp_path_factory.mktemp("bpd") / "data"
    r = CliRunner().invoke(app, ["build-pretrain-data", str(small_tokenizer), str(BOOK), "--out",
                                 str(out), "--dupe-factor", "2", "--validation-fraction", "0.1",
                                 "--workers", "1", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    return out, json.loads(r.stdout)


def test_artifact_records_tokenizer_stats_and_lineage(built, small_tokenizer):
    out, m = built
    assert m["kind"] == "pretrain-data"
    tok = json.loads((small_tokenizer / "artifact.json").read_text())
    s = m["stats"]
    assert s["tokenizer"]["id"] == tok["id"]
    assert s["tokenizer"]["special_ids"] == tok["stats"]["tokenizer"]["special_ids"]
    assert s["max_seq_length"] == 128 and s["nsp"] and s["masking"] == "static"
    train = s["splits"]["train"]
    assert train["instances"] > 100 and s["splits"]["validation"]["instances"] > 0
    assert 0.4 < train["is_next_share"] < 0.6
    assert s["corpus"]["documents"] > 10
    assert [i["role"] for i in m["inputs"]] == ["tokenizer", "corpus"]
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"):
        assert name in m["files"]


def test_workers_do_not_change_the_id(built, small_tokenizer, cli):
    out, m = built
    r = cli("build-pretrain-data", small_tokenizer, BOOK, "--out", out, "--dupe-factor", "2",
            "--validation-fraction", "0.1", "--workers", "2")
    assert r.exit_code == 0 and "up to date" in r.stdout


def test_inspect_shows_decoded_instances(built, cli):
    r = cli("inspect", built[0])
    assert r.exit_code == 0
    assert "sample instances" in r.stdout and "[MASK→" in r.stdout
    assert "IsNext" in r.stdout or "NotNext" in r.stdout


def test_slices_combine_into_the_whole(tmp_path, small_tokenizer, cli, built):
    common = ["--dupe-factor", "2", "--validation-fraction", "0.1", "--chunk-chars", "20000",
              "--workers", "1"]
    whole = cli("build-pretrain-data", small_tokenizer, BOOK, "--out", tmp_path / "whole",
                *common, "--json")
    assert whole.exit_code == 0, whole.stderr
    for i in range(3):
        r = cli("build-pretrain-data", small_tokenizer, BOOK, "--out", tmp_path / f"s{i}",
                *common, "--num-shards", "3", "--shard-index", str(i))
        assert r.exit_code == 0, r.stderr
    r = cli("build-pretrain-data", "--combine", tmp_path / "s0", "--combine", tmp_path / "s1",
            "--out", tmp_path / "all", "--json")
    assert r.exit_code == 2 and "missing slice(s) [2] of 3" in r.stderr
    r = cli("build-pretrain-data", *[a for i in range(3) for a in ("--combine", tmp_path / f"s{i}")],
            "--out", tmp_path / "all", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["stats"]["splits"] == whole.json()["stats"]["splits"]
    assert [i["role"] for i in r.json()["inputs"]] == ["slice"] * 3
    from bertctl.data.pretraining.dataset import PretrainingDataset

    a, b = PretrainingDataset(tmp_path / "all"), PretrainingDataset(tmp_path / "whole")
    assert len(a) == len(b)
    assert sorted(a.lengths.tolist()) == sorted(b.lengths.tolist())


@pytest.mark.parametrize("args, message", [
    (["--max-seq-length", "4"], "setting 'max_seq_length' = 4"),
    (["--max-seq-length", "9000"], "less than or equal to 8192"),
    (["--masked-lm-prob", "1.5"], "setting 'masked_lm_prob' = 1.5"),
    (["--num-shards", "2", "--shard-index", "2"], "shard_index 2 must be below num_shards 2"),
    (["--masking", "sometimes"], "setting 'masking' = 'sometimes'"),
])
def test_bad_settings(tmp_path, small_tokenizer, cli, args, message):
    r = cli("build-pretrain-data", small_tokenizer, BOOK, "--out", tmp_path / "d", *args)
    assert r.exit_code == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()


def test_bad_inputs(tmp_path, small_tokenizer, built, cli):
    r = cli("build-pretrain-data", built[0], BOOK, "--out", tmp_path / "d")
    assert r.exit_code == 2 and "is a pretrain-data artifact, expected tokenizer" in r.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    r = cli("build-pretrain-data", small_tokenizer, empty, "--out", tmp_path / "d")
    assert r.exit_code == 2 and "no documents" in r.stderr
    one = tmp_path / "one.txt"
    one.write_text("Just one sentence here.\n\nAnd one more document.\n")
    r = cli("build-pretrain-data", small_tokenizer, one, "--out", tmp_path / "d",
            "--validation-fraction", "0.0")
    assert r.exit_code in (0, 2)  # one-sentence documents: instances or a clear error, no crash
    assert len(r.stderr.strip().splitlines()) >= 1
    newer = tmp_path / "newer"
    newer.mkdir()
    manifest = json.loads((small_tokenizer / "artifact.json").read_text())
    (newer / "artifact.json").write_text(json.dumps({**manifest, "schema_version": 7}))
    r = cli("build-pretrain-data", newer, BOOK, "--out", tmp_path / "d2")
    assert r.exit_code == 2 and "newer than this bertctl" in r.stderr
    assert not (tmp_path / "d2").exists()


def test_slices_built_with_other_settings_are_refused_in_one_line(tmp_path, small_tokenizer,
                                                                  cli):
    for i, dupe in ((0, "2"), (1, "3")):
        r = cli("build-pretrain-data", small_tokenizer, BOOK, "--out", tmp_path / f"s{i}",
                "--dupe-factor", dupe, "--workers", "1", "--num-shards", "2",
                "--chunk-chars", "20000", "--shard-index", str(i))
        assert r.exit_code == 0, r.stderr
    r = cli("build-pretrain-data", "--combine", tmp_path / "s0", "--combine", tmp_path / "s1",
            "--out", tmp_path / "all")
    one_line_error(r, "s1: built with other settings than", "(dupe_factor)")


def test_exclude_leaves_out_the_documents_holding_task_text(tmp_path, small_tokenizer, cli):
    """Two documents of the book carry a sentence of a task file: both, and only they, are
    left out, and listed; the data built is what the book without them builds."""
    from bertctl.data import corpus as corpus_mod

    docs = list(corpus_mod.iter_documents([BOOK]))
    task = tmp_path / "task.tsv"
    sentence = "the quick brown fox jumps over the lazy dog by the old mill stream"
    task.write_text("sentence\tlabel\n" + sentence.capitalize() + " .\t1\nshort one\t0\n",
                    encoding="utf-8")
    planted = [d[:] for d in docs]
    planted[3] = planted[3] + ["And then: The QUICK brown fox jumps over the lazy dog by the "
                               "old mill stream!"]
    planted[7] = [sentence] + planted[7]
    book = tmp_path / "book.txt"
    book.write_text("\n\n".join("\n".join(d) for d in planted) + "\n", encoding="utf-8")
    clean = tmp_path / "clean.txt"
    clean.write_text("\n\n".join("\n".join(d) for i, d in enumerate(planted) if i not in (3, 7))
                     + "\n", encoding="utf-8")
    common = ["--dupe-factor", "2", "--workers", "1", "--json"]
    r = cli("build-pretrain-data", small_tokenizer, book, "--exclude", task,
            "--out", tmp_path / "x", *common)
    assert r.exit_code == 0, r.stderr
    stats = r.json()["stats"]
    assert stats["excluded"]["documents"] == 2
    listed = [json.loads(line) for line in (tmp_path / "x" / "excluded.jsonl").read_text()
              .splitlines()]
    assert [(d["document"], d["row"]) for d in listed] == [(3, 1), (7, 1)]
    assert "exclude" in [i["role"] for i in r.json()["inputs"]]
    base = cli("build-pretrain-data", small_tokenizer, clean, "--out", tmp_path / "c", *common)
    assert base.exit_code == 0, base.stderr
    assert stats["splits"] == base.json()["stats"]["splits"]
    r = cli("build-pretrain-data", small_tokenizer, book, "--exclude", tmp_path / "none.tsv",
            "--out", tmp_path / "y")
    one_line_error(r, "none.tsv: file not found")
    assert not (tmp_path / "y").exists()


@pytest.mark.slow
@pytest.mark.parametrize("length", [2048, 8192])
def test_instances_past_512_are_built_masked_and_pretrained_on(tmp_path, small_tokenizer, cli,
                                                               length):
    """ModernBERT is documented to 8,192 tokens: the builder makes such instances (static and
    dynamic masking; their masking once failed an assertion at 512, after the dynamic
    artifact was published), inspect --verify reads them, and a tiny ModernBERT pretrains on
    them."""
    for masking in ("static", "dynamic"):
        data = tmp_path / f"data-{masking}"
        r = cli("build-pretrain-data", small_tokenizer, CORPUS, "--max-seq-length", length,
                "--masking", masking, "--no-nsp", "--packing", "concatenated", "--out", data)
        assert r.exit_code == 0, r.stderr
        assert cli("inspect", data, "--verify").exit_code == 0
        train = json.loads((data / "artifact.json").read_text())["stats"]["splits"]["train"]
        assert train["mean_length"] > 512 and train["instances"] >= 1   # long ones, packed
    r = cli("pretrain", tmp_path / "data-dynamic", "--architecture", "modernbert",
            "--objective", "mlm", "--model-size", "tiny", "--steps", "1", "--batch-size", "1",
            "--max-position-embeddings", length, "--out", tmp_path / "model")
    assert r.exit_code == 0, r.stderr
