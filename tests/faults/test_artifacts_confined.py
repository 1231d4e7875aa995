"""Artifacts are confined to their directory: a manifest naming files outside it (absolute paths,
`..` parts) is a corrupted manifest, and a symbolic link inside it is never read as its file."""

import json
import shutil

import pytest

from bertctl.contract import artifacts
from bertctl.errors import BertctlError

from helpers import CORPUS


def _artifact(path, files):
    def build(tmp):
        for name, text in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        return {}
    artifacts.produce("eval", {"t": 1}, [], artifacts.Target(path), build)
    return path


def _rename_in_manifest(path, old, new):
    m = json.loads((path / artifacts.MANIFEST).read_text())
    m["files"][new] = m["files"].pop(old)
    (path / artifacts.MANIFEST).write_text(json.dumps(m))


@pytest.mark.parametrize("name", ["../secret.txt", "/etc/hostname", "sub/../../secret.txt",
                                  "..\\secret.txt"])
def test_names_outside_are_a_corrupted_manifest(tmp_path, cli, name):
    (tmp_path / "secret.txt").write_text("not the artifact's")
    art = _artifact(tmp_path / "art", {"metrics.json": "{}"})
    _rename_in_manifest(art, "metrics.json", name)
    with pytest.raises(BertctlError, match="corrupted manifest.*outside the artifact"):
        artifacts.read_manifest(art)
    r = cli("inspect", art, "--verify")
    assert r.exit_code == 2 and "outside the artifact" in r.stderr
    assert "verified" not in r.stdout


def test_a_symlink_inside_fails_verification_and_is_not_read(tmp_path, cli):
    (tmp_path / "elsewhere.json").write_text("{}")
    art = _artifact(tmp_path / "art", {"metrics.json": "{}", "sub/x.json": "{}"})
    (art / "metrics.json").unlink()
    (art / "metrics.json").symlink_to(tmp_path / "elsewhere.json")  # same bytes, other file
    shutil.rmtree(art / "sub")
    (art / "sub").symlink_to(tmp_path)
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(BertctlError, match="symbolic link"):   # what a stage reads
        artifacts.read_artifact(art)
    a = artifacts.read_artifact(art, check_files=False)       # what inspect reads
    problems = artifacts.verify(a)
    assert len(problems) == 2 and all("symbolic link" in p for p in problems)
    with pytest.raises(BertctlError, match="symbolic link"):
        a.file("metrics.json")
    r = cli("inspect", art, "--verify")
    assert r.exit_code == 1 and "symbolic link" in r.stderr


def test_combine_refuses_a_slice_naming_files_outside(tmp_path, small_tokenizer, cli):
    common = ["--dupe-factor", "1", "--workers", "1", "--num-shards", "2", "--chunk-chars", "20000"]
    for i in range(2):
        r = cli("build-pretrain-data", small_tokenizer, CORPUS / "alice.txt", "--out",
                tmp_path / f"s{i}", *common, "--shard-index", str(i))
        assert r.exit_code == 0, r.stderr
    victim = tmp_path / "victim.txt"
    victim.write_text("outside")
    m = json.loads((tmp_path / "s0" / artifacts.MANIFEST).read_text())
    name = next(n for n in m["files"] if n.endswith(".bin") or n.endswith(".npy"))
    _rename_in_manifest(tmp_path / "s0", name, "../../victim.txt")
    r = cli("build-pretrain-data", "--combine", tmp_path / "s0", "--combine", tmp_path / "s1",
            "--out", tmp_path / "out" / "all")
    assert r.exit_code == 2 and "outside the artifact" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert victim.read_text() == "outside" and victim.stat().st_nlink == 1


def _copy(src, dst):
    shutil.copytree(src, dst, symlinks=True)
    return dst


@pytest.mark.parametrize("victim", ["train-00000of00001-00000.tokens.bin", "tokenizer.json"])
def test_every_stage_refuses_a_link_inside_a_data_artifact(cli, pretrain_data, tiny_pretrained,
                                                          tmp_path, victim):
    data = _copy(pretrain_data, tmp_path / "data")
    shutil.copy(data / victim, tmp_path / "same-bytes")
    (data / victim).unlink()
    (data / victim).symlink_to(tmp_path / "same-bytes")   # same bytes, a file elsewhere
    for args in (["pretrain", data, "--model-size", "tiny", "--hidden-size", "32",
                  "--num-attention-heads", "2", "--intermediate-size", "64", "--steps", "1"],
                 ["eval", tiny_pretrained, data]):
        out = tmp_path / f"out-{args[0]}"
        r = cli(*args, "--out", out)
        assert r.exit_code == 2 and "symbolic link" in r.stderr and victim in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_finetune_and_eval_refuse_a_linked_model_file(cli, tiny_pretrained, tmp_path):
    model = _copy(tiny_pretrained, tmp_path / "model")
    shutil.copy(model / "model.safetensors", tmp_path / "weights")
    (model / "model.safetensors").unlink()
    (model / "model.safetensors").symlink_to(tmp_path / "weights")
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "".join(f"text {i}\t{i % 2}\n" for i in range(8)))
    for args in (["finetune", model, train, "--task", "glue/sst2", "--steps", "1",
                  "--batch-size", "4"], ["embed", model, train, "--text-column", "sentence"]):
        out = tmp_path / f"out-{args[0]}"
        r = cli(*args, "--out", out)
        assert r.exit_code == 2 and "model.safetensors: a symbolic link" in r.stderr, r.stderr
        assert not out.exists()


@pytest.mark.parametrize("name", ["../../elsewhere/train-00000of00001-00000",
                                  "/tmp/train-00000of00001-00000", "train-00000of00001-00000/.."])
def test_shard_names_in_the_build_index_cannot_leave_the_artifact(cli, pretrain_data,
                                                                  tiny_pretrained, tmp_path,
                                                                  name):
    data = _copy(pretrain_data, tmp_path / "data")
    index = next(data.glob("build-*.json"))
    summary = json.loads(index.read_text())
    summary["splits"]["train"]["shards"][0] = name
    index.write_text(json.dumps(summary))
    for args in (["pretrain", data, "--steps", "1"], ["eval", tiny_pretrained, data, "--split",
                                                      "train"]):
        out = tmp_path / f"out-{args[0]}"
        r = cli(*args, "--out", out)
        assert r.exit_code == 2 and "is not a shard name" in r.stderr and index.name in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_files_get_the_umask_mode(tmp_path):
    import os
    import stat

    def build(tmp):
        (tmp / "a.bin").write_bytes(b"x")
        os.chmod(tmp / "a.bin", 0o600)  # as safetensors writes model.safetensors
        (tmp / "b.txt").write_text("y")
        return {}
    old = os.umask(0o027)
    try:
        artifacts.produce("eval", {"t": 2}, [], artifacts.Target(tmp_path / "art"), build)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "art").iterdir()}
    assert modes == {"a.bin": 0o640, "b.txt": 0o640, "artifact.json": 0o640}
