"""Reading tabular files: one reader for every family's task files and for corpora's rows.

Files are read through the `datasets` library (TSV, CSV, JSON lines, parquet, a directory
written by `save_to_disk`) or, an Arrow file, memory-mapped by pyarrow: whole as a table
(`open_table`, a task file) or one column streamed (`stream_column`, a corpus's text). TSV/CSV cells are always read as text (no type guessing: a sentence
"NA" or "1.5" stays text), a UTF-8 byte-order mark is dropped, and quoting is off where the spec
says so: the GLUE TSVs are written without quoting and hold unbalanced quotes, which a quoting
parser silently merges across rows (MRPC, STS-B, RTE). A headerless file's columns are named "0",
"1", ... unless the spec names them.

Problems a user can fix raise `BertctlError` as one line naming the file, the row (1-based,
counting data rows only: the header and blank lines are not rows) and the column. A label
column's cells become labels in label_columns.py.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from bertctl.errors import BertctlError

# Every tabular format, by the suffix that names it (a trailing .gz looked through).
FORMATS = {".tsv": "tsv", ".csv": "csv", ".json": "json", ".jsonl": "json",
           ".parquet": "parquet", ".arrow": "arrow"}


# What `datasets`' save_to_disk leaves in a directory (a Dataset, or a DatasetDict).
SAVED_DATASET_FILES = ("dataset_info.json", "state.json", "dataset_dict.json")


def is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and any((path / n).is_file() for n in SAVED_DATASET_FILES)


def _saved_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BertctlError(f"{path}: missing (not a directory written by save_to_disk?)") \
            from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BertctlError(f"{path}: cannot read: {exc}") from None


def refuse_dataset_dict(path: Path) -> None:
    """A DatasetDict's directory is read by split, named as the directory save_to_disk gave
    it (DIR/train): one spelling for every stage, and a path the shell completes."""
    if not (path / "dataset_dict.json").is_file():
        return
    splits = _saved_json(path / "dataset_dict.json")
    splits = splits.get("splits") if isinstance(splits, dict) else None
    if not isinstance(splits, list) or not splits:
        raise BertctlError(f"{path / 'dataset_dict.json'}: no list of splits")
    raise BertctlError(f"{path}: a DatasetDict of the splits {', '.join(map(str, splits))}; "
                       f"give one of them, e.g. {path / str(splits[0])}")


def no_such_path(path: Path) -> BertctlError:
    """The error for a path that does not exist: a split a DatasetDict lacks lists its
    splits."""
    path = Path(path)
    if (path.parent / "dataset_dict.json").is_file():
        try:
            splits = json.loads((path.parent / "dataset_dict.json").read_text(encoding="utf-8"))
            splits = [str(s) for s in splits.get("splits") or []]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            splits = []
        if splits:
            return BertctlError(f"{path}: the DatasetDict {path.parent} has no split "
                                f"{path.name!r} (its splits: {', '.join(splits)})")
    return BertctlError(f"{path}: no such file or directory")


def saved_dataset_files(path: Path) -> list[Path]:
    """The Arrow files of a directory save_to_disk wrote, in the dataset's row order
    (state.json's list)."""
    refuse_dataset_dict(path)
    state = _saved_json(path / "state.json")
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not files or not all(
            isinstance(f, dict) and isinstance(f.get("filename"), str) for f in files):
        raise BertctlError(f"{path / 'state.json'}: no list of data files")
    found = []
    for f in files:
        name = Path(f["filename"])
        if name.is_absolute() or ".." in name.parts:
            raise BertctlError(f"{path / 'state.json'}: data file {f['filename']!r} lies "
                               f"outside the dataset's directory")
        if not (path / name).is_file():
            raise BertctlError(f"{path / name}: missing (listed in {path / 'state.json'})")
        found.append(path / name)
    return found

def table_files(path: Path) -> list[Path]:
    """The files one table argument names, in row order: a file; a directory save_to_disk
    wrote (itself: `datasets` reads it); a directory of shards (the table files directly in
    it) or a glob pattern (its matches), sorted by name, all of one format. Hub datasets keep
    their splits so (data/train-00000-of-00004.parquet, ...)."""
    if path.is_file() or is_saved_dataset(path):
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")
                       and format_of(p) is not None)
        if not files:
            # Subdirectories are not searched: a data set's root mixes its splits (data/train-*,
            # data/test-*) and GLUE's root its tasks.
            deeper = sorted({p.parent.relative_to(path).as_posix() for p in path.rglob("*")
                             if p.is_file() and format_of(p) is not None})
            hint = (f"; its subdirectories hold some ({', '.join(deeper[:3])}"
                    f"{', ...' if len(deeper) > 3 else ''}): name one, or a pattern such as "
                    f"'{path / deeper[0] / '*'}'" if deeper else "")
            raise BertctlError(f"{path}: no table files in it "
                               f"({', '.join(sorted(FORMATS))}) and not a directory "
                               f"written by save_to_disk{hint}")
    elif glob.has_magic(str(path)):
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True)
                       if Path(p).is_file())
        if not files:
            raise BertctlError(f"{path}: pattern matches no files")
    elif path.exists():
        raise BertctlError(f"{path}: not a regular file")
    else:
        raise BertctlError(f"{path}: file not found")
    kinds = {format_of(f) for f in files}
    if len(kinds) != 1 or None in kinds:
        shown = ", ".join(sorted(str(k) for k in kinds))
        raise BertctlError(f"{path}: shards of one format expected, found {shown} "
                           f"({', '.join(f.name for f in files[:3])}{', ...' if len(files) > 3 else ''})")
    return files


