"""Tokenizers of every kind bertctl trains or reads (WordPiece, BPE, byte-level BPE, Unigram):
the special tokens and their spellings (specials.py), reading and writing them (files.py),
training one on a corpus (training.py), growing one for a domain (extension.py), and where
words start in its pieces (words.py). All per-character and per-token work happens inside the
`tokenizers` library or numpy."""
