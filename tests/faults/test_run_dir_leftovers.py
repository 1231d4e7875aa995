"""#26 item 9: a training run that ends without a checkpoint to resume from leaves no hidden
run directory behind (a resume error on a new --out, a divergence before the first checkpoint);
one that has checkpoints keeps them for the rerun."""

import pytest

from helpers import TINY_MODEL


def _hidden(parent):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("flags,code,needle", [
    (["--resume-from", "5"], 2, "resume_from 5: no checkpoints"),
    (["--lr", "1e30", "--precision", "fp32"], 1, "training diverged"),
])
def test_nothing_to_resume_leaves_nothing(cli, pretrain_data, tmp_path, flags, code, needle):
    r = cli("pretrain", pretrain_data, "--out", tmp_path / "m", *TINY_MODEL, "--steps", "4",
            "--batch-size", "4", "--checkpoint-every", "3", *flags)
    assert r.exit_code == code and needle in r.stderr, r.stderr
    assert _hidden(tmp_path) == [] and not (tmp_path / "m").exists()


def test_force_over_a_symlinked_out_leaves_no_sibling(cli, tmp_path):
    """The link is replaced by the new artifact; the directory it pointed to is left alone and
    no `.NAME.tmp-PID-old-*` stays behind."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"line {i} of some words" for i in range(60)))
    elsewhere = tmp_path / "elsewhere"
    assert cli("tokenize", corpus, "--out", elsewhere, "--vocab-size", "300").exit_code == 0
    work = tmp_path / "work"
    work.mkdir()
    (work / "tok").symlink_to(elsewhere)
    r = cli("tokenize", corpus, "--out", work / "tok", "--vocab-size", "320", "--force")
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in work.iterdir()) == ["tok"]
    assert not (work / "tok").is_symlink() and (elsewhere / "artifact.json").is_file()


def test_a_stale_old_sibling_of_a_dead_run_is_removed(cli, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"line {i} of some words" for i in range(60)))
    stale = tmp_path / ".tok.tmp-999999-old-0123abcd"   # no such process
    stale.mkdir()
    (stale / "x").write_text("left by a killed run")
    assert cli("tokenize", corpus, "--out", tmp_path / "tok", "--vocab-size", "300").exit_code == 0
    assert not stale.exists()


def test_an_out_name_too_long_for_its_siblings_is_refused_first(cli, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"line {i} of some words" for i in range(60)))
    out = tmp_path / ("n" * 245)
    r = cli("tokenize", corpus, "--out", out, "--vocab-size", "300")
    assert r.exit_code == 2 and "too long" in r.stderr, r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]
