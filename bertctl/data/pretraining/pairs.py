"""Google's sentence-pair packing (create_instances_from_document) and pair truncation, as
array code over all documents of a window at once; `build` calls them per chunk."""

from __future__ import annotations

import numpy as np

from bertctl.data.pretraining.masking import ranges


def pack_pairs(g: np.random.Generator, cum: np.ndarray, lo: np.ndarray, hi: np.ndarray, passes: int,
          max_num: int, short_seq_prob: float, no_nsp: bool, stats: dict) -> tuple:
    """`passes` passes of Google's create_instances_from_document over the documents of a window.

    Documents are sentence ranges [lo[d], hi[d]); sentence s is tokens [cum[s], cum[s + 1]).
    Returns token ranges A = [a0, a1), B = [b0, b1) and the NotNext flag of every instance.

    Each (pass, document) pair is an independent lane running Google's loop; all lanes advance
    in lockstep, one instance per live lane per step, so the Python loop runs once per step
    (about the number of instances in the longest document) instead of once per instance.
    Google's decisions, per document: the target length (drawn once per document and pass);
    per instance: the chunk (sentences until the target is reached or the document ends), the
    split point, IsNext (50%, NotNext when the chunk is one sentence), for NotNext a uniformly
    chosen other document of the window (Google retries 10 times to avoid the current one; we
    draw among the others directly) and a random start sentence there, B then running until it
    fills the rest of the target; the chunk's unused sentences start the next instance.
    """
    n_docs = len(lo)
    lane_doc = np.tile(np.arange(n_docs), passes)
    n_lanes = len(lane_doc)
    u = g.random((2, n_lanes))
    short = u[0] < short_seq_prob
    target = np.where(short, 2 + (u[1] * (max_num - 1)).astype(np.int64), max_num)
    stats["short_targets"] += int(short.sum())
    cs = lo[lane_doc].copy()
    live = np.arange(n_lanes)
    out: list[tuple[np.ndarray, ...]] = []
    while len(live):
        d, c, t = lane_doc[live], cs[live], target[live]
        doc_end = hi[d]
        start_tok = cum[c]
        # The chunk: sentences c..end-1, the first whose running length reaches the target (or
        # the document's last). cum strictly increases, so a global search lands after c.
        end = np.minimum(np.searchsorted(cum, start_tok + t, side="left"), doc_end)
        n_seg = end - c
        u = g.random((4, len(live)))
        a_end = c + np.where(n_seg >= 2, 1 + (u[0] * (n_seg - 1)).astype(np.int64), 1)
        a0, a1 = start_tok, cum[a_end]
        stats["single_sentence_chunks"] += int((n_seg == 1).sum())
        if no_nsp:
            rnd = np.zeros(len(live), dtype=bool)
        else:
            rnd = (n_seg == 1) | (u[1] < 0.5)
        b0, b1 = cum[a_end].copy(), cum[end].copy()
        if rnd.any():
            ri = np.nonzero(rnd)[0]
            if n_docs > 1:
                other = (u[2, ri] * (n_docs - 1)).astype(np.int64)
                other += other >= d[ri]
            else:
                other = d[ri]
                stats["random_next_same_document"] += len(ri)
            rs = lo[other] + (u[3, ri] * (hi[other] - lo[other])).astype(np.int64)
            target_b = t[ri] - (a1[ri] - a0[ri])
            re_ = np.clip(np.searchsorted(cum, cum[rs] + target_b, side="left"), rs + 1,
                          hi[other])
            b0[ri], b1[ri] = cum[rs], cum[re_]
        out.append((a0, a1, b0, b1, rnd))
        cs[live] = np.where(rnd, a_end, end)  # NotNext: the unused sentences are put back
        live = live[cs[live] < hi[lane_doc[live]]]
    a0, a1, b0, b1, rnd = (np.concatenate(x) for x in zip(*out))
    return a0, a1, b0, b1, rnd.astype(np.uint8)


