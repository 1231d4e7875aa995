"""An .npy file written a piece at a time (embedding shards of any size) and its header read
back without its data."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import numpy as np


class NpyAppender:
    """An .npy file of rows appended in pieces: the header is written with room to spare and
    rewritten with the final row count on close, so no shard is ever held in memory."""

    HEADER = 128

    def __init__(self, path: Path, dim: int, dtype: np.dtype):
        self.path, self.dim, self.dtype, self.rows = path, dim, np.dtype(dtype), 0
        self.f = open(path, "wb")
        self._header()

    def _header(self) -> None:
        header = {"descr": self.dtype.str, "fortran_order": False, "shape": (self.rows, self.dim)}
        text = repr(header).encode("latin1")
        pad = self.HEADER - 10 - len(text) - 1
        self.f.seek(0)
        self.f.write(b"\x93NUMPY\x01\x00" + (self.HEADER - 10).to_bytes(2, "little")
                     + text + b" " * pad + b"\n")

    def append(self, array: np.ndarray) -> None:
        self.f.seek(0, io.SEEK_END)
        self.f.write(np.ascontiguousarray(array, dtype=self.dtype).tobytes())
        self.rows += len(array)

    def close(self) -> None:
        self._header()
        self.f.close()


def header_shape(path: Path) -> tuple[int, int]:
    """The shape an .npy header records (a check on a shard without reading its data)."""
    with open(path, "rb") as f:
        head = f.read(NpyAppender.HEADER)
    return ast.literal_eval(head[10:].decode("latin1").strip())["shape"]
