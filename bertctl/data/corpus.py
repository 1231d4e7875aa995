"""Reading pretraining corpora, streamed: memory stays flat whatever the corpus size.

The unit is Google's format: one sentence per line, a blank line between documents. Plain text
files (optionally .gz) are read as such. Tabular files (JSON lines, CSV, parquet, Arrow, and the
directories `datasets`' save_to_disk writes, read as their Arrow files) hold one document per
row in `text_column`; a row's text is split into sentences at its line breaks.

Text is decoded as UTF-8 with universal newlines (CRLF and CR become LF) and a leading BOM dropped.
Invalid bytes are replaced with U+FFFD and counted, never fatal: one bad byte in a 100 GB crawl
must not cost a day's run.
"""

from __future__ import annotations

import codecs
import glob
import gzip
import io
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bertctl.data.tables import (FORMATS, base_suffix, format_of, is_saved_dataset,
                                  no_such_path, saved_dataset_files, stream_column)
from bertctl.errors import BertctlError

# What a directory contributes: files with these endings (optionally .gz), so that a README or
# a script beside the data is not read as corpus. Files named explicitly are read whatever
# their ending.
TEXT_SUFFIXES = {".txt", ".text", ".raw", ".tokens"}
BINARY_SHARE = 0.01


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
@dataclass
class CorpusStats:
    files: int = 0
    lines: int = 0
    documents: int = 0
    sentences: int = 0
    characters: int = 0
    invalid_bytes_replaced: int = 0
    long_line_pieces: int = 0     # cuts made in lines longer than MAX_LINE_CHARS
    paths: list[str] = field(default_factory=list)
    # Files whose bytes were more than BINARY_SHARE not UTF-8 (an executable, an image): read,
    # but most likely not text; the stages name them.
    not_text: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("paths")
        return d

    def warnings(self) -> list[str]:
        return [f"warning: {p}: more than {BINARY_SHARE:.0%} of its bytes are not UTF-8 text "
                f"(replaced): is it a corpus file?" for p in self.not_text]


# A codec error handler cannot carry state of its own, so it counts into this module-level tally;
# readers take the difference before and after a file.
_invalid_bytes = 0


def _count_and_replace(err: UnicodeDecodeError):
    global _invalid_bytes
    _invalid_bytes += err.end - err.start
    return "\ufffd", err.end


codecs.register_error("bertctl-count", _count_and_replace)


def expand_sources(sources: Iterable[str | os.PathLike]) -> list[Path]:
    """Files, glob patterns and directories (searched recursively) as a sorted, de-duplicated list.

    Sorting makes the corpus order, and so every artifact id and output, independent of the order
    the file system lists entries in.
    """
    found: list[Path] = []
    for source in sources:
        text = str(source)
        path = Path(text)
        if is_saved_dataset(path):
            found.extend(saved_dataset_files(path))
        elif path.is_dir():
            known = TEXT_SUFFIXES | set(FORMATS)
            files = sorted(p for p in path.rglob("*") if p.is_file()
                           and not p.name.startswith(".") and base_suffix(p) in known)
            if not files:
                raise BertctlError(f"{text}: directory holds no corpus files "
                                   f"({', '.join(sorted(known))}, optionally .gz)")
            found.extend(files)
        elif path.is_file():
            found.append(path)
        elif glob.has_magic(text):
            files = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
            if not files:
                raise BertctlError(f"{text}: pattern matches no files")
            found.extend(files)
        elif path.exists():
            raise BertctlError(f"{text}: not a regular file")
        else:
            raise no_such_path(path)
    if not found:
        raise BertctlError("no corpus files given")
    # Absolute, links kept: a hub cache's snapshot links each file to a blob named by its hash,
    # and the file's own name (its suffix, the commit in its path) is what says what it is.
    return list(dict.fromkeys(Path(os.path.abspath(p)) for p in found))


def _open_text(path: Path) -> io.TextIOBase:
    raw = gzip.open(path, "rb") if path.suffix.lower() == ".gz" else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="bertctl-count", newline=None)


# The longest piece of a line read at once. A longer line (a file without newlines, a whole book
# on one line) is read in pieces cut at the last white space before this length, each piece a
# sentence of the same document, so memory never grows with line length.
MAX_LINE_CHARS = 100_000


def _text_file_lines(path: Path, stats: "CorpusStats | None" = None,
                     limit: int = MAX_LINE_CHARS) -> Iterator[str]:
    try:
        with _open_text(path) as fh:
            carry = ""
            while True:
                piece = fh.readline(limit)
                if not piece:
                    break
                text = carry + piece
                if piece.endswith("\n") or len(piece) < limit:   # the line ends here (or the file)
                    carry = ""
                    yield text
                    continue
                cut = max(text.rfind(" "), text.rfind("\t"))
                cut = cut + 1 if cut > 0 else len(text)          # one endless word: cut anywhere
                if stats is not None:
                    stats.long_line_pieces += 1
                carry = text[cut:]
                yield text[:cut]
            if carry:
                yield carry
    except (OSError, EOFError) as exc:  # unreadable, or a truncated/corrupt .gz
        raise BertctlError(f"{path}: cannot read: {exc}") from None


def iter_documents(sources: Iterable[str | os.PathLike], text_column: str | None = None,
                   stats: CorpusStats | None = None) -> Iterator[list[str]]:
    """Yield documents, each a list of stripped, non-empty sentences, in corpus order.

    A blank line ends a document in text files; a document never spans two files.
    `stats`, when given, is filled in as the stream is consumed.
    """
    global _invalid_bytes
    stats = stats if stats is not None else CorpusStats()
    for path in expand_sources(sources):
        stats.files += 1
        stats.paths.append(str(path))
        before = _invalid_bytes
        fmt = format_of(path) or "text"
        doc: list[str] = []
        if fmt == "text":
            for line in _text_file_lines(path, stats):
                stats.lines += 1
                stats.characters += len(line)
                line = line.strip()
                if line:
                    doc.append(line)
                elif doc:
                    stats.documents += 1
                    stats.sentences += len(doc)
                    yield doc
                    doc = []
            if doc:
                stats.documents += 1
                stats.sentences += len(doc)
                yield doc
        else:
            for text in stream_column(path, text_column):
                stats.lines += 1
                stats.characters += len(text)
                doc = [s for s in (part.strip() for part in text.splitlines()) if s]
                if doc:
                    stats.documents += 1
                    stats.sentences += len(doc)
                    yield doc
        replaced = _invalid_bytes - before
        stats.invalid_bytes_replaced += replaced
        if replaced and replaced > BINARY_SHARE * max(1, _size(path)):
            stats.not_text.append(str(path))


def iter_sentence_batches(sources: Iterable[str | os.PathLike], text_column: str | None = None,
                          stats: CorpusStats | None = None,
                          batch_size: int = 1000) -> Iterator[list[str]]:
    """Sentences in lists of about `batch_size`: the shape the tokenizers library trains and
    encodes fastest from."""
    batch: list[str] = []
    for doc in iter_documents(sources, text_column, stats):
        batch.extend(doc)
        if len(batch) >= batch_size:
            yield batch
            batch = []
    if batch:
        yield batch