def column_name(value: Any) -> Any:
    # Columns of a headerless file are named by their index; accept the index as an int.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def base_suffix(path: Path) -> str:
    """The suffix that names a file's format, looking through a trailing .gz."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def format_of(path: Path) -> str | None:
    """The format a path's name (or being a directory save_to_disk wrote) says, or None. A
    directory of shards or a glob pattern says its files' format."""
    if is_saved_dataset(path):
        return "arrow"
    if path.is_dir() or (not path.exists() and glob.has_magic(str(path))):
        try:
            return format_of(table_files(path)[0])
        except BertctlError:
            return None
    return FORMATS.get(base_suffix(path))


def detect_format(spec, path: Path) -> str:
    if is_saved_dataset(path):   # whatever the task's own files are
        return "arrow"
    if spec.format != "auto":
        return spec.format
    fmt = format_of(path)
    if fmt is None:
        raise BertctlError(f"{path}: cannot tell the file format from its name; "
                           "use .tsv, .csv, .jsonl, .parquet or set the task's format")
    return fmt


@contextlib.contextmanager
def _quiet_datasets():
    """No progress bars or info logs from `datasets` while it reads (the console owns stderr)."""
    import datasets
    bars = datasets.is_progress_bar_enabled()
    verbosity = datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    # errors too: a parse error is logged before it is raised, and bertctl reports it in one line
    datasets.logging.set_verbosity(datasets.logging.CRITICAL + 1)
    try:
        yield datasets
    finally:
        datasets.logging.set_verbosity(verbosity)
        if bars:
            datasets.enable_progress_bars()


def _root_cause(exc: BaseException) -> str:
    while exc.__cause__ is not None or (exc.__context__ is not None and not exc.__suppress_context__):
        exc = exc.__cause__ or exc.__context__
    return " ".join(str(exc).split()) or type(exc).__name__


def _read_delimited_header(path: Path, sep: str, quoting: bool, header: bool) -> list[str]:
    """The first row's cells, with every row checked to hold as many: pandas, under
    `datasets`, takes a file whose rows all hold one field more than its header as having an
    index column (every column shifted one to the left) and pads a short row with empty cells,
    both without a word. Also checks that a data row follows a header."""
    # The csv module's default cell limit (128 KiB) is not pandas': without this, a long cell
    # was refused in the first rows, read here, and accepted further down. One rule: any size.
    csv.field_size_limit(2**31 - 1)
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter=sep, quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE)
        try:
            first = next(reader)
            rows = 0
            for row in reader:
                if not row:
                    continue   # a blank line is not a row
                rows += 1
                if len(row) != len(first):
                    what = "the header" if header else "row 1"
                    raise BertctlError(
                        f"{path}: row {rows + (0 if header else 1)} (line {reader.line_num}) "
                        f"has {len(row)} field{'s' if len(row) != 1 else ''} where {what} "
                        f"has {len(first)}: a field too "
                        f"{'many' if len(row) > len(first) else 'few'} (a tab or comma inside "
                        f"a text, or a column left out?)")
            if header and not rows:
                raise BertctlError(f"{path}: no data rows")
            return first
        except StopIteration:
            raise BertctlError(f"{path}: the file is empty") from None
        except UnicodeDecodeError:
            # The csv reader's line count lags the decoder's read-ahead: find the line itself.
            raise BertctlError(f"{path}: line {_first_undecodable_line(path)}: not UTF-8 "
                               f"text") from None
        except csv.Error as exc:
            raise BertctlError(f"{path}: line {reader.line_num}: cannot read: {exc}") from None


