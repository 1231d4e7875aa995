"""Bad usage through the real entry point (`python -m bertctl`, not CliRunner): one line on
stderr and exit 2, as every other exit-2 error (no usage block, no traceback)."""

import pytest

from conftest import run_bertctl


@pytest.mark.parametrize("args,needle", [
    (["finetune", "m", "d", "--out", "o", "--lr", "abc"], "Invalid value for '--lr'"),
    (["finetun"], "No such command 'finetun'"),
    (["eval"], "Missing argument"),
    (["tokenize", "--out", "o", "--vocab-size", "many"], "'--vocab-size'"),
    (["finetune", "m", "d", "--out", "o", "--no-such-flag"], "--no-such-flag"),
    # #26 item 9: no float setting means anything at inf or NaN
    (["pretrain", "d", "--out", "o", "--steps", "2", "--lr", "inf"],
     "setting 'lr' = inf: Input should be a finite number"),
    (["finetune", "m", "d", "--out", "o", "--warmup", "nan"], "setting 'warmup' = nan"),
])
def test_usage_errors_are_one_line(tmp_path, args, needle):
    r = run_bertctl(*args, cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_help_still_prints_and_succeeds():
    r = run_bertctl("finetune", "--help", timeout=60)
    assert r.returncode == 0 and "--freeze-encoder" in r.stdout


def test_a_ragged_table_is_one_line_without_library_logs(tmp_path, minilm_dir):
    bad = tmp_path / "rag.tsv"
    bad.write_text("sentence\tlabel\nhello\t1\nbad\t0\textra\n")
    r = run_bertctl("finetune", minilm_dir, bad, "--family", "single", "--text-column",
                    "sentence", "--out", tmp_path / "o", "--steps", "1", timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(bad) in r.stderr and "line 3" in r.stderr
