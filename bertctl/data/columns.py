"""CoNLL-style column files, streamed: one word per line, its fields separated by white space
(CoNLL-2003: token POS chunk NER), a blank line between sentences, `-DOCSTART-` lines between
documents. Every word line must have as many fields as the file's first word line. Read by
the tagging family (tasks/tagging/reader.py) and by `embed --token-column` alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from bertctl.errors import BertctlError

DOCSTART = "-DOCSTART-"
Column = int | str
# Fields are separated by ASCII white space only: a word may be an odd Unicode space (U+00A0),
# which str.split() would take for a separator and silently drop.
_ASCII_SPACE = " \t\r\n\v\f"
_FIELD_SEP = re.compile(r"[ \t\r\n\v\f]+")
_SIMPLE = re.compile(r"^[\x21-\x7e \t\r\n]*$")   # printable ASCII: str.split() is the same, faster


def _field_index(column: Column, names: tuple[str, ...] | None, path: Path, what: str) -> int:
    if isinstance(column, int) and not isinstance(column, bool):
        return column
    if isinstance(column, str) and column.lstrip("-").isdigit():
        return int(column)
    if names is None:
        raise BertctlError(f"{path}: a column file has no header, so the {what} column "
                           f"'{column}' needs column names (or give its index)")
    if column not in names:
        raise BertctlError(f"{path}: no {what} column '{column}' (columns: {', '.join(names)})")
    return names.index(column)


def column_sentences(path: Path, token_column: Column, tag_column: Column | None = None,
                     column_names: tuple[str, ...] | None = None
                     ) -> Iterator[tuple[int, int, list[str], list[str]]]:
    """A column file's sentences, streamed: (line of the first word, document number, words,
    tags). Without `tag_column` (embedding a token file) the tags are empty lists."""
    tok_i = _field_index(token_column, column_names, path, "token")
    tag_i = None if tag_column is None else _field_index(tag_column, column_names, path, "tag")
    words: list[str] = []
    tags: list[str] = []
    width = None
    doc = 0
    start_line = 0    # line of the open sentence's first word; 0 while none is open
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:     # line by line, so that an undecodable byte is reported on its own line
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise BertctlError(f"{path}:{lineno}: not UTF-8 text ({exc.reason})") from None
            fields = line.strip(_ASCII_SPACE).split() if _SIMPLE.match(line) else \
                _FIELD_SEP.split(line.strip(_ASCII_SPACE))
            if fields == [""] or not fields or fields[0] == DOCSTART:
                if start_line:
                    yield start_line, doc, words, tags
                    words, tags, start_line = [], [], 0
                doc += bool(fields) and fields[0] == DOCSTART
                continue
            if width is None:
                width = len(fields)
                if column_names is not None and len(column_names) != width:
                    raise BertctlError(f"{path}:{lineno}: {width} columns but "
                                       f"{len(column_names)} column names ({', '.join(column_names)})")
                for i, what in ((tok_i, "token"), (tag_i, "tag")):
                    if i is not None and not -width <= i < width:
                        raise BertctlError(f"{path}:{lineno}: no {what} column {i} "
                                           f"(the line has {width} columns)")
                if tag_i is not None and tok_i % width == tag_i % width:
                    raise BertctlError(f"{path}: the token and tag columns are the same column")
            elif len(fields) != width:
                raise BertctlError(f"{path}:{lineno}: {len(fields)} columns, expected {width} "
                                   "(as on the file's first word line)")
            if not start_line:
                start_line = lineno
            words.append(fields[tok_i])
            if tag_i is not None:
                tags.append(fields[tag_i])
    if start_line:
        yield start_line, doc, words, tags
