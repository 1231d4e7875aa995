"""Masked-LM masking over a padded batch of instances, vectorised with numpy.

One function serves both masking modes: static masking (the builder, random numbers from the
chunk's numpy Generator) and dynamic masking (the loader, random numbers from a counter-based hash
of (seed, epoch, instance index, position), so an instance gets the same mask in the same epoch
whatever batch it lands in and whichever process loads it).

The rules are Google's `create_masked_lm_predictions`: candidates are every position except
[CLS] and the [SEP]s; the number of predictions is
min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob))) with len(tokens)
counting the special tokens; candidates are taken in random order; each chosen one becomes [MASK]
80% of the time, a random token 10% and stays itself 10%. With whole-word masking the candidates
are words (a piece plus the `##` pieces after it), a word that would overshoot the budget is
skipped, and the 80/10/10 draw is made once per word. (Google's reference draws it per piece even
with whole-word masking; we draw per word so a word is either fully hidden or not.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# What happened to each position: the codes stored in `MaskResult.action`.
NOT_MASKED, MASKED, RANDOM, KEPT = 0, 1, 2, 3


@dataclass(frozen=True)
class MaskingRules:
    masked_lm_prob: float
    max_predictions_per_seq: int
    whole_word_mask: bool
    mask_id: int
    is_continuation: np.ndarray  # bool per vocabulary id: the piece starts with "##"
    replacement_ids: np.ndarray  # ids a "random token" is drawn from (the vocabulary minus specials)


@dataclass
class MaskResult:
    """The predicted positions, row-major (ascending position within an instance)."""
    rows: np.ndarray    # instance (row) of each prediction
    cols: np.ndarray    # its position
    labels: np.ndarray  # the original id there
    action: np.ndarray  # int8: MASKED / RANDOM / KEPT


# (stream, rows, cols) -> uniforms in [0, 1), one per (row, col) pair. Stream 1 decides
# [MASK]/random/kept, stream 2 picks the random token.
UniformAt = Callable[[int, np.ndarray, np.ndarray], np.ndarray]

SELECT_BITS = 22  # random bits per position for the candidate order; 9 more bits hold the column


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


def _first_k(keys: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the low 9 bits (a column or word number) of the k[row] smallest keys, returned
    as (rows, numbers) in row-major order with the numbers ascending within a row.

    Keys are unique within a row (the number is in them), so any sort algorithm gives the same
    answer: the result does not depend on the numpy build or CPU."""
    kmax = int(k.max(initial=0))
    if kmax == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    smallest = np.partition(keys, kmax - 1, axis=1)[:, :kmax] if kmax < keys.shape[1] else keys
    smallest = np.sort(smallest, axis=1) & 511
    take = np.arange(smallest.shape[1])[None, :] < k[:, None]
    smallest = np.sort(np.where(take, smallest, 1 << 20), axis=1)  # ascending numbers first
    return np.nonzero(take)[0], smallest[take].astype(np.int64)


def apply_masking(ids: np.ndarray, lengths: np.ndarray, b_starts: np.ndarray, rules: MaskingRules,
                  select_bits: np.ndarray, uniform_at: UniformAt) -> MaskResult:
    """Mask a padded (I, T) batch of ids in place (T <= 512) and return what was predicted.

    `select_bits` (I, T) holds random integers in [0, 2**SELECT_BITS): a position's value (a
    word's first piece's, with whole-word masking) orders the candidates. `uniform_at` draws
    the 80/10/10 decision and the random token, only where needed.
    """
    n_rows, width = ids.shape
    assert width <= 512
    rows = np.arange(n_rows)
    col = np.arange(width, dtype=np.int32)[None, :]
    cand = candidate_positions(lengths, b_starts, width)
    n_cand = cand.sum(axis=1)
    k = np.minimum(num_to_predict(lengths, rules.masked_lm_prob, rules.max_predictions_per_seq),
                   n_cand)
    top = np.int32(np.iinfo(np.int32).max)

    if not rules.whole_word_mask:
        # Random order of the candidates = ascending key; the first k win.
        keys = np.where(cand, (select_bits.astype(np.int32) << 9) | col, top)
        pr, pc = _first_k(keys, k)
        action_u = uniform_at(1, pr, pc)
    else:
        # A word starts at every candidate that is not a `##` piece directly after another
        # candidate (so a `##` piece right after [CLS]/[SEP], left by truncation, starts a word)
        # and runs over the candidates after it that do not start a word. Flat (row-major)
        # indices throughout: much cheaper than 2-D fancy indexing.
        prev_cand = np.zeros_like(cand)
        prev_cand[:, 1:] = cand[:, :-1]
        start = cand & ~(rules.is_continuation[ids] & prev_cand)
        next_continues = np.zeros_like(cand)
        next_continues[:, :-1] = cand[:, 1:] & ~start[:, 1:]
        first = np.flatnonzero(start)                       # each word's first cell
        last = np.flatnonzero(cand & ~next_continues)       # each word's last cell
        size = last - first + 1
        wrow = first // width
        n_words = np.bincount(wrow, minlength=n_rows)
        row_first_word = np.cumsum(n_words) - n_words
        wnum = np.arange(len(first)) - row_first_word[wrow]  # word number within its row
        slot = wrow * width + wnum                           # (row, word number), flat
        keys = np.full(n_rows * width, top, dtype=np.int32)
        keys[slot] = (select_bits.ravel()[first].astype(np.int32) << 9) | wnum
        order = np.minimum(np.sort(keys.reshape(n_rows, width), axis=1) & 511, width - 1)
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

    labels = ids[pr, pc].copy()
    action = np.where(action_u < 0.8, MASKED, np.where(action_u < 0.9, KEPT, RANDOM))
    action = action.astype(np.int8)
    ids[pr[action == MASKED], pc[action == MASKED]] = rules.mask_id
    rr, rc = pr[action == RANDOM], pc[action == RANDOM]
    if len(rr):
        n_rep = len(rules.replacement_ids)
        pick = np.minimum((uniform_at(2, rr, rc) * n_rep).astype(np.int64), n_rep - 1)
        ids[rr, rc] = rules.replacement_ids[pick]
    return MaskResult(pr, pc, labels, action)


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


def hashed_masking_inputs(seed: int, epoch: int, indices: np.ndarray,
                          width: int) -> tuple[np.ndarray, UniformAt]:
    """`select_bits` and `uniform_at` for `apply_masking`, keyed by instance index."""
    indices = np.asarray(indices, dtype=np.int64)
    bits = hashed_bits(seed, epoch, indices[:, None], np.arange(width)[None, :], 0)
    select = (bits >> np.uint64(64 - SELECT_BITS)).astype(np.int32)

    def uniform_at(stream: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return hashed_uniform(seed, epoch, indices[rows], cols, stream)
    return select, uniform_at
