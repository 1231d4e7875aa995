"""The settings of the search stages: `embed` (vectors of texts), `index` (an approximate
index of them), `mine` (hard negatives for a retrieval training file), `split` (a dev set
held out of one) and `choose` (a choice among evals of that dev set), each a pydantic model
whose fields are the command's flags (see bertctl/settings.py); declared.py lists them with the
other stages'."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from bertctl.settings import DATA, RUNTIME, SEQ_LENGTH, Runtime, StageConfig, Threads, meta

_RUN = meta(RUNTIME, identity=False)
EMBEDDINGS = "Embeddings"
MINING = "Mining"
INDEX = "Index"
DEV = "Dev set"


class EmbedSettings(Runtime):
    """`bertctl embed`: a frozen encoder's hidden states as vectors (see bertctl/frozen_features.py)."""

    produces: ClassVar[str | None] = "embeddings"

    text_column: list[str] | None = Field(None, description="Tables: the text column (twice "
                                          "for sentence pairs); a plain text file has one item "
                                          "per line.", json_schema_extra=meta(DATA))
    id_column: str | None = Field(None, description="Tables: a column of row ids (a search "
                                  "index's document ids, BEIR's _id), written to the index "
                                  "beside each row's vectors.", json_schema_extra=meta(DATA))
    token_column: str | None = Field(None, description="A CoNLL-style token file (one word "
                                     "per line, a blank line between sentences, -DOCSTART- "
                                     "lines skipped): the field of the word, 0 the first. Each "
                                     "sentence is a row; --pool words gives one vector per word "
                                     "of the file.", json_schema_extra=meta(DATA))
    layers: str = Field("-1", description="Hidden states to use: indices as transformers "
                        "numbers them (0 the embeddings layer, -1 the last layer), "
                        "comma-separated, or all.", json_schema_extra=meta(EMBEDDINGS))
    combine: Literal["concat", "sum", "mean"] = Field("concat", description="How several "
                                                      "layers are combined.",
                                                      json_schema_extra=meta(EMBEDDINGS))
    pool: Literal["model", "cls", "mean", "tokens", "words"] | None = Field(
        None, description="model: an embedding model's own vectors (bertctl's, a "
        "sentence-transformers model's: its pooling, Dense layers and normalisation, each text "
        "truncated as its encode does). Else one vector per row of the --layers' hidden states "
        "([CLS], or the mean over its pieces), per piece, or per word (the mean of its "
        "pieces). Unset: model for an embedding model, else mean.",
        json_schema_extra=meta(EMBEDDINGS))
    normalize: bool | None = Field(None, description="Scale every vector to unit length (for "
                                   "cosine search). Unset: as the model's own vectors are, "
                                   "else not.", json_schema_extra=meta(EMBEDDINGS))
    prompt_name: str | None = Field(None, description="An embedding model's prompt to put "
                                    "before every text (config_sentence_transformers.json's "
                                    "prompts: query, document, ...). Unset: its default "
                                    "prompt, if it has one.", json_schema_extra=meta(EMBEDDINGS))
    prompt: str | None = Field(None, description="A text to put before every text, in place "
                               "of the model's prompts.", json_schema_extra=meta(EMBEDDINGS))
    store_text: bool = Field(False, description="Keep each row's text in index.parquet "
                             "(the text `bertctl search` prints beside each hit).",
                             json_schema_extra=meta(EMBEDDINGS))
    store_pieces: bool = Field(False, description="An embedding model's own vectors: keep "
                               "each row's pieces as late interaction compares them (its "
                               "late-interaction head's map, else its last hidden states; "
                               "unit length), so that `bertctl search --rerank-scoring "
                               "maxsim` reorders hits without embedding them again.",
                               json_schema_extra=meta(EMBEDDINGS))
    dtype: Literal["fp32", "fp16"] = Field("fp32", description="Stored vector (and piece) type.",
                                           json_schema_extra=meta(EMBEDDINGS))
    max_seq_length: int | None = Field(None, **SEQ_LENGTH, description="Pieces per model "
                                       "window; longer single texts are windowed, pairs "
                                       "truncated. Unset: the model's position limit (at most "
                                       "512).", json_schema_extra=meta(EMBEDDINGS))
    doc_stride: int | None = Field(None, ge=0, description="Pieces shared by consecutive "
                                   "windows of a long text (default half the window).",
                                   json_schema_extra=meta(EMBEDDINGS))
    shard_rows: int = Field(1_000_000, ge=1, description="Vectors per .npy shard (a shard "
                            "closes at the first chunk past it).",
                            json_schema_extra=meta(EMBEDDINGS))
    batch_size: int = Field(64, ge=1, description="Windows per forward pass.",
                            json_schema_extra=_RUN)


