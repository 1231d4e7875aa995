"""Word-piece alignment and windows on real CoNLL-2003 rows with the real all-MiniLM tokenizer:
every word is labelled and predicted exactly once, on its first piece, long sentences included."""

import numpy as np
import pytest

from bertctl.data.tokenizer.files import from_hf_directory
from bertctl.labels import IGNORE_INDEX
from bertctl.tasks.tagging import schemes
from bertctl.tasks.tagging.metrics import score, score_lines
from bertctl.tasks.tagging.predict import (WordPredictions, conlleval_token, predicted_tags,
                                           write_predictions)
from bertctl.tasks.tagging.reader import TaggedExamples, read_tagged
from bertctl.tasks.tagging.windows import encode_tagged, make_batch, word_index

from helpers import FIXTURES

CONLL = FIXTURES / "conll2003"


@pytest.fixture(scope="module")
def tok(minilm_dir):
    return from_hf_directory(minilm_dir)[0]


@pytest.fixture(scope="module", params=["train.txt", "original_iob1/eng.train"])
def examples(request):
    return read_tagged(CONLL / request.param)


def _labels(ex):
    iob2 = schemes.convert(ex.tags, ex.offsets, "iob2")
    labels = schemes.label_list(schemes.entity_types(iob2), "iob2")
    return labels, schemes.label_ids(iob2, labels)


def _first_piece(tok, word):
    ids = tok.encode([word], is_pretokenized=True, add_special_tokens=False).ids
    return ids[0] if ids else tok.token_to_id("[UNK]")


def _check_alignment(ex, tok, f, max_seq_length):
    """The invariants the issue asks for, checked from the outside."""
    assert f.lengths.max() <= max_seq_length
    assert np.all(f.input_ids[f.offsets[:-1]] == tok.token_to_id("[CLS]"))
    assert np.all(f.input_ids[f.offsets[1:] - 1] == tok.token_to_id("[SEP]"))
    positions = np.flatnonzero(f.predict_word >= 0)
    words = f.predict_word[positions]
    # Exactly one prediction per word, in file order within each window.
    assert np.array_equal(np.sort(words), np.arange(ex.num_words))
    # It sits on the word's first piece ...
    expected = np.array([_first_piece(tok, ex.words[w]) for w in words])
    assert np.array_equal(f.input_ids[positions], expected)
    # ... in a window of the word's own sentence.
    window = np.searchsorted(f.offsets, positions, side="right") - 1
    sentence = np.searchsorted(ex.offsets, words, side="right") - 1
    assert np.array_equal(f.window_sentence[window], sentence)


@pytest.mark.parametrize("max_seq_length,document_context",
                         [(128, False), (12, False), (64, True), (6, True)])