def truncation(la: np.ndarray, lb: np.ndarray,
                budget: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens removed from A and from B by Google's loop "while too long, shorten the longer
    (B on a tie)": first the longer comes down to the shorter's length, then they alternate,
    B first."""
    excess = np.maximum(la + lb - budget, 0)
    da = np.where(la > lb, np.minimum(excess, la - lb), 0)
    db = np.where(lb > la, np.minimum(excess, lb - la), 0)
    rest = excess - da - db
    return da + rest // 2, db + (rest + 1) // 2


def pack_full(g: np.random.Generator, cum: np.ndarray, lo: np.ndarray, hi: np.ndarray,
              passes: int, max_num: int, whole_sentences: bool = True,
              short_seq_prob: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Continuous text packed to max_num tokens across document boundaries; returns token
    ranges [a0, a1).

    whole_sentences (RoBERTa's FULL-SENTENCES): as many whole sentences, in corpus order, as fit;
    a sentence longer than max_num is cut into max_num-token pieces (nothing is truncated away).
    Otherwise (run_mlm.py's concatenate-and-chunk) the text is cut every max_num tokens wherever
    that falls, so every instance but a run's last is full.

    Documents whose token ranges do not touch (the other split's documents lie between them)
    are separate runs: an instance is one contiguous range of the token array. Pass 0 packs
    each run from its start; every later pass begins each run with a piece of random length,
    so instance boundaries differ between passes as Google's packings do.

    short_seq_prob: about that share of instances is shorter than max_num, as Google's
    short_seq_prob does for its pairs (fine-tuning inputs are short; a model that only ever saw
    full sequences never saw [SEP] anywhere but the end of the positions). Whole sentences: that
    share of instances gets a target length drawn from [2, max_num]. Concatenated: that share of
    instances comes from full pieces cut in two at a random token, so no text is dropped.
    At 0 nothing is drawn: the instances are those of a build without it.
    """
    sents = ranges(lo, hi - lo)
    s0, s1 = cum[sents], cum[sents + 1]
    if not whole_sentences:   # one span per run of touching sentences
        run = np.concatenate([[True], s0[1:] != s1[:-1]])
        s0, s1 = s0[run], np.concatenate([s1[:-1][run[1:]], s1[-1:]])
    out0, out1 = [], []
    for p in range(passes):
        # The first piece of each span (of a later pass) is of random length, then max_num.
        first = (1 + (g.random(len(s0)) * max_num).astype(np.int64) if p > 0 and not
                 whole_sentences else np.full(len(s0), max_num))
        first = np.minimum(first, s1 - s0)
        n_pieces = 1 + -(-(s1 - s0 - first) // max_num)
        k = np.arange(int(n_pieces.sum())) - np.repeat(np.cumsum(n_pieces) - n_pieces, n_pieces)
        p0 = np.repeat(s0, n_pieces) + np.where(k > 0, np.repeat(first, n_pieces) +
                                                (k - 1) * max_num, 0)
        p1 = np.minimum(np.where(k > 0, p0 + max_num, p0 + np.repeat(first, n_pieces)),
                        np.repeat(s1, n_pieces))
        if not whole_sentences:
            if short_seq_prob > 0:
                p0, p1 = _split_some(g, p0, p1, short_seq_prob)
            out0.append(p0)
            out1.append(p1)
            continue
        # Runs of touching pieces; within a run, each instance takes the pieces that end
        # within reach (one lockstep step per instance of the longest run).
        starts = np.nonzero(np.concatenate([[True], p0[1:] != p1[:-1]]))[0]
        ends = np.concatenate([starts[1:], [len(p0)]])
        cut = (1 + (g.random(len(starts)) * max_num).astype(np.int64) if p > 0
               else np.full(len(starts), max_num))
        pos, live = starts.copy(), np.arange(len(starts))
        while len(live):
            a = pos[live]
            e = np.clip(np.searchsorted(p1, p0[a] + cut[live], side="right"), a + 1,
                        ends[live])
            out0.append(p0[a])
            out1.append(p1[e - 1])
            pos[live] = e
            cut[live] = max_num
            if short_seq_prob > 0:
                short = g.random(len(live)) < short_seq_prob
                cut[live[short]] = g.integers(2, max_num + 1, int(short.sum()))
            live = live[pos[live] < ends[live]]
    if not out0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out0), np.concatenate(out1)


def _split_some(g: np.random.Generator, p0: np.ndarray, p1: np.ndarray, share: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """Cut a random q of the pieces in two at a uniform inner token, q = share / (2 - share),
    so that `share` of the pieces that result are the halves of a cut one."""
    q = share / (2 - share)
    cut = (g.random(len(p0)) < q) & (p1 - p0 >= 4)
    at = p0[cut] + 2 + (g.random(int(cut.sum())) * (p1[cut] - p0[cut] - 3)).astype(np.int64)
    # Each cut piece [a, b) becomes [a, at) and [at, b), kept next to each other.
    n = 1 + cut.astype(np.int64)
    first = np.cumsum(n) - n
    q0, q1 = np.repeat(p0, n), np.repeat(p1, n)
    q1[first[cut]] = at
    q0[first[cut] + 1] = at
    return q0, q1
