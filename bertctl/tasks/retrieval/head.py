"""The retrieval family's head: a text's vector from the encoder's last hidden states, as
sentence-transformers computes it (bertctl.model.sentence's chain: pooling, Dense layers,
normalisation), on any architecture's encoder (bertctl/model/composed.py pairs them; the model
class is the architecture's prefix + "ForEmbedding"). It only embeds: how it is trained (the
contrastive losses, cached negatives) is the job's, contrastive.py's.

`matryoshka_dims` are the sizes its vectors were trained to be cut to (recorded). `late_dim`:
a late-interaction head (`late`, a linear map of each piece's state, fitted with the encoder
frozen: `finetune --late-dim`), which late interaction compares instead of the raw states; it
is kept in its own folder (LATE_FOLDER), which sentence-transformers does not read. The sentence
chain, the prompts and the sizes are the model's: config.json's `bertctl_embedding`, or a
sentence-transformers directory's modules, which it writes beside config.json so that
`SentenceTransformer(DIR).encode` gives the same vectors."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from bertctl.data import collate
from bertctl.errors import BertctlError
from bertctl.model import architectures, sentence
from bertctl.model.composed import Composed, Head
from bertctl.step_scope import host_twin
from bertctl.search import late as late_interaction


LATE_FOLDER = "late_projection"
# What encoding one more run of a column costs on a CPU, in positions of work
# (SentenceEmbedding.column_vectors).
RUN_OVERHEAD = 32


class SentenceEmbedding(sentence.SentenceHead, Head):
    """One vector per sequence. Inputs (B, T): `embeddings` (B, D); or (B, K, T), K sequences
    an example (a query and its documents, a pair): `embeddings` (B, K, D)."""

    # Its weights (the Dense layers) are `sentence.dense.N...`, kept in sentence-transformers'
    # folders, not model.safetensors.
    attribute = "sentence"
    weights_elsewhere = ("sentence.",)
    # An export embeds one text a row (a search index's queries and documents); pairs and
    # training batches are (B, K, T) in PyTorch only.
    input_rank = 2
    # Its pooling is read from any config that has one, a sentence-transformers model's too
    # (whose config.json names the bare encoder).
    kwargs_from_any_config = True

    def __init__(self, config, pooling: str | list[str] = "mean", normalize: bool = True,
                 dense: list[dict[str, Any]] | tuple = (), prompts: dict[str, str] | None = None,
                 default_prompt_name: str | None = None, max_seq_length: int | None = None,
                 matryoshka_dims: list[int] | tuple = (), late_dim: int | None = None):
        try:
            sentence.SentenceHead.__init__(self, config.hidden_size, pooling, dense, normalize)
        except ValueError as exc:
            raise BertctlError(f"the embedding head: {exc}") from None
        dims = tuple(int(d) for d in matryoshka_dims)
        if dims and (dims[0] > self.dim or list(dims) != sorted(set(dims), reverse=True)
                     or dims[-1] < 1):
            raise BertctlError(f"--matryoshka-dims {','.join(map(str, dims))}: sizes largest "
                               f"first, each at most the model's {self.dim} values")
        self.matryoshka_dims = dims
        self.late = None
        if late_dim is not None:
            if not 1 <= int(late_dim) <= config.hidden_size:
                raise BertctlError(f"--late-dim {late_dim}: at most the model's hidden size, "
                                   f"{config.hidden_size}")
            self.late = nn.Linear(config.hidden_size, int(late_dim), bias=False)
            # Starts at the states' first late_dim values (all of them at the hidden size:
            # the untrained reordering's scores), a start the fitting improves on.
            with torch.no_grad():
                self.late.weight.copy_(torch.eye(int(late_dim), config.hidden_size))
        self.prompts, self.default_prompt_name = dict(prompts or {}), default_prompt_name
        self.max_seq_length = max_seq_length

    def embed(self, model: Composed, input_ids: torch.Tensor,
              token_type_ids: torch.Tensor | None = None,
              attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(N, T) -> (N, D): each sequence's vector."""
        return self.embed_with_states(model, input_ids, token_type_ids, attention_mask)[0]

    def embed_with_states(self, model: Composed, input_ids: torch.Tensor,
                          token_type_ids: torch.Tensor | None = None,
                          attention_mask: torch.Tensor | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, T) -> the vectors (N, D) and the last hidden states they pool (N, T, H): the
        pieces late interaction compares (late.py)."""
        hidden = model.sequence(input_ids, token_type_ids, attention_mask)
        return sentence.SentenceHead.forward(self, hidden, attention_mask), hidden

    def token_vectors(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, T, H) last hidden states -> the pieces late interaction compares: mapped by the
        late head where the model has one, else as they are."""
        return hidden if self.late is None else self.late(hidden)

    def embed_with_pieces(self, model: Composed, input_ids: torch.Tensor,
                          token_type_ids: torch.Tensor | None = None,
                          attention_mask: torch.Tensor | None = None
                          ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(N, T) -> the vectors (N, D) and, from the same pass, each row's pieces as late
        interaction compares them: its real tokens' `token_vectors` at unit length ((n, width)
        float32 a row; [CLS] and [SEP] included)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        vectors, hidden = self.embed_with_states(model, input_ids, token_type_ids,
                                                 attention_mask)
        return vectors, late_interaction.unit_pieces(self.token_vectors(hidden), attention_mask)

    @staticmethod
    def trim(input_ids, token_type_ids=None, attention_mask=None,
             lengths: np.ndarray | None = None) -> tuple:
        """Rows cut to their longest real sequence (padding changes no vector); `lengths`,
        the rows' lengths on the host where the loop has them (`host_lengths`): a length
        read from the device waits for it."""
        if attention_mask is not None:
            longest = attention_mask.sum(-1).max() if lengths is None else lengths.max()
            width = max(int(longest), 1)
            input_ids, attention_mask = input_ids[:, :width], attention_mask[:, :width]
            token_type_ids = None if token_type_ids is None else token_type_ids[:, :width]
        return input_ids, token_type_ids, attention_mask

    def trimmed(self, model: Composed, input_ids, token_type_ids=None,
                attention_mask=None) -> torch.Tensor:
        """`embed` of rows cut to their longest real sequence."""
        return self.embed(model, *self.trim(input_ids, token_type_ids, attention_mask))

    @staticmethod
    def columns(*inputs: torch.Tensor | None) -> list[torch.Tensor | None]:
        """(B, K, T) inputs as (K * B, T) rows, column by column (all queries, then all
        positives, ...); (B, T) ones as they are."""
        return [None if t is None else t.transpose(0, 1).reshape(-1, t.shape[-1])
                if t.dim() == 3 else t for t in inputs]

    def column_batches(self, flat: list[torch.Tensor | None], step: int,
                       lengths: np.ndarray | None = None):
        """`columns`' (K * B, T) rows a column (`step` rows) at a time, each cut to its own
        longest sequence: a batch pads its short queries to its long passages otherwise.
        Yields (ids, types, mask, the rows' lengths on the host or None)."""
        for i in range(0, flat[0].shape[0], step):
            part = None if lengths is None else lengths[i:i + step]
            yield (*self.trim(*[None if t is None else t[i:i + step] for t in flat],
                              lengths=part), part)

    @staticmethod
    def host_lengths(attention_mask: torch.Tensor | None) -> np.ndarray | None:
        """The (K * B) rows' lengths, as `columns` orders them, from the host's copy of a
        training batch's mask (step_scope.host_twin), in numpy: nothing of the step's
        tensors is read. None without one."""
        host = host_twin(attention_mask)
        if host is None:
            return None
        lengths = host.numpy().sum(-1)
        return lengths.T.reshape(-1) if lengths.ndim == 2 else lengths

    def column_vectors(self, model: Composed, input_ids: torch.Tensor,
                       token_type_ids: torch.Tensor | None = None,
                       attention_mask: torch.Tensor | None = None,
                       lengths: np.ndarray | None = None) -> torch.Tensor:
        """One column's vectors (N, D) (a batch's queries, or its positives; `trim`'s rows).
        On a CPU its rows are encoded in runs of similar length (`collate.length_runs`, a
        run's work its model FLOPs): in one batch, a column of 16-token queries or of passages
        from 40 to 128 tokens spends a fifth to a half of its work on padding. Each row's
        vector is what one batch gives it; the dropout draws fall elsewhere. A run costs about
        what 32 more positions do on a CPU (`RUN_OVERHEAD`; on all-MiniLM-L6-v2, 16 and 64 ran
        within 2% of it). On a GPU, where a batch's launches cost more than its rows, the
        column stays one batch: splitting it there is unmeasured."""
        if attention_mask is None or input_ids.device.type != "cpu" or len(input_ids) < 2:
            return self.embed(model, input_ids, token_type_ids, attention_mask)
        if lengths is None:
            lengths = attention_mask.sum(-1).numpy()
        order_np = np.argsort(lengths, kind="stable")
        ordered = lengths[order_np].tolist()
        order = torch.from_numpy(order_np)
        config = model.config
        per_length = {n: config.matmul_flops(1, max(n, 1), mlm_fraction=0.0, training=False)
                      for n in set(ordered)}
        runs = collate.length_runs(
            [per_length[n] for n in ordered],
            config.matmul_flops(1, RUN_OVERHEAD, mlm_fraction=0.0, training=False))
        if len(runs) == 1:
            return self.embed(model, input_ids, token_type_ids, attention_mask)
        # Each run cut to its longest row, whose length is known: no trim's reduction again.
        parts = [self.embed(model, *[None if t is None else t[order[a:z], :max(ordered[z - 1], 1)]
                                     for t in (input_ids, token_type_ids, attention_mask)])
                 for a, z in runs]
        return torch.cat(parts)[torch.from_numpy(np.argsort(order_np))]

    def forward(self, model: Composed, input_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The vectors; `labels` (an evaluated file's scores) are not the model's to read: a
        loss over them is the training job's (contrastive.py)."""
        shape = input_ids.shape
        if len(shape) == 2:   # one text a row (inference, an export's graph): as given
            return {"embeddings": self.embed(model, input_ids, token_type_ids, attention_mask)}
        flat = self.columns(input_ids, token_type_ids, attention_mask)
        lengths = self.host_lengths(attention_mask)
        vectors = torch.cat([self.column_vectors(model, *rows)
                             for rows in self.column_batches(flat, shape[0], lengths)])
        return {"embeddings": vectors.reshape(shape[1], shape[0], -1).transpose(0, 1)}

    def hf_config(self) -> dict[str, Any]:
        record = self.record()
        if self.matryoshka_dims:
            record["matryoshka_dims"] = list(self.matryoshka_dims)
        if self.late is not None:
            record["late_dim"] = self.late.out_features
        if self.prompts:
            record.update(prompts=self.prompts, default_prompt_name=self.default_prompt_name)
        return {sentence.KEY: record}

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        given = sentence.record_of(hf_config) or {}
        kwargs = {k: given[k] for k in ("pooling", "normalize", "prompts", "matryoshka_dims",
                                        "default_prompt_name", "max_seq_length", "late_dim")
                  if k in given}
        if given.get("dense"):
            kwargs["dense"] = [{k: v for k, v in d.items() if k != "path"}
                               for d in given["dense"]]
        return kwargs

    @classmethod
    def extra_weights(cls, directory, hf_config: dict[str, Any]) -> dict[str, torch.Tensor]:
        record = sentence.record_of(hf_config) or {}
        tensors = sentence.dense_weights(directory, record, "sentence.dense")
        if record.get("late_dim") is not None:
            tensors.update(sentence.folder_weights(directory, LATE_FOLDER, "sentence.late"))
        return tensors

    def extra_files(self, model: Composed) -> dict[str, Any]:
        files = self.layout(model.config.hidden_size,
                            self.max_seq_length or architectures.longest_input(model.config),
                            self.prompts, self.default_prompt_name)
        if self.late is not None:
            files[f"{LATE_FOLDER}/model.safetensors"] = {
                k: v.detach().contiguous().cpu() for k, v in self.late.state_dict().items()}
        return files


__all__ = ["SentenceEmbedding"]
