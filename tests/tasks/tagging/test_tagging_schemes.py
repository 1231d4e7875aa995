"""Tag schemes: detection, validation, conversion (checked against the real CoNLL-2003 files,
published in both IOB1 and IOB2) and the chunk-for-chunk equivalence of the schemes."""

import numpy as np
import pytest

from bertctl.errors import BertctlError
from bertctl.tasks.tagging import schemes
from bertctl.tasks.tagging.metrics import score
from bertctl.tasks.tagging.reader import read_tagged

from helpers import FIXTURES

CONLL = FIXTURES / "conll2003"


@pytest.fixture(scope="module")
def iob2():
    return read_tagged(CONLL / "train.txt")


@pytest.fixture(scope="module")
def iob1():
    return read_tagged(CONLL / "original_iob1" / "eng.train")


def test_detect_real_files(iob1, iob2):
    assert schemes.check_scheme(iob2) == schemes.Detection("iob2", 0)
    assert schemes.check_scheme(iob1) == schemes.Detection("iob1", 0)
    dev = read_tagged(CONLL / "original_iob1" / "eng.testa")
    assert schemes.check_scheme(dev).scheme == "iob1"
    bioes = schemes.convert(iob2.tags, iob2.offsets, "bioes")
    assert schemes.detect(bioes, iob2.offsets).scheme == "bioes"


def test_detect_edge_cases():
    one = np.array([0, 3])
    assert schemes.detect(["O", "O", "O"], one).scheme == "iob2"             # no chunks at all
    assert schemes.detect(["I-PER", "B-PER", "O"], one).scheme == "iob1"
    # Mixed: the majority wins and the rest is counted (eng.train has 2 such B- in IOB1).
    tags = ["I-PER", "O", "I-LOC", "O", "B-ORG"]
    assert schemes.detect(tags, np.array([0, 5])) == schemes.Detection("iob1", 1)
    assert "1 chunk(s)" in schemes.Detection("iob1", 1).describe()
    tags = ["B-PER", "O", "B-LOC", "O", "I-ORG"]
    assert schemes.detect(tags, np.array([0, 5])) == schemes.Detection("iob2", 1)


def test_real_iob1_converts_to_the_published_iob2(iob1, iob2):
    assert iob1.words == iob2.words and np.array_equal(iob1.offsets, iob2.offsets)
    assert np.array_equal(schemes.convert(iob1.tags, iob1.offsets, "iob2"), iob2.tags)
    assert np.array_equal(schemes.convert(iob2.tags, iob2.offsets, "iob1"), iob1.tags)
    bioes = schemes.convert(iob2.tags, iob2.offsets, "bioes")
    assert np.array_equal(schemes.convert(bioes, iob2.offsets, "iob2"), iob2.tags)
    assert np.array_equal(schemes.convert(bioes, iob2.offsets, "iob1"), iob1.tags)


def test_conversion_known_answers():
    one = np.array([0, 4])
    assert schemes.convert(["B-PER", "B-PER", "I-PER", "O"], one, "iob1").tolist() == [
        "I-PER", "B-PER", "I-PER", "O"]
    assert schemes.convert(["B-PER", "B-PER", "I-PER", "O"], one, "bioes").tolist() == [
        "S-PER", "B-PER", "E-PER", "O"]
    # An ill-formed prediction is rewritten as conlleval chunks it.
    assert schemes.convert(["O", "I-PER", "I-LOC", "B-LOC"], one, "iob2").tolist() == [
        "O", "B-PER", "B-LOC", "B-LOC"]
    # IOB1's B- never reaches across a sentence break: each sentence's chunk opens with I-.
    assert schemes.convert(["B-PER", "B-PER"], np.array([0, 1, 2]), "iob1").tolist() == [
        "I-PER", "I-PER"]


def test_schemes_score_alike():
    """The same chunks written in any scheme give conlleval the same entity figures."""
    rng = np.random.default_rng(0)
    tags = np.array(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"])
    for _ in range(20):
        offsets = np.unique(np.concatenate([[0, 200], rng.integers(1, 200, 20)]))
        gold = schemes.convert(tags[rng.integers(0, len(tags), 200)], offsets, "iob2")
        pred = schemes.convert(tags[rng.integers(0, len(tags), 200)], offsets, "iob2")
        base = score(gold, pred, offsets)
        for scheme in ("iob1", "bioes"):
            s = score(schemes.convert(gold, offsets, scheme), schemes.convert(pred, offsets, scheme),
                      offsets)
            assert {k: v for k, v in s.items() if k != "accuracy"} == {
                k: v for k, v in base.items() if k != "accuracy"}


def _examples(tmp_path, body: str):
    path = tmp_path / "dev.txt"
    path.write_text(body)
    return read_tagged(path), path


def test_tag_outside_any_scheme_names_file_line(tmp_path):
    ex, path = _examples(tmp_path, "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP X-PER\n")
    with pytest.raises(BertctlError, match=rf"^{path}:4: 'X-PER' is not a tag"):
        schemes.check_scheme(ex)
    for bad in ("PER", "B-", "O-PER", "B_PER"):
        ex, _ = _examples(tmp_path, f"a NN B-NP {bad}\n")
        with pytest.raises(BertctlError, match=":1: "):
            schemes.check_scheme(ex)


def test_tag_outside_the_given_scheme(tmp_path):
    ex, path = _examples(tmp_path, "a NN B-NP B-PER\nb NN I-NP E-PER\n")
    assert schemes.check_scheme(ex).scheme == "bioes"
    with pytest.raises(BertctlError, match=rf"^{path}:2: 'E-PER' is not an IOB2 tag"):
        schemes.check_scheme(ex, "iob2")
    with pytest.raises(BertctlError, match="unknown tag scheme 'bio'"):
        schemes.check_scheme(ex, "bio")


def test_dev_type_never_seen_in_training(tmp_path):
    ex, path = _examples(tmp_path, "a NN B-NP B-PER\n\nb NN I-NP O\nc NN I-NP B-EVENT\n")
    schemes.check_known_types(ex, ("PER", "EVENT"))
    with pytest.raises(BertctlError, match=rf"^{path}:4: tag 'B-EVENT' never seen in training"):
        schemes.check_known_types(ex, ("LOC", "PER"))


def test_label_list_and_ids(iob2):
    types = schemes.entity_types(iob2.tags)
    assert types == ("LOC", "MISC", "ORG", "PER")
    labels = schemes.label_list(types, "iob2")
    assert labels == ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER")
    assert len(schemes.label_list(types, "bioes")) == 17
    ids = schemes.label_ids(iob2.tags, labels)
    assert np.array_equal(np.array(labels)[ids], iob2.tags)
    with pytest.raises(ValueError):
        schemes.label_ids(["S-PER"], labels)