def test_every_word_exactly_once(examples, tok, max_seq_length, document_context):
    labels, word_labels = _labels(examples)
    f = encode_tagged(examples, tok, max_seq_length, doc_stride=max(1, (max_seq_length - 2) // 2),
                      document_context=document_context, word_labels=word_labels)
    _check_alignment(examples, tok, f, max_seq_length)
    if max_seq_length <= 12:
        assert f.stats["windowed_sentences"] > 0 and f.stats["windows"] > f.stats["sentences"]
    # The batches' labels are the words' labels on their predicting tokens, nothing elsewhere.
    batch = make_batch(f, np.arange(len(f)))
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    lab = batch["labels"].numpy()
    words = word_index(f, np.arange(len(f)), lab.shape[1])
    assert np.array_equal(lab[words >= 0], word_labels[words[words >= 0]])
    assert np.all(lab[words < 0] == IGNORE_INDEX)
    assert int(np.sum(lab != IGNORE_INDEX)) == examples.num_words
    assert np.array_equal(batch["attention_mask"].sum(1).numpy(), f.lengths)


def test_windows_start_on_word_boundaries(tok):
    ex = read_tagged(CONLL / "train.txt")
    f = encode_tagged(ex, tok, 10, doc_stride=3)
    plain = encode_tagged(ex, tok, 512, doc_stride=100)
    assert f.stats["cut_words"] == 0
    # Without cut words, every window is a contiguous run of its sentence's pieces that starts
    # and ends on a word boundary (a word's first piece, or the sentence end).
    assert plain.stats["windows"] == ex.num_sentences
    for w in range(len(f)):
        body = f.input_ids[f.offsets[w] + 1:f.offsets[w + 1] - 1]
        s = f.window_sentence[w]
        whole = plain.input_ids[plain.offsets[s] + 1:plain.offsets[s + 1] - 1]
        bounds = set(np.flatnonzero(plain.predict_word[plain.offsets[s] + 1:plain.offsets[s + 1] - 1]
                                    >= 0).tolist()) | {len(whole)}
        assert any(np.array_equal(whole[i:i + len(body)], body) and i + len(body) in bounds
                   for i in bounds), (w, s)


def test_max_context_known_answer(tok):
    # Ten one-piece words, windows of 4 pieces every 2: [0,4) [2,6) [4,8) [6,10). run_squad's
    # score min(left, right) + 0.01 * length picks for each word (earlier window on ties):
    words = list("abcdefghij")
    ex = TaggedExamples(path="x", words=words, tags=np.array(["O"] * 10), offsets=np.array([0, 10]),
                        doc_ids=np.array([0]), lines=np.array([1]))
    f = encode_tagged(ex, tok, 6, doc_stride=2)
    assert f.stats["windows"] == 4
    window = np.searchsorted(f.offsets, np.flatnonzero(f.predict_word >= 0), side="right") - 1
    order = np.argsort(f.predict_word[f.predict_word >= 0])
    assert window[order].tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]


def test_word_without_pieces_becomes_unk(tok):
    words = ["EU", "\x00", "rejects", "\u200b", "German", "", "\u00a0", "lamb"]
    tags = ["B-ORG", "O", "O", "B-MISC", "I-MISC", "O", "B-PER", "O"]
    ex = TaggedExamples(path="x", words=words, tags=np.array(tags), offsets=np.array([0, 8]),
                        doc_ids=np.array([0]), lines=np.array([1]))
    labels, word_labels = _labels(ex)
    f = encode_tagged(ex, tok, 32, doc_stride=8, word_labels=word_labels)
    assert f.stats["unk_words"] == 4
    _check_alignment(ex, tok, f, 32)
    unk = tok.token_to_id("[UNK]")
    positions = np.flatnonzero(f.predict_word >= 0)
    assert [int(f.input_ids[p]) == unk for p in positions] == [
        False, True, False, True, False, True, True, False]
    lab = make_batch(f, [0])["labels"][0].numpy()
    assert [labels[i] for i in lab[lab != IGNORE_INDEX]] == tags   # no label shifted


def test_long_word_keeps_its_first_piece(tok):
    words = ["a", "Blackburn" * 6, "b", "c"]
    ex = TaggedExamples(path="x", words=words, tags=np.array(["O", "B-PER", "O", "O"]),
                        offsets=np.array([0, 4]), doc_ids=np.array([0]), lines=np.array([1]))
    f = encode_tagged(ex, tok, 5, doc_stride=1)
    assert f.stats["cut_words"] == 1
    _check_alignment(ex, tok, f, 5)
    ex.words[3] = ex.words[1]                       # a sentence ending in a too-long word
    f = encode_tagged(ex, tok, 5, doc_stride=2)
    assert f.stats["cut_words"] == 2
    _check_alignment(ex, tok, f, 5)