def _first_undecodable_line(path: Path) -> int:
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return n
    return 0


# A spec for `read_table` that only says "the format its name says" (readers of tables that are
# not a task's files: span QA's flat files, tagging tables, embed's input).
BY_NAME = SimpleNamespace(format="auto", quoting=None, header=True, column_names=None)


def _check_json_rows(path: Path) -> None:
    """A JSON table's rows are objects: a JSON array of objects, or JSON lines each an object.
    Checked before `datasets` reads the file, because its JSON reader crashes the process (a
    segmentation fault, found by tests/faults) on some files whose rows are not objects, such as
    a bare `null` or `[null, {...}]`."""

    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
        if not head:
            return
        if head[:1] == b"[":
            f.seek(0)
            try:
                rows = json.loads(f.read().decode("utf-8-sig"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise BertctlError(f"{path}: not valid JSON: {exc}") from None
            bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None) \
                if isinstance(rows, list) else 0
            if bad is not None:
                raise BertctlError(f"{path}: row {bad + 1} is not a JSON object")
            return
        if head[:1] != b"{":
            raise BertctlError(f"{path}: not a JSON table: the first row is not an object "
                               f"(starts with {head[:20].decode('utf-8', 'replace')!r})")
        f.seek(0)
        for lineno, line in enumerate(f, 1):
            line = line.lstrip(b"\xef\xbb\xbf \t\r\n")
            if line and line[:1] != b"{":
                if lineno == 1 or not _complete_object(path):
                    return   # one pretty-printed object, not JSON lines: datasets decides
                raise BertctlError(f"{path}:{lineno}: not a JSON object (JSON lines hold one "
                                   "object per line)")


def _text_columns(spec) -> list[str]:
    names = [getattr(spec, "text_columns", None) or [], getattr(spec, "choice_columns", None)
             or [], [getattr(spec, n, None) for n in ("context_column", "choice_prefix_column")]]
    return [str(c) for group in names for c in group if c]


def _check_json_texts(path: Path, columns: list[str]) -> None:
    """Each of a JSON table's text columns holds text in every row that has it: a number or
    NaN (JSON has no NaN, but Python's writer emits it) is named with its row, where the
    reader would have made "5" of a number and an empty text of NaN, naming another row."""
    if not columns:
        return

    def check(n: int, row) -> None:
        for c in columns:
            v = row.get(c) if isinstance(row, dict) else None
            if v is not None and not isinstance(v, str):
                what = "NaN" if isinstance(v, float) and math.isnan(v) else \
                    f"{type(v).__name__} {json.dumps(v)[:40]}"
                raise BertctlError(f"{path}: row {n}, column '{c}': {what}, not text")

    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] == b"[":
        rows = json.loads(path.read_text(encoding="utf-8-sig"))
        for n, row in enumerate(rows, 1):
            check(n, row)
        return
    n = 0
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            if not line.strip():
                continue
            n += 1
            try:
                row = json.loads(line)
            except ValueError:
                return   # one pretty-printed object, not JSON lines: the reader decides
            check(n, row)


def _complete_object(path: Path) -> bool:
    """Whether the file's first line alone is a JSON value (so the file is JSON lines)."""

    with open(path, "rb") as f:
        try:
            json.loads(f.readline().decode("utf-8-sig"))
            return True
        except (ValueError, UnicodeDecodeError):
            return False


def read_table(spec, path: Path):
    """The whole file as a pyarrow Table in memory (TSV/CSV columns all strings)."""
    with open_table(spec, path, in_memory=True) as table:
        return table


@contextlib.contextmanager
def open_table(spec, path: Path, in_memory: bool = False):
    """The file as a pyarrow Table (TSV/CSV columns all strings), memory-mapped unless
    `in_memory`: a text file is converted in blocks into Arrow files in a temporary directory
    that lives as long as the context, so a file of any size is read in bounded memory."""
    import pyarrow as pa

    files = table_files(path)
    if hasattr(spec, "for_file"):   # a task's spec: a file plainly in another format is read
        spec = spec.for_file(files[0])   # as what it is (the hub's parquet of a GLUE task)
    fmt = detect_format(spec, path) if files == [path] else detect_format(spec, files[0])
    if fmt == "json" and files[0].is_file():
        for f in files:
            _check_json_rows(f)
            _check_json_texts(f, _text_columns(spec))
    _sweep_stale_caches()
    with _quiet_datasets() as datasets, \
            tempfile.TemporaryDirectory(prefix=f"{_CACHE_PREFIX}{os.getpid()}-") as cache:
        table = _load(datasets, spec, path, files, fmt, cache, in_memory)
        if not isinstance(table, pa.Table):
            table = pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table
        yield table


