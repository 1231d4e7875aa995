"""Questions and passages into model windows: `[CLS] question [SEP] passage window [SEP]`.

The question is cut to `max_query_length` tokens; the passage is split into windows of at most
`max_seq_length - question - 3` tokens, consecutive windows overlapping by `doc_stride` tokens.
These are exactly the windows of a fast tokenizer's overflow (`stride=doc_stride`,
`truncation="only_second"`, `return_overflowing_tokens`), as in the transformers QA example; note
that Google's run_squad.py reads `doc_stride` as the step between window starts instead.

The tokenizer encodes each distinct passage and each question once (in Rust); windows are then
cut from those token arrays with numpy, which also gives every window token its passage token
index, needed to find the window where a token has the most context (Google's run_squad:
min(left, right context) + 0.01 * window length, the first window on ties).

Training targets come from the gold answer's character offsets through the tokenizer's offsets,
never by re-tokenizing the answer: the first token ending after the answer's first character to
the last token starting before its end. A window that does not contain the whole answer, and
every window of an unanswerable question, targets [CLS] (position 0).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import torch

from bertctl.data.collate import pad_to_tensor
from bertctl.data.tokenizer.specials import CLS, PAD, SEP, pair_separators, special_id, special_tokens
from bertctl.errors import BertctlError
from bertctl.tasks.span.reader import SpanExamples
from tokenizers import Tokenizer

_SHOWN_IDS = 5          # unaligned question ids kept for the report


@dataclass
class WindowStats:
    questions: int
    windows: int
    max_windows_per_question: int
    truncated_questions: int             # questions longer than max_query_length
    unaligned: int = 0                   # training: answer_start does not point at the text
    unaligned_ids: list[str] = field(default_factory=list)   # the first few of them
    partial_token_answers: int = 0       # training: answer starts/ends inside a token
    answer_outside_windows: int = 0      # training: answerable-question windows targeting [CLS]

    @property
    def windows_per_question(self) -> float:
        return self.windows / max(self.questions, 1)

    def as_dict(self) -> dict:
        return {"questions": self.questions, "windows": self.windows,
                "windows_per_question": round(self.windows_per_question, 4),
                "max_windows_per_question": self.max_windows_per_question,
                "truncated_questions": self.truncated_questions, "unaligned": self.unaligned,
                "unaligned_ids": list(self.unaligned_ids),
                "partial_token_answers": self.partial_token_answers,
                "answer_outside_windows": self.answer_outside_windows}


@dataclass
class SpanWindows:
    """All windows, tokens stored flat: window w is `input_ids[offsets[w]:offsets[w+1]]`.

    Per token (flat): `input_ids` int32, `token_type_ids` int8, `char_starts`/`char_ends` int32
    (the passage token's character span in its example's context, -1 for question and special
    tokens), `max_context` bool (the token's best window is this one; False off the passage).
    Per window: `example_index` (windows of one example are consecutive, examples in order),
    `lengths`, `passage_offset` (position of the first passage token in the window, i.e.
    question length + 1 + the separators), `start_positions`/`end_positions` (training only: the answer's token
    positions in the window, 0 = [CLS]) and `trainable` (False for windows of unaligned answers).
    """

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    offsets: np.ndarray
    char_starts: np.ndarray
    char_ends: np.ndarray
    max_context: np.ndarray
    example_index: np.ndarray
    lengths: np.ndarray
    passage_offset: np.ndarray
    start_positions: np.ndarray | None
    end_positions: np.ndarray | None
    trainable: np.ndarray
    pad_id: int
    stats: WindowStats

    def __len__(self) -> int:
        return len(self.lengths)

    def train_indices(self) -> np.ndarray:
        return np.flatnonzero(self.trainable)

    def batch(self, indices) -> dict[str, torch.Tensor]:
        """Model inputs for windows `indices`, padded to the longest: `input_ids`,
        `token_type_ids`, `attention_mask` (B, T) long, plus `start_positions`/`end_positions`
        (B,) long for training windows."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        starts, ends = self.offsets[idx], self.offsets[idx + 1]
        input_ids = pad_to_tensor([self.input_ids[s:e] for s, e in zip(starts, ends)], self.pad_id)
        types = pad_to_tensor([self.token_type_ids[s:e] for s, e in zip(starts, ends)], 0)
        width = input_ids.shape[1]
        mask = torch.from_numpy((np.arange(width)[None, :] < (ends - starts)[:, None])
                                .astype(np.int64))
        out = {"input_ids": input_ids, "token_type_ids": types, "attention_mask": mask}
        if self.start_positions is not None:
            out["start_positions"] = torch.from_numpy(self.start_positions[idx])
            out["end_positions"] = torch.from_numpy(self.end_positions[idx])
        return out


def _flat(encodings, attr: str, dtype, limit: int | None = None):
    """One flat array of an attribute of every encoding (cut to `limit` each) and its offsets."""
    lens = np.fromiter((len(getattr(e, attr)) for e in encodings), np.int64, len(encodings))
    if limit is not None:
        lens = np.minimum(lens, limit)
    seqs = (getattr(e, attr)[:n] for e, n in zip(encodings, lens.tolist()))
    values = np.fromiter(itertools.chain.from_iterable(seqs), dtype, int(lens.sum()))
    offs = np.zeros(len(encodings) + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    return values, offs


def _ragged_positions(lengths: np.ndarray):
    """For segments of `lengths`: each element's segment index and position within it."""
    seg = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return seg, np.arange(int(lengths.sum())) - starts[seg]


def encode_windows(examples: SpanExamples, tokenizer, max_seq_length: int = 384,
                   doc_stride: int = 128, max_query_length: int = 64,
                   training: bool = False) -> SpanWindows:
    """Windows of every example, with training targets when `training`.

    `tokenizer` is a `tokenizers.Tokenizer` (bertctl's tokenizer artifact); its [CLS], [SEP] and
    [PAD] ids are used. Unaligned training answers (the text at `answer_start` is not the answer)
    are counted in `stats` and their windows left out of training; all of them failing is an
    error, as is a passage that yields no tokens.
    """
    # [CLS] q [SEP] p [SEP]; RoBERTa's spelling separates the two with two (<s> q </s></s> p
    # </s>), as its tokenizers' pair template does.
    gap = pair_separators(tokenizer)
    specials = 2 + gap
    room_min = max_seq_length - max_query_length - specials
    if max_query_length < 1 or doc_stride < 0 or room_min <= doc_stride:
        names = special_tokens(tokenizer)
        marks = "/".join([names[CLS]] + [names[SEP]] * (1 + gap))
        raise BertctlError(
            f"max_seq_length {max_seq_length} leaves {room_min} passage tokens after a "
            f"{max_query_length}-token question and {specials} special tokens ({marks}); it "
            f"must exceed doc_stride {doc_stride} (lower --max-query-length or --doc-stride)")
    tok = Tokenizer.from_str(tokenizer.to_str())   # a copy: the caller's settings stay
    tok.no_truncation()
    tok.no_padding()
    cls_id, sep_id, pad_id = (special_id(tok, t) for t in (CLS, SEP, PAD))
    if cls_id is None or sep_id is None:
        raise BertctlError("the tokenizer has no [CLS] or [SEP] token")

    # Each distinct passage once: the questions of one paragraph share it.
    passage_of: dict[str, int] = {}
    ctx_index = np.fromiter((passage_of.setdefault(c, len(passage_of)) for c in examples.contexts),
                            np.int64, len(examples))
    passages = list(passage_of)
    p_enc = tok.encode_batch(passages, add_special_tokens=False)
    q_enc = tok.encode_batch(examples.questions, add_special_tokens=False)
    p_ids, p_off = _flat(p_enc, "ids", np.int32)
    p_chars = np.fromiter(itertools.chain.from_iterable(
        itertools.chain.from_iterable(e.offsets for e in p_enc)), np.int64, 2 * len(p_ids)
    ).reshape(-1, 2)
    q_ids, q_off = _flat(q_enc, "ids", np.int32, limit=max_query_length)
    q_full = np.fromiter((len(e.ids) for e in q_enc), np.int64, len(q_enc))

    p_len = np.diff(p_off)[ctx_index]          # per example
    empty = np.flatnonzero(p_len == 0)
    if len(empty):
        raise BertctlError(f"{examples.path}: {examples.where[empty[0]]}: the passage has no "
                           "tokens")
    q_len = np.diff(q_off)
    room = max_seq_length - q_len - specials
    step = room - doc_stride
    n_win = 1 + np.maximum(0, -(-(p_len - room) // step))   # ceil division

    # Windows: example, passage token range [p_start, p_end).
    ex, w_in_ex = _ragged_positions(n_win)
    p_start = w_in_ex * step[ex]
    p_end = np.minimum(p_start + room[ex], p_len[ex])
    w_len = q_len[ex] + (p_end - p_start) + specials
    offsets = np.zeros(len(ex) + 1, np.int64)
    np.cumsum(w_len, out=offsets[1:])

    # Tokens: which window, position in it, and which part ([CLS] q [SEP] p [SEP]).
    win, pos = _ragged_positions(w_len)
    ql = q_len[ex][win]
    in_q = (pos >= 1) & (pos <= ql)
    passage_pos = pos - ql - 1 - gap
    in_p = (passage_pos >= 0) & (passage_pos < (p_end - p_start)[win])
    input_ids = np.full(len(pos), sep_id, np.int32)
    input_ids[pos == 0] = cls_id
    input_ids[in_q] = q_ids[(q_off[ex] - 1)[win][in_q] + pos[in_q]]
    # Global index of each passage token into p_ids / p_chars.
    g = (p_off[ctx_index[ex]] + p_start)[win][in_p] + passage_pos[in_p]
    input_ids[in_p] = p_ids[g]
    token_type_ids = (passage_pos >= 0).astype(np.int8)     # passage and the final [SEP]
    char_starts = np.full(len(pos), -1, np.int32)
    char_ends = np.full(len(pos), -1, np.int32)
    char_starts[in_p], char_ends[in_p] = p_chars[g, 0], p_chars[g, 1]

    # Max context: the score as an exact integer (x100), and the first window wins a tie.
    p_in_win = passage_pos[in_p]
    span = (p_end - p_start)[win][in_p]
    score = np.minimum(p_in_win, span - 1 - p_in_win) * 100 + span
    # A passage token's key: (question, passage token index) numbered flat.
    first_key = np.zeros(len(examples), np.int64)
    np.cumsum(p_len[:-1], out=first_key[1:])
    key = (first_key[ex] + p_start)[win][in_p] + p_in_win
    rank = score * (len(ex) + 1) - win[in_p]
    best = np.full(int(p_len.sum()), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(best, key, rank)
    max_context = np.zeros(len(pos), bool)
    max_context[in_p] = rank == best[key]

    stats = WindowStats(questions=len(examples), windows=len(ex),
                        max_windows_per_question=int(n_win.max()),
                        truncated_questions=int((q_full > max_query_length).sum()))
    windows = SpanWindows(
        input_ids=input_ids, token_type_ids=token_type_ids, offsets=offsets,
        char_starts=char_starts, char_ends=char_ends, max_context=max_context,
        example_index=ex, lengths=w_len, passage_offset=q_len[ex] + 1 + gap, start_positions=None,
        end_positions=None, trainable=np.ones(len(ex), bool),
        pad_id=0 if pad_id is None else pad_id, stats=stats)
    if training:
        _add_targets(windows, examples, p_chars, p_off[ctx_index], p_len, p_start, p_end)
    return windows


def _add_targets(w: SpanWindows, examples: SpanExamples, p_chars: np.ndarray,
                 first_tok: np.ndarray, p_len: np.ndarray, p_start: np.ndarray,
                 p_end: np.ndarray) -> None:
    """Start/end positions of the first gold answer in each window (0 when not inside)."""
    n = len(examples)
    has = ~examples.is_impossible
    char_s = np.array([s[0] if s else 0 for s in examples.answer_starts], np.int64)
    text_len = np.array([len(t[0]) if t else 0 for t in examples.answer_texts], np.int64)
    char_e = char_s + text_len
    aligned = has & np.array([bool(t) and s >= 0 and c[s:s + len(t[0])] == t[0] for c, s, t in
                              zip(examples.contexts, char_s.tolist(), examples.answer_texts)])
    # Token span per example: first token ending after char_s .. last token starting before char_e.
    tok_s = np.zeros(n, np.int64)
    tok_e = np.full(n, -1, np.int64)
    for i in np.flatnonzero(aligned):    # one searchsorted per question, not per token
        chars = p_chars[first_tok[i]:first_tok[i] + p_len[i]]
        tok_s[i] = np.searchsorted(chars[:, 1], char_s[i], side="right")
        tok_e[i] = np.searchsorted(chars[:, 0], char_e[i], side="left") - 1
        if tok_s[i] <= tok_e[i]:
            partial = chars[tok_s[i], 0] != char_s[i] or chars[tok_e[i], 1] != char_e[i]
            w.stats.partial_token_answers += int(partial)
    aligned &= tok_s <= tok_e            # an answer of white space only covers no token

    ex = w.example_index
    inside = aligned[ex] & (tok_s[ex] >= p_start) & (tok_e[ex] < p_end)
    w.start_positions = np.where(inside, tok_s[ex] - p_start + w.passage_offset, 0)
    w.end_positions = np.where(inside, tok_e[ex] - p_start + w.passage_offset, 0)
    unaligned = np.flatnonzero(has & ~aligned)
    w.trainable = ~(has & ~aligned)[ex]
    w.stats.unaligned = len(unaligned)
    w.stats.unaligned_ids = [examples.ids[i] for i in unaligned[:_SHOWN_IDS]]
    w.stats.answer_outside_windows = int((aligned[ex] & ~inside).sum())
    if has.any() and not aligned.any():
        raise BertctlError(f"{examples.path}: none of the {int(has.sum())} answers matches the "
                           "passage text at its answer_start (e.g. question "
                           f"{examples.ids[unaligned[0]]}); are the offsets in characters?")
