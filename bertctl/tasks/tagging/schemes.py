"""Tag schemes (IOB1, IOB2, BIOES) and conlleval's chunk rules, on whole files at once.

A tag is `O` or `P-TYPE` with the prefix P in B, I (and E, S for BIOES). The schemes differ in
how a chunk (an entity) is marked:

- IOB2: every chunk opens with B-, continues with I-.
- IOB1 (the original CoNLL-2003 files): chunks are I-; B- only opens a chunk that directly
  follows one of the same type.
- BIOES: B- opens, I- continues, E- closes a chunk of two words or more; S- is a one-word chunk.

Chunks are read with conlleval's rules whatever the scheme: a chunk starts at B-, at an I- after
O or after another type, at a type change, and ends before O, B-, a type change or the sentence
end. conlleval knows no S- (and treats E- as the IOE schemes' chunk end); the BIOES additions
here (S- starts and ends a chunk, B- after E- starts one) change nothing for IOB1/IOB2 tags and
chunk a BIOES sequence as conlleval chunks its IOB2 translation.

Tags are numpy string arrays over a whole file with sentence `offsets` (as `TaggedExamples`
holds them); the rules run vectorised over all words, with each sentence start seen after an O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from bertctl.errors import BertctlError

SCHEMES = ("iob1", "iob2", "bioes")
O, B, I, E, S = range(5)
_PREFIX = {"B": B, "I": I, "E": E, "S": S}
_PREFIX_CHARS = "OBIES"
_TAG = re.compile(r"^([BIES])-(\S+)$")
_SCHEME_PREFIXES = {"iob1": "BI", "iob2": "BI", "bioes": "BIES"}
_FORMS = {"iob1": "O, B-TYPE, I-TYPE", "iob2": "O, B-TYPE, I-TYPE",
          "bioes": "O, B-TYPE, I-TYPE, E-TYPE, S-TYPE"}


@dataclass(frozen=True)
class ParsedTags:
    """Tags split into a prefix code (O, B, I, E, S) and a type index (-1 for O) per word."""

    prefix: np.ndarray      # int8
    type: np.ndarray        # int32, index into type_names, -1 for O
    type_names: tuple[str, ...]


@dataclass(frozen=True)
class Chunks:
    """Chunks (entities) as word ranges [start, end) with a type index into `type_names`."""

    start: np.ndarray       # int64
    end: np.ndarray         # int64
    type: np.ndarray        # int32
    type_names: tuple[str, ...]


def invalid_tags(tags, scheme: str | None = None) -> np.ndarray:
    """Positions of tags that are not tags of `scheme` (of any scheme when None)."""
    tags = np.asarray(tags, dtype=str)
    names, inverse = np.unique(tags, return_inverse=True)
    allowed = _SCHEME_PREFIXES[scheme] if scheme else "BIES"
    ok = np.array([n == "O" or ((m := _TAG.match(n)) is not None and m.group(1) in allowed)
                   for n in names], dtype=bool)
    return np.flatnonzero(~ok[inverse.reshape(-1)])


def parse(tags) -> ParsedTags:
    """Prefix and type per word. Raises ValueError on a tag of no scheme (check with
    `invalid_tags` first where the position matters)."""
    tags = np.asarray(tags, dtype=str)
    names, inverse = np.unique(tags, return_inverse=True)
    prefixes = np.zeros(len(names), dtype=np.int8)
    type_of = np.full(len(names), -1, dtype=np.int32)
    type_index: dict[str, int] = {}
    for j, name in enumerate(names):
        if name == "O":
            continue
        m = _TAG.match(name)
        if m is None:
            raise ValueError(f"not a tag: {name!r}")
        prefixes[j] = _PREFIX[m.group(1)]
        type_of[j] = type_index.setdefault(m.group(2), len(type_index))
    inverse = inverse.reshape(-1)
    return ParsedTags(prefixes[inverse], type_of[inverse], tuple(type_index))


def _previous(values: np.ndarray, offsets: np.ndarray, outside) -> np.ndarray:
    """Each word's predecessor in its sentence; `outside` before a sentence's first word."""
    prev = np.empty_like(values)
    if len(values):
        prev[1:] = values[:-1]
        prev[offsets[:-1][offsets[:-1] < len(values)]] = outside
    return prev


def boundaries(tags: ParsedTags, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """conlleval's startOfChunk and endOfChunk for every word and its predecessor: `starts[i]`
    says a chunk starts at word i, `ends[i]` that the chunk open at word i-1 ends before word i."""
    p, t = tags.prefix, tags.type
    pp, pt = _previous(p, offsets, O), _previous(t, offsets, -1)
    type_change = pt != t
    ends = (((pp == B) | (pp == I)) & ((p == B) | (p == O))
            | (pp == E) & ((p == E) | (p == I) | (p == O))
            | (pp != O) & type_change
            # BIOES: S- is a chunk of its own, and B- after E- opens a new one.
            | (pp == S) | (pp != O) & (p == S) | (pp == E) & (p == B))
    starts = (((pp == B) | (pp == I) | (pp == O)) & (p == B)
              | ((pp == O) | (pp == E)) & ((p == I) | (p == E))
              | (p != O) & type_change
              | (p == S) | (pp == E) & (p == B) | (pp == S) & (p != O))
    return starts, ends


def chunks(tags: ParsedTags, offsets: np.ndarray) -> Chunks:
    """The chunks conlleval reads: each runs from a start to the next chunk end or sentence end."""
    n = len(tags.prefix)
    starts, ends = boundaries(tags, offsets)
    start = np.flatnonzero(starts)
    stops = ends.copy()
    stops[offsets[:-1][offsets[:-1] < n]] = True     # nothing runs into the next sentence
    stop_at = np.append(np.flatnonzero(stops), n)
    end = stop_at[np.searchsorted(stop_at, start, side="right")]
    return Chunks(start.astype(np.int64), end.astype(np.int64), tags.type[start], tags.type_names)


def concat_ranges(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The concatenation of arange(start[k], end[k]) over k."""
    lengths = end - start
    total = int(lengths.sum())
    first = np.repeat(start - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return first + np.arange(total)


def encode(ch: Chunks, num_words: int, offsets: np.ndarray, scheme: str) -> np.ndarray:
    """The tags that mark exactly the chunks `ch` in `scheme` (a string array)."""
    prefix = np.zeros(num_words, dtype=np.int8)
    types = np.full(num_words, -1, dtype=np.int32)
    inside = concat_ranges(ch.start, ch.end)
    prefix[inside] = I
    types[inside] = np.repeat(ch.type, ch.end - ch.start)
    if scheme == "iob2":
        prefix[ch.start] = B
    elif scheme == "bioes":
        prefix[ch.start] = B
        prefix[ch.end - 1] = E
        prefix[ch.start[ch.end - ch.start == 1]] = S
    elif scheme == "iob1":
        # B- only where a chunk directly follows one of its type in the same sentence.
        follows = np.zeros(len(ch.start), dtype=bool)
        follows[1:] = (ch.end[:-1] == ch.start[1:]) & (ch.type[:-1] == ch.type[1:])
        follows &= ~np.isin(ch.start, offsets)
        prefix[ch.start[follows]] = B
    else:
        raise ValueError(f"unknown tag scheme {scheme!r}")
    return to_strings(ParsedTags(prefix, types, ch.type_names))


def to_strings(tags: ParsedTags) -> np.ndarray:
    """`O` / `P-TYPE` strings from prefix codes and types."""
    names = ["O"] + [f"{_PREFIX_CHARS[p]}-{t}" for t in tags.type_names for p in (B, I, E, S)]
    table = np.array(names, dtype=str)
    index = np.where(tags.prefix == O, 0, 1 + 4 * tags.type.astype(np.int64) + tags.prefix - B)
    return table[index]


def convert(tags, offsets: np.ndarray, scheme: str) -> np.ndarray:
    """Tags rewritten in `scheme`, chunk for chunk as conlleval reads them (ill-formed input,
    such as a predicted I- after O, is first chunked as conlleval would)."""
    parsed = parse(tags)
    return encode(chunks(parsed, offsets), len(parsed.prefix), offsets, scheme)


@dataclass(frozen=True)
class Detection:
    scheme: str
    conflicts: int    # chunks that break the detected scheme's rule (read as conlleval does)

    def describe(self) -> str:
        extra = (f" ({self.conflicts} chunk(s) do not follow it; they are read as conlleval "
                 "reads them)") if self.conflicts else ""
        return f"{self.scheme.upper()}{extra}"


def detect(tags, offsets: np.ndarray) -> Detection:
    """The scheme the tags are written in. E-/S- mean BIOES. Otherwise an I- opening a chunk
    means IOB1 and a B- opening a chunk that does not follow one of its type means IOB2; a file
    with both (the original eng.train has 2 such B- among 23,499 chunks) takes the majority.
    A file with neither (no chunks, or only B- between same-type chunks) is IOB2."""
    parsed = parse(tags)
    p = parsed.prefix
    if np.any((p == E) | (p == S)):
        return Detection("bioes", 0)
    starts, _ = boundaries(parsed, offsets)
    pp = _previous(p, offsets, O)
    pt = _previous(parsed.type, offsets, -1)
    i_starts = int(np.sum(starts & (p == I)))
    b_alone = int(np.sum((p == B) & ~((pp != O) & (pt == parsed.type))))
    if i_starts > b_alone:
        return Detection("iob1", b_alone)
    return Detection("iob2", i_starts)


def check_scheme(examples, scheme: str | None = None) -> Detection:
    """Validate the tags of `examples` (a `TaggedExamples`) and return their scheme: `scheme` when
    given, else the detected one. A tag of no scheme, or outside the given one, is an error
    naming its file:line."""
    if scheme is not None and scheme not in SCHEMES:
        raise BertctlError(f"unknown tag scheme '{scheme}' (known: {', '.join(SCHEMES)})")
    bad = invalid_tags(examples.tags, scheme)
    if bad.size:
        i = int(bad[0])
        form = _FORMS[scheme] if scheme else "O, B-TYPE, I-TYPE (and E-TYPE, S-TYPE in BIOES)"
        what = f"an {scheme.upper()} tag" if scheme else "a tag"
        raise BertctlError(f"{examples.where(i)}: {str(examples.tags[i])!r} is not {what} ({form})")
    if scheme is not None:
        return Detection(scheme, 0)
    return detect(examples.tags, examples.offsets)


def entity_types(tags) -> tuple[str, ...]:
    return tuple(sorted(parse(tags).type_names))


def label_list(types, scheme: str) -> tuple[str, ...]:
    """The model's labels: O, then each type's tags in `scheme` (sorted by type)."""
    prefixes = "BIES" if scheme == "bioes" else "BI"
    return ("O",) + tuple(f"{p}-{t}" for t in sorted(types) for p in prefixes)


def check_known_types(examples, types) -> None:
    """Every entity type of `examples` must be one of the training `types`: a model cannot
    predict a type it never saw, so the dev file's figures would silently count it as missed."""
    parsed = parse(examples.tags)
    unknown = [j for j, name in enumerate(parsed.type_names) if name not in set(types)]
    if unknown:
        i = int(np.flatnonzero(np.isin(parsed.type, unknown))[0])
        raise BertctlError(f"{examples.where(i)}: tag {str(examples.tags[i])!r} never seen in "
                           f"training (training entity types: {', '.join(sorted(types))})")


def label_ids(tags, labels: tuple[str, ...]) -> np.ndarray:
    """Index of each tag in `labels` (int64); ValueError for a tag outside it."""
    tags = np.asarray(tags, dtype=str)
    names, inverse = np.unique(tags, return_inverse=True)
    index = {name: i for i, name in enumerate(labels)}
    missing = [n for n in names if n not in index]
    if missing:
        raise ValueError(f"tags outside the label list: {missing}")
    return np.array([index[n] for n in names], dtype=np.int64)[inverse.reshape(-1)]
