"""Windows on real SQuAD rows with the real all-MiniLM-L6-v2 WordPiece tokenizer."""

import copy

import numpy as np
import pytest

from bertctl.data.tokenizer.files import from_hf_directory
from bertctl.errors import BertctlError
from bertctl.tasks.span.reader import read_span_examples
from bertctl.tasks.span.windows import encode_windows
from helpers import FIXTURES

SQUAD = FIXTURES / "squad"
# Small windows, so that the fixture's passages (up to ~330 tokens) need several each; an odd
# stride makes a token's context in two overlapping windows tie (the max-context tie rule).
SMALL = dict(max_seq_length=96, doc_stride=31, max_query_length=24)


@pytest.fixture(scope="module")
def tok(minilm_dir):
    return from_hf_directory(minilm_dir)[0]


@pytest.fixture(scope="module")
def v2():
    return read_span_examples(SQUAD / "dev-v2.0-sample.json", version_2=True)


def _window(w, i):
    s, e = w.offsets[i], w.offsets[i + 1]
    return slice(s, e)


def test_windows_are_the_tokenizers_overflow_windows(tok, v2):
    """Our numpy windows equal the fast tokenizer's own overflow with the same stride."""
    w = encode_windows(v2, tok, **SMALL)
    ref = tok.__class__.from_str(tok.to_str())
    ref.enable_truncation(SMALL["max_seq_length"], stride=SMALL["doc_stride"],
                          strategy="only_second")
    compared = 0
    for i in range(len(v2)):
        mine = np.flatnonzero(w.example_index == i)
        q_len = len(ref.encode(v2.questions[i], add_special_tokens=False).ids)
        if q_len > SMALL["max_query_length"]:
            assert all(w.passage_offset[mine] == SMALL["max_query_length"] + 2)
            continue
        enc = ref.encode(v2.questions[i], v2.contexts[i])
        theirs = [enc, *enc.overflowing]
        assert len(mine) == len(theirs)
        for j, e in zip(mine, theirs):
            sl = _window(w, j)
            assert w.input_ids[sl].tolist() == e.ids
            assert w.token_type_ids[sl].tolist() == e.type_ids
            passage = [k for k, sid in enumerate(e.sequence_ids) if sid == 1]
            assert np.flatnonzero(w.char_starts[sl] >= 0).tolist() == passage
            assert [tuple(x) for x in zip(w.char_starts[sl][passage], w.char_ends[sl][passage])] \
                == [e.offsets[k] for k in passage]
        compared += 1
    assert compared > 50
    assert w.stats.max_windows_per_question > 3 and w.stats.truncated_questions > 0
    assert (w.lengths <= SMALL["max_seq_length"]).all()


def test_max_context_partitions_the_passage(tok, v2):
    w = encode_windows(v2, tok, **SMALL)
    for i in range(len(v2)):
        passage = tok.encode(v2.contexts[i], add_special_tokens=False).offsets
        # Each window's passage tokens: its first one's index in the passage, and how many.
        spans = {}
        for j in np.flatnonzero(w.example_index == i):
            sl = _window(w, j)
            chars = list(zip(w.char_starts[sl].tolist(), w.char_ends[sl].tolist()))
            n = int((w.char_starts[sl] >= 0).sum())
            spans[j] = (passage.index(chars[w.passage_offset[j]]), n)
        chosen = []
        for j, (p0, n) in spans.items():
            sl = _window(w, j)
            flags = w.max_context[sl]
            assert not flags[:w.passage_offset[j]].any()
            assert not flags[w.passage_offset[j] + n:].any()
            for k in range(n):
                p = p0 + k
                # Google's rule by brute force: min(left, right) + 0.01 * length, first max wins.
                scores = [(min(p - q0, q0 + m - 1 - p) + 0.01 * m, -jj)
                          for jj, (q0, m) in spans.items() if q0 <= p < q0 + m]
                best = -max(scores)[1]
                assert flags[w.passage_offset[j] + k] == (best == j)
                if best == j:
                    chosen.append(p)
        assert sorted(chosen) == list(range(len(passage)))     # each token exactly once


def test_training_targets_map_back_to_the_gold_text(tok, v2):
    w = encode_windows(v2, tok, training=True, **SMALL)
    assert w.stats.unaligned == 0
    found = set()
    for j in range(len(w)):
        i = w.example_index[j]
        s, e = w.start_positions[j], w.end_positions[j]
        if v2.is_impossible[i]:
            assert s == e == 0
            continue
        if s == 0:
            assert e == 0
            continue
        assert w.passage_offset[j] <= s <= e < w.lengths[j] - 1
        sl = _window(w, j)
        start_char, end_char = w.char_starts[sl][s], w.char_ends[sl][e]
        gold_start = v2.answer_starts[i][0]
        gold = v2.answer_texts[i][0]
        assert v2.contexts[i][start_char:end_char] == gold
        assert (start_char, end_char) == (gold_start, gold_start + len(gold))
        found.add(i)
    # every answerable question has its answer inside some window (answers are short)
    assert found == set(np.flatnonzero(~v2.is_impossible).tolist())
    assert w.stats.answer_outside_windows > 0
    assert w.trainable.all()


