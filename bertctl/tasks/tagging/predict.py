"""From per-token logits to one tag per word, and predictions.txt in conlleval's input format.

    collector = WordPredictions(features)
    for idx in batches:
        collector.add(idx, model(**make_batch(features, idx))["logits"])
    label_ids = collector.result()                           # one label index per word
    tags = predicted_tags(label_ids, labels, examples.offsets, scheme)   # the input's scheme
    write_predictions(out / "predictions.txt", examples, tags)
    metrics = score(examples.tags, tags, examples.offsets)  # what conlleval prints for that file
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from bertctl.tasks.tagging.schemes import convert
from bertctl.tasks.tagging.windows import TaggingFeatures, word_index


class WordPredictions:
    """Collects the argmax label of each word from the one token that predicts it."""

    def __init__(self, features: TaggingFeatures):
        self.features = features
        self.labels = np.full(features.num_words, -1, dtype=np.int64)

    def add(self, indices, logits) -> None:
        """`logits`: (B, T, num_labels) for windows `indices`, T at least each window's length
        (a padded batch); a torch tensor or a numpy array."""
        if hasattr(logits, "detach"):
            logits = logits.detach().float().cpu().numpy()
        logits = np.asarray(logits)
        words = word_index(self.features, indices, logits.shape[1])
        mine = words >= 0
        self.labels[words[mine]] = logits.argmax(-1)[mine]

    def result(self) -> np.ndarray:
        missing = int(np.sum(self.labels < 0))
        if missing:
            raise RuntimeError(f"{missing} words got no prediction: not every window was predicted")
        return self.labels


def predicted_tags(label_ids: np.ndarray, labels: tuple[str, ...], offsets: np.ndarray,
                   scheme: str) -> np.ndarray:
    """The predicted tag strings, rewritten from the model's label scheme into `scheme` (the
    input file's), chunk for chunk as conlleval reads them."""
    return convert(np.asarray(labels, dtype=str)[label_ids], offsets, scheme)


_SPACE = re.compile(r"\s+")


def conlleval_token(word: str) -> str:
    """A word as one conlleval field: it splits lines on spaces and takes a first field `-X-`
    for a sentence boundary, so white space becomes `_`, an empty word `_`, and `-X-` `_-X-`.
    Only the token column changes; conlleval reads the tags."""
    word = _SPACE.sub("_", word) or "_"
    return "_-X-" if word == "-X-" else word


def write_predictions(path: str | Path, examples, predicted) -> None:
    """predictions.txt: `token gold predicted` per word, a blank line after each sentence, so
    `conlleval < predictions.txt` prints `score(examples.tags, predicted, examples.offsets)`;
    `token predicted` for untagged words (there is no gold to print).
    Written to a temporary file and renamed, so a failure leaves no partial file."""
    path = Path(path)
    predicted = np.asarray(predicted, dtype=str)
    ends = set(examples.offsets[1:].tolist())
    out = []
    for i, (word, gold, pred) in enumerate(zip(examples.words, examples.tags.tolist(),
                                              predicted.tolist())):
        out.append(f"{conlleval_token(word)} {gold} {pred}\n" if examples.labelled
                   else f"{conlleval_token(word)} {pred}\n")
        if i + 1 in ends:
            out.append("\n")
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(out)
    os.replace(tmp, path)
