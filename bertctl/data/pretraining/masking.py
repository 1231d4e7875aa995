"""Masked-LM masking over a batch of instances, vectorised with numpy.

One function serves both masking modes: static masking (the builder, random numbers from the
chunk's numpy Generator) and dynamic masking (the loader, random numbers from a counter-based hash
of (seed, epoch, instance index, draw number or position), so an instance gets the same mask in
the same epoch whatever batch it lands in and whichever process loads it).

The rules are Google's `create_masked_lm_predictions`: candidates are every position except
[CLS] and the [SEP]s; the number of predictions is
min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob))) with len(tokens)
counting the special tokens; the chosen candidates are a uniformly random subset of that size
(Google shuffles the candidates and takes the first ones; we sample without replacement, which
draws a few numbers per prediction instead of one per position); each chosen one becomes [MASK]
80% of the time, a random token 10% and stays itself 10%. With whole-word masking the candidates
are words (a piece plus the pieces after it that continue its word: `##` pieces in
WordPiece, tokenizer.WordMarks for every kind; a word longer than the whole budget is its pieces,
each a word), a word that would overshoot the budget is skipped, and the 80/10/10 draw is made once per word. (Google's reference draws it per piece even
with whole-word masking; we draw per word so a word is either fully hidden or not.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bertctl.data.tokenizer.words import WordMarks

# What happened to each position: the codes stored in `MaskResult.action`.
NOT_MASKED, MASKED, RANDOM, KEPT = 0, 1, 2, 3


@dataclass(frozen=True)
class MaskingRules:
    masked_lm_prob: float
    max_predictions_per_seq: int
    whole_word_mask: bool
    mask_id: int
    words: WordMarks             # where the vocabulary's words begin (whole-word masking)
    replacement_ids: np.ndarray  # ids a "random token" is drawn from (the vocabulary minus specials)


@dataclass
class MaskResult:
    """The predicted positions, row-major (ascending position within an instance)."""
    rows: np.ndarray    # instance (row) of each prediction
    cols: np.ndarray    # its position
    labels: np.ndarray  # the original id there
    action: np.ndarray  # int8: MASKED / RANDOM / KEPT


# (stream, rows, cols) -> uniforms in [0, 1), one per (row, col) pair (the arrays broadcast
# against each other; the result has their broadcast shape). Stream 0 orders the
# candidates (col = a draw number, or a word's first position with whole-word masking), stream 1
# decides [MASK]/random/kept, stream 2 picks the random token.
UniformAt = Callable[[int, np.ndarray, np.ndarray], np.ndarray]

_ORDER_BITS = 22  # random bits of a word's sort key; more bits hold its number (_bits)


def _bits(width: int) -> int:
    """Bits that hold a position below `width`: 9 up to BERT's 512 (the packing every
    pretrain-data artifact was masked with), more for longer instances (ModernBERT's 8,192)."""
    return max(9, (max(int(width), 1) - 1).bit_length())


def num_to_predict(lengths: np.ndarray, masked_lm_prob: float, max_predictions: int) -> np.ndarray:
    """Google's prediction count per instance; `lengths` include [CLS] and [SEP]s.

    np.rint rounds half to even like Python's round(), which Google's code uses.
    """
    n = np.rint(np.asarray(lengths, dtype=np.float64) * masked_lm_prob).astype(np.int64)
    return np.minimum(max_predictions, np.maximum(1, n))


def candidate_positions(lengths: np.ndarray, b_starts: np.ndarray, width: int) -> np.ndarray:
    """(I, width) bool: inside the instance and not [CLS] (col 0), the middle [SEP]
    (col b_start - 1) or the final [SEP] (col length - 1)."""
    col = np.arange(width)[None, :]
    lengths = np.asarray(lengths)[:, None]
    b_starts = np.asarray(b_starts)[:, None]
    return (col > 0) & (col < lengths - 1) & (col != b_starts - 1)


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + n) for each (s, n), without a Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, dtype=np.int64) - offsets, lengths) + np.arange(total)


