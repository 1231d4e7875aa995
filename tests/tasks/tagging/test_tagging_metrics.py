"""conlleval's figures on known-answer cases, each worked out by hand from the script's rules
(startOfChunk / endOfChunk, a sentence break counted as O, the correct-chunk bookkeeping)."""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from bertctl.errors import BertctlError
from bertctl.tasks.tagging.metrics import score, score_lines
from bertctl.tasks.tagging.schemes import chunks, parse


def _score(gold_sentences, pred_sentences):
    gold = [t for s in gold_sentences for t in s]
    pred = [t for s in pred_sentences for t in s]
    offsets = np.cumsum([0] + [len(s) for s in gold_sentences])
    return score(gold, pred, offsets)


def _spans(tags, offsets=None):
    offsets = np.array([0, len(tags)]) if offsets is None else np.asarray(offsets)
    ch = chunks(parse(tags), offsets)
    return [(ch.type_names[t], int(s), int(e)) for s, e, t in zip(ch.start, ch.end, ch.type)]


def test_chunks_iob2():
    tags = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "O", "B-ORG"]
    assert _spans(tags) == [("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 6), ("ORG", 7, 8)]


def test_chunks_iob1_b_only_between_same_type():
    # I- opens a chunk after O or another type; B- splits two adjacent chunks of one type.
    tags = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG", "I-MISC"]
    assert _spans(tags) == [("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 6), ("ORG", 6, 7),
                            ("MISC", 7, 8)]


def test_chunks_ill_formed_as_conlleval():
    # I- after O or after another type opens a chunk; B-X then I-Y are two chunks.
    assert _spans(["O", "I-PER", "B-LOC", "I-PER"]) == [("PER", 1, 2), ("LOC", 2, 3), ("PER", 3, 4)]


def test_chunks_end_at_sentence_end():
    # The second sentence's I-PER follows a sentence break (an O): a chunk of its own.
    assert _spans(["B-PER", "I-PER", "I-PER"], [0, 2, 3]) == [("PER", 0, 2), ("PER", 2, 3)]
    assert _spans(["B-PER", "I-PER", "I-PER"]) == [("PER", 0, 3)]


def test_chunks_bioes():
    # S- is a chunk of its own; B- after E- opens a new chunk even of the same type.
    tags = ["S-PER", "S-PER", "B-LOC", "E-LOC", "B-LOC", "I-LOC", "E-LOC", "O", "S-ORG"]
    assert _spans(tags) == [("PER", 0, 1), ("PER", 1, 2), ("LOC", 2, 4), ("LOC", 4, 7),
                            ("ORG", 8, 9)]


def test_score_iob2():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-MISC"]]
    s = _score(gold, pred)
    # gold PER(0-1) LOC(3) ORG(4); predicted PER(0-1) ORG(3) ORG(4) MISC(5): 2 correct.
    assert (s["gold_entities"], s["predicted_entities"], s["correct_entities"]) == (3, 4, 2)
    assert s["precision"] == pytest.approx(50.0)
    assert s["recall"] == pytest.approx(200 / 3)
    assert s["f1"] == pytest.approx(2 * 50 * (200 / 3) / (50 + 200 / 3))
    assert s["accuracy"] == pytest.approx(100 * 4 / 6)
    assert s["tokens"] == 6
    per = s["per_type"]
    assert list(per) == ["LOC", "MISC", "ORG", "PER"]          # gold and predicted types, sorted
    assert per["PER"]["f1"] == 100.0
    assert per["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "gold_entities": 1,
                          "predicted_entities": 0, "correct_entities": 0}
    assert per["MISC"]["predicted_entities"] == 1 and per["MISC"]["recall"] == 0.0
    assert per["ORG"]["precision"] == 50.0 and per["ORG"]["recall"] == 100.0
    assert per["ORG"]["f1"] == pytest.approx(200 / 3)


def test_partial_span_or_wrong_type_is_wrong():
    assert _score([["B-PER", "I-PER"]], [["B-PER", "O"]])["f1"] == 0.0
    assert _score([["B-PER", "I-PER"]], [["B-PER", "I-PER", ]])["f1"] == 100.0
    # A type change inside: PER(0) + LOC(1) against PER(0-1).
    s = _score([["B-PER", "I-PER"]], [["B-PER", "I-LOC"]])
    assert (s["predicted_entities"], s["correct_entities"]) == (2, 0)


def test_i_after_o_starts_a_chunk_but_tags_differ():
    s = _score([["O", "B-PER", "I-PER", "O"]], [["O", "I-PER", "I-PER", "O"]])
    assert s["f1"] == 100.0                    # the same chunk
    assert s["accuracy"] == 75.0               # accuracy compares the tag strings


def test_iob1_b_splits_same_type_chunks():
    s = _score([["I-PER", "I-PER", "B-PER", "O"]], [["I-PER", "I-PER", "I-PER", "O"]])
    assert (s["gold_entities"], s["predicted_entities"], s["correct_entities"]) == (2, 1, 0)


def test_chunk_at_sentence_end_is_counted():
    s = _score([["O", "B-LOC"], ["I-LOC", "O"]], [["O", "B-LOC"], ["B-LOC", "O"]])
    # gold: LOC(1) and, after the break, LOC(2) again; the prediction has the same two chunks.
    assert (s["gold_entities"], s["correct_entities"]) == (2, 2)
    assert s["accuracy"] == 75.0


def test_bioes_known_answer():
    s = _score([["S-PER", "B-PER", "E-PER", "S-PER"]], [["S-PER", "B-PER", "I-PER", "E-PER"]])
    # gold PER(0) PER(1-2) PER(3); predicted PER(0) PER(1-3).
    assert (s["gold_entities"], s["predicted_entities"], s["correct_entities"]) == (3, 2, 1)
    assert s["precision"] == 50.0 and s["recall"] == pytest.approx(100 / 3)


def test_nothing_predicted_scores_zero():
    s = _score([["B-PER", "O"]], [["O", "O"]])
    assert (s["precision"], s["recall"], s["f1"], s["accuracy"]) == (0.0, 0.0, 0.0, 50.0)
    s = _score([["O", "O"]], [["O", "O"]])
    assert (s["precision"], s["recall"], s["f1"], s["accuracy"]) == (0.0, 0.0, 0.0, 100.0)
    assert s["per_type"] == {}


def test_empty_and_bad_input():
    with pytest.raises(BertctlError):
        score([], [], [0])
    with pytest.raises(ValueError):
        score(["O"], ["O", "O"], [0, 1])
    with pytest.raises(ValueError):
        score(["X-PER"], ["O"], [0, 1])


def test_lines_like_conlleval():
    lines = ["-DOCSTART- -X- O O", "", "EU NNP B-ORG B-ORG", "rejects VBZ O B-ORG",
             "German JJ B-MISC B-MISC", "", "Peter NNP B-PER B-PER", "Blackburn NNP I-PER I-PER"]
    s = score_lines(lines)                     # the last chunk ends at the end of the input
    # A -DOCSTART- line is a token to conlleval (O O: correct); blank lines are not.
    assert s["tokens"] == 6 and s["accuracy"] == pytest.approx(100 * 5 / 6)
    # rejects' B-ORG after B-ORG is a second predicted ORG; EU's ORG still ends where gold's does.
    assert (s["gold_entities"], s["predicted_entities"], s["correct_entities"]) == (3, 4, 3)
    # A -X- line separates sentences as a blank line does; without a break the chunk runs on.
    assert score_lines(["a B-PER B-PER", "-X- O O", "b I-PER I-PER"])["gold_entities"] == 2
    assert score_lines(["a B-PER B-PER", "b I-PER I-PER"])["gold_entities"] == 1
    with pytest.raises(BertctlError, match="line 1"):
        score_lines(["B-PER B-PER"])


def test_lines_equal_arrays():
    rng = np.random.default_rng(0)
    tags = np.array(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])
    gold, pred = tags[rng.integers(0, 5, 300)], tags[rng.integers(0, 5, 300)]
    offsets = np.unique(np.concatenate([[0, 300], rng.integers(1, 300, 40)]))
    lines = []
    for a, b in zip(offsets[:-1], offsets[1:]):
        lines += [f"w {g} {p}" for g, p in zip(gold[a:b], pred[a:b])] + [""]
    assert score_lines(lines) == score(gold, pred, offsets)


@pytest.mark.skipif(not os.environ.get("CONLLEVAL") or not shutil.which("perl"),
                    reason="set CONLLEVAL to a copy of conlleval(.pl) to compare with the script")
def test_against_the_conlleval_script():
    rng = np.random.default_rng(1)
    tags = np.array(["O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"])
    for _ in range(50):
        n = int(rng.integers(1, 60))
        gold, pred = tags[rng.integers(0, len(tags), n)], tags[rng.integers(0, len(tags), n)]
        breaks = set(rng.integers(1, n + 1, 5).tolist())
        lines = []
        for i in range(n):
            lines.append(f"w {gold[i]} {pred[i]}")
            if i + 1 in breaks:
                lines.append("")
        out = subprocess.run(["perl", os.environ["CONLLEVAL"]], input="\n".join(lines) + "\n",
                             capture_output=True, text=True, check=True).stdout
        counts = re.search(r"processed (\d+) tokens with (\d+) phrases; found: (\d+) phrases; "
                           r"correct: (\d+)", out).groups()
        figures = re.search(r"accuracy:\s*([\d.]+)%; precision:\s*([\d.]+)%; recall:\s*([\d.]+)%; "
                            r"FB1:\s*([\d.]+)", out).groups()
        s = score_lines(lines)
        assert (s["tokens"], s["gold_entities"], s["predicted_entities"],
                s["correct_entities"]) == tuple(map(int, counts))
        for key, value in zip(("accuracy", "precision", "recall", "f1"), figures):
            assert f"{s[key]:.2f}" == value


def test_the_family_says_its_metrics_are_percentages():
    """conlleval reports 0-100; export --check turns a difference into points with this flag
    (a 0.05-point drop in F1 was read as 5 points and failed the gate)."""
    from bertctl import tasks
    from bertctl.tasks.tagging.metrics import score_lines

    perfect = score_lines(["EU B-ORG B-ORG", "rejects O O", "German B-MISC B-MISC", ""])
    assert perfect["f1"] == 100.0
    assert tasks.get("tagging").metric_in_percent
