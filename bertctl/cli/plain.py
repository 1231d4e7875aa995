"""The commands that read artifacts and write none: no settings class, no --out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bertctl.cli.flags import DEBUG, JSON_OUTPUT
from bertctl.cli.handling import _handled


def inspect_artifact(
    directory: Annotated[Path, typer.Argument(help="Any artifact directory.")],
    verify: Annotated[bool, typer.Option("--verify", help="Recompute every file's checksum; "
                                         "exit 1 naming any changed or missing file.")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="Show every setting, not only those "
                                           "that differ from their defaults.")] = False,
    json_output: JSON_OUTPUT = False,
    debug: DEBUG = False,
):
    """Show an artifact's manifest, its lineage back to the source files, and check it."""
    from bertctl.stages import inspect as stage_module

    with _handled(json_output, debug):
        stage_module.run(directory, verify=verify, json_output=json_output, show_all=show_all)


def diff_artifacts(
    a: Annotated[Path, typer.Argument(help="An artifact directory.", show_default=False)],
    b: Annotated[Path, typer.Argument(help="Another artifact directory.", show_default=False)],
    json_output: JSON_OUTPUT = False,
    debug: DEBUG = False,
):
    """What differs between two artifacts' lineages (settings at every level, inputs by content
    hash, bertctl versions, environments), one line per difference."""
    from bertctl.stages import diff as stage_module

    with _handled(json_output, debug):
        stage_module.run(a, b, json_output=json_output)




def search(
    index: Annotated[Path, typer.Argument(help="An embeddings artifact of an embedding "
                                          "model's own vectors (bertctl embed MODEL DOCS "
                                          "--id-column ID --store-text), or an index artifact "
                                          "built on one (bertctl index).")],
    query: Annotated[Optional[list[str]], typer.Option(
        help="A query (repeatable).", show_default=False)] = None,
    queries: Annotated[Optional[Path], typer.Option(
        help="A file of queries: .txt (a query a line) or a BEIR queries.jsonl.",
        show_default=False)] = None,
    top_k: Annotated[int, typer.Option(min=1, max=10_000, help="Documents per query.")] = 10,
    model: Annotated[Optional[Path], typer.Option(
        help="The index's model where it has moved (its id must be the one recorded).",
        show_default=False)] = None,
    precision: Annotated[str, typer.Option(help="auto, fp32 or bf16, as eval's.")] = "auto",
    threads: Annotated[Optional[int], typer.Option(min=1, help="CPU threads.",
                                                   show_default=False)] = None,
    probe: Annotated[Optional[int], typer.Option(
        min=1, help="An ivf index: the lists a query scans (unset: as built).",
        show_default=False)] = None,
    ef_search: Annotated[Optional[int], typer.Option(
        min=1, help="An hnsw index: the beam of a query (unset: as built).",
        show_default=False)] = None,
    rerank: Annotated[Optional[Path], typer.Option(
        help="Reorder each query's --rerank-depth hits by this model's scores: a "
             "cross-encoder, or with --rerank-scoring maxsim an embedding model (the index's "
             "own, say) by late interaction over its token vectors. The index must keep its "
             "texts (--store-text), or for its own model its pieces (--store-pieces); each "
             "hit's score is then the reranker's.",
        show_default=False)] = None,
    rerank_scoring: Annotated[str, typer.Option(
        help="cross or maxsim, as eval's --rerank-scoring. maxsim with no --rerank: by the "
             "pieces the index stores (embed --store-pieces), the index's own model's.")
    ] = "cross",
    rerank_depth: Annotated[Optional[int], typer.Option(
        min=1, max=10_000, help="The hits reordered a query, of which the first --top-k are "
        "printed (unset: --top-k).", show_default=False)] = None,
    debug: DEBUG = False,
):
    """Search an embeddings or index artifact: each query's nearest documents (exact cosine
    search, or the index's approximate one; the query embedded by the documents' own model)
    as JSON lines: query, rank, id, score, text; optionally reordered by a reranker."""
    from bertctl.stages import search as stage_module

    with _handled(False, debug):
        stage_module.run(index, query or [], queries, top_k, model, precision, threads, probe,
                         ef_search, rerank, rerank_scoring, rerank_depth)


PLAIN = [("inspect", inspect_artifact), ("diff", diff_artifacts), ("search", search)]
