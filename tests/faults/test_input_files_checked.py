"""Files of an input artifact are checked before a stage copies them into a new one (#13 item
2): a symbolic link (to a file anywhere) or a changed file is a one-line error, exit 2."""

import shutil

import pytest

from conftest import TINY_MODEL


@pytest.fixture
def data(tmp_path, pretrain_data):
    copy = tmp_path / "data"
    shutil.copytree(pretrain_data, copy)
    return copy


def _pretrain(cli, data, out):
    return cli("pretrain", data, "--out", out, "--steps", "1", "--batch-size", "4", *TINY_MODEL)


def test_a_symlinked_tokenizer_file_is_refused(cli, data, tmp_path):
    elsewhere = tmp_path / "secret.json"
    elsewhere.write_text((data / "special_tokens_map.json").read_text())
    (data / "special_tokens_map.json").unlink()
    (data / "special_tokens_map.json").symlink_to(elsewhere)
    r = _pretrain(cli, data, tmp_path / "m")
    # refused before any work: the error is the only line
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "special_tokens_map.json: a symbolic link" in r.stderr
    assert not (tmp_path / "m").exists()


def test_a_changed_tokenizer_file_is_refused(cli, data, tmp_path):
    path = data / "special_tokens_map.json"
    path.write_text(path.read_text().replace("[MASK]", "[MASQ]"))
    r = _pretrain(cli, data, tmp_path / "m")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "special_tokens_map.json: changed since it was written" in r.stderr
    assert not (tmp_path / "m").exists()
