"""The pretraining instance builder, shard format and loader, on real text (tests/fixtures/pretrain)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from bertctl.data.settings import PretrainingDataSettings as PretrainingDataConfig
from bertctl.data.pretraining.build import build_pretraining_data, validation_documents
from bertctl.data.pretraining.dataset import (PretrainingDataset, decode_instances,
                                              read_pretraining_info)
from bertctl.data.pretraining.masking import (
    _sample_without_replacement, generator_uniform_at, hashed_uniform_at, num_to_predict)
from bertctl.errors import BertctlError
from helpers import FIXTURES

PRETRAIN = FIXTURES / "pretrain"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def read_documents(path: Path) -> list[list[str]]:
    """Google's format: one sentence per line, a blank line between documents."""
    docs, doc = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            doc.append(line)
        elif doc:
            docs.append(doc)
            doc = []
    if doc:
        docs.append(doc)
    return docs


@pytest.fixture(scope="session")
def corpus() -> list[list[str]]:
    return [d for f in sorted(PRETRAIN.glob("*.txt")) for d in read_documents(f)]


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    # Specials not at 0..4 on purpose: nothing may assume their ids.
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=2000, special_tokens=["[PAD]", "[UNK]", "[SEP]",
                                                                         "[CLS]", "[MASK]"])
    tok.train([str(f) for f in sorted(PRETRAIN.glob("*.txt"))], trainer)
    return tok


def ids_of(tok: Tokenizer) -> dict[str, int]:
    return {t: tok.token_to_id(t) for t in SPECIALS}


def build(tmp_path_factory, corpus, tokenizer, name="data", workers=1, **settings):
    out = tmp_path_factory.mktemp(name)
    settings.setdefault("chunk_chars", 40_000)
    settings.setdefault("dupe_factor", 2)
    build_pretraining_data(corpus, tokenizer, out, PretrainingDataConfig(**settings),
                           workers=workers)
    return out


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory, corpus, tokenizer):
    return build(tmp_path_factory, corpus, tokenizer, "static", dupe_factor=3,
                 validation_fraction=0.15)


@pytest.fixture(scope="module")
def static(static_dir):
    ds = PretrainingDataset(static_dir, "train")
    return ds, ds.arrays(np.arange(len(ds)))


def original_ids(arr: dict) -> np.ndarray:
    """input_ids with the masked positions restored to their labels."""
    return np.where(arr["labels"] != -100, arr["labels"], arr["input_ids"])


def token_stream(docs, tokenizer) -> bytes:
    """All documents' tokens as uint32 bytes, documents separated by an impossible id."""
    parts = []
    for d in docs:
        for e in tokenizer.encode_batch(d, add_special_tokens=False):
            parts.append(np.asarray(e.ids, dtype=np.uint32))
        parts.append(np.array([2**32 - 1], dtype=np.uint32))
    return np.concatenate(parts).tobytes()


def occurs(seq: np.ndarray, stream: bytes) -> bool:
    needle = np.asarray(seq, dtype=np.uint32).tobytes()
    at = stream.find(needle)
    while at != -1 and at % 4:
        at = stream.find(needle, at + 1)
    return at != -1


# ---- structure ---------------------------------------------------------------------------------