def _row_major(rows: np.ndarray, values: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, ...]:
    """The first k[r] entries of each row of `values` (I, m), as (rows, values) in row-major
    order with the values ascending within a row."""
    take = np.arange(values.shape[1])[None, :] < k[:, None]
    values = np.sort(np.where(take, values, np.iinfo(values.dtype).max), axis=1)
    return np.repeat(rows, k), values[take].astype(np.int64)


def _sample_without_replacement(n: np.ndarray, k: np.ndarray, uniform_at: UniformAt
                                ) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random k[r]-subset of range(n[r]) per row (k <= n), as (rows, values)
    in row-major order, ascending within a row.

    Rejection sampling: row r draws values floor(u * n[r]) with u = uniform_at(0, r, j) for
    draw numbers j = 0, 1, ..., and keeps the first k[r] distinct ones (the sequential definition
    of sampling without replacement). A few draws more than k suffice nearly always; the rare
    row left short draws more. Work is O(rows x k), not O(rows x length) like ranking every
    position, and the numbers are addressed by draw number, so the loader's hashed uniforms give
    an instance the same sample wherever it is loaded.
    """
    rows_out, vals_out = [], []
    pending = np.nonzero(k > 0)[0]
    bits = _bits(int(n.max(initial=1)))
    # (value, draw) and (draw, value) pack into one integer: int32 as long as they fit (every
    # instance up to 512 tokens), else int64; the same numbers either way.
    wide = np.int32 if bits == 9 else np.int64
    # Draws per row, a power of two so that (value, draw) packs into an int32 by shifting.
    shift = max(3, int(k.max(initial=0)) + 8 - 1).bit_length()
    drawn = 0
    while len(pending):
        m = 1 << shift
        kp, np_ = k[pending], n[pending]
        u = uniform_at(0, pending[:, None], np.arange(drawn, drawn + m)[None, :])
        values = np.minimum((u * np_[:, None]).astype(wide), (np_[:, None] - 1).astype(wide))
        # Sorted by (value, draw), each value's first draw comes first among its copies.
        keyed = np.sort((values << shift) | np.arange(m, dtype=wide)[None, :], axis=1)
        value = keyed >> shift
        first = np.ones(keyed.shape, dtype=bool)
        first[:, 1:] = value[:, 1:] != value[:, :-1]
        done = first.sum(axis=1) >= kp
        # The distinct values ordered by their first draw; the first k win.
        by_draw = np.sort(np.where(first, ((keyed & (m - 1)) << bits) | value,
                                   np.iinfo(wide).max), axis=1)
        r, v = _row_major(pending[done], by_draw[done] & ((1 << bits) - 1), kp[done])
        rows_out.append(r)
        vals_out.append(v)
        # Rows left short start over with twice the draws (fresh numbers: draw numbers go on).
        pending, drawn, shift = pending[~done], drawn + m, shift + 1
    if len(rows_out) == 1:
        return rows_out[0], vals_out[0]
    rows, values = np.concatenate(rows_out), np.concatenate(vals_out)
    order = np.argsort(rows, kind="stable")  # rows finished in later rounds go back in place
    return rows[order], values[order]


def apply_masking(ids: np.ndarray, lengths: np.ndarray, b_starts: np.ndarray, rules: MaskingRules,
                  uniform_at: UniformAt, row_base: np.ndarray | None = None) -> MaskResult:
    """Mask a batch of instances in place (of any length) and return what was predicted.

    `ids` is a padded (I, T) array, or 1-D with instance r's tokens at
    ids[row_base[r]:row_base[r] + lengths[r]] (the builder's packed layout, no padding).
    `uniform_at` supplies every random number: the candidates' order, the 80/10/10 decision
    and the random token, drawn only where needed.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    b_starts = np.asarray(b_starts, dtype=np.int64)
    n_rows = len(lengths)
    if ids.ndim == 2:
        row_base = np.arange(n_rows, dtype=np.int64) * ids.shape[1]

    if not rules.whole_word_mask:
        # Candidates are A's tokens (columns 1..la) then B's (la+2..): number them 0..n-1,
        # sample among the numbers, and skip the middle [SEP] when mapping back to columns.
        has_b = b_starts < lengths
        n_cand = lengths - 2 - has_b
        k = np.minimum(num_to_predict(lengths, rules.masked_lm_prob,
                                      rules.max_predictions_per_seq), n_cand)
        pr, v = _sample_without_replacement(n_cand, k, uniform_at)
        pc = v + 1 + (v >= b_starts[pr] - 2)
        action_u = uniform_at(1, pr, pc)
    else:
        if ids.ndim == 2:
            padded = ids
        else:
            width = int(lengths.max(initial=0))
            padded = np.zeros((n_rows, width), dtype=ids.dtype)
            padded[np.arange(width)[None, :] < lengths[:, None]] = ids[ranges(row_base, lengths)]
        pr, pc, action_u = _whole_word_choice(padded, lengths, b_starts, rules, uniform_at)

    at = row_base[pr] + pc  # flat (C-order) indices: np.take / np.put address any ids that way
    labels = np.take(ids, at)
    action = np.where(action_u < 0.8, MASKED, np.where(action_u < 0.9, KEPT, RANDOM))
    action = action.astype(np.int8)
    np.put(ids, at[action == MASKED], rules.mask_id)
    rnd = action == RANDOM
    if rnd.any():
        n_rep = len(rules.replacement_ids)
        pick = np.minimum((uniform_at(2, pr[rnd], pc[rnd]) * n_rep).astype(np.int64), n_rep - 1)
        np.put(ids, at[rnd], rules.replacement_ids[pick])
    return MaskResult(pr, pc, labels, action)


def _words(cand: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each word's first cell (flat, row-major) and its number of pieces."""
    next_continues = np.zeros_like(cand)
    next_continues[:, :-1] = cand[:, 1:] & ~start[:, 1:]
    first = np.flatnonzero(start)
    last = np.flatnonzero(cand & ~next_continues)
    return first, last - first + 1


def _whole_word_choice(ids: np.ndarray, lengths: np.ndarray, b_starts: np.ndarray,
                       rules: MaskingRules, uniform_at: UniformAt) -> tuple[np.ndarray, ...]:
    """Whole-word masking's predicted (rows, cols) of a padded batch, and each one's 80/10/10
    uniform (one per word)."""
    n_rows, width = ids.shape
    rows = np.arange(n_rows)
    cand = candidate_positions(lengths, b_starts, width)
    k = np.minimum(num_to_predict(lengths, rules.masked_lm_prob,
                                  rules.max_predictions_per_seq), cand.sum(axis=1))
    # A word starts at every candidate that begins one after the piece before it, or follows
    # no candidate (so a `##` piece right after [CLS]/[SEP], left by truncation, starts a word),
    # and runs over the candidates after it that do not start a word. Flat (row-major)
    # indices throughout: much cheaper than 2-D fancy indexing.
    prev_cand = np.zeros_like(cand)
    prev_cand[:, 1:] = cand[:, :-1]
    prev_ids = np.empty_like(ids)
    prev_ids[:, 1:] = ids[:, :-1]
    prev_ids[:, 0] = ids[:, 0]
    start = cand & (rules.words.begins(prev_ids, ids) | ~prev_cand)
    first, size = _words(cand, start)
    # A word longer than its row's budget could never be taken (Google's greedy pass skips
    # it): such a word's pieces are words of their own, so a line the pre-tokenizer left in
    # one piece (a script without spaces it does not know, a URL) is still masked at the rate.
    big = size > k[first // width]
    if big.any():
        start.reshape(-1)[ranges(first[big], size[big])] = True
        first, size = _words(cand, start)
    wrow = first // width
    n_words = np.bincount(wrow, minlength=n_rows)
    row_first_word = np.cumsum(n_words) - n_words
    wnum = np.arange(len(first)) - row_first_word[wrow]  # word number within its row
    slot = wrow * width + wnum                           # (row, word number), flat
    # Random order of a row's words = ascending key (random bits, then the word number).
    bits = _bits(width)
    wide = np.int32 if bits == 9 else np.int64   # as in _sample_without_replacement
    order_bits = (uniform_at(0, wrow, first - wrow * width) * (1 << _ORDER_BITS))
    keys = np.full(n_rows * width, np.iinfo(wide).max, dtype=wide)
    keys[slot] = (order_bits.astype(wide) << bits) | wnum.astype(wide)
    order = np.minimum(np.sort(keys.reshape(n_rows, width), axis=1) & ((1 << bits) - 1),
                       width - 1)
    size_at = np.zeros(n_rows * width, dtype=np.int64)
    size_at[slot] = size
    # Google's greedy pass over the shuffled words, one rank at a time for the rows still
    # open: take a word if it fits in what is left of the budget, otherwise skip it.
    taken = np.zeros(n_rows * width, dtype=bool)
    count = np.zeros(n_rows, dtype=np.int64)
    active = rows[(k > 0) & (n_words > 0)]
    for rank in range(int(n_words.max(initial=0))):
        at = active * width + order[active, rank]
        fits = count[active] + size_at[at] <= k[active]
        taken[at[fits]] = True
        count[active[fits]] += size_at[at[fits]]
        active = active[(count[active] < k[active]) & (rank + 1 < n_words[active])]
        if not len(active):
            break
    chosen_words = np.nonzero(taken[slot])[0]           # ascending = row-major cell order
    w_first, w_size = first[chosen_words], size[chosen_words]
    word_u = uniform_at(1, wrow[chosen_words], w_first - wrow[chosen_words] * width)
    cells = ranges(w_first, w_size)
    pr = cells // width
    pc = cells - pr * width
    action_u = np.repeat(word_u, w_size)                # one draw per word

    return pr, pc, action_u


# ---- counter-based random numbers for dynamic masking ----------------------------------------

_M64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array (wrapping arithmetic)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def hashed_bits(seed: int, epoch: int, index: np.ndarray, col: np.ndarray,
                stream: int) -> np.ndarray:
    """64 random bits per (index, col) pair (broadcast), a pure function of
    (seed, epoch, index, col, stream): the same instance in the same epoch always gets the same
    numbers, whatever batch or process it is loaded in."""
    with np.errstate(over="ignore"):
        base = _splitmix64(_splitmix64(np.array([int(seed) & _M64], dtype=np.uint64))
                           ^ np.array([int(epoch) & _M64], dtype=np.uint64))[0]
        row = _splitmix64(np.asarray(index, dtype=np.uint64) * np.uint64(0xD6E8FEB86659FD93)
                          ^ base)
        cell = _splitmix64(np.asarray(col, dtype=np.uint64) * np.uint64(4)
                           + np.uint64(stream + 1))
        return _splitmix64(row ^ cell)


def hashed_uniform(seed: int, epoch: int, index: np.ndarray, col: np.ndarray,
                   stream: int) -> np.ndarray:
    """Uniforms in [0, 1) from `hashed_bits`."""
    return (hashed_bits(seed, epoch, index, col, stream) >> np.uint64(11)).astype(
        np.float64) * (1.0 / (1 << 53))


def generator_uniform_at(g: np.random.Generator) -> UniformAt:
    """`uniform_at` for `apply_masking` drawing from `g` in call order (the builder's static
    masks: one generator per chunk, so the numbers depend only on the chunk)."""
    return lambda _stream, rows, cols: g.random(np.broadcast_shapes(np.shape(rows),
                                                                    np.shape(cols)))


def hashed_uniform_at(seed: int, epoch: int, indices: np.ndarray) -> UniformAt:
    """`uniform_at` for `apply_masking`, keyed by instance index (rows are batch positions)."""
    indices = np.asarray(indices, dtype=np.int64)

    def uniform_at(stream: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return hashed_uniform(seed, epoch, indices[rows], cols, stream)
    return uniform_at
