"""`bertctl embed` end to end: vectors equal transformers' hidden states on the real
all-MiniLM-L6-v2 weights, for every pooling, through the CLI; the index maps back to rows and
words; long texts are windowed with max context; inputs larger than a chunk stream through."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from bertctl.data.npy import header_shape

TEXTS = ["The quick brown fox jumps over the lazy dog.",
         "BERT's hidden states, used as features: an ELMo-style ablation!",
         "",
         "Short.",
         "Unaffable naïveté in Zürich."]


def _hf(minilm_dir):
    transformers = pytest.importorskip("transformers")
    model = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
    return model, tok


def _states(model, tok, text, layers):
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        states = model(**enc, output_hidden_states=True).hidden_states
    return torch.cat([states[i][0] for i in layers], dim=-1).numpy(), enc


def _read(out):
    index = pq.read_table(out / "index.parquet").to_pylist()
    vectors = np.concatenate([np.load(p, mmap_mode="r")
                              for p in sorted(out.glob("vectors-*.npy"))])
    return index, vectors


@pytest.mark.parametrize("pool", ["cls", "mean", "tokens", "words"])
def test_vectors_equal_transformers(cli, minilm_dir, tmp_path, pool):
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "emb"
    r = cli("embed", minilm_dir, data, "--out", out, "--pool", pool, "--layers=-1,-3,0",
            "--precision", "fp32", "--device", "cpu", "--json")
    assert r.exit_code == 0, r.stderr
    manifest = r.json()
    assert manifest["kind"] == "embeddings" and manifest["stats"]["layers"] == [6, 4, 0]
    index, vectors = _read(out)
    assert [row["row"] for row in index] == list(range(len(TEXTS)))
    model, tok = _hf(minilm_dir)
    for row, text in zip(index, TEXTS):
        states, enc = _states(model, tok, text, [6, 4, 0])
        got = vectors[row["start"]:row["start"] + row["count"]]
        if pool == "cls":
            want = states[:1]
        elif pool == "mean":
            want = states.mean(0, keepdims=True)
        elif pool == "tokens":
            want = states
        else:
            word_ids = enc.word_ids()
            ids = sorted({w for w in word_ids if w is not None})
            want = np.stack([states[[j for j, w in enumerate(word_ids) if w == i]].mean(0)
                             for i in ids]) if ids else np.zeros((0, states.shape[1]))
            spans = [enc.word_to_chars(i) for i in ids]
            assert row["words"] == [text[s.start:s.end] for s in spans]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_windows_take_each_piece_from_its_max_context_window(cli, minilm_dir, tmp_path):
    """A text longer than the window: each piece's vector is transformers' hidden state in the
    window where it has the most context (run_squad's rule, written out plainly here)."""
    text = " ".join(TEXTS[:2] * 3)
    data = tmp_path / "long.txt"
    data.write_text(text + "\n", encoding="utf-8")
    out = tmp_path / "emb"
    r = cli("embed", minilm_dir, data, "--out", out, "--pool", "tokens", "--max-seq-length",
            "16", "--doc-stride", "5", "--precision", "fp32", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["stats"]["windowed_rows"] == 1
    index, vectors = _read(out)
    model, tok = _hf(minilm_dir)
    ids = tok(text)["input_ids"]
    content, budget, step = ids[1:-1], 14, 14 - 5
    starts = list(range(0, len(content), step))
    starts = [s for i, s in enumerate(starts) if i == 0 or starts[i - 1] + budget < len(content)]
    windows = []
    for s in starts:
        piece = [ids[0]] + content[s:s + budget] + [ids[-1]]
        with torch.no_grad():
            h = model(torch.tensor([piece]), output_hidden_states=True).hidden_states[-1][0]
        windows.append((s, min(s + budget, len(content)), h.numpy()))
    want = [windows[0][2][0]]
    for t in range(len(content)):
        best = max(((min(t - a, b - 1 - t) + 0.01 * (b - a), -k) for k, (a, b, _) in
                    enumerate(windows) if a <= t < b))
        a, _, h = windows[-best[1]]
        want.append(h[t - a + 1])
    want.append(windows[-1][2][windows[-1][1] - windows[-1][0] + 1])
    assert index[0]["count"] == len(ids)
    np.testing.assert_allclose(vectors, np.stack(want), atol=1e-5, rtol=0)


def test_table_pairs_normalize_fp16_and_streaming(cli, minilm_dir, tmp_path):
    rows = [{"a": f"sentence number {i}", "b": TEXTS[i % 2]} for i in range(1100)]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "emb"
    # chunks of at most 1,024 table rows, so 1,100 rows stream through in several;
    # a shard closes at the first chunk past 600 vectors
    r = cli("embed", minilm_dir, data, "--out", out, "--text-column", "a", "--text-column", "b",
            "--max-seq-length", "64", "--normalize", "--dtype", "fp16", "--shard-rows", "600",
            "--precision", "fp32", "--json")
    assert r.exit_code == 0, r.stderr
    stats = r.json()["stats"]
    assert stats["rows"] == 1100 and stats["shards"] == 2
    shards = sorted(out.glob("vectors-*.npy"))
    first = header_shape(shards[0])[0]
    assert 600 <= first < 1100 and header_shape(shards[1])[0] == 1100 - first
    index, vectors = _read(out)
    assert vectors.dtype == np.float16 and vectors.shape == (1100, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors.astype(np.float32), axis=1), 1, atol=2e-3)
    assert [(x["shard"], x["start"]) for x in index[first - 1:first + 1]] == [(0, first - 1),
                                                                               (1, 0)]
    model, tok = _hf(minilm_dir)
    enc = tok(rows[1030]["a"], rows[1030]["b"], return_tensors="pt")
    with torch.no_grad():
        mean = model(**enc).last_hidden_state[0].mean(0).numpy()
    got = np.load(shards[1])[1030 - first].astype(np.float32)
    np.testing.assert_allclose(got, mean / np.linalg.norm(mean), atol=2e-3)
    # the same command again is up to date
    r = cli("embed", minilm_dir, data, "--out", out, "--text-column", "a", "--text-column", "b",
            "--max-seq-length", "64", "--normalize", "--dtype", "fp16", "--shard-rows", "600",
            "--precision", "fp32")
    assert r.exit_code == 0 and "up to date" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--layers=-8"], "--layers -8: the model has 6 layers"),
    (["--layers", "1,x"], "--layers 1,x"),
    (["--text-column", "a"], "--text-column is for tables"),
])
def test_bad_input_is_one_line(cli, minilm_dir, tmp_path, args, needle):
    data = tmp_path / "t.txt"
    data.write_text("hello\n")
    r = cli("embed", minilm_dir, data, "--out", tmp_path / "o", *args)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr
    assert not (tmp_path / "o").exists()