class IndexSettings(Threads):
    """`bertctl index`: an embeddings artifact made searchable: exact search below a size,
    above it an approximate index (faiss), its recall against exact search measured on the
    build (see bertctl/search/approximate.py)."""

    produces: ClassVar[str | None] = "index"

    kind: Literal["auto", "exact", "ivf", "hnsw"] = Field(
        "auto", description="exact: every vector scored (no approximation, no extra); ivf or "
        "hnsw: faiss's inverted lists or graph. auto: exact below --exact-below vectors, else "
        "ivf.", json_schema_extra=meta(INDEX))
    exact_below: int = Field(100_000, ge=0, description="With --kind auto: fewer vectors "
                             "than this are searched exactly.", json_schema_extra=meta(INDEX))
    quantize: Literal["none", "int8", "binary"] = Field(
        "none", description="How an approximate index stores each value: float32; a byte (a "
        "quarter of the memory); or its sign, a bit (a thirty-second), searched by Hamming "
        "distance, the first 4 x k candidates rescored with the stored vectors.",
        json_schema_extra=meta(INDEX))
    lists: int | None = Field(None, ge=1, description="ivf: the clusters. Unset: 4 x "
                              "sqrt(vectors), at least 64 vectors a list.",
                              json_schema_extra=meta(INDEX))
    probe: int = Field(32, ge=1, description="ivf: the lists a query scans (search may change "
                       "it).", json_schema_extra=meta(INDEX))
    m: int = Field(32, ge=4, le=256, description="hnsw: links per vector.",
                   json_schema_extra=meta(INDEX))
    ef_construction: int = Field(200, ge=8, description="hnsw: the beam while building.",
                                 json_schema_extra=meta(INDEX))
    ef_search: int = Field(128, ge=1, description="hnsw: the beam of a query (search may "
                           "change it).", json_schema_extra=meta(INDEX))
    recall_queries: int = Field(1000, ge=1, description="Stored vectors used as queries to "
                                "measure recall against exact search.",
                                json_schema_extra=meta(INDEX))
    recall_k: int = Field(10, ge=1, le=1000, description="The k of the recorded recall@k.",
                          json_schema_extra=meta(INDEX))
    seed: int = Field(0, ge=0, description="The training sample's and the recall queries' "
                      "draw.", json_schema_extra=meta(INDEX))

    @model_validator(mode="after")
    def _approximate_only(self):
        if self.kind == "exact" and self.quantize != "none":
            raise ValueError("--quantize applies to an approximate index (--kind ivf, hnsw "
                             "or auto)")
        return self