def test_every_instance_is_cls_a_sep_b_sep_within_max_length(static, tokenizer):
    ds, arr = static
    sp = ids_of(tokenizer)
    n, ids, tt = arr["lengths"], original_ids(arr), arr["token_type_ids"]
    assert len(ds) > 2000 and n.max() <= 128 and n.min() >= 5
    rows = np.arange(len(n))
    b = tt.argmax(axis=1)
    assert (ids[:, 0] == sp["[CLS]"]).all()
    assert (ids[rows, b - 1] == sp["[SEP]"]).all() and (ids[rows, n - 1] == sp["[SEP]"]).all()
    assert (b >= 2).all() and (b <= n - 2).all()  # A and B both non-empty
    specials = np.isin(ids, [sp["[CLS]"], sp["[SEP]"], sp["[PAD]"]])
    assert (specials.sum(axis=1) == 3 + (ids.shape[1] - n)).all()  # nothing else special
    inside = np.arange(ids.shape[1])[None, :] < n[:, None]
    assert (arr["attention_mask"] == inside).all()
    assert ((tt == 1) == (inside & (np.arange(ids.shape[1])[None, :] >= b[:, None]))).all()
    assert (ids[~inside] == sp["[PAD]"]).all()
    # Most instances fill the target (Google packs to max_seq_length - 3 + 3 specials).
    assert np.mean(n == 128) > 0.6


def test_no_mask_on_a_special_token_and_google_prediction_count(static, tokenizer):
    ds, arr = static
    sp = ids_of(tokenizer)
    ids, labels, n = original_ids(arr), arr["labels"], arr["lengths"]
    masked = labels != -100
    assert not np.isin(ids[masked], [sp["[CLS]"], sp["[SEP]"], sp["[PAD]"]]).any()
    assert not np.isin(arr["input_ids"][masked], [sp["[CLS]"], sp["[SEP]"], sp["[PAD]"]]).any()
    expected = [min(20, max(1, int(round(k * 0.15)))) for k in n.tolist()]
    assert masked.sum(axis=1).tolist() == expected
    assert (num_to_predict(np.array([4, 10, 13, 100, 128, 200]), 0.15, 20)
            == [1, 2, 2, 15, 19, 20]).all()  # round half to even: 13 * 0.15 = 1.95 -> 2


