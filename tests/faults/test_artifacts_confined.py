"""Artifacts are confined to their directory: a manifest naming files outside it (absolute paths,
`..` parts) is a corrupted manifest, and a symbolic link inside it is never read as its file."""

import json
import shutil

import pytest

from bertctl import artifacts
from bertctl.errors import BertctlError

from conftest import CORPUS


def _artifact(path, files):
    def build(tmp):
        for name, text in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        return {}
    artifacts.produce("eval", {"t": 1}, [], path, build)
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
    a = artifacts.read_artifact(art)
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
        artifacts.produce("eval", {"t": 2}, [], tmp_path / "art", build)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "art").iterdir()}
    assert modes == {"a.bin": 0o640, "b.txt": 0o640, "artifact.json": 0o640}
