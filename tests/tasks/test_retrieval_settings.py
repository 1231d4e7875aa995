"""The batch a contrastive loss compares is the batch the manifest records, and a setting the
data cannot be trained with is refused before any work (#63, class 3): a micro-batch that
would split in-batch negatives, CoSENT without scores, a batch larger than the file, a scale
that overflows; negative columns are read without being named; a training set the loss cannot
learn from is named in a warning."""

import json

import pytest


def _refused(r, tmp_path, *parts):
    """Exit 2, one error line (after the log of the data read) holding every part, nothing
    written."""
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1, r.stderr
    for part in parts:
        assert part in errors[0], errors[0]
    assert not (tmp_path / "m").exists()

RET_COLUMNS = "query\tpositive\tnegative\n"
ROWS = [("what is a fox", "a fox is an animal", "a car is a machine"),
        ("where is rome", "rome is in italy", "paris is in france"),
        ("who wrote hamlet", "shakespeare wrote hamlet", "tolstoy wrote war and peace"),
        ("what is rain", "rain is water falling", "snow is frozen"),
        ("what is a cat", "a cat is a pet", "a tree is a plant"),
        ("how old is the sun", "the sun is old", "the moon is close"),
        ("what is tea", "tea is a drink", "bread is food"),
        ("who is newton", "newton was a physicist", "bach was a composer")]


def _table(tmp_path, rows, header=RET_COLUMNS, name="train.tsv"):
    path = tmp_path / name
    path.write_text(header + "".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _finetune(cli, model, data, tmp_path, *flags):
    return cli("finetune", model, data, "--task", "retrieval", "--steps", "1",
               "--max-seq-length", "32", "--out", tmp_path / "m", *flags)


@pytest.mark.parametrize("cached", [False, True])
def test_a_micro_batch_would_split_the_negatives_and_is_refused(cli, tiny_pretrained,
                                                                tmp_path, cached):
    """Before: each step's loss compared 2 pairs (ln 2 at the start) while the manifest said
    8, with or without cached negatives."""
    data = _table(tmp_path, ROWS)
    r = _finetune(cli, tiny_pretrained, data, tmp_path, "--batch-size", "8",
                  "--micro-batch-size", "2", *(["--cache-negatives", "4"] if cached else []))
    _refused(r, tmp_path, "--micro-batch-size 2", "batch of 8", "--cache-negatives")


def test_the_whole_batch_is_compared_at_a_micro_batchs_memory_with_cached_negatives(
        cli, tiny_pretrained, tmp_path):
    """--cache-negatives is the way: the first step's loss is over the 8 pairs' 16 documents,
    near ln 16 for an untrained model whose vectors are alike, not ln 2's 0.69."""
    import math

    data = _table(tmp_path, ROWS)
    r = _finetune(cli, tiny_pretrained, data, tmp_path, "--batch-size", "8",
                  "--cache-negatives", "4", "--log-every", "1", "--lr", "1e-9")
    assert r.exit_code == 0, r.stderr
    first = next(json.loads(x) for x in (tmp_path / "m" / "metrics.jsonl").read_text()
                 .splitlines() if '"loss"' in x)
    assert first["loss"] > math.log(8) - 1.0, first


def test_cosent_without_scores_is_refused(cli, tiny_pretrained, tmp_path):
    r = _finetune(cli, tiny_pretrained, _table(tmp_path, ROWS), tmp_path, "--loss", "cosent",
                  "--batch-size", "4")
    _refused(r, tmp_path, "--loss cosent", "--label-column")


def test_a_batch_larger_than_the_file_is_refused_before_the_memory_plan(cli, tiny_pretrained,
                                                                        tmp_path):
    """Before: a one-row file at --batch-size 8 was measured at one row and refused as
    '--batch-size 1'."""
    r = _finetune(cli, tiny_pretrained, _table(tmp_path, ROWS[:1]), tmp_path,
                  "--batch-size", "8")
    _refused(r, tmp_path, "--batch-size 8", "larger than the training data (1 examples)")
    assert "memory:" not in r.stderr


def test_a_scale_that_overflows_is_refused(cli, tiny_pretrained, tmp_path):
    r = _finetune(cli, tiny_pretrained, _table(tmp_path, ROWS), tmp_path, "--scale", "1e30")
    _refused(r, tmp_path, "scale")


def test_negative_columns_are_read_without_naming_them(tmp_path):
    from bertctl.tasks import get, make_task_spec

    data = _table(tmp_path, [r + (r[2] + " too",) for r in ROWS],
                  header="query\tpositive\tnegative_1\tnegative_2\n")
    examples = get("retrieval").read(make_task_spec("retrieval"), data)
    assert [len(row) for row in examples.texts] == [4] * len(ROWS)
    assert examples.texts[0][3] == "a car is a machine too"


DEGENERATE = {
    "every row the same": ([ROWS[0]] * 8, RET_COLUMNS, "all 8 rows are the same"),
    "a query its own positive": ([(r[0], r[0], r[2]) for r in ROWS], RET_COLUMNS,
                                 "every query is its own positive"),
    "a negative equal to its positive": ([(r[0], r[1], r[1]) for r in ROWS[:3]] + ROWS[3:],
                                         RET_COLUMNS, "3 of 8 rows have a hard negative equal"),
    "one repeated line": ([("the same line",)] * 8, "query\n", "every text is the same"),
    "constant scores": ([(r[0], r[1], "3.0") for r in ROWS], "query\tpositive\tscore\n",
                        "every pair is scored 3"),
}


@pytest.mark.parametrize("case", sorted(DEGENERATE))
def test_a_training_set_the_loss_cannot_learn_from_is_named(cli, tiny_pretrained, tmp_path,
                                                            case):
    rows, header, words = DEGENERATE[case]
    flags = ["--batch-size", "4"]
    if header.startswith("query\n"):
        flags += ["--text-column", "query", "--dropout", "0.1"]
    if "score" in header:
        flags += ["--text-column", "query", "--text-column", "positive", "--label-column",
                  "score"]
    r = _finetune(cli, tiny_pretrained, _table(tmp_path, rows, header), tmp_path, *flags)
    assert r.exit_code == 0, r.stderr
    warnings = [x for x in r.stderr.splitlines() if "warning:" in x]
    assert len(warnings) == 1 and words in warnings[0], r.stderr


def test_a_dev_file_that_can_score_nothing_is_refused_before_training(cli, tiny_pretrained,
                                                                      tmp_path):
    """#63 class 6: a SimCSE text file as --dev trained the whole run, then failed with
    "select: evaluate returned no 'ndcg@10'"."""
    texts = tmp_path / "dev.txt"
    texts.write_text("one text\nanother text\n", encoding="utf-8")
    r = cli("finetune", tiny_pretrained, _table(tmp_path, ROWS), "--task", "retrieval",
            "--steps", "1", "--batch-size", "4", "--dev", texts, "--out", tmp_path / "m")
    _refused(r, tmp_path, "texts alone (SimCSE) score nothing")
    assert "fine-tuning" not in r.stderr
