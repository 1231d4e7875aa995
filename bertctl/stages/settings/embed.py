"""`bertctl embed`: a frozen encoder's vectors of texts."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from bertctl.settings import DATA, SEQ_LENGTH, Runtime, batch_size_field, meta



EMBEDDINGS = "Embeddings"


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
    batch_size: int = batch_size_field(64, step=False, what="Windows")
