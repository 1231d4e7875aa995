"""Quality gates: `eval --expect 'accuracy>=0.85'`.

An expectation names a metric of the eval artifact's metrics.json (a dotted path reaches into
nested values, e.g. `per_type.PER.f1`), a comparison and a number. They are parsed before any
work, so a typo costs nothing; they are checked against the artifact's metrics after it is
written (or found up to date), so a CI job gates on the figures it keeps.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Any

from bertctl.errors import BertctlError

# An unmet expectation exits with this code: a CI pipeline can tell a quality regression (3)
# from bad usage (2) and from a crash (1).
EXIT_UNMET = 3

_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
        "==": operator.eq}
_SYNTAX = re.compile(r"^\s*([A-Za-z_][\w.\-@/]*)\s*(>=|<=|==|>|<)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Expectation:
    metric: str
    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"


def parse(text: str) -> Expectation:
    """'accuracy>=0.85' -> Expectation; BertctlError (exit 2) for anything else."""
    m = _SYNTAX.match(text)
    if m is None:
        raise BertctlError(f"--expect {text!r}: write METRIC OP NUMBER with OP one of "
                           f"{', '.join(_OPS)} (e.g. 'accuracy>=0.85')")
    try:
        value = float(m.group(3))
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise BertctlError(f"--expect {text!r}: {m.group(3)!r} is not a finite number")
    return Expectation(m.group(1), m.group(2), value)


def _lookup(metrics: dict[str, Any], path: str) -> Any:
    node: Any = metrics
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


def unmet(expectations: list[Expectation], metrics: dict[str, Any], where: str) -> list[str]:
    """One line per expectation the metrics fail; an empty list when all hold. A metric the
    artifact does not have is a usage error (BertctlError) naming the ones it has."""
    lines = []
    for e in expectations:
        try:
            actual = _lookup(metrics, e.metric)
        except KeyError:
            have = ", ".join(k for k, v in metrics.items() if not isinstance(v, (dict, list)))
            raise BertctlError(f"--expect {e}: {where} has no metric {e.metric!r} "
                               f"(it has {have})") from None
        if isinstance(actual, (dict, list, str)):   # the gate names no number: a usage error
            raise BertctlError(f"--expect {e}: {e.metric!r} in {where} is a "
                               f"{type(actual).__name__}, not a number; name one of its numbers"
                               + (f" ({e.metric}.{next(iter(actual))}, ...)"
                                  if isinstance(actual, dict) and actual else ""))
        # None: a metric without a value (NaN in metrics.json), which a gate cannot pass.
        if actual is None or isinstance(actual, bool) or not isinstance(actual, (int, float)):
            lines.append(f"expectation not met: {e} ({e.metric} is {actual!r}, not a number)")
        elif not _OPS[e.op](actual, e.value):
            lines.append(f"expectation not met: {e} ({e.metric} = {actual:.6g})")
    return lines


class ExpectationsUnmet(Exception):
    """The artifact was written (or is up to date) but its metrics miss an expectation."""

    exit_code = EXIT_UNMET

    def __init__(self, outcome, lines: list[str]):
        super().__init__("; ".join(lines))
        self.outcome, self.lines = outcome, lines
