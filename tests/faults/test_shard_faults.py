"""Corrupted pretraining data (#13 item 7): missing, truncated or garbage shard files are one
clear error naming the file (exit 2 through the CLI), never an IndexError inside the model."""

import shutil

import numpy as np
import pytest

from bertctl.data.pretraining.dataset import PretrainingDataset
from bertctl.errors import BertctlError

from helpers import TINY_MODEL, write_manifest

SHARD = "train-00000of00001-00000"


@pytest.fixture
def data(tmp_path, pretrain_data):
    copy = tmp_path / "data"
    shutil.copytree(pretrain_data, copy)
    return copy


def test_a_missing_shard_file(data):
    (data / f"{SHARD}.tokens.bin").unlink()
    with pytest.raises(BertctlError, match=rf"{SHARD}\.tokens\.bin: shard file missing"):
        PretrainingDataset(data, "train")


def test_a_missing_or_garbled_shard_index(data):
    index = data / f"{SHARD}.json"
    index.write_text("{not json")
    with pytest.raises(BertctlError, match=rf"{SHARD}\.json: corrupted shard index"):
        PretrainingDataset(data, "train")
    index.unlink()
    with pytest.raises(BertctlError, match=rf"{SHARD}\.json: shard index missing"):
        PretrainingDataset(data, "train")


def test_garbage_offsets(data):
    path = data / f"{SHARD}.offsets.bin"
    arr = np.memmap(path, dtype=np.int64, mode="r+")
    arr[3] = arr[-1] + 1000
    arr.flush()
    del arr
    with pytest.raises(BertctlError, match=r"offsets\.bin: corrupted \(offsets do not rise"):
        PretrainingDataset(data, "train")


def test_random_bytes_in_the_tokens(data, cli, tmp_path):
    path = data / f"{SHARD}.tokens.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, path.stat().st_size,
                                                       dtype=np.uint8).tobytes())
    ds = PretrainingDataset(data, "train")   # same size: opens
    with pytest.raises(BertctlError, match=r"tokens\.bin: corrupted: token id \d+ is not below"):
        ds.batch(np.arange(len(ds)))
    r = cli("pretrain", data, "--out", tmp_path / "m", "--steps", "2", "--batch-size", "4",
            *TINY_MODEL)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "tokens.bin: corrupted" in r.stderr
    assert not (tmp_path / "m").exists()


def test_a_manifest_without_stats_does_not_decide_what_is_read(data, cli, tmp_path):
    """The data's own summaries say what it holds; a manifest stripped of its stats (a KeyError
    before) changes nothing."""
    import json

    manifest = json.loads((data / "artifact.json").read_text())
    manifest.pop("stats")
    write_manifest(data, manifest)
    r = cli("pretrain", data, "--out", tmp_path / "m", "--steps", "1", "--batch-size", "4",
            *TINY_MODEL)
    assert r.exit_code == 0, r.stderr
