"""The settings that determine pretraining instances, owned by the builder that reads them
(`data.pretraining.build`) and the loader that re-draws dynamic masks
(`data.pretraining.dataset`): the block build-pretrain-data's settings
(stages/settings/build_pretrain_data.py) mix in."""

from __future__ import annotations

import math

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from bertctl.settings import DATA, DEFAULT_LENGTH, SEQ_LENGTH, StageConfig, meta


def predictions_for(length: int, rate: float) -> int:
    """The predictions a rate asks of `length` tokens, rounded up (rounded to 6 places first,
    so 100 x 0.2 is 20, not 21)."""
    return max(1, math.ceil(round(length * rate, 6)))


class PretrainingDataSettings(StageConfig):
    """The settings that determine pretraining instances: the same settings (and tokenizer and
    corpus) give the same bytes. The core builder takes these; the stage adds how to run."""

    where: ClassVar[str] = "build-pretrain-data"
    max_seq_length: int = Field(DEFAULT_LENGTH, **SEQ_LENGTH, description="Tokens per instance, [CLS] and "
                                "both [SEP] included (BERT's positions stop at 512, "
                                "ModernBERT's at 8,192).",
                                json_schema_extra=meta(DATA))
    dupe_factor: int | None = Field(None, ge=1, description="Passes over the corpus with "
                                    "different pairings and masks; unset: 10 for static masking, "
                                    "1 for dynamic.", json_schema_extra=meta(DATA))
    short_seq_prob: float | None = Field(None, ge=0, le=1, description="Share of instances "
                                         "packed to a random shorter length; unset: 0.1 for "
                                         "documents (Google), 0 for the other packings.",
                                         json_schema_extra=meta(DATA))
    masked_lm_prob: float = Field(0.15, gt=0, lt=1, description="Share of tokens predicted.",
                                  json_schema_extra=meta(DATA))
    max_predictions_per_seq: int | None = Field(
        None, ge=1, description="Most predictions per instance; unset: what the rate asks at "
        "the full length, rounded up (Google's 20 at 128 tokens, 1,229 at 8,192).",
        json_schema_extra=meta(DATA))
    seed: int = Field(12345, ge=0, description="Seed for pairing, truncation and masking.",
                      json_schema_extra=meta(DATA))
    whole_word_mask: bool = Field(False, description="Mask all pieces of a word together.",
                                  json_schema_extra=meta(DATA))
    masking: Literal["static", "dynamic"] = Field(
        "static", description="static: masks drawn here (Google); dynamic: pretrain draws new "
        "masks every epoch (RoBERTa).", json_schema_extra=meta(DATA))
    no_nsp: bool = Field(False, description="No next-sentence prediction: B is always the real "
                         "continuation (the paper's ablation).",
                         json_schema_extra=meta(DATA, flag="--no-nsp/--nsp"))
    packing: Literal["documents", "full-sentences", "concatenated"] = Field(
        "documents", description="documents: Google's instances, each within one document "
        "(short_seq_prob of them shorter); full-sentences: whole sentences packed to the length "
        "across document boundaries (RoBERTa); concatenated: the text cut every max_seq_length "
        "- 2 tokens wherever that falls (transformers' run_mlm.py): no padding. The last two "
        "need --no-nsp.", json_schema_extra=meta(DATA))
    validation_fraction: float = Field(0.0, ge=0, lt=1, description="Share of documents held "
                                       "out as a validation split.", json_schema_extra=meta(DATA))
    chunk_chars: int = Field(1 << 18, ge=1, description="Characters per chunk of documents: the "
                             "unit of parallel work and the window random B segments come from.",
                             json_schema_extra=meta(DATA))
    shard_max_tokens: int = Field(1 << 28, ge=1, description="Tokens per shard file.",
                                  json_schema_extra=meta(DATA))

    @model_validator(mode="after")
    def _full_packing_is_one_segment(self):
        if self.packing != "documents" and not self.no_nsp:
            raise ValueError(f"--packing {self.packing} packs continuous text without sentence "
                             f"pairs: add --no-nsp")
        if self.short_seq_prob is None and self.packing == "documents":
            # Google's default, recorded as before it could be unset (so ids do not move).
            object.__setattr__(self, "short_seq_prob", 0.1)
        if self.max_predictions_per_seq is None:
            # Recorded resolved: 20 at 128 tokens and 0.15, the fixed default it replaces.
            object.__setattr__(self, "max_predictions_per_seq",
                               predictions_for(self.max_seq_length, self.masked_lm_prob))
        return self

    def capped_far_under_rate(self) -> str | None:
        """A line when the cap on predictions holds the masks well under the rate at the full
        length (Google's 20 at 512 tokens is 3.9%, not 15%)."""
        full = predictions_for(self.max_seq_length, self.masked_lm_prob)
        if self.max_predictions_per_seq < 0.5 * full:
            return (f"--max-predictions-per-seq {self.max_predictions_per_seq} caps the masks "
                    f"at {self.max_predictions_per_seq / self.max_seq_length:.1%} of a "
                    f"{self.max_seq_length}-token instance, under the rate "
                    f"{self.masked_lm_prob} ({full} predictions; unset, it follows the rate)")
        return None

    @property
    def passes(self) -> int:
        """dupe_factor, with its default resolved: Google's 10 for static masking, 1 for dynamic
        (the loader draws new masks every epoch, so passes only vary the A/B pairings)."""
        if self.dupe_factor is not None:
            return self.dupe_factor
        return 10 if self.masking == "static" else 1

    @property
    def short_share(self) -> float:
        """short_seq_prob as applied: unset only for the packings that fill every instance
        (document packing gets Google's 0.1 at validation), where it means 0, as before it was
        a choice (so their builds keep their bytes)."""
        return 0.0 if self.short_seq_prob is None else self.short_seq_prob

    def to_dict(self) -> dict[str, Any]:
        """The settings as stored beside the data, dupe_factor and short_seq_prob resolved."""
        return {**self.model_dump(mode="json"), "dupe_factor": self.passes,
                "short_seq_prob": self.short_share}
