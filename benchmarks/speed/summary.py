"""The one-line-per-comparison rows every benchmark can hand to run_all.py.

A benchmark given `--summary-json PATH` appends rows to PATH (a JSON list): what is compared,
our figure, the reference's, their unit, the ratio (>1: we are better, whatever the unit), the
target as text and whether it was met (None: no target). run_all.py prints them as one table.
"""

from __future__ import annotations

import json
from pathlib import Path


def row(bench: str, compared: str, ours: float, reference: float | None, unit: str, *,
        higher_is_better: bool = True, target: float | None = None, target_text: str = "",
        met: bool | None = None, note: str = "") -> dict:
    """`target` is a floor on the ratio (e.g. 1.5 for "at least 1.5x the reference"); a target
    that is not a ratio (a share of the matmul peak) comes as `target_text` and `met`."""
    if reference in (None, 0) or ours in (None, 0):
        ratio = None
    else:
        ratio = ours / reference if higher_is_better else reference / ours
    if target is not None and ratio is not None:
        met = ratio >= target
    return {"bench": bench, "compared": compared, "ours": ours, "reference": reference,
            "unit": unit, "ratio": ratio, "target": target_text or
            (f">= {target:g}x" if target is not None else ""), "met": met, "note": note}


def append(path: str | Path | None, rows: list[dict]) -> None:
    if not path:
        return
    path = Path(path)
    old = json.loads(path.read_text()) if path.exists() and path.stat().st_size else []
    path.write_text(json.dumps(old + rows, indent=1))


def fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.3g}"
    return str(x)


def table(rows: list[dict]) -> str:
    head = ["benchmark", "compared", "ours", "reference", "unit", "ratio", "target", "met"]
    lines = [[r["bench"], r["compared"], fmt(r["ours"]), fmt(r["reference"]), r["unit"],
              "-" if r["ratio"] is None else f"{r['ratio']:.2f}x", r["target"] or "-",
              {True: "yes", False: "NO", None: "-"}[r["met"]]] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    return "\n".join(out + ["| " + " | ".join(x.ljust(w) for x, w in zip(line, widths)) + " |"
                            for line in lines])
