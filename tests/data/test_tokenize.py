"""`bertctl tokenize`, settings handling and the CLI contract, on real example text."""

import gzip
import json

import pytest
from tokenizers import Tokenizer

from bertctl.data import corpus

from helpers import CORPUS, run_bertctl

HELD_OUT = [
    "Mr. Sherlock Holmes, who was usually very late in the mornings, was seated at breakfast.",
    "Café naïve RÉSUMÉ — accents and CAPITALS, 力加勝北区 and numbers 1,234.56!",
    "unbelievably-hyphenated words & symbols: <tag> {brace} ~tilde~ ##hash",
]


def test_trained_tokenizer_loads_in_transformers_and_agrees(small_tokenizer):
    transformers = pytest.importorskip("transformers")
    ours = Tokenizer.from_file(str(small_tokenizer / "tokenizer.json"))
    hf = transformers.BertTokenizerFast.from_pretrained(str(small_tokenizer))
    for text in HELD_OUT:
        enc = ours.encode(text)
        assert hf(text)["input_ids"] == enc.ids
        assert hf.convert_ids_to_tokens(enc.ids) == enc.tokens
    a, b = HELD_OUT[0], HELD_OUT[1]
    pair = ours.encode(a, b)
    got = hf(a, b)
    assert got["input_ids"] == pair.ids and got["token_type_ids"] == pair.type_ids
    # The slow (pure Python) tokenizer reads only vocab.txt and tokenizer_config.json.
    slow = transformers.BertTokenizer.from_pretrained(str(small_tokenizer))
    assert slow(HELD_OUT[0])["input_ids"] == ours.encode(HELD_OUT[0]).ids


