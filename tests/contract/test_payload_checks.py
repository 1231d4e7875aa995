"""What a stage reads of an input artifact is what its manifest records (#82): a file dropped
in later is never read, a truncated shard and a same-size edit (below the checksum limit) are
one line naming the file, exit 2, before any work; the same rule for an index's vectors and
rows and for a model's weights."""

import shutil

import numpy as np

from helpers import EXAMPLES, one_line_error, write_manifest

QUERY = ["--query", "Who were the Normans?"]


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_an_unrecorded_shard_is_never_read(cli, example_index, tmp_path):
    """A vectors-00001.npy dropped beside the recorded shard: search returns what it did."""
    index = _copy(example_index, tmp_path / "index")
    before = cli("search", index, *QUERY, "--top-k", "5")
    assert before.exit_code == 0, before.stderr
    shard = np.load(index / "vectors-00000.npy")
    np.save(index / "vectors-00001.npy", shard)         # every vector twice
    after = cli("search", index, *QUERY, "--top-k", "5")
    assert after.exit_code == 0, after.stderr
    assert after.stdout == before.stdout


def test_an_edited_or_truncated_shard_or_index_is_one_line(cli, example_index, tmp_path):
    for name, edit, words in (
            ("vectors-00000.npy", "flip", "checksum mismatch"),
            ("vectors-00000.npy", "truncate", "bytes,"),
            ("index.parquet", "flip", "checksum mismatch")):
        index = _copy(example_index, tmp_path / f"index-{name}-{edit}")
        path = index / name
        data = bytearray(path.read_bytes())
        if edit == "flip":
            data[-8] ^= 0xFF                             # the same size, one byte changed
            path.write_bytes(bytes(data))
        else:
            path.write_bytes(bytes(data[:len(data) // 2]))
        r = cli("search", index, *QUERY)
        one_line_error(r, str(path), "changed since it was written", words)


def test_a_models_edited_weights_are_refused_before_any_work(cli, tiny_pretrained, tmp_path):
    model = _copy(tiny_pretrained, tmp_path / "model")
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    assert len(data) < 16 << 20                        # below the checksum limit
    data[-4] ^= 0x01
    weights.write_bytes(bytes(data))
    texts = tmp_path / "texts.txt"
    texts.write_text("a line of text\nanother line\n")
    r = cli("embed", model, texts, "--out", tmp_path / "emb")
    one_line_error(r, str(weights), "checksum mismatch")
    assert not (tmp_path / "emb").exists()
    r = cli("eval", model, EXAMPLES / "glue" / "SST-2" / "dev.tsv", "--task", "glue/sst2",
            "--out", tmp_path / "ev")
    one_line_error(r, str(weights), "checksum mismatch")


def test_search_counts_the_vectors_it_reads_not_the_manifests_stats(cli, example_index,
                                                                   tmp_path):
    """stats.vectors edited to 2 in a crafted manifest (its digest recomputed): --top-k 5
    still prints 5 hits."""
    import json

    index = _copy(example_index, tmp_path / "index")
    manifest = json.loads((index / "artifact.json").read_text())
    manifest["stats"]["vectors"] = 2
    write_manifest(index, manifest)
    r = cli("search", index, *QUERY, "--top-k", "5")
    assert r.exit_code == 0, r.stderr
    assert len(r.stdout.splitlines()) == 5


def test_compile_is_in_the_id_and_off_keeps_the_old_ids():
    """--compile trains other weights (compiled kernels round differently): a run with it has
    another id; off (the default) hashes as before it was counted."""
    from bertctl.stages.settings.finetune import FinetuneSettings
    from bertctl.contract.identity import compute_id
    from bertctl.settings import identity as identity_config

    off, on = FinetuneSettings().resolved(), FinetuneSettings(compile=True).resolved()
    assert "compile" not in identity_config(off)
    assert identity_config(on)["compile"] is True
    assert compute_id("model", identity_config(off), []) != \
        compute_id("model", identity_config(on), [])


def test_out_inside_a_beir_set_named_by_one_of_its_files_is_refused(cli, minilm_dir, tmp_path):
    """mine --corpus BEIR/corpus.jsonl, embed BEIR/corpus.jsonl and eval MODEL
    BEIR/qrels/test.tsv with --out inside the BEIR directory: refused before any work (the
    artifact would change the set's id for every later eval of it)."""
    beir = _copy(EXAMPLES / "retrieval" / "beir", tmp_path / "beir")
    for args, out in (
            (("mine", minilm_dir, EXAMPLES / "retrieval" / "train.tsv", "--corpus",
              beir / "corpus.jsonl"), beir / "x"),
            (("embed", minilm_dir, beir / "corpus.jsonl", "--text-column", "text"),
             beir / "emb"),
            (("eval", minilm_dir, beir / "qrels" / "test.tsv", "--task", "retrieval"),
             beir / "qrels" / "ev")):
        r = cli(*args, "--out", out)
        one_line_error(r, "lies inside the input directory", str(beir))
        assert not out.exists()


def test_a_file_of_an_artifact_carries_that_artifact_as_its_lineage(cli, minilm_dir, tmp_path):
    """finetune on a split's train.jsonl records the split artifact behind the file (the
    lineage goes on to the pairs it was split from); the id is the file's, the same as for a
    copy of the rows read from elsewhere."""
    import json

    split = tmp_path / "split"
    assert cli("split", EXAMPLES / "retrieval" / "train.tsv", "--out", split).exit_code == 0
    copy = tmp_path / "rows.jsonl"
    shutil.copy(split / "train.jsonl", copy)
    ids = []
    for rows, out in ((split / "train.jsonl", tmp_path / "a"), (copy, tmp_path / "b")):
        r = cli("finetune", minilm_dir, rows, "--task", "retrieval", "--steps", "1",
                "--batch-size", "4", "--precision", "fp32", "--out", out)
        assert r.exit_code == 0, r.stderr
        manifest = json.loads((out / "artifact.json").read_text())
        ids.append(manifest["id"])
        train = next(i for i in manifest["inputs"] if i["role"] == "train")
        if rows == copy:
            assert train["inputs"] == []
        else:
            (parent,) = train["inputs"]
            assert parent["kind"] == "split" and parent["inputs"][0]["path"].endswith("train.tsv")
    assert ids[0] == ids[1]
    shown = cli("inspect", tmp_path / "a")
    assert "artifact: split" in shown.stdout


def test_every_byte_of_a_large_file_is_checked_before_it_is_read(tmp_path):
    """Above the checksum limit a file has a sample too (its size and blocks from its first
    byte to its last), and every byte is hashed as well: an edit in a block or between the
    blocks (#103: 6 MB of MiniLM's embeddings multiplied by -5 passed) is one line, exit 2; a
    small file's entry has no sample (its manifest entry as before)."""
    import pytest

    from bertctl.contract import artifacts
    from bertctl.errors import BertctlError

    size = artifacts.CHECKSUM_ON_COPY_BYTES + 12345
    payload = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)

    def build(tmp):
        payload.tofile(tmp / "vectors-00000.npy")
        (tmp / "small.txt").write_text("x")
        return {}

    out = tmp_path / "art"
    artifacts.produce("embeddings", {"seed": 1}, [], artifacts.Target(out), build)
    art = artifacts.read_artifact(out)
    entries = art.manifest.files
    assert entries["vectors-00000.npy"].sample and entries["small.txt"].sample is None
    assert '"sample"' not in (out / "artifact.json").read_text().split('"small.txt"')[1][:80]
    art.file("vectors-00000.npy")
    data = bytearray((out / "vectors-00000.npy").read_bytes())
    last = len(data) - artifacts.SAMPLE_BLOCK
    between = last // (artifacts.SAMPLE_BLOCKS - 1) + artifacts.SAMPLE_BLOCK + 100
    assert artifacts.sample_digest(out / "vectors-00000.npy") == \
        entries["vectors-00000.npy"].sample
    for at in (0, len(data) - 1, last * 7 // (artifacts.SAMPLE_BLOCKS - 1) + 10,   # 3 blocks
               between):                                                        # none
        edited = bytearray(data)
        edited[at] ^= 0xFF
        (out / "vectors-00000.npy").write_bytes(bytes(edited))
        with pytest.raises(BertctlError, match="vectors-00000.npy: changed since it was "
                           "written \\(checksum mismatch\\)") as err:
            art.file("vectors-00000.npy")
        assert err.value.exit_code == 2
