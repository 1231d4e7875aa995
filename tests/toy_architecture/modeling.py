"""The toy encoder, then its heads. Deliberately not BERT-shaped: pre-norm blocks with one fused
projection, no segment embeddings, no biases, a final norm, weights under its own names
(`toy.blocks.N...`). Running the stack (with checkpointing), compiling it, keeping some layers'
weights and counting parameters are `EncoderBase`'s; the heads' inputs, outputs and losses are
the roles' (bertctl.model.roles)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from bertctl.model.attention import AttentionPolicy
from bertctl.model.roles import SequenceClassifier, masked_lm
from bertctl.model.shared import EncoderBase, EncoderWithHead, attention_bias, first_tokens

from toy_architecture.config import ToyConfig


def init(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)


class ToyEmbeddings(nn.Module):
    def __init__(self, config: ToyConfig):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size,
                                   padding_idx=config.pad_token_id)
        self.positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)

    def forward(self, input_ids):
        return self.tokens(input_ids) + self.positions.weight[:input_ids.shape[1]]


class ToyBlock(nn.Module):
    def __init__(self, config: ToyConfig, policy: AttentionPolicy):
        super().__init__()
        self.policy = policy
        h = config.hidden_size
        self.heads = config.num_attention_heads
        self.norm1, self.norm2 = nn.LayerNorm(h, bias=False), nn.LayerNorm(h, bias=False)
        self.qkv, self.out = nn.Linear(h, 3 * h, bias=False), nn.Linear(h, h, bias=False)
        self.mlp = nn.Sequential(nn.Linear(h, config.intermediate_size, bias=False), nn.GELU(),
                                 nn.Linear(config.intermediate_size, h, bias=False))
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x, mask):
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = self.policy.attend(q, k, v, mask)
        x = x + self.drop(self.out(a.transpose(1, 2).reshape(b, t, h)))
        return x + self.drop(self.mlp(self.norm2(x)))


class ToyModel(EncoderBase):
    LAYERS = "blocks"

    def __init__(self, config: ToyConfig):
        super().__init__()
        self.config = config
        self.embeddings = ToyEmbeddings(config)
        self.attention_policy = AttentionPolicy()    # its own, as each architecture's
        self.blocks = nn.ModuleList(ToyBlock(config, self.attention_policy)
                                    for _ in range(config.num_hidden_layers))
        self.norm = nn.LayerNorm(config.hidden_size, bias=False)
        self.apply(init)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None,
                output_hidden_states=False, position_ids=None, num_layers=None):
        states = self.run_layers(self.embeddings(input_ids), num_layers,
                                 attention_bias(attention_mask))
        x = self.norm(states[-1])
        return {"last_hidden_state": x,
                "hidden_states": (*states[:-1], x) if output_hidden_states else None}

    def hidden_state_modules(self):
        # pre-norm: the last hidden state is the final norm's output, not the last block's
        return [self.embeddings, *self.blocks[:-1], self.norm]


class ToyWithHead(EncoderWithHead):
    encoder_name = "toy"

    def _build_encoder(self, config):
        return ToyModel(config)

    def _init_module(self, module):
        init(module)

    def _add_classifier(self, num_outputs):
        self.classifier = nn.Linear(self.config.hidden_size, num_outputs)
        self._init_head()

    def _classify(self, x):
        return self.classifier(x)


class ToyForMaskedLM(ToyWithHead):
    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                position_ids=None):
        hidden = self.toy(input_ids, None, attention_mask)["last_hidden_state"]
        out = masked_lm(lambda h: F.linear(h, self.toy.embeddings.tokens.weight), hidden,
                        labels)
        if labels is not None:
            out["loss"] = out["mlm_loss"]
        return out


class ToyForSequenceClassification(SequenceClassifier, ToyWithHead):
    def __init__(self, config, num_labels=None, problem_type="single_label_classification",
                 features=None):
        super().__init__(config, features)
        self._add_classifier(self._problem(num_labels, problem_type))

    def _pool(self, input_ids, token_type_ids, attention_mask, position_ids=None,
              sequence_starts=None):
        return first_tokens(self._sequence(input_ids, None, attention_mask), sequence_starts)
