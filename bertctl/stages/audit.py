"""`bertctl audit CORPUS... --against TASK_FILE... --out DIR`: which task examples share a word
n-gram with the corpus (the rule: bertctl/data/overlap.py), as an audit artifact: per task file
the share of audited examples that overlap, in the manifest; every overlapping example, with the
n-gram and where in the corpus it was found, in overlaps.jsonl."""

from __future__ import annotations

import bisect
import json
import time
from pathlib import Path

from bertctl import console
from bertctl.contract import artifacts
from bertctl.stages.settings.audit import AuditSettings
from bertctl.data import corpus, overlap
from bertctl.errors import BertctlError
from bertctl.stages.common import task_texts

OVERLAPS_FILE = "overlaps.jsonl"


def run(settings: AuditSettings, target: artifacts.Target, sources: list[str],
        against: list[Path]) -> artifacts.Outcome:
    if not sources:
        raise BertctlError("no corpus files given (audit CORPUS... --against TASK_FILE...)")
    if not against:
        raise BertctlError("no task files given: name them with --against")
    files = corpus.expand_sources(sources)
    tasks = [task_texts.read_task_file(Path(p), settings.against_column) for p in against]
    inputs = ([artifacts.file_input(f, "corpus") for f in files]
              + [artifacts.file_input(t.path, "task") for t in tasks])
    texts, owner = task_texts.flatten(tasks)
    index = overlap.TaskTexts.index(texts, settings.ngram, settings.min_ngram)
    total_bytes = sum(f.stat().st_size for f in files)

    def build(tmp: Path) -> dict:
        stats = corpus.CorpusStats()
        starts: list[int] = []     # the first corpus sentence of each file, in stream order
        counted = [0]

        def batches():
            with console.progress("auditing corpus", total=total_bytes, unit="bytes") as bar:
                for f in files:
                    starts.append(counted[0])
                    for batch in corpus.iter_sentence_batches([f], settings.text_column, stats):
                        counted[0] += len(batch)
                        bar.update(sum(map(len, batch)))
                        yield batch
                if stats.sentences == 0:   # before the progress line's last report
                    raise BertctlError(f"{', '.join(sources)}: corpus holds no text")

        started = time.monotonic()
        first: dict[tuple[int, int], tuple[int, overlap.Match]] = {}
        for match in index.scan(batches()):
            t, r, c = owner[match.text]
            first.setdefault((t, r), (c, match))
        seconds = time.monotonic() - started

        with open(tmp / OVERLAPS_FILE, "w", encoding="utf-8") as out:
            for (t, r), (c, m) in sorted(first.items()):
                k = bisect.bisect_right(starts, m.line) - 1
                out.write(json.dumps({
                    "file": str(tasks[t].path), "row": r + 1, "column": tasks[t].columns[c],
                    "text": tasks[t].cells[c][r], "ngram": m.ngram, "corpus": str(files[k]),
                    "sentence": m.line - starts[k] + 1}, ensure_ascii=False) + "\n")
        # An example is audited when any of its texts is long enough.
        audited = {(t, r) for (t, r, _), n in zip(owner, index.ns.tolist()) if n}
        per_file = {}
        for t, task in enumerate(tasks):
            audited_rows = {r for (tt, r) in audited if tt == t}
            hits = sorted(r for (tt, r) in first if tt == t)
            per_file[str(task.path)] = {
                "columns": task.columns, "examples": task.rows, "audited": len(audited_rows),
                "too_short": task.rows - len(audited_rows), "overlapping": len(hits),
                "share": round(len(hits) / len(audited_rows), 6) if audited_rows else None}
            share = per_file[str(task.path)]["share"]
            console.log(f"{task.path}: {len(hits):,} of {len(audited_rows):,} audited examples "
                        f"overlap the corpus" + (f" ({share:.2%})" if share is not None else "")
                        + f"; {task.rows - len(audited_rows):,} too short to audit")
            for r in hits[:settings.max_listed]:
                c, m = first[(t, r)]
                console.log(f"  row {r + 1}: \"{m.ngram}\"")
        for warning in stats.warnings():
            console.log(warning)
        console.log(f"{stats.sentences:,} corpus sentences ({total_bytes / 1e6:,.1f} MB) audited "
                    f"in {seconds:.1f}s")
        return {"rule": {"ngram": settings.ngram, "min_ngram": settings.min_ngram,
                         "words": "lowercased, accents stripped, runs of letters and digits"},
                "tasks": per_file, "corpus": stats.as_dict(),
                "seconds": round(seconds, 3),
                "mb_per_second": round(total_bytes / 1e6 / seconds, 2) if seconds else None}

    return artifacts.produce("audit", settings, inputs, target, build)
