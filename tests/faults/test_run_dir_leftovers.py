"""#26 item 9: a training run that ends without a checkpoint to resume from leaves no hidden
run directory behind (a resume error on a new --out, a divergence before the first checkpoint);
one that has checkpoints keeps them for the rerun."""

import pytest

from conftest import TINY_MODEL


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
