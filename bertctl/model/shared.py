"""What every architecture's model files share: the activations config.json names (their
functions; the names are the contract's, architectures.ACTIVATION_NAMES), attention masks,
layer selection, [CLS] gathering, the pieces of post-LN layers and classifiers that several
architectures name alike, and `EncoderBase` (the layer stack). An architecture's own package (model/bert/,
model/modernbert/) imports from here, never from another architecture's."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import torch
import torch.utils.checkpoint
import torch.nn.functional as F
from torch import nn

from bertctl.model import varlen
from bertctl.model.dropout import Dropout
from bertctl.step_scope import StepTargets

# HF's names for the activations BERT checkpoints use. "gelu" is the exact erf form, as in the
# original TF code; the tanh approximation is a different function and gives different outputs.
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_new": partial(F.gelu, approximate="tanh"),
    "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}


def layer_mask(policy, attention_mask: torch.Tensor | None, packed: bool,
               input_ids: torch.Tensor) -> torch.Tensor | varlen.Masked | None:
    """What an encoder hands its layers for attention: `attention_bias`'s boolean mask, with
    the batch's sequences beside it (varlen.Masked) where its attention `policy` may take the
    variable-length path. A batch without padding needs none: flash takes it as it is."""
    dense = attention_bias(attention_mask, packed)
    if attention_mask is None or not policy.wants_sequences(input_ids.device):
        return dense
    return varlen.Masked(dense, varlen.Sequences.of(attention_mask, packed, *input_ids.shape[:2],
                                                    input_ids.device))


def attention_bias(attention_mask: torch.Tensor | None, packed: bool = False
                   ) -> torch.Tensor | None:
    """HF's (B, T) 1 = token / 0 = padding mask as SDPA's boolean "may attend" mask.

    Unpacked: (B, 1, 1, T). Padded query rows still attend to the real tokens, so no row is
    ever fully masked unless a sequence has no tokens at all. A batch without padding is best
    passed without a mask (training and evaluation drop an all-ones mask while the batch is
    still on the host: `data.collate.without_full_mask`), which lets SDPA use its fastest
    unmasked kernel; checking for that here would read the mask back from the device, a stall
    per forward pass on a GPU.

    Packed (see `data.collate.pack_batch`): the mask holds each token's sequence number in its
    row (1, 2, ...; 0 = padding) and a token attends only to its own sequence: a block-diagonal
    (B, 1, T, T) mask, so each sequence's outputs are those it would have alone.
    """
    if attention_mask is None:
        return None
    if packed:
        seq = attention_mask
        same = (seq[:, :, None] == seq[:, None, :]) | (seq[:, :, None] == 0)
        return (same & (seq[:, None, :] > 0))[:, None]
    return attention_mask.bool()[:, None, None, :]


def init_normal(module: nn.Module, std: float) -> None:
    """BERT's initialisation, which RoBERTa, DeBERTa, ELECTRA and DistilBERT share in
    transformers: N(0, std) weights (truncation aside), zero biases, LayerNorm 1/0, the padding
    row of an embedding zero."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def keep_layers(state: dict[str, torch.Tensor], layer: str, layers: list[int],
                drop=lambda new, rest: False) -> dict[str, torch.Tensor]:
    """`state` with only the `layers` of the list whose keys start with `layer` (`encoder.layer.`),
    renumbered from 0; `drop(new index, rest of the key)` leaves out what the layer at its new
    place does not have."""
    renumber = {old: new for new, old in enumerate(layers)}
    kept = {}
    for key, tensor in state.items():
        if not key.startswith(layer):
            kept[key] = tensor
            continue
        index, rest = key[len(layer):].split(".", 1)
        new = renumber.get(int(index))
        if new is not None and not drop(new, rest):
            kept[f"{layer}{new}.{rest}"] = tensor
    return kept


