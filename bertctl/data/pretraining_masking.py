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
    input_ids: np.ndarray  # (I, T) ids after masking
    chosen: np.ndarray     # (I, T) bool: position is predicted
    action: np.ndarray     # (I, T) int8: NOT_MASKED / MASKED / RANDOM / KEPT


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


def apply_masking(ids: np.ndarray, lengths: np.ndarray, b_starts: np.ndarray, rules: MaskingRules,
                  u_select: np.ndarray, u_action: np.ndarray, u_random: np.ndarray) -> MaskResult:
    """Mask a padded (I, T) batch. The three uniform [0, 1) arrays, shaped like `ids`, are the only
    source of randomness: a position's (or a word's first piece's) `u_select` orders the
    candidates, `u_action` picks [MASK]/random/kept, `u_random` picks the random token."""
    n_rows, width = ids.shape
    rows = np.arange(n_rows)
    cand = candidate_positions(lengths, b_starts, width)
    n_cand = cand.sum(axis=1)
    k = np.minimum(num_to_predict(lengths, rules.masked_lm_prob, rules.max_predictions_per_seq),
                   n_cand)

    if not rules.whole_word_mask:
        # Random order of the candidates = ascending key, non-candidates last; the first k win.
        key = np.where(cand, u_select, np.inf)
        order = np.argsort(key, axis=1, kind="stable")
        rank = np.empty_like(order)
        rank[rows[:, None], order] = np.arange(width)[None, :]
        chosen = rank < k[:, None]
        action_u = u_action
    else:
        # A word starts at every candidate that is not a `##` piece directly after another
        # candidate (so a `##` piece right after [CLS]/[SEP], left by truncation, starts a word).
        prev_cand = np.zeros_like(cand)
        prev_cand[:, 1:] = cand[:, :-1]
        cont = rules.is_continuation[ids] & cand & prev_cand
        start = cand & ~cont
        word = np.cumsum(start, axis=1) - 1           # word number of each position (-1 before any)
        word = np.where(cand, word, 0)
        n_words = start.sum(axis=1)
        flat = (rows[:, None] * width + word)[cand]
        sizes = np.bincount(flat, minlength=n_rows * width).reshape(n_rows, width)
        # Per word: its first piece's random key and action draw.
        srow, scol = np.nonzero(start)
        sword = word[srow, scol]
        word_key = np.full((n_rows, width), np.inf)
        word_key[srow, sword] = u_select[srow, scol]
        word_act = np.zeros((n_rows, width), dtype=u_action.dtype)
        word_act[srow, sword] = u_action[srow, scol]
        order = np.argsort(word_key, axis=1, kind="stable")
        # Google's greedy pass over the shuffled words, one column (= rank) at a time for all rows:
        # take a word if it fits in what is left of the budget, otherwise skip it.
        taken = np.zeros((n_rows, width), dtype=bool)
        count = np.zeros(n_rows, dtype=np.int64)
        for r in range(int(n_words.max(initial=0))):
            w = order[:, r]
            size = sizes[rows, w]
            ok = (r < n_words) & (count + size <= k)
            taken[rows[ok], w[ok]] = True
            count += np.where(ok, size, 0)
            if np.all((count >= k) | (r + 1 >= n_words)):
                break
        chosen = cand & taken[rows[:, None], word]
        action_u = word_act[rows[:, None], word]

    masked = chosen & (action_u < 0.8)
    kept = chosen & (action_u >= 0.8) & (action_u < 0.9)
    randomised = chosen & (action_u >= 0.9)
    out = ids.copy()
    out[masked] = rules.mask_id
    pick = np.minimum((u_random[randomised] * len(rules.replacement_ids)).astype(np.int64),
                      len(rules.replacement_ids) - 1)
    out[randomised] = rules.replacement_ids[pick]
    action = np.zeros(ids.shape, dtype=np.int8)
    action[masked] = MASKED
    action[randomised] = RANDOM
    action[kept] = KEPT
    return MaskResult(out, chosen, action)


# ---- counter-based random numbers for dynamic masking ----------------------------------------

_M64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array (wrapping arithmetic)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def hashed_uniforms(seed: int, epoch: int, indices: np.ndarray, width: int,
                    streams: int = 3) -> list[np.ndarray]:
    """`streams` arrays (len(indices), width) of uniforms in [0, 1), each value a pure function of
    (seed, epoch, instance index, stream, column): the same instance in the same epoch always
    gets the same numbers, whatever batch or process it is loaded in."""
    with np.errstate(over="ignore"):
        base = _splitmix64(_splitmix64(np.array([int(seed) & _M64], dtype=np.uint64))
                           ^ np.array([int(epoch) & _M64], dtype=np.uint64))[0]
    with np.errstate(over="ignore"):
        row = _splitmix64(np.asarray(indices, dtype=np.uint64) * np.uint64(0xD6E8FEB86659FD93)
                          ^ base)
        cols = np.arange(width, dtype=np.uint64) * np.uint64(streams)
        out = []
        for s in range(streams):
            h = _splitmix64(row[:, None] ^ _splitmix64(cols + np.uint64(s + 1))[None, :])
            out.append((h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53)))
    return out
