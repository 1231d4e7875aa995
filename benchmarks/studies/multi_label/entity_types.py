"""CoNLL-2003 as a multi-label task: each sentence and the set of entity types it names
(PER, ORG, LOC, MISC; none for a sentence without an entity), the types joined by commas.
A real multi-label task from real text: about 40% of sentences name none, some name several.

    python benchmarks/studies/multi_label/entity_types.py CONLL_FILE OUT.tsv
"""

from __future__ import annotations

import argparse
from pathlib import Path


def sentences(path: Path):
    """(words, entity types) of each sentence of a CoNLL file (IOB1 or IOB2)."""
    words, types = [], set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if not parts or parts[0] == "-DOCSTART-":
            if words:
                yield words, types
            words, types = [], set()
            continue
        words.append(parts[0])
        if parts[-1] != "O":
            types.add(parts[-1].split("-", 1)[1])
    if words:
        yield words, types


def convert(conll: Path, out: Path) -> int:
    """Write `text<TAB>labels` rows; returns the row count."""
    rows = [f"{' '.join(w)}\t{','.join(sorted(t))}\n" for w, t in sentences(conll)]
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write("text\tlabels\n")
        f.writelines(rows)
    return len(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("conll", type=Path, help="a CoNLL-2003 file")
    parser.add_argument("out", type=Path, help="the TSV to write")
    args = parser.parse_args()
    print(convert(args.conll, args.out), "rows")