def first_tokens(hidden: torch.Tensor, sequence_starts: torch.Tensor | None) -> torch.Tensor:
    """Each sequence's [CLS] state: column 0 of each row, or the `sequence_starts` (flat
    row * T + column indices) of a packed batch."""
    if sequence_starts is None:
        return hidden[:, 0]
    return hidden.flatten(0, 1)[sequence_starts]


# Rows of logits converted to fp32 at a time: about 2 MB, so each slice stays in the cache
# between its conversion and its use.
_LOSS_CHUNK_BYTES = 1 << 21


class EncoderBase(nn.Module):
    """What every architecture's bare encoder does alike around its stack of layers (at
    `LAYERS`, its path in the module and in the state dict): run it (all of it or its first
    layers, recomputing each layer in the backward pass with `gradient_checkpointing`: dropout
    draws the same masks the second time, as checkpoint restores the RNG), compile each layer
    in place, name the modules whose outputs are the hidden states, keep some layers' weights,
    count its parameters. A subclass builds `embeddings` and the stack and says how a layer is
    called (`run_layers`' arguments)."""

    LAYERS: ClassVar[str] = "encoder.layer"
    gradient_checkpointing = False

    @property
    def stack(self) -> nn.ModuleList:
        module: nn.Module = self
        for name in self.LAYERS.split("."):
            module = getattr(module, name)
        return module

    def run_layers(self, x: torch.Tensor, num_layers: int | None, *args: Any
                   ) -> list[torch.Tensor]:
        """The hidden states: `x`, then each layer's output (the first `num_layers` only)."""
        layers = self.stack if num_layers is None else self.stack[:num_layers]
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        states = [x]
        for layer in layers:
            if recompute:
                x = torch.utils.checkpoint.checkpoint(layer, x, *args, use_reentrant=False)
            else:
                x = layer(x, *args)
            states.append(x)
        return states

    def compile_layers(self, on: bool = True) -> None:
        """torch.compile each layer in place (the training loop's --compile), or (`on` False)
        run them eager again. Regional: the layers share one compiled graph, so compiling
        costs one layer's time, parameter names do not change (checkpoints and artifacts stay
        as they are), and it composes with DDP and gradient checkpointing. Sequence lengths
        vary from batch to batch: torch marks them dynamic after the first recompile."""
        for layer in self.stack:
            if on:
                layer.compile()
            else:   # what nn.Module.compile set, unset
                layer._compiled_call_impl = None

    def hidden_state_modules(self) -> list[nn.Module]:
        """The modules whose outputs are the hidden states 0 (the embeddings) to L."""
        return [self.embeddings, *self.stack]

    def layer_state(self, layers: list[int], state: dict[str, torch.Tensor] | None = None,
                    prefix: str = "") -> dict[str, torch.Tensor]:
        """`state` (this model's by default; keys under `prefix`) with only `layers` of the
        stack, renumbered from 0."""
        return keep_layers(self.state_dict() if state is None else state,
                           f"{prefix}{self.LAYERS}.", layers, drop=self._dropped_when_moved)

    @staticmethod
    def _dropped_when_moved(new: int, rest: str) -> bool:
        """Whether a layer's weight `rest` has no place at its new index `new`."""
        return False

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        skip = {id(p) for p in self.embeddings.parameters()} if exclude_embeddings else set()
        return sum(p.numel() for p in self.parameters() if id(p) not in skip)


