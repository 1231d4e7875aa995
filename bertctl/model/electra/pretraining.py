"""ELECTRA's replaced-token detection (Clark et al. 2020) on the BERT encoder.

A small generator, a masked LM `generator_size` times the discriminator's width (same depth,
heads and feed-forward scaled alike, as the ELECTRA code sizes it), fills the masked positions
by sampling from its own predictions; the discriminator, a plain BERT encoder at `bert`, reads
the result and predicts for every real token whether it was replaced. A sampled token equal to
the original counts as not replaced (the paper's definition). The two share the token, position
and type embeddings (the generator reads them through a projection to its width, and its output
layer is the shared word-embedding table); sampling passes no gradient, so the discriminator's
loss trains the discriminator and the embeddings, the generator's masked-LM loss the generator
and the embeddings. loss = mlm_loss + discriminator_weight * discriminator loss (50, the paper).

What fine-tuning keeps is `bert`: the file's `bert.*` weights are a BertModel's, which bertctl
and transformers (BertModel.from_pretrained) load as they load any BERT encoder.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.labels import IGNORE_INDEX
from bertctl.model.attention import AttentionPolicy
from bertctl.model.bert.config import BertConfig
from bertctl.model.bert.modeling import BertHead, BertLayer
from bertctl.model.roles import masked_lm
from bertctl.model.shared import ACTIVATIONS, layer_mask, token_mean
from bertctl.step_scope import scope_for

GENERATOR_SIZE = 0.25      # the paper's best generator: 1/4 to 1/2 of the discriminator
DISCRIMINATOR_WEIGHT = 50.0


def generator_config(config: BertConfig, size: float) -> BertConfig:
    hidden = max(1, round(config.hidden_size * size))
    heads = max(1, round(config.num_attention_heads * size))
    while hidden % heads:
        heads -= 1
    return dataclasses.replace(config, hidden_size=hidden, num_attention_heads=heads,
                               intermediate_size=max(1, round(config.intermediate_size * size)))


class ElectraGenerator(nn.Module):
    """The generator's own layers: a projection from the shared embeddings, the encoder blocks
    and the masked-LM head whose output layer is the shared word-embedding table."""

    def __init__(self, config: BertConfig, gen: BertConfig):
        super().__init__()
        self.embeddings_project = nn.Linear(config.hidden_size, gen.hidden_size)
        # Its own attention policy: its shapes are not the discriminator's.
        self.attention_policy = AttentionPolicy()
        self.layer = nn.ModuleList(BertLayer(gen, self.attention_policy)
                                   for _ in range(gen.num_hidden_layers))
        self.dense = nn.Linear(gen.hidden_size, config.hidden_size)
        self.act = ACTIVATIONS[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, embedded: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.embeddings_project(embedded)
        for layer in self.layer:
            x = layer(x, mask)
        return x

    def logits(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.LayerNorm(self.act(self.dense(hidden))), word_embeddings, self.bias)


class ElectraDiscriminatorHead(nn.Module):
    """ELECTRA's head (transformers' names): dense, activation, one logit per token."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATIONS[config.hidden_act]
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.act(self.dense(hidden))).squeeze(-1)


def replace_masked(input_ids: torch.Tensor, labels: torch.Tensor, samples: torch.Tensor,
                   positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(the discriminator's input, its target): the original tokens with the masked positions
    (labels != IGNORE_INDEX, in row-major order; `positions`, their flat indices, where the
    loop found them on the host) set to the samples; target 1 where a token differs from the
    original. The original is read from the labels, never from the generator's (masked)
    input, so no [MASK] reaches the discriminator."""
    masked = labels != IGNORE_INDEX
    original = torch.where(masked, labels, input_ids)
    if positions is None:
        corrupted = original.masked_scatter(masked, samples.to(original.dtype))
    else:
        corrupted = original.reshape(-1).index_copy(
            0, positions, samples.to(original.dtype)).view_as(original)
    return corrupted, corrupted != original


class ElectraPreTrainingHead(BertHead):
    """The generator and the discriminator's head on the BERT encoder, which is the
    discriminator."""

    def __init__(self, config: BertConfig, generator_size: float = GENERATOR_SIZE,
                 discriminator_weight: float = DISCRIMINATOR_WEIGHT):
        super().__init__(config)
        self.generator_size, self.discriminator_weight = generator_size, discriminator_weight
        self.generator = ElectraGenerator(config, generator_config(config, generator_size))
        self.discriminator_predictions = ElectraDiscriminatorHead(config)

    def hf_config(self) -> dict[str, Any]:
        return {"bertctl_electra": {"generator_size": self.generator_size,
                                    "discriminator_weight": self.discriminator_weight}}

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        saved = hf_config.get("bertctl_electra")
        if not isinstance(saved, dict):
            return {}
        # Only what this class takes, as positive numbers: config.json may have been edited.
        return {k: float(v) for k, v in saved.items()
                if k in ("generator_size", "discriminator_weight")
                and isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e6}

    def forward(self, model, input_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                sample_generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """With `labels` (the masked positions' original ids): the generator's masked-LM
        outputs (mlm_logits/mlm_targets/mlm_loss, as `masked_lm` names them), the corrupted
        input, the discriminator's logits over every token and the losses. `sample_generator`
        seeds the sampling (validation draws the same samples every time)."""
        if labels is None:
            raise ValueError("ELECTRA pretraining needs the masked positions (labels)")
        mask = layer_mask(self.generator.attention_policy, attention_mask, False, input_ids)
        embedded = model.encoder.embeddings(input_ids, token_type_ids)
        hidden = self.generator(embedded, mask)
        table = model.encoder.embeddings.word_embeddings.weight
        out = masked_lm(lambda h: self.generator.logits(h, table), hidden, labels)
        logits, targets = out["mlm_logits"], out["mlm_targets"]
        with torch.no_grad():
            probs = torch.softmax(logits.float(), dim=-1)
            # torch.multinomial's own draw for one sample, without its check of the
            # probabilities, which reads them back to the host: the same samples.
            draws = torch.empty_like(probs).exponential_(1, generator=sample_generator)
            samples = (probs / draws).argmax(-1) if targets.numel() else targets
        scope = scope_for(labels)
        corrupted, replaced = replace_masked(input_ids, labels, samples,
                                             scope.positions if scope else None)
        disc = self.discriminator_predictions(
            model.encoder(corrupted, token_type_ids, attention_mask)["last_hidden_state"])
        real = (attention_mask.bool() if attention_mask is not None
                else torch.ones_like(replaced))
        per_token = F.binary_cross_entropy_with_logits(disc.float(), replaced.float(),
                                                       reduction="none")
        out["disc_loss"] = token_mean((per_token * real).sum(), real.sum(), scope, "tokens")
        out.update(disc_logits=disc, replaced=replaced, real=real, corrupted=corrupted)
        out["loss"] = out["mlm_loss"] + self.discriminator_weight * out["disc_loss"]
        return out