class MineSettings(Runtime):
    """`bertctl mine`: each training query searched with the model over a corpus, and the
    highest-ranked documents that are not its positives written as its hard negatives, with
    sentence-transformers' mine_hard_negatives' guards against false negatives (see
    bertctl/tasks/retrieval/mining.py)."""

    produces: ClassVar[str | None] = "mined"

    text_column: list[str] | None = Field(None, description="The training table's query and "
                                          "positive columns (twice). Unset: query, positive.",
                                          json_schema_extra=meta(DATA))
    negatives: int = Field(3, ge=1, le=64, description="Hard negatives per row; a row with "
                           "fewer eligible candidates is left out (counted).",
                           json_schema_extra=meta(MINING))
    range_min: int = Field(0, ge=0, description="Candidates skipped at the top of the ranking "
                           "(after the query's positives): the likeliest false negatives.",
                           json_schema_extra=meta(MINING))
    range_max: int = Field(100, ge=1, le=10_000, description="Candidates considered, from the "
                           "top of the ranking (after the query's positives).",
                           json_schema_extra=meta(MINING))
    margin: float | None = Field(None, ge=0, description="A negative's cosine must be at least "
                                 "this far below its row's positive's. Unset: no margin.",
                                 json_schema_extra=meta(MINING))
    relative_margin: float | None = Field(None, ge=0, lt=1, description="A negative's cosine "
                                          "must be at most (1 - this) times its row's "
                                          "positive's (0.05: 95%). Unset: none.",
                                          json_schema_extra=meta(MINING))
    max_score: float | None = Field(None, ge=-1, le=1, description="A ceiling on a negative's "
                                    "cosine (near-duplicates of the positive are likely "
                                    "false negatives). Unset: none.",
                                    json_schema_extra=meta(MINING))
    min_score: float | None = Field(None, ge=-1, le=1, description="A floor on a negative's "
                                    "cosine (too easy to teach anything). Unset: none.",
                                    json_schema_extra=meta(MINING))
    sampling: Literal["top", "random"] = Field("top", description="top: the highest-ranked "
                                               "eligible candidates; random: drawn among them "
                                               "(--seed).", json_schema_extra=meta(MINING))
    seed: int = Field(0, ge=0, description="The draw of --sampling random.",
                      json_schema_extra=meta(MINING))
    max_seq_length: int | None = Field(None, **SEQ_LENGTH, description="Pieces per text "
                                       "embedded. Unset: the model's own length.",
                                       json_schema_extra=meta(MINING))
    teacher_scoring: Literal["cross", "maxsim"] = Field(
        "cross", description="--teacher: cross, a cross-encoder's scores; maxsim, an "
        "embedding model's (the miner itself, say) by late interaction over its token "
        "vectors, written as sigmoid(20 x (MaxSim - the row's best)) so that the listwise KL "
        "reads softmax(20 x MaxSim).", json_schema_extra=meta(MINING, hashed_if_changed=True))
    batch_size: int = Field(64, ge=1, description="Texts per forward pass.",
                            json_schema_extra=_RUN)

    @model_validator(mode="after")
    def _ranges(self):
        if self.range_max <= self.range_min:
            raise ValueError(f"range_max {self.range_max} must be above range_min "
                             f"{self.range_min}")
        if self.range_max - self.range_min < self.negatives:
            raise ValueError(f"range_min {self.range_min} to range_max {self.range_max} holds "
                             f"fewer candidates than --negatives {self.negatives}")
        if self.min_score is not None and self.max_score is not None and \
                self.min_score >= self.max_score:
            raise ValueError("min_score must be below max_score")
        if self.text_column is not None and len(self.text_column) != 2:
            raise ValueError("give --text-column twice: the query's column, the positive's")
        return self


class SplitSettings(StageConfig):
    """`bertctl split`: a retrieval training table's queries held out as a dev set (see
    bertctl/tasks/retrieval/split.py)."""

    produces: ClassVar[str | None] = "split"

    text_column: list[str] | None = Field(None, description="The training table's query and "
                                          "positive columns (twice). Unset: query, positive "
                                          "and any negative columns.",
                                          json_schema_extra=meta(DATA))
    dev_share: float = Field(0.1, gt=0, lt=0.5, description="The share of the distinct "
                             "queries held out (every row of a query goes one way).",
                             json_schema_extra=meta(DEV))
    min_dev_queries: int = Field(50, ge=10, description="The fewest dev queries: the share "
                                 "is raised to reach it, and a table with fewer than twice "
                                 "as many queries is refused. 50 queries measure a paired "
                                 "nDCG@10 difference to about 0.03 (one standard error).",
                                 json_schema_extra=meta(DEV))
    seed: int = Field(0, ge=0, description="Which queries are held out (a hash of each "
                   "query's text with the seed: the same split in every process).",
                   json_schema_extra=meta(DEV))

    @model_validator(mode="after")
    def _columns(self):
        if self.text_column is not None and len(self.text_column) != 2:
            raise ValueError("give --text-column twice: the query's column, the positive's")
        return self


class ChooseSettings(StageConfig):
    """`bertctl choose`: one of several evals of the same dev set, by their paired nDCG@10
    (see bertctl/report/choices.py)."""

    produces: ClassVar[str | None] = "choice"

    rule: Literal["best", "chain"] = Field("best", description="best: the candidate of the "
                                           "highest mean, if it gains over the first (the "
                                           "baseline), else the first; chain: each candidate "
                                           "a step after the one before, taken while each "
                                           "gains over it (the first that does not ends it).",
                                           json_schema_extra=meta(DEV))
    min_gain: float = Field(0.0, ge=0, description="The paired mean gain a candidate must "
                            "exceed to be taken over the one it is compared with.",
                            json_schema_extra=meta(DEV))
