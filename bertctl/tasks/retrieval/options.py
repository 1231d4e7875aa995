"""The retrieval family's own settings (a task spec's `options`; flags of the same names),
and the vector sizes its Matryoshka and --dims options take."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bertctl.model import sentence_layout as sentence
from bertctl.tasks.retrieval.loss import LOSSES


class RetrievalOptions(BaseModel):
    """The retrieval family's own settings (a task spec's `options`; flags of the same names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    loss: str | None = Field(
        None, description="The training loss, from the registry (tasks/retrieval/loss.py): "
        + "; ".join(f"{x.name}, {x.description}" for x in LOSSES.values())
        + ". Unset: cosent for a file with scores, kl for one with teacher scores, "
        "else infonce.")
    scale: float = Field(20.0, gt=0, le=1000, description="The cosine similarities' scale "
                         "(inverse temperature) in the loss; at most 1000 (a temperature of "
                         "0.001), beyond which the loss's exponentials overflow.")
    pooling: Literal[sentence.MODES] | None = Field(  # type: ignore[valid-type]
        None, description="A sequence's vector from its last hidden states, as "
        "sentence-transformers' Pooling: [CLS], the mean, the maximum, the sum over the "
        "square root of the count, the position-weighted mean, the last token. Unset: the "
        "model's own (a sentence-transformers model's), else mean.")
    normalize: bool | None = Field(None, description="Unit-length vectors. Unset: the model's "
                                   "own, else yes.")
    cache_negatives: int = Field(0, ge=0, description="Embed a training batch this many "
                                 "sequences at a time and back-propagate through the cached "
                                 "vectors (GradCache): the loss and gradients of the whole "
                                 "batch at the memory of this many; 0: off.")
    late_dim: int | None = Field(None, ge=1, description="Fit a late-interaction head: a "
                                 "linear map of each piece's last hidden state to this many "
                                 "values (ColBERT's is 128), trained alone by in-batch "
                                 "InfoNCE over MaxSim with the encoder frozen, so the model's "
                                 "search is unchanged; eval --rerank-scoring maxsim and search "
                                 "--rerank then compare the mapped pieces. At most the "
                                 "hidden size; the model records it.")
    dropout: float | None = Field(None, ge=0, lt=1, description="Dropout while training, "
                                  "everywhere (unset: the model's). SimCSE's noise: a model "
                                  "without dropout (ModernBERT's default) needs one, e.g. 0.1.")
    query_prompt: str | None = Field(None, description="Text put before every query (E5's "
                                     "'query: '). Unset: the model's own prompt for queries "
                                     "(config_sentence_transformers.json), else none.")
    document_prompt: str | None = Field(None, description="Text put before every document "
                                        "(positives, negatives, a corpus). Unset: the model's "
                                        "own, else none.")
    text_prompt: str | None = Field(None, description="Text put before the texts of scored "
                                    "pairs and of SimCSE. Unset: the model's default prompt, "
                                    "else none.")
    matryoshka_dims: str | None = Field(None, description="Train the loss at each of these "
                                        "vector sizes too, largest first (e.g. "
                                        "384,256,128,64; sentence-transformers' "
                                        "MatryoshkaLoss: the losses summed), so the vectors "
                                        "cut to any of them still search well; the model "
                                        "records them. Unset: the model's own, else none.")
    dims: str | None = Field(None, description="eval: also score the vectors cut to each of "
                             "these sizes (e.g. 256,128,64), as dimN/METRIC.")
    bm25: bool = Field(False, description="eval of a BEIR set: also score BM25 over the same "
                       "texts (bm25s, the search extra) and the hybrid of the model's ranking "
                       "with BM25's (reciprocal rank fusion), as bm25/METRIC and "
                       "hybrid/METRIC: whether the dense model is worth it.")
    top_k: int = Field(100, ge=10, le=10_000, description="Documents retrieved per query "
                       "(the run's depth; Recall@100 and MAP read it).")

    @field_validator("loss")
    @classmethod
    def _registered(cls, name: str | None) -> str | None:
        return None if name is None else LOSSES.known(name)


def sizes(text: str | None, name: str) -> tuple[int, ...]:
    """A comma-separated list of vector sizes, largest first; ValueError naming the flag."""
    if text is None:
        return ()
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--{name.replace('_', '-')} {text}: write sizes as 384,256,128") from None
    if min(dims) < 1 or list(dims) != sorted(set(dims), reverse=True):
        raise ValueError(f"--{name.replace('_', '-')} {text}: positive sizes, each below the "
                         f"one before")
    return dims


def options(spec) -> RetrievalOptions:
    return RetrievalOptions(**spec.options)
