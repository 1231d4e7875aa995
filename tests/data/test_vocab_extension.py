"""`tokenize --extend` and the model that grows with it: every base piece keeps its id, the words
added are those that save most tokens (checked against counting them plainly), pretraining from
the base model grows its tables with means of the base pieces' rows and keeps every old row,
and transformers loads the grown model with its tokenizer."""

import collections
import json

import numpy as np
import pytest
import torch

from helpers import CORPUS, one_line_error

BOOKS = sorted(str(p) for p in CORPUS.glob("*.txt"))


@pytest.fixture(scope="module")
def extended(tmp_path_factory, minilm_dir):
    from typer.testing import CliRunner

    from bertctl.cli import app

    out = tmp_path_factory.mktemp("ext") / "tok"
    r = CliRunner().invoke(app, ["tokenize", *BOOKS, "--extend", str(minilm_dir), "--add", "60",
                                 "--out", str(out), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    return out, json.loads(r.stdout)


def test_base_ids_stay_and_the_words_added_save_most(extended, minilm_dir):
    from tokenizers import Tokenizer

    out, manifest = extended
    base = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    base.no_padding()   # MiniLM's tokenizer.json pads every encoding to 128
    base.no_truncation()
    grown = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert all(grown.token_to_id(t) == i for t, i in base.get_vocab().items())
    assert grown.get_vocab_size() == base.get_vocab_size() + 60
    rows = [line.split("\t") for line in (out / "added_pieces.tsv").read_text().splitlines()[1:]]
    added = [r[1] for r in rows]
    assert [int(r[0]) for r in rows] == list(range(30522, 30582))

    # The plain definition: count every word the base tokenizer sees, cost (pieces - 1) each.
    counts = collections.Counter()
    for path in BOOKS:
        for line in open(path, encoding="utf-8"):
            norm = base.normalizer.normalize_str(line)
            counts.update(w for w, _ in base.pre_tokenizer.pre_tokenize_str(norm))
    saving = {w: c * (len(base.encode(w, add_special_tokens=False).ids) - 1)
              for w, c in counts.items() if c >= 2 and base.token_to_id(w) is None}
    best = sorted(saving, key=lambda w: (-saving[w], -counts[w], w))[:60]
    assert added == best
    assert [int(r[2]) for r in rows] == [counts[w] for w in added]
    stats = manifest["stats"]
    assert stats["extends"]["vocab_size"] == 30522 and stats["extends"]["added"] == 60
    assert stats["pieces_per_word"] < stats["extends"]["pieces_per_word_before"]
    assert "extends" in [i["role"] for i in manifest["inputs"]]
    # a word of the corpus that was split is one piece now
    assert grown.encode(added[0], add_special_tokens=False).ids == [30522]


def test_pretraining_from_the_base_model_grows_it(extended, minilm_dir, tmp_path, cli):
    from transformers import AutoModelForMaskedLM, AutoTokenizer, BertModel

    tok, _ = extended
    data = tmp_path / "data"
    r = cli("build-pretrain-data", tok, CORPUS / "alice.txt", "--out", data, "--no-nsp",
            "--masking", "dynamic", "--packing", "full-sentences", "--max-seq-length", "64",
            "--workers", "1")
    assert r.exit_code == 0, r.stderr
    out = tmp_path / "model"
    r = cli("pretrain", data, "--init-from", minilm_dir, "--objective", "mlm", "--steps", "2",
            "--batch-size", "4", "--lr", "1e-12", "--dropout", "0", "--out", out, "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["stats"]["vocabulary_grown"]["to"] == 30582

    base = BertModel.from_pretrained(minilm_dir).embeddings.word_embeddings.weight.detach()
    model = AutoModelForMaskedLM.from_pretrained(out)
    table = model.bert.embeddings.word_embeddings.weight.detach()
    assert table.shape == (30582, base.shape[1])
    # lr 1e-12: after two steps every row is where it started, to float precision
    torch.testing.assert_close(table[:30522], base, atol=1e-6, rtol=0)
    tokenizer = AutoTokenizer.from_pretrained(out)
    from tokenizers import Tokenizer

    orig = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    orig.no_padding()
    rows = [line.split("\t") for line in (tok / "added_pieces.tsv").read_text().splitlines()[1:]]
    for new_id, piece, _, _ in rows[:5]:
        assert tokenizer.convert_tokens_to_ids(piece) == int(new_id)
        ids = orig.encode(piece, add_special_tokens=False).ids
        np.testing.assert_allclose(table[int(new_id)].numpy(), base[ids].mean(0).numpy(),
                                   atol=1e-5)


def test_extend_needs_its_pair_of_flags_and_a_corpus(tmp_path, cli, minilm_dir):
    one_line_error(cli("tokenize", *BOOKS, "--add", "5", "--out", tmp_path / "a"),
                   "--extend TOKENIZER and --add N go together")
    one_line_error(cli("tokenize", *BOOKS, "--extend", minilm_dir, "--out", tmp_path / "a"),
                   "--extend TOKENIZER and --add N go together")
    one_line_error(cli("tokenize", "--extend", minilm_dir, "--add", "5", "--out", tmp_path / "a"),
                   "no corpus files given")
    one_line_error(cli("tokenize", *BOOKS, "--extend", tmp_path / "nothing", "--add", "5",
                       "--out", tmp_path / "a"), "nothing: not a directory")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
def test_every_architecture_grows_its_per_token_tables(architecture):
    import bertctl.model.modernbert  # noqa: F401  (registers the architecture)
    from bertctl.model import ARCHITECTURES, build
    from bertctl.model.vocabulary import grow_vocabulary

    config = ARCHITECTURES[architecture].config_class.from_preset("tiny", vocab_size=120)
    torch.manual_seed(0)
    model = build("masked_lm", config)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert grow_vocabulary(model, 120, [[5, 6], [7], []]) == 123 == model.config.vocab_size
    after = model.state_dict()
    grown = [k for k in before if after[k].shape != before[k].shape]
    assert grown and all(after[k].shape[0] == 123 for k in grown)
    assert any(before[k].dim() == 1 for k in grown)    # the decoder's bias, not only the table
    for k in before:
        torch.testing.assert_close(after[k][:before[k].shape[0]], before[k], rtol=0, atol=0)
    for k in grown:
        torch.testing.assert_close(after[k][120], before[k][[5, 6]].mean(0))
        torch.testing.assert_close(after[k][121], before[k][7])
    ids = torch.tensor([[1, 120, 121, 122, 2]])
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids))["mlm_logits"]
    assert logits.shape[-1] == 123 and torch.isfinite(logits).all()


@pytest.fixture(scope="module", params=["byte-level-bpe", "bpe", "unigram"])
def extended_kind(request, tmp_path_factory):
    from typer.testing import CliRunner

    from bertctl.cli import app

    work = tmp_path_factory.mktemp(f"ext-{request.param}")
    run = CliRunner().invoke
    r = run(app, ["tokenize", str(CORPUS / "alice.txt"), "--model", request.param,
                  "--vocab-size", "700", "--out", str(work / "base")], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    r = run(app, ["tokenize", *BOOKS, "--extend", str(work / "base"), "--add", "30",
                  "--out", str(work / "tok"), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    return request.param, work, json.loads(r.stdout)


def test_each_kind_takes_the_words_that_save_most_whole(extended_kind):
    """BPE and Unigram grow too: base ids kept, the words chosen by the plain definition (each
    word the base pre-tokenizer makes, its pieces what the base model makes of it), each read
    whole by the grown model, the corpus shorter and decoded the same, and
    transformers' AutoTokenizer reading it id for id."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    kind, work, manifest = extended_kind
    base = Tokenizer.from_file(str(work / "base" / "tokenizer.json"))
    grown = Tokenizer.from_file(str(work / "tok" / "tokenizer.json"))
    assert all(grown.token_to_id(t) == i for t, i in base.get_vocab().items())
    rows = [line.split("\t") for line in (work / "tok" / "added_pieces.tsv").read_text(
        encoding="utf-8").splitlines()[1:]]
    assert [int(r[0]) for r in rows] == list(range(700, grown.get_vocab_size()))
    words = [r[1] for r in rows if int(r[2]) > 0]
    assert len(words) == 30 == manifest["stats"]["extends"]["added"]
    if kind == "unigram":   # a scored piece is all it takes
        assert len(rows) == 30
    else:                   # BPE's merges pass through pieces of their own
        assert len(rows) > 30 and manifest["stats"]["extends"]["new_pieces"] == len(rows)

    counts = collections.Counter()
    for path in BOOKS:
        for line in open(path, encoding="utf-8"):
            norm = base.normalizer.normalize_str(line.rstrip("\n"))
            counts.update(w for w, _ in base.pre_tokenizer.pre_tokenize_str(norm))

    saving = {w: c * (len(base.model.tokenize(w)) - 1) for w, c in counts.items()
              if c >= 2 and base.token_to_id(w) is None}
    best = sorted(saving, key=lambda w: (-saving[w], -counts[w], w))[:30]
    assert words == best
    for word in words:
        assert [t.id for t in grown.model.tokenize(word)] == [grown.token_to_id(word)]

    lines = (CORPUS / "alice.txt").read_text(encoding="utf-8").splitlines()
    before, after = base.encode_batch(lines), grown.encode_batch(lines)
    assert sum(len(e.ids) for e in after) < sum(len(e.ids) for e in before)
    assert [grown.decode(e.ids) for e in after] == [base.decode(e.ids) for e in before]
    theirs = AutoTokenizer.from_pretrained(str(work / "tok"))
    assert [theirs(line)["input_ids"] for line in lines[:50]] == [e.ids for e in after[:50]]


def test_a_roberta_grows_with_its_byte_level_vocabulary(tmp_path, cli):
    """pretrain --init-from a RoBERTa whose byte-level vocabulary the data's extends: the model's
    tables grow, each new row the mean of the rows of the pieces its base splits the piece
    into (merges' pieces between included)."""
    from tokenizers import Tokenizer
    from transformers import AutoModelForMaskedLM

    def ok(*args):
        r = cli(*args)
        assert r.exit_code == 0, r.stderr
        return r

    ok("tokenize", CORPUS / "alice.txt", "--model", "byte-level-bpe", "--vocab-size", "700",
       "--out", tmp_path / "base")
    data = ("--no-nsp", "--masking", "dynamic", "--packing", "full-sentences",
            "--max-seq-length", "64", "--workers", "1")
    ok("build-pretrain-data", tmp_path / "base", CORPUS / "alice.txt", *data,
       "--out", tmp_path / "d0")
    tiny = ("--objective", "mlm", "--steps", "1", "--batch-size", "4", "--dropout", "0")
    ok("pretrain", tmp_path / "d0", "--architecture", "roberta", "--model-size", "tiny", *tiny,
       "--out", tmp_path / "m0")
    ok("tokenize", *BOOKS, "--extend", tmp_path / "m0", "--add", "10", "--out", tmp_path / "tok")
    ok("build-pretrain-data", tmp_path / "tok", CORPUS / "alice.txt", *data,
       "--out", tmp_path / "d1")
    r = ok("pretrain", tmp_path / "d1", "--init-from", tmp_path / "m0", *tiny, "--lr", "1e-12",
           "--out", tmp_path / "m1", "--json")
    size = Tokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json")).get_vocab_size()
    assert r.json()["stats"]["vocabulary_grown"] == {
        "from": 700, "to": size, "new_pieces": size - 700,
        "initialised": "mean of the base pieces' rows"}
    base = AutoModelForMaskedLM.from_pretrained(tmp_path / "m0").roberta.embeddings
    grown = AutoModelForMaskedLM.from_pretrained(tmp_path / "m1").roberta.embeddings
    old, new = base.word_embeddings.weight.detach(), grown.word_embeddings.weight.detach()
    torch.testing.assert_close(new[:700], old, atol=1e-6, rtol=0)
    split = Tokenizer.from_file(str(tmp_path / "base" / "tokenizer.json")).model
    by_id = {i: t for t, i in Tokenizer.from_file(
        str(tmp_path / "tok" / "tokenizer.json")).get_vocab().items()}
    for i in range(700, size):
        ids = [t.id for t in split.tokenize(by_id[i])]
        torch.testing.assert_close(new[i], old[ids].mean(0), atol=1e-5, rtol=0)


def test_a_vocabulary_whose_next_ids_are_taken_is_refused_in_one_line(tmp_path, cli):
    """Tokens added after a model's own pieces hold the ids the new pieces would take."""
    from tokenizers import Tokenizer

    assert cli("tokenize", CORPUS / "alice.txt", "--model", "unigram", "--vocab-size", "700",
               "--out", tmp_path / "base").exit_code == 0
    tok = Tokenizer.from_file(str(tmp_path / "base" / "tokenizer.json"))
    tok.add_tokens(["<extra>"])
    (tmp_path / "hf").mkdir()
    tok.save(str(tmp_path / "hf" / "tokenizer.json"))
    r = cli("tokenize", *BOOKS, "--extend", tmp_path / "hf", "--add", "5", "--out",
            tmp_path / "x")
    one_line_error(r, "hf", "tokens added after the Unigram model's own pieces")
    assert not (tmp_path / "x").exists()
