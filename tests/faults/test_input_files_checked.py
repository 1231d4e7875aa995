"""Files of an input artifact are checked before a stage copies them into a new one (#13 item
2): a symbolic link (to a file anywhere) or a changed file is a one-line error, exit 2."""

import shutil

import pytest

from helpers import TINY_MODEL, write_manifest


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


def _swap_vocab_lines_and_resign(artifact):
    """Two lines of vocab.txt swapped, and the manifest re-signed to match (#26 item 6): the
    checksums pass, only the two files' disagreement can tell."""
    import hashlib
    import json

    vocab = artifact / "vocab.txt"
    lines = vocab.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[200], lines[201] = lines[201], lines[200]
    vocab.write_text("".join(lines), encoding="utf-8")
    manifest = json.loads((artifact / "artifact.json").read_text())
    entry = manifest["files"]["vocab.txt"]
    entry["sha256"] = hashlib.sha256(vocab.read_bytes()).hexdigest()
    entry["size"] = vocab.stat().st_size
    write_manifest(artifact, manifest)
    return lines[200].strip()


def test_a_vocab_txt_that_disagrees_with_tokenizer_json_is_refused(cli, small_tokenizer,
                                                                   data, tiny_pretrained,
                                                                   tmp_path):
    from helpers import CORPUS

    tok = tmp_path / "tok"
    shutil.copytree(small_tokenizer, tok)
    token = _swap_vocab_lines_and_resign(tok)
    r = cli("build-pretrain-data", tok, CORPUS / "alice.txt", "--out", tmp_path / "d")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"vocab.txt: disagrees with tokenizer.json: line 201 is {token!r}" in r.stderr
    assert not (tmp_path / "d").exists()

    _swap_vocab_lines_and_resign(data)
    r = _pretrain(cli, data, tmp_path / "m")
    assert r.exit_code == 2 and "disagrees with tokenizer.json" in r.stderr, r.stderr

    model = tmp_path / "model"
    shutil.copytree(tiny_pretrained, model)
    _swap_vocab_lines_and_resign(model)
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "".join(f"text {i}\t{i % 2}\n" for i in range(8)))
    r = cli("finetune", model, train, "--task", "glue/sst2", "--steps", "1", "--batch-size",
            "4", "--out", tmp_path / "ft")
    assert r.exit_code == 2 and "disagrees with tokenizer.json" in r.stderr, r.stderr
    assert not (tmp_path / "ft").exists()