def test_answer_inside_a_word_widens_to_whole_tokens(tok, v2):
    ex = copy.deepcopy(v2)
    i = int(np.flatnonzero(~v2.is_impossible)[0])           # "France" at 159
    ex.answer_texts[i] = ["ranc"]
    ex.answer_starts[i] = [v2.answer_starts[i][0] + 1]
    w = encode_windows(ex, tok, training=True, **SMALL)
    assert w.stats.partial_token_answers == 1
    j = np.flatnonzero((w.example_index == i) & (w.start_positions > 0))[0]
    sl = _window(w, j)
    assert ex.contexts[i][w.char_starts[sl][w.start_positions[j]]:
                          w.char_ends[sl][w.end_positions[j]]] == "France"


def test_answer_next_to_punctuation(tok, v2):
    """Tokens that end where the answer starts or start where it ends stay outside the span."""
    ex = copy.deepcopy(v2)
    i = 0
    at = ex.contexts[i].index('"Norseman")') + 1
    ex.answer_texts[i], ex.answer_starts[i] = ["Norseman"], [at]
    w = encode_windows(ex, tok, training=True, **SMALL)
    assert w.stats.partial_token_answers == 0
    for j in np.flatnonzero((w.example_index == i) & (w.start_positions > 0)):
        sl = _window(w, j)
        assert ex.contexts[i][w.char_starts[sl][w.start_positions[j]]:
                              w.char_ends[sl][w.end_positions[j]]] == "Norseman"


def test_unaligned_answers_are_counted_and_skipped(tok, v2):
    ex = copy.deepcopy(v2)
    answerable = np.flatnonzero(~v2.is_impossible)
    bad = int(answerable[2])
    outside = int(answerable[4])
    ex.answer_starts[bad] = [ex.answer_starts[bad][0] + 3]
    ex.answer_starts[outside] = [10 ** 6]
    w = encode_windows(ex, tok, training=True, **SMALL)
    assert w.stats.unaligned == 2 and w.stats.unaligned_ids == [v2.ids[bad], v2.ids[outside]]
    skipped = np.isin(w.example_index, [bad, outside])
    assert not w.trainable[skipped].any() and w.trainable[~skipped].all()
    assert not np.isin(w.example_index[w.train_indices()], [bad, outside]).any()
    for i in answerable:
        ex.answer_starts[i] = [ex.answer_starts[i][0] + 1]
    with pytest.raises(BertctlError, match=r"none of the 26 answers matches the passage text"):
        encode_windows(ex, tok, training=True, **SMALL)


def test_question_truncation_and_settings(tok, v2):
    ex = copy.deepcopy(v2)
    ex.questions[0] = " ".join(["why"] * 100)
    w = encode_windows(ex, tok, **SMALL)
    j = np.flatnonzero(w.example_index == 0)[0]
    assert w.passage_offset[j] == 24 + 2
    assert w.input_ids[_window(w, j)][1:25].tolist() == [tok.token_to_id("why")] * 24
    with pytest.raises(BertctlError, match=r"max_seq_length 64 leaves 0 passage tokens"):
        encode_windows(v2, tok, max_seq_length=64, doc_stride=0, max_query_length=61)
    with pytest.raises(BertctlError, match=r"must exceed doc_stride 128"):
        encode_windows(v2, tok, max_seq_length=192, doc_stride=128, max_query_length=64)


def test_the_length_message_counts_each_spellings_special_tokens(tok, v2):
    """RoBERTa's pair has four (<s> q </s></s> p </s>): the message said [CLS]/[SEP]/[SEP]."""
    from bertctl.data.tokenizer import training as tokenizer_training
    from bertctl.data.tokenizer.specials import ROBERTA

    lines = [" ".join(q.split()) for q in v2.questions + v2.contexts]
    roberta = tokenizer_training.train_subwords(lambda: iter([lines]), "byte-level-bpe", 600,
                                                False, False, None, ROBERTA)
    with pytest.raises(BertctlError, match=r"leaves -3 passage tokens after a 63-token question "
                       r"and 4 special tokens \(<s>/</s>/</s>/</s>\)"):
        encode_windows(v2, roberta, max_seq_length=64, doc_stride=0, max_query_length=63)
    with pytest.raises(BertctlError, match=r"3 special tokens \(\[CLS\]/\[SEP\]/\[SEP\]\)"):
        encode_windows(v2, tok, max_seq_length=64, doc_stride=0, max_query_length=63)


def test_passage_without_tokens(tok, v2):
    ex = copy.deepcopy(v2)
    ex.contexts[3] = "\u200b\u200b"          # zero-width spaces: text, but no tokens
    with pytest.raises(BertctlError, match=rf"{ex.where[3]}: the passage has no tokens"):
        encode_windows(ex, tok, **SMALL)


def test_default_windows_and_batch(tok, v2):
    w = encode_windows(v2, tok, training=True)                 # 384 / 128 / 64
    assert w.stats.windows == len(v2)                          # every passage fits in one
    idx = np.array([5, 0, 7])
    b = w.batch(idx)
    width = int(w.lengths[idx].max())
    assert b["input_ids"].shape == b["token_type_ids"].shape == (3, width)
    assert b["attention_mask"].sum(1).tolist() == w.lengths[idx].tolist()
    assert b["input_ids"][1, : w.lengths[0]].tolist() == w.input_ids[_window(w, 0)].tolist()
    assert (b["input_ids"][b["attention_mask"] == 0] == w.pad_id).all()
    assert b["start_positions"].tolist() == w.start_positions[idx].tolist()
    assert set(encode_windows(v2, tok).batch(idx)) == {"input_ids", "token_type_ids",
                                                       "attention_mask"}
