"""Hub names (hf:ORG/NAME, hf:datasets/ORG/NAME, @REVISION, a path inside) resolved from a
local cache laid out as huggingface_hub lays it out (blobs, snapshots of symbolic links into
them, refs naming commits), with no network: a stage reads the snapshot as a local directory and
its lineage names the commit; a name not in the cache is one line saying where it looked."""

import hashlib
import json
import os

import pytest

from helpers import CORPUS, FIXTURES, one_line_error

COMMIT = "a" * 40
OTHER = "b" * 40


def _lay_out(cache, kind, repo, files, commit, refs=("main",)):
    """A repository in the cache as huggingface_hub writes it."""
    root = cache / f"{kind}--{repo.replace('/', '--')}"
    for name, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = root / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (root / "refs" / ref).write_text(commit)


@pytest.fixture
def hub(tmp_path, monkeypatch, minilm_dir):
    cache = tmp_path / "hub"
    files = {p.name: p.read_bytes() for p in minilm_dir.iterdir() if p.is_file()}
    _lay_out(cache, "models", "sentence-transformers/all-MiniLM-L6-v2", files, COMMIT)
    rows = "".join(json.dumps({"text": d}) + "\n" for d in
                   (CORPUS / "alice.txt").read_text(encoding="utf-8").split("\n\n") if d.strip())
    _lay_out(cache, "datasets", "someone/alice", {"data/train.jsonl": rows.encode()}, COMMIT)
    _lay_out(cache, "datasets", "someone/alice", {"data/train.jsonl": "".join(rows.splitlines(True)[:10]).encode()},
             OTHER, refs=("v0",))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_a_model_by_its_hub_name_is_its_snapshot(hub, cli, tmp_path):
    r = cli("finetune", "hf:sentence-transformers/all-MiniLM-L6-v2",
            FIXTURES / "glue" / "SST-2" / "train.tsv", "--task", "glue/sst2", "--steps", "1",
            "--batch-size", "8", "--max-seq-length", "32", "--out", tmp_path / "m", "--json")
    assert r.exit_code == 0, r.stderr
    model = next(i for i in r.json()["inputs"] if i["kind"] == "hf-model")
    assert f"snapshots/{COMMIT}" in model["path"]
    assert (tmp_path / "m" / "model.safetensors").is_file()


def test_a_data_set_by_its_hub_name_and_revision(hub, cli, tmp_path):
    def tokenize(source, out):
        r = cli("tokenize", source, "--text-column", "text", "--vocab-size", "500",
                "--out", tmp_path / out, "--json")
        assert r.exit_code == 0, r.stderr
        return r.json()

    main = tokenize("hf:datasets/someone/alice", "main")
    old = tokenize("hf:datasets/someone/alice@v0", "old")
    file = tokenize(f"hf:datasets/someone/alice@{COMMIT}/data/train.jsonl", "file")
    def path(m):
        return next(i["path"] for i in m["inputs"] if i["role"] == "corpus")

    assert path(main).endswith(f"snapshots/{COMMIT}/data/train.jsonl")
    assert f"snapshots/{OTHER}/" in path(old)
    assert old["stats"]["documents"] < main["stats"]["documents"] == file["stats"]["documents"]


@pytest.mark.parametrize("name, parts", [
    ("hf:nobody/nothing", ["nobody/nothing is not in the local Hugging Face cache",
                           "models--nobody--nothing", "huggingface-cli download nobody/nothing"]),
    ("hf:datasets/someone/alice@v9", ["no revision 'v9'", "refs/v9"]),
    ("hf:datasets/someone/alice/data/test.jsonl", ["no data/test.jsonl in the snapshot"]),
    (f"hf:datasets/someone/alice@{'c' * 40}", ["the snapshot " + "c" * 40]),
])
def test_a_name_not_in_the_cache_is_one_line(name, parts, hub, cli, tmp_path):
    r = cli("tokenize", name, "--text-column", "text", "--out", tmp_path / "t")
    one_line_error(r, *parts)
    assert not (tmp_path / "t").exists()


def test_a_hub_split_kept_as_parquet_shards_reads_by_pattern(tmp_path, monkeypatch):
    """The hub keeps a split as data/train-0000N-of-0000M.parquet: a pattern inside the
    snapshot names them all, read as one table in order."""
    datasets = pytest.importorskip("datasets")
    from bertctl.cli import _local
    from bertctl.tasks import make_task_spec
    from helpers import read_examples

    spec = make_task_spec("glue/sst2")
    rows = read_examples(spec, FIXTURES / "glue" / "SST-2" / "train.tsv")
    ds = datasets.Dataset.from_dict({"sentence": list(rows.text_a),
                                     "label": [int(x) for x in rows.labels]})
    files = {}
    for i in range(2):
        ds.shard(2, i, contiguous=True).to_parquet(str(tmp_path / f"{i}.parquet"))
        files[f"data/train-{i:05d}-of-00002.parquet"] = (tmp_path / f"{i}.parquet").read_bytes()
    _lay_out(tmp_path / "hub", "datasets", "nyu/sst2", files, COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    path = _local("hf:datasets/nyu/sst2/data/train-*.parquet")
    assert f"snapshots/{COMMIT}/data/train-*.parquet" in str(path)
    assert list(read_examples(spec, path).text_a) == list(rows.text_a)