def test_words_of_pairs_and_empty_input_are_errors(cli, minilm_dir, tmp_path):
    pairs = tmp_path / "p.jsonl"
    pairs.write_text('{"a": "x", "b": "y"}\n')
    r = cli("embed", minilm_dir, pairs, "--out", tmp_path / "o", "--text-column", "a",
            "--text-column", "b", "--pool", "words")
    assert r.exit_code == 2 and "--pool words takes single texts" in r.stderr
    empty = tmp_path / "e.txt"
    empty.write_text("")
    r = cli("embed", minilm_dir, empty, "--out", tmp_path / "o")
    assert r.exit_code == 2 and "input is empty" in r.stderr
    assert not (tmp_path / "o").exists()


def test_text_files_stream_in_bounded_chunks(tmp_path):
    from bertctl.frozen_features import read_chunks

    lines = [f"line {i} " + "x" * (i % 50) for i in range(1000)]
    path = tmp_path / "t.txt"
    path.write_text("\n".join(lines) + "\n")
    chunks = list(read_chunks(path, None, rows=300, chars=2000))
    assert len(chunks) > 4 and all(len(c.texts) <= 300 for c in chunks)
    assert all(sum(len(t) + 1 for t in c.texts[:-1]) < 2000 for c in chunks)
    assert [c.first_row for c in chunks] == list(np.cumsum([0] + [len(c.texts)
                                                                 for c in chunks])[:-1])
    assert [t for c in chunks for t in c.texts] == lines