def test_tokenizer_layout_and_manifest(small_tokenizer, cli):
    vocab = (small_tokenizer / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(vocab) <= 4000
    # Google's layout: [PAD]=0, 99 [unused] slots, then [UNK] [CLS] [SEP] [MASK] at 100..103.
    assert vocab[0] == "[PAD]" and vocab[1] == "[unused0]" and vocab[99] == "[unused98]"
    assert vocab[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert any(t.startswith("##") for t in vocab)
    m = cli("inspect", small_tokenizer, "--json").json()
    assert m["kind"] == "tokenizer"
    s = m["stats"]
    assert s["tokenizer"]["special_ids"] == {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101,
                                             "[SEP]": 102, "[MASK]": 103}
    assert s["tokenizer"]["lowercase"] is True and s["tokenizer"]["vocab_size"] == len(vocab)
    assert s["documents"] > 300 and s["sentences"] > 8000 and s["files"] == 4
    assert 0 <= s["unk_rate"] < 0.01 and 1.0 <= s["pieces_per_word"] < 2.0
    assert {i["role"] for i in m["inputs"]} == {"corpus"}
    assert all(len(i["id"]) == 64 for i in m["inputs"])  # content hashes of the files


def test_cased_without_unused_tokens(tmp_path, cli):
    r = cli("tokenize", CORPUS / "alice.txt", "--vocab-size", "1500", "--cased",
            "--unused-tokens", "0", "--out", tmp_path / "a", "--json")
    assert r.exit_code == 0, r.stderr
    tok = Tokenizer.from_file(str(tmp_path / "a" / "tokenizer.json"))
    assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert "Alice" in tok.encode("Alice").tokens


def test_import_vocab_and_hf_directory(tmp_path, cli, minilm_dir):
    reference = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    reference.no_padding()  # the shipped file pads to 128; ours leaves lengths to each stage
    text = HELD_OUT[0]
    r = cli("tokenize", "--from-vocab", minilm_dir / "vocab.txt", "--out", tmp_path / "v")
    assert r.exit_code == 0, r.stderr
    r = cli("tokenize", "--from-pretrained", minilm_dir, CORPUS / "alice.txt",
            "--out", tmp_path / "p", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["stats"]["tokenizer"]["vocab_size"] == 30522
    assert r.json()["stats"]["unk_rate"] < 0.01
    for d in ("v", "p"):
        ours = Tokenizer.from_file(str(tmp_path / d / "tokenizer.json"))
        assert ours.encode(text).ids == reference.encode(text).ids


def test_settings_precedence_and_config_written(tmp_path, cli):
    cfg = tmp_path / "tok.yaml"
    cfg.write_text("vocab-size: 5000\nmin_frequency: 3\n")
    r = cli("tokenize", CORPUS / "alice.txt", "--config", cfg, "--vocab-size", "1200",
            "--out", tmp_path / "t", "--json")
    assert r.exit_code == 0, r.stderr
    config = r.json()["config"]
    assert config["vocab_size"] == 1200  # the flag wins over the file
    assert config["min_frequency"] == 3  # the file wins over the default
    assert config["limit_alphabet"] == 1000  # the default
    saved = json.loads((tmp_path / "t" / "artifact.json").read_text())
    assert saved["config"] == config


@pytest.mark.parametrize("yaml_text, message", [
    ("vocab_sise: 10\n", "unknown setting 'vocab_sise'"),
    ("vocab_size: lots\n", "setting 'vocab_size' = 'lots'"),
    ("min_frequency: 0\n", "setting 'min_frequency' = 0: Input should be greater than or equal to 1"),
    ("vocab_size: [1, 2\n", "invalid YAML"),
    ("- a list\n", "must be a mapping"),
    # #26 item 13: PyYAML keeps the last of repeated keys, and both spellings of a setting
    # would leave the winner to the order: both refused.
    ("vocab_size: 1200\nmin_frequency: 2\nvocab_size: 900\n", "key 'vocab_size' is repeated"),
    ("vocab_size: 1200\nvocab-size: 900\n",
     "setting 'vocab_size' is given twice ('vocab_size' and 'vocab-size')"),
])
def test_bad_settings_are_one_line_exit_2(tmp_path, cli, yaml_text, message):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml_text)
    r = cli("tokenize", CORPUS / "alice.txt", "--config", cfg, "--out", tmp_path / "t")
    assert r.exit_code == 2
    assert message in r.stderr and str(cfg) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "t").exists()


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("setup, message", [
    (lambda d: [d / "missing.txt"], "no such file or directory"),
    (lambda d: [_write(d / "empty.txt", b"\n\n  \n")], "corpus holds no text"),
    (lambda d: [(d / "emptydir").mkdir() or d / "emptydir"], "directory holds no corpus files"),
    (lambda d: [str(d / "*.nomatch")], "pattern matches no files"),
    (lambda d: [_write(d / "rows.jsonl", b'{"body": "text", "id": 1}\n')],
     "name one with --text-column"),
])
def test_bad_corpus_is_one_line_exit_2(tmp_path, cli, setup, message):
    sources = setup(tmp_path)
    r = cli("tokenize", *sources, "--out", tmp_path / "t")
    assert r.exit_code == 2, r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "t").exists()


def test_vocab_too_small_for_the_alphabet(tmp_path, cli):
    r = cli("tokenize", CORPUS / "alice.txt", "--vocab-size", "60", "--unused-tokens", "0",
            "--out", tmp_path / "t")
    assert r.exit_code == 2 and "smaller than the 5 special" in r.stderr
    r = cli("tokenize", CORPUS / "alice.txt", "--vocab-size", "50", "--out", tmp_path / "t")
    assert r.exit_code == 2 and "leaves no room" in r.stderr
    assert not (tmp_path / "t").exists()


def test_bad_out_and_bad_vocab(tmp_path, cli, small_tokenizer):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    r = cli("tokenize", CORPUS / "alice.txt", "--out", plain)
    assert r.exit_code == 2 and "not a directory" in r.stderr
    # A tokenizer with other settings already there.
    r = cli("tokenize", CORPUS / "alice.txt", "--out", small_tokenizer)
    assert r.exit_code == 2 and "pass --force" in r.stderr
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("hello\nworld\n")
    r = cli("tokenize", "--from-vocab", vocab, "--out", tmp_path / "v")
    assert r.exit_code == 2 and "lacks the special token(s) [PAD], [UNK]" in r.stderr


