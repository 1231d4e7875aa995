"""`tokenize --model bpe|byte-level-bpe|unigram`: each kind is the tokenizers library's own
trainer's vocabulary (its reference tokenizer classes, same corpus and settings), the same bytes
from two processes, what transformers' AutoTokenizer reads back id for id, with RoBERTa's
specials and pair template, and whole-word masking's word starts taken from its pre-tokenizer.
Options that do not apply to a kind are refused in one line."""

import json
import subprocess
import sys

import pytest

from conftest import CORPUS, one_line_error
from bertctl.data import tokenizer as tokmod
from bertctl.data import tokenizer_training

LINES = [line for line in (CORPUS / "alice.txt").read_text(encoding="utf-8").splitlines()
         if line.strip()]
TEXT = "Alice was beginning to get very tired of sitting by her sister's bank."


def _batches():
    return (LINES[i:i + 200] for i in range(0, len(LINES), 200))


def _ours(kind, **kw):
    args = dict(vocab_size=1500, lowercase=False, strip_accents=False, unicode=None,
                spelling="roberta")
    return tokenizer_training.train_subwords(_batches(), kind, **{**args, **kw})


def test_byte_level_bpe_is_the_reference_trainers():
    from tokenizers import ByteLevelBPETokenizer

    ref = ByteLevelBPETokenizer(add_prefix_space=True)
    ref.train_from_iterator(_batches(), vocab_size=1500, min_frequency=2, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    ours = _ours("byte-level-bpe", unicode="none")
    assert ours.get_vocab() == ref.get_vocab()
    assert json.loads(ours.to_str())["model"]["merges"] == \
        json.loads(ref.to_str())["model"]["merges"]
    assert ours.encode(TEXT, add_special_tokens=False).ids == ref.encode(TEXT).ids
    # bytes: lossless, but for the space put before the first word
    assert ours.decode(ours.encode(TEXT).ids) == " " + TEXT


def test_bpe_is_sentencepiece_bpe_of_the_reference_trainer():
    from tokenizers import SentencePieceBPETokenizer

    ref = SentencePieceBPETokenizer(unk_token="<unk>")
    ref.train_from_iterator(_batches(), vocab_size=1500, min_frequency=2, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    ours = _ours("bpe", limit_alphabet=1000)
    assert ours.get_vocab() == ref.get_vocab()
    assert ours.encode(TEXT, add_special_tokens=False).tokens == ref.encode(TEXT).tokens


@pytest.mark.parametrize("kind", ["bpe", "byte-level-bpe", "unigram"])
def test_the_same_corpus_gives_the_same_bytes_in_two_processes(kind):
    code = ("import sys; from test_tokenizer_kinds import _ours; "
            f"sys.stdout.write(_ours({kind!r}).to_str())")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, cwd=str(CORPUS.parents[1] / "tests")).stdout
            for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) > 1000


@pytest.mark.parametrize("kind", ["bpe", "byte-level-bpe", "unigram"])
def test_an_artifact_of_each_kind_is_what_transformers_reads(kind, cli, tmp_path):
    transformers = pytest.importorskip("transformers")
    r = cli("tokenize", CORPUS / "alice.txt", "--model", kind, "--vocab-size", "1500",
            "--out", tmp_path / "t")
    assert r.exit_code == 0, r.stderr
    stats = json.loads((tmp_path / "t" / "artifact.json").read_text())["stats"]
    assert stats["tokenizer"]["kind"] == kind
    assert stats["tokenizer"]["special_ids"] == {"[PAD]": 1, "[UNK]": 3, "[CLS]": 0,
                                                 "[SEP]": 2, "[MASK]": 4}
    assert stats["pieces_per_word"] > 1 and 0 <= stats["unk_rate"] < 0.01
    assert not (tmp_path / "t" / "vocab.txt").exists()
    ours = tokmod.load(tmp_path / "t" / "tokenizer.json")
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "t"))
    pair = theirs(TEXT, "Down the rabbit hole.")
    assert pair["input_ids"] == ours.encode(TEXT, "Down the rabbit hole.").ids
    tokens = theirs.convert_ids_to_tokens(pair["input_ids"])
    assert tokens[0] == "<s>" and tokens.count("</s>") == 3 and "token_type_ids" not in pair
    assert theirs.mask_token == "<mask>" and theirs.pad_token_id == 1


def test_word_starts_follow_each_pre_tokenizer():
    for kind in ("byte-level-bpe", "bpe", "unigram"):
        tok = _ours(kind)
        starts = tokmod.word_starts(tok)
        enc = tok.encode("rabbit-holes", add_special_tokens=False)
        words = tok.encode("rabbit holes", add_special_tokens=False)
        # each word's first piece starts a word and no other piece does
        first = [i == 0 or w != words.word_ids[i - 1] for i, w in enumerate(words.word_ids)]
        assert [bool(starts[i]) for i in words.ids] == first, (kind, words.tokens)
        assert starts[tok.token_to_id("<mask>")]
        if kind == "byte-level-bpe":   # GPT-2's pre-tokenizer parts the hyphen from the word
            assert starts[enc.ids[enc.tokens.index("-")]]


def test_wordpiece_word_starts_are_not_continuations(small_tokenizer):
    tok = tokmod.load(small_tokenizer / "tokenizer.json")
    starts = tokmod.word_starts(tok)
    vocab = tok.get_vocab()
    assert all(starts[i] != t.startswith("##") for t, i in vocab.items())


@pytest.mark.parametrize("args, parts", [
    (["--model", "unigram", "--min-frequency", "3"], ["--min-frequency", "unigram"]),
    (["--model", "byte-level-bpe", "--limit-alphabet", "50"], ["--limit-alphabet"]),
    (["--model", "bpe", "--unused-tokens", "3"], ["--unused-tokens", "bpe"]),
    (["--unicode", "nfc"], ["--unicode", "wordpiece"]),
    (["--special-tokens", "roberta"], ["WordPiece", "BERT's"]),
])
def test_an_option_that_does_not_apply_is_one_line(args, parts, cli, tmp_path):
    r = cli("tokenize", CORPUS / "alice.txt", *args, "--out", tmp_path / "t")
    one_line_error(r, *parts)
    assert not (tmp_path / "t").exists()


def test_extending_a_bpe_vocabulary_is_refused_in_one_line(cli, tmp_path):
    assert cli("tokenize", CORPUS / "alice.txt", "--model", "bpe", "--vocab-size", "800",
               "--out", tmp_path / "t").exit_code == 0
    r = cli("tokenize", CORPUS / "alice.txt", "--extend", tmp_path / "t", "--add", "5",
            "--out", tmp_path / "x")
    one_line_error(r, "BPE", "WordPiece")
