"""The toy encoder, then its heads. Deliberately not BERT-shaped: pre-norm blocks with one fused
projection, no segment embeddings, no biases, a final norm, weights under its own names
(`toy.blocks.N...`). Running the stack (with checkpointing), compiling it, keeping some layers'
weights and counting parameters are `EncoderBase`'s; the heads' inputs, outputs and losses are
the roles' (bertctl.model.roles)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from bertctl.model.attention import AttentionPolicy
from bertctl.model.roles import MaskedLM, RoleHead, SequenceClassifier
from bertctl.model.shared import EncoderBase, attention_bias

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


class ToyHead(RoleHead):
    def init_module(self, module):
        init(module)


class ToyMaskedLMHead(ToyHead, MaskedLM):
    """Its decoder is the token table, with no weights of its own."""

    def predict(self, model, hidden):
        return F.linear(hidden, model.encoder.embeddings.tokens.weight)


class ToySequenceClassificationHead(ToyHead, SequenceClassifier):
    """A linear classifier on the first token (the role's pooling)."""

    def __init__(self, config, num_labels=None, problem_type="single_label_classification",
                 features=None):
        super().__init__(config)
        self.classifier = nn.Linear(self.width(features),
                                    self.problem(num_labels, problem_type))

    def classify(self, x):
        return self.classifier(x)
