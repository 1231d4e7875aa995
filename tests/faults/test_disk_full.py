"""A full disk (#13 item 8): a write failing with ENOSPC, or torch's short-write RuntimeError,
is one line "no space left on device writing PATH", exit 1, and what was there stays intact."""

import errno
import json

import pytest

from bertctl.contract import artifacts
from bertctl.errors import DiskFull
from bertctl.train import checkpoint

from helpers import TINY_MODEL


def test_a_checkpoint_write_that_runs_out_of_space(cli, pretrain_data, tmp_path, monkeypatch):
    real_save, calls = checkpoint.torch.save, []

    def save(obj, path, *a, **kw):
        calls.append(path)
        if len(calls) > 2:   # the second checkpoint's optimizer state: the disk is full
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos "
                               "4096 vs 1024")
        return real_save(obj, path, *a, **kw)

    monkeypatch.setattr(checkpoint.torch, "save", save)
    out = tmp_path / "m"
    r = cli("pretrain", pretrain_data, "--out", out, "--steps", "4", "--checkpoint-every", "2",
            "--batch-size", "4", *TINY_MODEL)
    assert r.exit_code == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]          # after the run's own log lines
    assert last.startswith("error: no space left on device writing") and "step-" in last
    assert "inline_container" not in r.stderr
    assert not out.exists()
    kept = [c for _, c in checkpoint.list_checkpoints(next(tmp_path.glob(".m.run-*")))]
    assert len(kept) == 1                      # step 2, complete, and no half-written step 4
    sums = json.loads((kept[0] / checkpoint.CHECKSUMS).read_text())
    assert {p.name for p in kept[0].iterdir()} == set(sums) | {checkpoint.CHECKSUMS}
    assert not list(kept[0].parent.glob(".tmp-*"))
    monkeypatch.setattr(checkpoint.torch, "save", real_save)
    r = cli("pretrain", pretrain_data, "--out", out, "--steps", "4", "--checkpoint-every", "2",
            "--batch-size", "4", *TINY_MODEL)
    assert r.exit_code == 0, r.stderr    # space again: the rerun resumes and finishes


def test_an_artifact_write_with_enospc_keeps_the_old_artifact(cli, tmp_path):
    out = tmp_path / "art"

    def build(text):
        def write(tmp):
            (tmp / "data.txt").write_text(text)
            return {}
        return write

    artifacts.produce("eval", {"k": 1}, [], artifacts.Target(out), build("one"))

    def full(tmp):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "data.txt"))
    with pytest.raises(DiskFull, match=f"no space left on device writing {out}$"):
        artifacts.produce("eval", {"k": 2}, [], artifacts.Target(out, force=True), full)

    def nameless(tmp):   # a write's ENOSPC names no file: the artifact is named
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(DiskFull, match=f"writing {out}$"):
        artifacts.produce("eval", {"k": 3}, [], artifacts.Target(out, force=True), nameless)
    assert (out / "data.txt").read_text() == "one"
    assert str(DiskFull("x")) == "no space left on device writing x"


@pytest.mark.parametrize("where", ["tokenizer", "weights"])
def test_the_rust_writers_full_disk_is_one_line(where, cli, tmp_path, monkeypatch,
                                                tiny_pretrained):
    """tokenizers and safetensors report ENOSPC as their own exception types, with the OS
    message inside: one line naming the file, exit 1, nothing written (#26 item 10)."""
    from bertctl.data.tokenizer import files as tokenizer
    from bertctl.model import hf

    if where == "tokenizer":
        class Full:
            def __init__(self, tok):
                self.tok = tok

            def save(self, path):
                raise Exception("No space left on device (os error 28)")

            def __getattr__(self, name):
                return getattr(self.tok, name)

        real = tokenizer.save
        monkeypatch.setattr(tokenizer, "save",
                            lambda tok, *a: real(Full(tok), *a))
        corpus = tmp_path / "c.txt"
        corpus.write_text("\n".join(f"line {i} of words" for i in range(50)))
        args = ("tokenize", corpus, "--vocab-size", "300")
        needle = "tokenizer.json"
    else:
        def full(*a, **kw):
            from safetensors import SafetensorError
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: '
                                  'StorageFull, message: "No space left on device" })')
        monkeypatch.setattr(hf, "save_file", full)
        args = ("finetune", tiny_pretrained, tmp_path / "t.tsv", "--task", "glue/sst2",
                "--steps", "1", "--batch-size", "2")
        (tmp_path / "t.tsv").write_text("sentence\tlabel\n" + "a good film\t1\nbad\t0\n" * 4)
        needle = "model.safetensors"
    out = tmp_path / "out"
    r = cli(*args, "--out", out)
    assert r.exit_code == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: no space left on device writing") and needle in last, last
    assert "os error" not in r.stderr and "IoError" not in r.stderr
    assert not out.exists()
