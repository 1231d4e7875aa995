"""The eval outputs in the formats the official SQuAD scripts read.

- predictions.json: {question id: answer text}, "" for no answer (evaluate-v1.1/v2.0.py's
  prediction file);
- nbest_predictions.json: {question id: [{text, probability, start_logit, end_logit}, ...]},
  best first (run_squad.py's n-best file);
- null_odds.json (v2.0): {question id: null score - best span score} (the --na-prob-file).
"""

from __future__ import annotations

import json
from pathlib import Path

from bertctl.tasks.span.postprocess import SpanPredictions

PREDICTIONS_FILE = "predictions.json"
NBEST_FILE = "nbest_predictions.json"
NULL_ODDS_FILE = "null_odds.json"


def _write(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n",
                    encoding="utf-8")


def write_span_outputs(directory: str | Path, result: SpanPredictions) -> list[str]:
    """Write the files into `directory` (the stage's temporary output); returns their names."""
    directory = Path(directory)
    _write(directory / PREDICTIONS_FILE, result.predictions)
    _write(directory / NBEST_FILE, result.nbest)
    names = [PREDICTIONS_FILE, NBEST_FILE]
    if result.null_odds is not None:
        _write(directory / NULL_ODDS_FILE, result.null_odds)
        names.append(NULL_ODDS_FILE)
    return names