_CACHE_PREFIX = "bertctl-read-"


def _sweep_stale_caches() -> None:
    """Remove the conversion caches of reads whose process is gone (a SIGKILL skips the
    context's cleanup): each is named after its process's id."""
    root = Path(tempfile.gettempdir())
    for d in root.glob(f"{_CACHE_PREFIX}*-*"):
        pid = d.name[len(_CACHE_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:   # another user's live process
            continue


def _load(datasets, spec, given: Path, files: list[Path], fmt: str, cache: str,
          in_memory: bool):
    path = files[0]   # the file a header's message names: the only one, or the first shard
    try:
        if fmt == "arrow" and not is_saved_dataset(path):
            return _arrow_table(files)
        if fmt == "arrow":
            try:
                ds = datasets.load_from_disk(str(path), keep_in_memory=in_memory)
            except FileNotFoundError as exc:
                raise BertctlError(f"{path}: not a directory written by save_to_disk "
                                   f"({_root_cause(exc)})") from None
            if isinstance(ds, datasets.DatasetDict):
                refuse_dataset_dict(path)
        elif fmt in ("tsv", "csv"):
            sep = "\t" if fmt == "tsv" else ","
            quoting = spec.quoting if spec.quoting is not None else fmt == "csv"
            first = _read_delimited_header(path, sep, quoting, spec.header)
            for other in files[1:]:   # pandas would fill or drop what a shard's header lacks
                header = _read_delimited_header(other, sep, quoting, spec.header)
                if header != first if spec.header else len(header) != len(first):
                    raise BertctlError(f"{other}: its columns ({', '.join(header)}) are not "
                                       f"those of {path} ({', '.join(first)})")
            if spec.header:
                names = first
                if any(not n.strip() for n in names):
                    raise BertctlError(f"{path}: row 1, read as the header, has an empty column "
                                       f"name (a file without a header row, as CoLA's?)")
            elif spec.column_names is not None:
                names = list(spec.column_names)
                if len(names) != len(first):
                    raise BertctlError(f"{path}: row 1: {len(first)} columns but the task names "
                                       f"{len(names)} ({', '.join(names)})")
            else:
                names = [str(i) for i in range(len(first))]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise BertctlError(f"{path}: duplicate column names in the header: {', '.join(dupes)}")
            features = datasets.Features({n: datasets.Value("string") for n in names})
            kwargs: dict[str, Any] = dict(
                sep=sep, quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE,
                encoding="utf-8-sig", na_filter=False, keep_default_na=False, features=features)
            if spec.header:
                kwargs["header"] = 0
            else:
                kwargs.update(header=None, column_names=names)
            ds = datasets.load_dataset("csv", data_files=[str(f) for f in files],
                                       split="train", cache_dir=cache,
                                       keep_in_memory=in_memory, **kwargs)
        else:
            ds = datasets.load_dataset(fmt, data_files=[str(f) for f in files],
                                       split="train", cache_dir=cache,
                                       keep_in_memory=in_memory)
        return ds.with_format("arrow")[:]
    except BertctlError:
        raise
    except Exception as exc:  # parse errors surface as many types from pandas/pyarrow/datasets
        where = "quoting off" if fmt == "tsv" and not spec.quoting else ""
        raise BertctlError(f"{given}: cannot read as {fmt.upper()}"
                           f"{' (' + where + ')' if where else ''}: {_root_cause(exc)}") from None


def _arrow_batches(path: Path):
    """(schema, record batches) of an Arrow file (an IPC stream, as save_to_disk writes, or an
    IPC file), memory-mapped: read a batch at a time, memory flat in the file's size."""
    import pyarrow as pa

    try:
        source = pa.memory_map(str(path))
        try:
            reader = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:
            source.seek(0)
            file = pa.ipc.open_file(source)
            return file.schema, (file.get_batch(i) for i in range(file.num_record_batches))
        return reader.schema, reader
    except (pa.ArrowInvalid, OSError) as exc:
        raise BertctlError(f"{path}: not an Arrow file ({str(exc).splitlines()[0]})") from None


def _arrow_table(files: list[Path]):
    """Arrow files (shards of one table) as one table, memory-mapped."""
    import pyarrow as pa

    parts = []
    for f in files:
        schema, batches = _arrow_batches(f)
        try:
            parts.append(pa.Table.from_batches(list(batches), schema=schema))
        except (pa.ArrowInvalid, OSError) as exc:
            raise BertctlError(f"{f}: cannot read: {str(exc).splitlines()[0]}") from None
        if parts[0].schema.names != schema.names:
            raise BertctlError(f"{f}: its columns ({', '.join(schema.names)}) are not those "
                               f"of {files[0]} ({', '.join(parts[0].schema.names)})")
    return pa.concat_tables(parts, promote_options="default") if len(parts) > 1 else parts[0]


def pick_column(path: Path, columns: list[str], name: str | None) -> str:
    """The column asked; unset, `text` or a table's only column, as transformers' run_mlm
    takes them."""
    if name is None:
        if "text" in columns:
            return "text"
        if len(columns) == 1:
            return columns[0]
        raise BertctlError(f"{path}: no column named text: name one with --text-column "
                           f"(columns: {', '.join(columns) or 'none'})")
    if name not in columns:
        raise BertctlError(f"{path}: has no column {name!r} (columns: "
                           f"{', '.join(columns) or 'none'})")
    return name


def stream_column(path: Path, name: str | None):
    """One column of a tabular file as text, row by row (`pick_column`'s; None cells are
    empty): an Arrow file memory-mapped a batch at a time, the others streamed by `datasets`,
    so a corpus of any size is read in flat memory."""
    fmt = format_of(path)
    if fmt == "arrow":
        yield from _arrow_column(path, name)
        return
    # Its builder's lock file goes to the cache dir: a temporary one, so that nothing is
    # written outside --out and the system temp dir (never ~/.cache/huggingface).
    with _quiet_datasets() as datasets, \
            tempfile.TemporaryDirectory(prefix=f"{_CACHE_PREFIX}{os.getpid()}-") as cache:
        kwargs = {"delimiter": "\t"} if fmt == "tsv" else {}
        builder = "csv" if fmt == "tsv" else fmt
        try:
            stream = datasets.load_dataset(builder, data_files=str(path), split="train",
                                           streaming=True, cache_dir=cache, **kwargs)
            columns = stream.column_names
            if columns is None:  # some streaming builders only know them after the first row
                first = next(iter(stream), None)
                columns = list(first) if first else []
            name = pick_column(path, [str(c) for c in columns], name)
            for row in stream.select_columns([name]):
                value = row[name]
                yield "" if value is None else str(value)
        except BertctlError:
            raise
        except Exception as exc:  # datasets wraps parse errors in many exception types
            raise BertctlError(f"{path}: cannot read as {builder}: "
                               f"{str(exc).splitlines()[0]}") from None


def _arrow_column(path: Path, name: str | None):
    import pyarrow as pa

    schema, batches = _arrow_batches(path)
    name = pick_column(path, schema.names, name)
    kind = schema.field(name).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise BertctlError(f"{path}: column {name!r} holds {kind}, not text")
    try:
        for batch in batches:
            for value in batch.column(name).to_pylist():
                yield "" if value is None else value
    except (pa.ArrowInvalid, OSError) as exc:
        raise BertctlError(f"{path}: cannot read: {str(exc).splitlines()[0]}") from None

def text_column(table, name: str, path: Path, *, allow_empty: bool = False,
                first_row: int = 0) -> list[str]:
    """A column's cells as text; `first_row`: the table's rows are the file's from that one on
    (0-based), for the row numbers of messages."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.column(name)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        try:
            col = pc.cast(col, pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise BertctlError(f"{path}: column '{name}' holds {col.type}, not text") from None
    if not allow_empty:
        empty = pc.or_kleene(pc.is_null(col), pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(col)), 0))
        empty = pc.fill_null(empty, True)
        if pc.any(empty).as_py():
            row = first_row + int(np.flatnonzero(empty.to_numpy(zero_copy_only=False))[0]) + 1
            raise BertctlError(f"{path}: row {row}, column '{name}': empty text")
    return [s if s is not None else "" for s in col.to_pylist()]


def require_columns(table, columns, path: Path) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        have = ", ".join(f"'{c}'" for c in table.column_names)
        raise BertctlError(f"{path}: column '{missing[0]}' not found; the file has columns {have}")