@pytest.mark.parametrize("source", ["generator", "hashed"])
def test_masked_positions_are_a_uniform_sample_without_replacement(source):
    """Every row gets k distinct values in [0, n), ascending; each value is equally likely, also
    for rows where k = n or k close to n (the draws run short and start over)."""
    rows = 20_000
    n = np.array([6, 6, 40, 100, 7] * (rows // 5))
    k = np.array([6, 1, 20, 15, 5] * (rows // 5))
    uniform_at = (generator_uniform_at(np.random.default_rng(0)) if source == "generator"
                  else hashed_uniform_at(7, 0, np.arange(rows)))
    r, v = _sample_without_replacement(n, k, uniform_at)
    assert np.array_equal(r, np.repeat(np.arange(rows), k))
    starts = np.cumsum(k) - k
    for row in range(10):
        got = v[starts[row]:starts[row] + k[row]]
        assert np.all(np.diff(got) > 0) and got.min() >= 0 and got.max() < n[row]
    for kind in range(5):
        rows_of_kind = np.arange(kind, rows, 5)
        picked = v[np.isin(r, rows_of_kind)]
        counts = np.bincount(picked, minlength=n[kind])
        expected = len(rows_of_kind) * k[kind] / n[kind]
        # chi-square against the uniform inclusion probability k/n
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < 3 * n[kind] + 30, (kind, counts)
    hashed = hashed_uniform_at(7, 0, np.arange(rows))
    assert np.array_equal(_sample_without_replacement(n, k, hashed)[1],
                          _sample_without_replacement(n, k, hashed)[1])


@pytest.mark.parametrize("length", [2048, 8192])
@pytest.mark.parametrize("whole_word", [False, True])
def test_long_instances_are_masked_as_short_ones_are(length, whole_word):
    """Instances past BERT's 512 (ModernBERT's 8,192): Google's prediction count, distinct
    candidate positions only (never [CLS] or a [SEP]), whole words whole, every position as
    likely as any (the sample's mean position at the middle); up to 512 the packing is the one
    every artifact was masked with (the same positions as before, tests above)."""
    from bertctl.data.pretraining.masking import MaskingRules, apply_masking, num_to_predict
    from bertctl.data.tokenizer.words import WordMarks

    rows, vocab = 16, 50
    rng = np.random.default_rng(1)
    lengths = np.array([length - 7 * i for i in range(rows)], np.int64)
    b_starts = lengths // 2
    ids = rng.integers(5, vocab, (rows, length)).astype(np.int32)
    continuation = np.zeros(vocab, bool)
    continuation[40:] = True                       # ids 40..49 are ## pieces
    classes = np.zeros(vocab, np.int8)   # WordPiece's: the ## marks alone part words
    rules = MaskingRules(0.15, length, whole_word, 4, WordMarks(~continuation, classes, classes),
                         np.arange(5, vocab))
    before = ids.copy()
    result = apply_masking(ids, lengths, b_starts, rules,
                           hashed_uniform_at(3, 0, np.arange(rows)))
    k = num_to_predict(lengths, 0.15, length)
    got = np.bincount(result.rows, minlength=rows)
    if whole_word:
        assert np.all(got <= k) and np.all(got >= k - 12)   # a word that does not fit: skipped
    else:
        assert np.array_equal(got, k)
    assert np.all(result.cols > 0) and np.all(result.cols < lengths[result.rows] - 1)
    assert not np.any(result.cols == b_starts[result.rows] - 1)
    pairs = result.rows.astype(np.int64) * length + result.cols
    assert len(np.unique(pairs)) == len(pairs)
    assert np.array_equal(result.labels, before[result.rows, result.cols])
    mid = (result.cols / lengths[result.rows]).mean()
    assert abs(mid - 0.5) < 0.02, mid
    if whole_word:   # a ## piece predicted only with the piece before it
        chosen = np.zeros_like(before, bool)
        chosen[result.rows, result.cols] = True
        piece = continuation[before] & chosen
        piece[:, 0] = False
        r, c = np.nonzero(piece)
        starts_word = (c == b_starts[r]) | (c == 1)
        assert np.all(chosen[r, c - 1] | starts_word)


def test_nsp_and_mask_shares(static, static_dir, tokenizer):
    ds, arr = static
    stats = read_pretraining_info(static_dir).stats["train"]
    assert stats["instances"] == len(ds)
    # Chunks of one sentence always get a random B (as in Google's code); the others are 50/50.
    free = stats["instances"] - stats["single_sentence_chunks"]
    assert abs((stats["is_next"]) / free - 0.5) < 0.03
    assert arr["next_sentence_label"].sum() == stats["not_next"]
    masked = arr["labels"] != -100
    as_mask = (arr["input_ids"] == tokenizer.token_to_id("[MASK]")) & masked
    kept = (arr["input_ids"] == arr["labels"]) & masked
    total = masked.sum()
    assert total == stats["masked"] and as_mask.sum() == stats["masked_as_mask"]
    assert abs(as_mask.sum() / total - 0.8) < 0.02
    assert abs(kept.sum() / total - 0.1) < 0.015
    assert abs(stats["masked_as_random"] / total - 0.1) < 0.015
    assert set(stats["mask_split"]) == {"mask", "random", "kept"}


def find_all(seq: np.ndarray, stream: bytes) -> list[int]:
    """Token positions where `seq` occurs in `stream`."""
    needle, hits = np.asarray(seq, dtype=np.uint32).tobytes(), []
    at = stream.find(needle)
    while at != -1:
        if at % 4 == 0:
            hits.append(at // 4)
        at = stream.find(needle, at + 1)
    return hits


def b_follows_a(a_at: list[int], a_len: int, b_at: list[int], doc_of: np.ndarray) -> bool:
    """B follows A in the same document, possibly after tokens cut by truncation."""
    return any(0 <= pb - (pa + a_len) <= 300 and doc_of[pa] == doc_of[pb]
               for pa in a_at for pb in b_at)


def test_is_next_b_continues_a_in_the_source(static, corpus, tokenizer):
    ds, arr = static
    stream = token_stream(corpus, tokenizer)
    doc_of = np.cumsum(np.frombuffer(stream, dtype=np.uint32) == 2**32 - 1)
    ids, b = original_ids(arr), arr["token_type_ids"].argmax(axis=1)
    checked = Counter()
    for r in range(0, len(ds), 7):
        n = arr["lengths"][r]
        a_part, b_part = ids[r, 1:b[r] - 1], ids[r, b[r]:n - 1]
        a_at, b_at = find_all(a_part, stream), find_all(b_part, stream)
        assert a_at and b_at
        if len(a_part) < 12 or len(b_part) < 12:
            continue  # short spans recur in the text: too ambiguous to place
        follows = b_follows_a(a_at, len(a_part), b_at, doc_of)
        if arr["next_sentence_label"][r] == 0:
            assert follows
            checked["is_next"] += 1
        else:
            assert not any(doc_of[pa] == doc_of[pb] for pa in a_at for pb in b_at)
            checked["not_next"] += 1
    assert checked["is_next"] > 50 and checked["not_next"] > 50


def test_whole_word_masking_never_splits_a_word(tmp_path_factory, corpus, tokenizer):
    out = build(tmp_path_factory, corpus, tokenizer, "wwm", whole_word_mask=True)
    ds = PretrainingDataset(out)
    arr = ds.arrays(np.arange(len(ds)))
    ids, labels, n = original_ids(arr), arr["labels"], arr["lengths"]
    vocab = tokenizer.get_vocab()
    cont = np.zeros(tokenizer.get_vocab_size(), dtype=bool)
    cont[[i for t, i in vocab.items() if t.startswith("##")]] = True
    masked = labels != -100
    b = arr["token_type_ids"].argmax(axis=1)
    col = np.arange(ids.shape[1])[None, :]
    # A `##` piece whose left neighbour is a text token (not [CLS]/[SEP]) belongs to its word.
    cand = (col > 0) & (col < n[:, None] - 1) & (col != b[:, None] - 1)
    joined = cont[ids] & cand & np.roll(cand, 1, axis=1)
    assert joined.sum() > 1000
    # A word longer than its instance's whole budget is masked piece by piece (an instance of
    # 7 tokens predicts 1): its pieces are left out of the check.
    word = np.cumsum(~joined, axis=1)
    size = np.take_along_axis(np.stack([np.bincount(w, minlength=ids.shape[1] + 1)
                                        for w in word]), word, axis=1)
    whole = joined & (size <= num_to_predict(n, 0.15, 20)[:, None])
    assert whole.sum() > 0.95 * joined.sum()
    assert (masked[:, 1:][whole[:, 1:]] == masked[:, :-1][whole[:, 1:]]).all()
    # The 80/10/10 choice is made per word: a word is all [MASK] or has no [MASK].
    is_mask = arr["input_ids"] == tokenizer.token_to_id("[MASK]")
    both = whole[:, 1:] & masked[:, 1:]
    assert (is_mask[:, 1:][both] == is_mask[:, :-1][both]).all()
    assert (masked.sum(axis=1) <= np.minimum(20, np.rint(n * 0.15))).all()
    assert (masked.sum(axis=1) >= 1).all()


# ---- determinism, parallelism, slices ----------------------------------------------------------

def digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_byte_identical_across_worker_counts_and_seed_changes_output(tmp_path_factory, corpus,
                                                                     tokenizer):
    one = build(tmp_path_factory, corpus, tokenizer, "w1", workers=1, validation_fraction=0.1)
    two = build(tmp_path_factory, corpus, tokenizer, "w2", workers=2, validation_fraction=0.1)
    assert digest(one) == digest(two)
    assert len(read_pretraining_info(one).shards["train"]) == 1
    other = build(tmp_path_factory, corpus, tokenizer, "seed", seed=7, validation_fraction=0.1)
    assert ((one / "train-00000of00001-00000.tokens.bin").read_bytes()
            != (other / "train-00000of00001-00000.tokens.bin").read_bytes())


def instance_set(ds: PretrainingDataset) -> Counter:
    arr = ds.arrays(np.arange(len(ds)))
    keys = Counter()
    for r in range(len(ds)):
        n = arr["lengths"][r]
        keys[(arr["input_ids"][r, :n].tobytes(), arr["labels"][r, :n].tobytes(),
              int(arr["next_sentence_label"][r]))] += 1
    return keys


def test_slices_built_separately_read_as_the_full_build(tmp_path_factory, corpus, tokenizer):
    settings = dict(chunk_chars=20_000, dupe_factor=1, shard_max_tokens=10_000,
                    validation_fraction=0.1)
    full = tmp_path_factory.mktemp("full")
    build_pretraining_data(corpus, tokenizer, full, PretrainingDataConfig(**settings))
    combined = tmp_path_factory.mktemp("combined")
    build_pretraining_data(corpus, tokenizer, combined, PretrainingDataConfig(**settings),
                           num_shards=3, shard_index=1)
    with pytest.raises(BertctlError, match="missing slice"):
        PretrainingDataset(combined)
    for i in (0, 2):
        build_pretraining_data(iter(corpus), tokenizer, combined,
                               PretrainingDataConfig(**settings), num_shards=3, shard_index=i)
    for split in ("train", "validation"):
        a, b = PretrainingDataset(full, split), PretrainingDataset(combined, split)
        assert len(a) == len(b)
        assert instance_set(a) == instance_set(b)
    info_a, info_b = read_pretraining_info(full), read_pretraining_info(combined)
    assert info_a.stats == info_b.stats and info_b.num_slices == 3
    assert len(info_b.shards["train"]) > 3  # several shard files per slice, read as one


def test_slices_with_other_settings_are_refused(tmp_path_factory, corpus, tokenizer):
    out = tmp_path_factory.mktemp("mixed")
    build_pretraining_data(corpus, tokenizer, out, PretrainingDataConfig(
        chunk_chars=50_000, dupe_factor=1), num_shards=2, shard_index=0)
    build_pretraining_data(corpus, tokenizer, out, PretrainingDataConfig(
        chunk_chars=50_000, dupe_factor=1, seed=1), num_shards=2, shard_index=1)
    with pytest.raises(BertctlError, match="different settings"):
        PretrainingDataset(out)


# ---- dynamic masking, no NSP, validation -------------------------------------------------------

def test_dynamic_masking_is_deterministic_per_epoch_and_index(tmp_path_factory, corpus, tokenizer):
    out = build(tmp_path_factory, corpus, tokenizer, "dyn", masking="dynamic", dupe_factor=None)
    info = read_pretraining_info(out)
    # the share one draw of the loader's masks covers is recorded; their split is the loader's
    stats = info.stats["train"]
    assert info.settings["dupe_factor"] == 1 and "mask_split" not in stats
    assert stats["masked"] == stats["mask_budget"] and 0.1 < stats["masked_share"] < 0.16
    ds = PretrainingDataset(out)
    idx = np.array([5, 17, 300, 900])
    x = ds.batch(idx, epoch=0)
    # Same (epoch, index) in another batch, another order, another width: same mask.
    y = ds.batch(np.array([900, 3, 17]), epoch=0)
    for k in ("input_ids", "labels"):
        assert (y[k][2, :x[k].shape[1]] == x[k][1]).all()
        assert (y[k][0, :x[k].shape[1]] == x[k][3]).all()
    z = ds.batch(idx, epoch=1)
    assert not (z["labels"] == x["labels"]).all()
    assert (original_ids({k: v.numpy() for k, v in z.items()})
            == original_ids({k: v.numpy() for k, v in x.items()})).all()
    arr = ds.arrays(np.arange(len(ds)), epoch=3)
    masked = arr["labels"] != -100
    assert masked.sum(axis=1).tolist() == num_to_predict(arr["lengths"], 0.15, 20).tolist()
    share = (arr["input_ids"][masked] == tokenizer.token_to_id("[MASK]")).mean()
    assert abs(share - 0.8) < 0.03
    assert PretrainingDataset(out, mask_seed=99).batch(idx)["labels"].ne(x["labels"]).any()


def test_no_nsp_keeps_b_contiguous_and_omits_the_label(tmp_path_factory, corpus, tokenizer):
    out = build(tmp_path_factory, corpus, tokenizer, "nonsp", no_nsp=True, short_seq_prob=0.5)
    ds = PretrainingDataset(out)
    assert not list(out.glob("*.nsp.bin"))
    batch = ds.batch(np.arange(8))
    assert "next_sentence_label" not in batch
    arr = ds.arrays(np.arange(len(ds)))
    stream = token_stream(corpus, tokenizer)
    doc_of = np.cumsum(np.frombuffer(stream, dtype=np.uint32) == 2**32 - 1)
    ids = original_ids(arr)
    single = arr["token_type_ids"].sum(axis=1) == 0
    assert read_pretraining_info(out).stats["train"]["single_segment"] == single.sum() > 0
    checked = 0
    for r in range(0, len(ds), 11):
        n = arr["lengths"][r]
        if single[r]:
            assert occurs(ids[r, 1:n - 1], stream)
            continue
        b = arr["token_type_ids"][r].argmax()
        a_part, b_part = ids[r, 1:b - 1], ids[r, b:n - 1]
        if len(a_part) >= 12 and len(b_part) >= 12:
            assert b_follows_a(find_all(a_part, stream), len(a_part), find_all(b_part, stream),
                               doc_of)
            checked += 1
    assert checked > 30


def joined_stream(docs, held, tokenizer, max_num):
    """The training documents' tokens as uint32, documents that touch joined (continuous text
    runs on across them), a separator where held-out documents lie between; and the offsets
    where a sentence, or a max_num piece of a longer one, starts and ends."""
    parts, starts, ends, at = [], set(), set(), 0
    for d, h in zip(docs, held):
        if h:
            if parts and parts[-1][0] != 2**32 - 1:
                parts.append(np.array([2**32 - 1], dtype=np.uint32))
                at += 1
            continue
        for e in tokenizer.encode_batch(d, add_special_tokens=False):
            n = len(e.ids)
            starts.update(range(at, at + n, max_num))
            ends.update(list(range(at + max_num, at + n, max_num)) + [at + n] if n else [])
            parts.append(np.asarray(e.ids, dtype=np.uint32))
            at += n
    return np.concatenate(parts).tobytes(), starts, ends


@pytest.mark.parametrize("short", [None, 0.3])
@pytest.mark.parametrize("packing", ["full-sentences", "concatenated"])
def test_continuous_packing_fills_instances_across_documents(tmp_path_factory, corpus, tokenizer,
                                                             packing, short):
    seq = 64
    out = build(tmp_path_factory, corpus, tokenizer, "packed", no_nsp=True, packing=packing,
                masking="dynamic", max_seq_length=seq, validation_fraction=0.2,
                short_seq_prob=short)
    held = validation_documents(12345, 0, len(corpus), 0.2)
    stream, starts, ends = joined_stream(corpus, held, tokenizer, seq - 2)
    words = np.frombuffer(stream, dtype=np.uint32)
    ds = PretrainingDataset(out)
    arr = ds.arrays(np.arange(len(ds)))
    ids, lengths = original_ids(arr), arr["lengths"]
    assert (arr["token_type_ids"] == 0).all() and lengths.max() <= seq
    # Every training token is in exactly `passes` (2) instances.
    body = np.concatenate([ids[r, 1:lengths[r] - 1] for r in range(len(ids))])
    assert (np.bincount(body, minlength=2000) ==
            2 * np.bincount(words[words != 2**32 - 1], minlength=2000)).all()
    runs = int((words == 2**32 - 1).sum()) + 1
    crossing = 0
    for r in range(0, len(ids), 3):
        part = ids[r, 1:lengths[r] - 1]
        found = find_all(part, stream)
        assert found, r                     # contiguous text of the training split
        if packing == "full-sentences" and len(found) == 1:
            # Instances start and end at sentences (pieces of over-long ones).
            assert found[0] in starts and found[0] + len(part) in ends
        crossing += len(found) == 1 and any(found[0] < e < found[0] + len(part)
                                            for e in ends)
    assert crossing > 0
    if short:
        # The short share is drawn (whole-sentence instances also fall short of a full
        # sequence where the next sentence does not fit, so only a lower bound there).
        short_share = (lengths <= seq - 2 - (seq - 2) // 8).mean()
        assert 0.6 * short < short_share < 1.4 * short or (
            packing == "full-sentences" and short_share > 0.6 * short), short_share
    elif packing == "concatenated":
        # Full but for the last instance of each run of touching documents (a chunk boundary
        # also ends a run), and a random-length first one in the second pass.
        chunks = json.loads(next(out.glob("build-*.json")).read_text())["corpus"]["chunks"]
        assert (lengths < seq).sum() <= 3 * (runs + chunks)
        assert lengths.mean() > seq - 1


def test_continuous_packing_needs_no_nsp():
    from bertctl.settings import SettingsError

    with pytest.raises(SettingsError, match="--packing concatenated .* add --no-nsp"):
        PretrainingDataConfig(packing="concatenated")


def test_validation_split_holds_whole_documents(static_dir, corpus, tokenizer):
    held = validation_documents(12345, 0, len(corpus), 0.15)
    assert 0 < held.sum() < len(corpus)
    val_stream = token_stream([d for d, h in zip(corpus, held) if h], tokenizer)
    train_stream = token_stream([d for d, h in zip(corpus, held) if not h], tokenizer)
    info = read_pretraining_info(static_dir)
    assert info.stats["validation"]["documents"] == held.sum()
    assert info.stats["train"]["documents"] == len(corpus) - held.sum()
    for split, mine, other in (("validation", val_stream, train_stream),
                               ("train", train_stream, val_stream)):
        ds = PretrainingDataset(static_dir, split)
        arr = ds.arrays(np.arange(0, len(ds), 5))
        ids, b = original_ids(arr), arr["token_type_ids"].argmax(axis=1)
        for r in range(len(ids)):
            for part in (ids[r, 1:b[r] - 1], ids[r, b[r]:arr["lengths"][r] - 1]):
                assert occurs(part, mine)
                if len(part) > 30:
                    assert not occurs(part, other)


# ---- loader ------------------------------------------------------------------------------------

def test_batch_pads_to_the_longest_and_reads_across_shards(tmp_path_factory, corpus, tokenizer):
    out = build(tmp_path_factory, corpus, tokenizer, "shards", dupe_factor=1,
                shard_max_tokens=20_000, short_seq_prob=0.5)
    ds = PretrainingDataset(out)
    assert len(ds.shards) > 3
    idx = np.array([len(ds) - 1, 0, len(ds) // 2, 7])
    lengths = ds.lengths[idx]
    batch = ds.batch(idx)
    assert batch["input_ids"].shape == (4, lengths.max())
    assert batch["input_ids"].dtype.is_floating_point is False
    assert batch["attention_mask"].sum(1).tolist() == lengths.tolist()
    assert batch["next_sentence_label"].shape == (4,)
    single = ds.batch(idx[:1])
    assert (single["input_ids"][0] == batch["input_ids"][0, :lengths[0]]).all()
    with pytest.raises(IndexError):
        ds.batch([len(ds)])
    text = decode_instances(ds, [0, 1])
    assert len(text) == 2 and "[MASK→" in "".join(text) and "\nA: " in text[0]


def test_token_dtype_is_uint16_for_a_small_vocabulary(static_dir):
    info = read_pretraining_info(static_dir)
    assert info.token_dtype == "<u2"
    size = (static_dir / "train-00000of00001-00000.tokens.bin").stat().st_size
    assert size == 2 * info.stats["train"]["tokens"]


# ---- edge cases --------------------------------------------------------------------------------

def test_one_sentence_document(tmp_path, tokenizer):
    build_pretraining_data([["Alice was beginning to get very tired."]], tokenizer, tmp_path,
                           PretrainingDataConfig(dupe_factor=1))
    ds = PretrainingDataset(tmp_path)
    stats = read_pretraining_info(tmp_path).stats["train"]
    assert len(ds) == 1 and stats["random_next_same_document"] == 1
    assert decode_instances(ds, [0])[0].startswith("#0 NotNext")


def test_a_one_megabyte_line(tmp_path, corpus, tokenizer):
    words = " ".join(s for d in corpus for s in d).split()
    line = ""
    while len(line) < 1_000_000:
        line += " ".join(words[:5000]) + " "
    docs = corpus[:3] + [[corpus[3][0], line, corpus[3][1]]] + corpus[4:6]
    build_pretraining_data(docs, tokenizer, tmp_path, PretrainingDataConfig(dupe_factor=1))
    ds = PretrainingDataset(tmp_path)
    assert ds.lengths.max() <= 128
    assert read_pretraining_info(tmp_path).stats["train"]["truncated_tokens"] > 200_000


@pytest.mark.parametrize("docs", [[], [[]], [[], []]])
def test_an_empty_corpus_is_an_error(tmp_path, tokenizer, docs):
    with pytest.raises(BertctlError, match="no documents"):
        build_pretraining_data(docs, tokenizer, tmp_path, PretrainingDataConfig(dupe_factor=1))
    assert not list(tmp_path.glob("build-*"))


def test_a_corpus_without_any_instance_is_an_error(tmp_path, tokenizer):
    # Whitespace-only and control-character-only sentences tokenize to nothing.
    docs = [["   ", "\u200b"], ["\x00\x01"]]
    with pytest.raises(BertctlError, match="no document yields"):
        build_pretraining_data(docs, tokenizer, tmp_path, PretrainingDataConfig(dupe_factor=1))
    assert not list(tmp_path.glob("*.bin"))


def test_all_documents_held_out_is_an_error(tmp_path, corpus, tokenizer):
    with pytest.raises(BertctlError, match="went to validation"):
        build_pretraining_data(corpus[:1], tokenizer, tmp_path, PretrainingDataConfig(
            dupe_factor=1, validation_fraction=0.999))


def test_settings_are_checked(tmp_path, tokenizer):
    for bad in (dict(max_seq_length=4), dict(max_seq_length=8193), dict(masked_lm_prob=0.0),
                dict(masked_lm_prob=1.0), dict(masking="sometimes"), dict(dupe_factor=0),
                dict(validation_fraction=1.0)):
        with pytest.raises(BertctlError, match="build-pretrain-data: "):
            PretrainingDataConfig(**bad)
    with pytest.raises(BertctlError, match="shard_index"):
        build_pretraining_data([["a b c"]], tokenizer, tmp_path, num_shards=2, shard_index=2)
    with pytest.raises(BertctlError, match=r"tokenizer: vocabulary lacks the special "
                       r"token\(s\) \[PAD\], \[CLS\], \[SEP\], \[MASK\] \(nor has RoBERTa's"):
        build_pretraining_data([["a b c"]], Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1},
                                                                       unk_token="[UNK]")), tmp_path)


def test_core_does_not_import_cli_libraries():
    import subprocess
    import sys
    code = ("import sys, bertctl.data.pretraining.dataset as p; p.PretrainingDataset; "
            "print(any(m in sys.modules for m in ('typer', 'rich', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
