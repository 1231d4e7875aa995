"""Lines longer than MAX_LINE_CHARS (#13 item 5) are read in bounded pieces cut at white space,
counted in the stats, and lose nothing."""

import numpy as np

from bertctl.data import corpus


def test_a_file_without_newlines_is_read_in_bounded_pieces(tmp_path):
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefgh"), size=int(n))) for n in rng.integers(1, 12, 60_000)]
    text = " ".join(words)                      # ~400k characters, one line, no newline
    path = tmp_path / "one_line.txt"
    path.write_text(text)
    stats = corpus.CorpusStats()
    pieces = list(corpus._text_file_lines(path, stats, limit=50_000))
    assert "".join(pieces) == text
    assert all(len(p) <= 2 * 50_000 for p in pieces) and len(pieces) >= 8
    assert all(p.endswith(" ") for p in pieces[:-1])      # cut after white space, never in a word
    assert stats.long_line_pieces == len(pieces) - 1
    docs = list(corpus.iter_documents([path], stats=corpus.CorpusStats()))
    assert len(docs) == 1 and " ".join(docs[0]).split() == words


def test_an_endless_word_is_cut_anyway_and_short_lines_are_untouched(tmp_path):
    path = tmp_path / "word.txt"
    path.write_text("x" * 120 + "\nshort line\n\nnext document\n")
    stats = corpus.CorpusStats()
    pieces = list(corpus._text_file_lines(path, stats, limit=50))
    assert "".join(pieces) == path.read_text()
    assert pieces[-3:] == ["short line\n", "\n", "next document\n"]
    assert stats.long_line_pieces == 2