def test_truncated_manifest_at_out(tmp_path, cli):
    out = tmp_path / "t"
    assert cli("tokenize", CORPUS / "alice.txt", "--vocab-size", "1500", "--out", out).exit_code == 0
    manifest = out / "artifact.json"
    manifest.write_text(manifest.read_text()[:100])
    r = cli("tokenize", CORPUS / "alice.txt", "--vocab-size", "1500", "--out", out)
    assert r.exit_code == 2 and "corrupted manifest" in r.stderr
    r = cli("inspect", out)
    assert r.exit_code == 2 and "corrupted manifest" in r.stderr
    r = cli("tokenize", CORPUS / "alice.txt", "--vocab-size", "1500", "--out", out, "--force")
    assert r.exit_code == 0 and json.loads(manifest.read_text())["kind"] == "tokenizer"


def test_corpus_reading_quirks(tmp_path):
    crlf = _write(tmp_path / "crlf.txt", b"\xef\xbb\xbfFirst line.\r\nSecond \xff line.\r\n\r\nDoc two.\r\n")
    gz = tmp_path / "more.txt.gz"
    with gzip.open(gz, "wb") as fh:
        fh.write(b"Zipped sentence.\n\nAnother doc.")
    rows = _write(tmp_path / "rows.jsonl", b'{"text": "Row one.\\nRow one b."}\n{"text": ""}\n'
                  b'{"text": "Row two."}\n')
    csv = _write(tmp_path / "rows.csv", b"id,text\n1,Csv row.\n")
    stats = corpus.CorpusStats()
    docs = list(corpus.iter_documents([crlf, gz], stats=stats))
    assert docs == [["First line.", "Second \ufffd line."], ["Doc two."],
                    ["Zipped sentence."], ["Another doc."]]
    assert stats.invalid_bytes_replaced == 1 and stats.documents == 4 and stats.files == 2
    docs = list(corpus.iter_documents([rows, csv], text_column="text"))
    assert docs == [["Row one.", "Row one b."], ["Row two."], ["Csv row."]]
    with pytest.raises(Exception, match="no column 'body' \\(columns: text\\)"):
        list(corpus.iter_documents([rows], text_column="body"))