def test_document_context(tok):
    ex = read_tagged(CONLL / "train.txt")
    plain = encode_tagged(ex, tok, 512, doc_stride=100)
    f = encode_tagged(ex, tok, 48, doc_stride=23, document_context=True)
    _check_alignment(ex, tok, f, 48)

    def pieces(features, w):
        return features.input_ids[features.offsets[w] + 1:features.offsets[w + 1] - 1]

    checked = 0
    for d in np.unique(ex.doc_ids):
        sents = np.flatnonzero(ex.doc_ids == d)
        stream = np.concatenate([pieces(plain, s) for s in sents])       # the document's pieces
        where = np.cumsum([0] + [len(pieces(plain, s)) for s in sents])
        for k, s in enumerate(sents):
            own = len(pieces(plain, s))
            windows = np.flatnonzero(f.window_sentence == s)
            if own > 46:               # too long for any context: strided windows of its own
                assert len(windows) > 1 and all(len(pieces(f, w)) <= 46 for w in windows)
                continue
            (w,) = windows
            body = pieces(f, w)
            checked += 1
            assert len(body) == min(46, len(stream))            # filled as far as the document goes
            # The window is a contiguous run of its document with the sentence inside it.
            starts = [i for i in range(where[k] + own - len(body), where[k] + 1)
                      if np.array_equal(stream[i:i + len(body)], body)]
            assert starts
            left = where[k] - starts[0]
            right = len(body) - own - left
            room = len(body) - own
            # About as much on each side, unless the document runs out on one.
            assert abs(left - right) <= 1 or left == where[k] or right == len(stream) - where[k + 1]
            assert left <= where[k] and right <= len(stream) - where[k + 1] and room >= 0
    assert checked > 100


def test_bad_window_settings(tok):
    ex = read_tagged(CONLL / "valid.txt")
    from bertctl.errors import BertctlError
    with pytest.raises(BertctlError, match="too short"):
        encode_tagged(ex, tok, 2, doc_stride=1)
    with pytest.raises(BertctlError, match="doc_stride 20 must be between 1 and"):
        encode_tagged(ex, tok, 16, doc_stride=20)


@pytest.mark.parametrize("name", ["valid.txt", "original_iob1/eng.testa"])
def test_predictions_file_round_trip(tmp_path, tok, name):
    """Gold labels fed back as logits give back the file's own tags in its own scheme, and
    predictions.txt scores (read as conlleval reads it) exactly as the arrays do."""
    ex = read_tagged(CONLL / name)
    scheme = schemes.check_scheme(ex).scheme
    labels, word_labels = _labels(ex)
    f = encode_tagged(ex, tok, 16, doc_stride=7, word_labels=word_labels)
    collector = WordPredictions(f)
    rng = np.random.default_rng(0)
    for idx in np.array_split(rng.permutation(len(f)), 7):
        lab = make_batch(f, idx)["labels"].numpy()
        logits = rng.normal(size=lab.shape + (len(labels),))
        np.put_along_axis(logits, np.maximum(lab, 0)[..., None], 10.0, axis=-1)
        collector.add(idx, logits)
    tags = predicted_tags(collector.result(), labels, ex.offsets, scheme)
    assert np.array_equal(tags, ex.tags)
    # A worse prediction: every PER word said to be O.
    tags = np.where(np.char.endswith(tags, "PER"), "O", tags)
    path = tmp_path / "predictions.txt"
    write_predictions(path, ex, tags)
    lines = path.read_text().splitlines()
    assert len(lines) == ex.num_words + ex.num_sentences and lines[-1] == ""
    assert lines[0].split(" ") == [ex.words[0], ex.tags[0], tags[0]]
    s = score(ex.tags, tags, ex.offsets)
    assert score_lines(lines) == s
    assert s["per_type"]["PER"]["recall"] == 0.0 and s["per_type"]["LOC"]["f1"] == 100.0


def test_collector_needs_every_window(tok):
    ex = read_tagged(CONLL / "valid.txt")
    f = encode_tagged(ex, tok, 32, doc_stride=10)
    c = WordPredictions(f)
    c.add(np.arange(len(f) - 1), np.zeros((len(f) - 1, 32, 3)))
    with pytest.raises(RuntimeError, match="got no prediction"):
        c.result()


def test_conlleval_token():
    assert [conlleval_token(w) for w in ["EU", "New York", "", "-X-", "a\u00a0b"]] == [
        "EU", "New_York", "_", "_-X-", "a_b"]
