"""Bad usage through the real entry point (`python -m bertctl`, not CliRunner): one line on
stderr and exit 2, as every other exit-2 error (no usage block, no traceback)."""

from pathlib import Path

import pytest

from bertctl.errors import BertctlError
from helpers import FIXTURES, run_bertctl


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


# ---- #52 class 5: settings checked before work; the same settings, the same id -------------

def test_bounds_and_micro_batches_are_checked_before_any_work(cli, tmp_path, pretrain_data):
    for args, words in (
            (("--steps", "99999999999999999999"), "steps"),
            (("--steps", "2", "--threads", "100000"), "threads"),
            (("--time-budget", "1m", "--min-steps", "5", "--batch-size", "96",
              "--micro-batch-size", "30"), "not a multiple of micro_batch_size 30")):
        r = cli("pretrain", pretrain_data, *args, "--out", tmp_path / "m")
        assert r.exit_code == 2 and words in r.stderr, r.stderr
        assert len([x for x in r.stderr.splitlines() if x.strip()]) == 1, r.stderr
    assert not (tmp_path / "m").exists()


def test_extend_refuses_the_settings_it_cannot_apply(cli, tmp_path, minilm_dir):
    from helpers import CORPUS

    for extra in (("--cased",), ("--vocab-size", "1000"), ("--from-vocab",
                                                           minilm_dir / "vocab.txt")):
        r = cli("tokenize", CORPUS, "--extend", minilm_dir, "--add", "10", *extra,
                "--out", tmp_path / "t")
        assert r.exit_code == 2 and "cannot apply" in r.stderr and extra[0] in r.stderr, r.stderr
    assert not (tmp_path / "t").exists()


def test_an_exclusion_given_twice_or_reordered_is_one_id(cli, tmp_path, small_tokenizer):
    from helpers import CORPUS

    dev, rte = FIXTURES / "glue" / "SST-2" / "dev.tsv", FIXTURES / "glue" / "RTE" / "dev.tsv"
    ids = []
    for i, exclude in enumerate(([dev], [dev, dev], [dev, rte], [rte, dev])):
        flags = [x for f in exclude for x in ("--exclude", f)]
        r = cli("build-pretrain-data", small_tokenizer, CORPUS / "alice.txt", *flags,
                "--max-seq-length", "64", "--workers", "1", "--json", "--out", tmp_path / f"d{i}")
        assert r.exit_code == 0, r.stderr
        ids.append(r.json()["id"])
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2]


def test_a_task_file_that_is_not_utf8_names_the_line_of_the_bad_byte(tmp_path):
    """#52 class 6: it was reported at 'line 0' (the csv reader's count lags the decoder)."""
    from bertctl.tasks import get, make_task_spec

    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"sentence\tlabel\nfine\t1\nbad \xff byte\t0\n")
    with pytest.raises(BertctlError, match=r"bad.tsv: line 3: not UTF-8"):
        get("single").read(make_task_spec("glue/sst2"), bad)


def test_a_time_budget_with_total_steps_names_no_placeholder(cli, tmp_path, pretrain_data):
    r = cli("pretrain", pretrain_data, "--model-size", "tiny", "--time-budget", "3s",
            "--total-steps", "100", "--out", tmp_path / "m")
    assert r.exit_code == 2 and "give one" in r.stderr and "10000000" not in r.stderr, r.stderr


def test_a_path_that_is_not_utf8_is_one_line(cli, tmp_path):
    """#52 class 6: a corpus directory named with a byte that is not UTF-8 was a
    UnicodeEncodeError (exit 1; with --json a PydanticSerializationError)."""
    import os

    bad = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xffdir"))
    bad.mkdir()
    (bad / "book.txt").write_text("Some text.\nMore text here.\n" * 50, encoding="utf-8")
    for extra in ((), ("--json",)):
        r = cli("tokenize", bad, "--vocab-size", "1000", "--out", tmp_path / "tok", *extra)
        assert r.exit_code == 2, r.stderr
        assert "bad\\xffdir" in r.stderr + r.stdout and "not valid UTF-8" in r.stderr + r.stdout
    assert not (tmp_path / "tok").exists()