def test_subprocess_contract_json_and_exit_codes(tmp_path):
    """A real process: stdout holds exactly one JSON object, logs go to stderr, no traceback."""
    out = tmp_path / "t"
    r = run_bertctl("tokenize", CORPUS / "alice.txt", "--vocab-size", "1500", "--out", out, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["id"] == json.loads((out / "artifact.json").read_text())["id"]
    r = run_bertctl("tokenize", CORPUS / "alice.txt", "--vocab-size", "1500", "--out", out)
    assert r.returncode == 0 and "up to date" in r.stdout
    r = run_bertctl("tokenize", tmp_path / "nope.txt", "--out", tmp_path / "x", "--json")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert json.loads(r.stdout) == {"error": f"{tmp_path / 'nope.txt'}: no such file or directory",
                                    "exit_code": 2}
    r = run_bertctl("tokenize", tmp_path / "nope.txt", "--out", tmp_path / "x", "--debug")
    assert r.returncode == 2 and "Traceback" in r.stderr
    r = run_bertctl("--help")
    assert r.returncode == 0 and "tokenize" in r.stdout and "inspect" in r.stdout


def test_inspect_shows_lineage(small_tokenizer, cli):
    r = cli("inspect", small_tokenizer)
    assert r.exit_code == 0
    assert "tokenizer artifact" in r.stdout and "lineage:" in r.stdout
    assert "sherlock_holmes.txt" in r.stdout
    r = cli("inspect", small_tokenizer.parent / "nothing")
    assert r.exit_code == 2 and "no such artifact directory" in r.stderr


def test_every_boolean_setting_has_an_off_flag(tmp_path, cli):
    """`--x/--no-x` (or `--cased/--uncased`): the second spelling must switch the setting off."""
    import typer

    from bertctl.cli import app

    commands = typer.main.get_command(app).commands
    for name in ("tokenize", "build-pretrain-data", "pretrain", "finetune", "eval"):
        for param in commands[name].params:
            if getattr(param, "is_bool_flag", False) and param.name not in (
                    "force", "json_output", "wait", "debug", "help"):
                assert param.secondary_opts, f"{name} {param.opts}: no off switch"
    cfg = tmp_path / "cased.yaml"
    cfg.write_text("cased: true\n")
    r = cli("tokenize", CORPUS / "alice.txt", "--vocab-size", "1500", "--config", cfg,
            "--uncased", "--out", tmp_path / "t", "--json")
    assert r.exit_code == 0 and r.json()["config"]["cased"] is False


def test_a_tabular_corpus_writes_nothing_under_the_hub_cache(cli, tmp_path, monkeypatch):
    """#26 item 13: `datasets` puts its builder's lock in its cache dir; bertctl gives it a
    temporary one, so nothing lands outside --out and the system temp dir."""
    import datasets

    hub = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", hub)
    corpus = tmp_path / "c.csv"
    corpus.write_text("text,label\n" + "".join(f"row {i} of some words,1\n" for i in range(40)))
    r = cli("tokenize", corpus, "--text-column", "text", "--out", tmp_path / "tok",
            "--vocab-size", "320")
    assert r.exit_code == 0, r.stderr
    assert not hub.exists() or not any(hub.rglob("*")), sorted(map(str, hub.rglob("*")))


def test_inspect_shows_the_settings_that_differ_and_all_with_all(small_tokenizer, cli):
    """The tokenizer fixture was trained with --vocab-size 4000: the one setting that differs
    from TokenizeSettings' defaults; --all shows every recorded setting."""
    from bertctl.stages.settings.tokenize import TokenizeSettings

    recorded = json.loads((small_tokenizer / "artifact.json").read_text())["config"]
    changed = {k for k, v in recorded.items()
               if k not in TokenizeSettings.model_fields
               or v != TokenizeSettings.model_fields[k].default}
    assert changed == {"vocab_size"}
    lines = cli("inspect", small_tokenizer).stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("settings"))
    assert lines[at] == (f"settings (1 of {len(recorded)} differ from their defaults; all with "
                         f"--all):")
    assert lines[at + 1] == "  vocab_size: 4000" and lines[at + 2] == "stats:"
    lines = cli("inspect", small_tokenizer, "--all").stdout.splitlines()
    at = lines.index("settings:")
    assert [ln.split(":")[0].strip() for ln in lines[at + 1:at + 1 + len(recorded)]] == list(
        recorded)


def test_a_binary_file_in_the_corpus_is_named(cli, tmp_path):
    """#52 class 6: an executable in a corpus directory was read silently, its replaced bytes
    only a number in the stats; now a warning names it (and the manifest lists it)."""
    corp = tmp_path / "corp"
    corp.mkdir()
    (corp / "book.txt").write_text((CORPUS / "alice.txt").read_text(encoding="utf-8")[:50_000],
                                   encoding="utf-8")
    (corp / "program.txt").write_bytes(bytes(range(128, 256)) * 100)
    r = cli("tokenize", corp, "--vocab-size", "1000", "--out", tmp_path / "tok", "--json")
    assert r.exit_code == 0, r.stderr
    assert f"warning: {corp / 'program.txt'}: more than 1% of its bytes are not UTF-8" in r.stderr
    assert r.json()["stats"]["not_text"] == [str(corp / "program.txt")]