class ProjectAddNorm(nn.Module):
    """dense -> dropout -> add the block's input -> LayerNorm: the post-LN sub-layer output of
    BERT's layer and of the layers built like it (DeBERTa's). transformers names it SelfOutput
    after attention and Output after the feed-forward; the two differ only in the input width."""

    def __init__(self, in_features: int, config):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Intermediate(nn.Module):
    """The feed-forward's expansion to intermediate_size and its activation (transformers'
    Intermediate, at `intermediate`)."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class DenseClassificationHead(nn.Module):
    """A classifier with a dense layer of its own (RoBERTa's and ELECTRA's, where BERT's reads
    the pooler): on the first token, dropout, dense, `activation`, dropout, out_proj."""

    def __init__(self, config, width: int, num_labels: int,
                 activation: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        p = config.classifier_dropout
        self.dropout = Dropout(config.hidden_dropout_prob if p is None else p)
        self.dense = nn.Linear(width, config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, num_labels)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(self.activation(self.dense(self.dropout(x)))))


class TiedOutputBias(nn.Module):
    """A masked LM's output layer whose weight is the word embedding table (passed in where
    it is used): only its bias is its own, at `NAME.bias` as transformers' checkpoints hold it
    (ELECTRA's generator_lm_head, DistilBERT's vocab_projector)."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size))


class _VocabularyCrossEntropy(torch.autograd.Function):
    """Cross-entropy of (N, V) logits of any float dtype summed over the rows, computed in fp32
    a slice of rows at a time: the gradient softmax - one-hot is written straight into the
    logits' dtype.

    Why not `F.cross_entropy(logits.float(), targets)` on a CPU: over a 30k vocabulary that
    makes a fp32 copy of the logits, their log-softmax, a zero-filled gradient and its conversion
    back, each a fresh (N, V) tensor too large to reuse freed memory (70 MB at 579 x 30,522
    in fp32, each one paid in page faults). With bf16 logits of that size, forward and backward
    took 106 ms that way and 40 ms this way (fp32 logits: 84 and 58 ms) on an AMD EPYC with 2
    threads, the plain form being a sixth of BERT mini's bf16 step. The arithmetic is the same
    fp32 one, so loss and gradient agree with the plain form to fp32 rounding.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        n, vocabulary = logits.shape
        rows = max(1, _LOSS_CHUNK_BYTES // (4 * vocabulary))
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        for i in range(0, n, rows):
            torch.logsumexp(logits[i:i + rows].float(), -1, out=lse[i:i + rows])
        picked = logits.gather(1, targets[:, None]).squeeze(1).float()
        ctx.save_for_backward(logits, targets, lse)
        ctx.rows = rows
        return (lse - picked).sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        n, rows = logits.size(0), ctx.rows
        out = torch.empty_like(logits)
        scale = grad.float()
        for i in range(0, n, rows):
            # Out of place: for fp32 logits .float() is the saved tensor itself.
            p = torch.sub(logits[i:i + rows].float(), lse[i:i + rows, None]).exp_()
            p[torch.arange(p.size(0), device=p.device), targets[i:i + rows]] -= 1
            out[i:i + rows] = p.mul_(scale)
        return out, None


def vocabulary_cross_entropy(logits: torch.Tensor, targets: torch.Tensor,
                             fused: bool | None = None) -> torch.Tensor:
    """The masked LM's loss summed over the predicted positions, in fp32 whatever the logits'
    dtype: `fused` (on CUDA unless given) one cross-entropy, else `_VocabularyCrossEntropy`'s
    slices, which pay on a CPU's cache (its docstring) and would only add kernels on a GPU.
    Zero, still reaching every parameter, when nothing is predicted (a shape: known on the
    host)."""
    if not targets.numel():
        return logits.sum() * 0.0
    if fused is None:
        fused = logits.device.type == "cuda"
    if fused:
        return F.cross_entropy(logits.float(), targets, reduction="sum")
    return _VocabularyCrossEntropy.apply(logits, targets)


def token_mean(total: torch.Tensor, count: torch.Tensor | int, scope: StepTargets | None,
               kind: str = "targets") -> torch.Tensor:
    """`total` (a loss summed over `count` tokens) as a mean: over this batch's tokens, or in
    the loop's scope over the step's (`StepTargets`: `kind` "targets", predicted labels, or
    "tokens", real tokens)."""
    denominator = getattr(scope, kind) if scope is not None else None
    if denominator is None:
        if isinstance(count, torch.Tensor):
            return total / count.clamp(min=1)
        return total / max(count, 1)
    return total / denominator
