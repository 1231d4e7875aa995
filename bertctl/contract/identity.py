"""Artifact ids: what an id hashes (the kind, its layout and code revision, the settings that
determine the output, the inputs' ids) and the check that a manifest's id, and each ancestor's
in its recorded lineage, is still what its recorded settings and inputs give.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from bertctl import settings as settings_mod

if TYPE_CHECKING:
    from bertctl.contract.manifest import InputRef, Manifest

# The layout version of each kind this code writes and can read. Bump one when its files change
# in a way older readers would misread.
SCHEMA_VERSIONS: dict[str, int] = {"tokenizer": 1, "pretrain-data": 1, "model": 1, "eval": 1,
                                   "report": 1, "embeddings": 1, "glue-summary": 1,
                                   "export": 1, "audit": 1, "mined": 1, "index": 1,
                                   "split": 1, "choice": 1}
# Raised when the code makes a different output from the same settings and inputs (the schema,
# what the files look like, stays), so an artifact made before is not taken as up to date.
# pretrain-data 2: masked positions sampled per prediction; model 2: length-grouping windows of 8;
# model 3: step 1 trains the order's first batch; model 4: CPU dropout masks from 64-bit draws
# (model.dropout), another random stream; model 5: reduced-precision training on a CPU takes the
# written-out attention where it is clearly faster (model.attention), other roundings; model
# 6: the masked LM's loss computed a slice of rows at a time (shared.vocabulary_cross_entropy),
# its gradient rounded once from another fp32 formula, and the written-out attention's padding
# mask and scale applied inside the scores' product (model.attention); model 7: the
# written-out attention's softmax in its scores' precision (bf16 under autocast), whose
# backward reads the rounded probabilities (model.attention); pretrain-data 3 and model 8:
# whole-word masking's words as the pre-tokenizer makes them (tokenizer.WordMarks: "(word" is
# two words in a byte-level BPE), in static and in dynamic masks; model 9: on a CPU a
# retrieval batch's columns encoded in runs of similar length (retrieval/head.py), the dropout
# draws elsewhere; pretrain-data 4 and model 10: whole-word masking's words split at
# characters of scripts written without spaces, and a word longer than the budget masked
# piece by piece (data/pretraining/masking.py), in static and in dynamic masks;
# model 11: every loss the global batch's under micro-batches and torchrun (a mean over
# tokens divides by the step's count: step_scope.StepTargets; in-batch negatives
# gathered across ranks: retrieval/contrastive.across_ranks);
# export 2: products of constants (DeBERTa's position projections) kept fp32 in int8 graphs;
# tokenizer 2: the alphabet and continuation pieces fixed before training (#26), one vocabulary
# where each process made its own; tokenizer 3: Unigram's scores estimated again from its
# pieces (data/tokenizer/training.py's _settled_scores), one file where processes differed. Not a revision: finetune's group_by_length default turning
# off (#10), since the id hashes the resolved setting (a default run gets a new id, an artifact
# made grouped keeps its own, still what the code makes from its settings); nor finetune's
# `pack` (on by default), a new setting that every id made since hashes.
REVISIONS: dict[str, int] = {"tokenizer": 3, "pretrain-data": 4, "model": 11, "export": 2}


def compute_id(kind: str, config: dict[str, Any], inputs: list[InputRef],
               revision: int | None = -1) -> str:
    """Hash of what determines the output. Input paths are left out on purpose: the same
    content read from elsewhere is the same artifact. (`revision`: this code's, unless an
    earlier one is asked for: None, the kind's first.)"""
    if revision == -1:
        revision = REVISIONS.get(kind)
    payload = {
        "kind": kind,
        "schema_version": SCHEMA_VERSIONS[kind],
        **({"revision": revision} if revision is not None else {}),
        "config": config,
        "inputs": sorted([i.role, i.kind, i.id] for i in inputs),
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def id_holds(kind: str, artifact_id: str, config: dict[str, Any],
            inputs: list[InputRef]) -> bool:
    """Whether `artifact_id` is the id of these recorded settings and inputs, as this code or an
    earlier revision of it computed ids. A manifest is plain JSON: this is what notices a
    setting, an input or a parent's id edited after the artifact was written."""
    if kind not in SCHEMA_VERSIONS:
        return False
    revisions = [None, *range(2, REVISIONS.get(kind, 1) + 1)]
    classes = settings_mod.stage_settings()
    writers = [cls for cls in classes if cls.produces == kind]
    config = settings_mod.without_unchanged_defaults(config, *writers)
    for excluded in settings_mod.identity_exclusions(kind, classes):
        hashed = {k: v for k, v in config.items() if k not in excluded}
        if any(compute_id(kind, hashed, inputs, r) == artifact_id for r in revisions):
            return True
    return False


def lineage_problem(manifest: Manifest) -> str | None:
    """Why the manifest's id, or the id of an ancestor its lineage records, is not what the
    recorded settings and inputs give (None: the lineage holds)."""
    if not id_holds(manifest.kind, manifest.id, manifest.config, manifest.inputs):
        return (f"its id {manifest.id} is not the hash of its recorded settings and inputs "
                f"(the manifest was edited)")
    if manifest.digest is not None and manifest.digest != manifest.content_digest():
        return ("its contents are not what was written (a field outside the id, such as its "
                "stats or metrics, was edited)")
    stack = list(manifest.inputs)
    while stack:
        ref = stack.pop()
        if ref.kind == "file" or ref.config is None:
            continue
        if not id_holds(ref.kind, ref.id, ref.config, ref.inputs):
            return (f"the lineage it records for its {ref.role} input ({ref.kind} {ref.id}) "
                    f"does not give that id (the manifest was edited)")
        stack.extend(ref.inputs)
    return None