def test_lower_layers_run_only_the_layers_they_need(cli, minilm_dir, tmp_path):
    """--layers 0,2 runs the embeddings and two blocks only; the vectors are still transformers'
    hidden states 0 and 2."""
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS[:2]) + "\n", encoding="utf-8")
    out = tmp_path / "emb"
    r = cli("embed", minilm_dir, data, "--out", out, "--pool", "tokens", "--layers", "0,2",
            "--combine", "sum", "--precision", "fp32")
    assert r.exit_code == 0, r.stderr
    index, vectors = _read(out)
    model, tok = _hf(minilm_dir)
    for row, text in zip(index, TEXTS):
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            states = model(**enc, output_hidden_states=True).hidden_states
        want = (states[0][0] + states[2][0]).numpy()
        np.testing.assert_allclose(vectors[row["start"]:row["start"] + row["count"]], want,
                                   atol=1e-5, rtol=0)


def test_a_conll_token_file_gets_one_vector_per_word(cli, minilm_dir, tmp_path):
    """--token-column: each sentence of a CoNLL file is a row and each of its words (the file's
    own tokens, whatever the tokenizer makes of them) a vector equal to transformers' mean over
    the word's pieces of the same words (`is_split_into_words`)."""
    sentences = [["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
                 ["Peter", "Blackburn"],
                 ["naïveté", "\u0007", "Zürich", "1996-08-22"]]   # a word with no piece
    lines = ["-DOCSTART- -X- -X- O", ""]
    for words in sentences:
        lines += [f"{w} NN O O" for w in words] + [""]
    data = tmp_path / "valid.txt"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "emb"
    r = cli("embed", minilm_dir, data, "--out", out, "--pool", "words", "--token-column", "0",
            "--layers=-1,-2", "--precision", "fp32", "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    index, vectors = _read(out)
    assert [row["row"] for row in index] == [0, 1, 2]
    assert [row["words"] for row in index] == sentences
    assert [row["count"] for row in index] == [len(s) for s in sentences]
    model, tok = _hf(minilm_dir)
    for row, words in zip(index, sentences[:2]):
        enc = tok(words, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            states = model(**enc, output_hidden_states=True).hidden_states
        h = torch.cat([states[6][0], states[5][0]], dim=-1).numpy()
        word_ids = enc.word_ids()
        want = np.stack([h[[j for j, w in enumerate(word_ids) if w == i]].mean(0)
                         for i in range(len(words))])
        np.testing.assert_allclose(vectors[row["start"]:row["start"] + row["count"]], want,
                                   atol=1e-5, rtol=0)
    r = cli("embed", minilm_dir, data, "--out", tmp_path / "e2", "--token-column", "7")
    assert r.exit_code == 2 and "no token column 7" in r.stderr and "valid.txt:3" in r.stderr


def test_embed_defaults_to_the_models_position_limit(tmp_path, tiny_pretrained, cli):
    """A model with 128 positions (the tiny test model) embeds with the defaults: the window is
    the model's limit, not 512, and a long text is windowed within it."""
    text = tmp_path / "long.txt"
    text.write_text(" ".join(["alice was beginning to get very tired"] * 60) + "\nshort one\n")
    out = tmp_path / "emb"
    r = cli("embed", tiny_pretrained, text, "--out", out, "--pool", "mean", "--json")
    assert r.exit_code == 0, r.stderr
    manifest = r.json()
    assert manifest["stats"]["windowed_rows"] == 1
    assert manifest["stats"]["rows"] == 2
