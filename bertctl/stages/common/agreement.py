"""Whether a model can read the token ids of some data: one check for pretrain, finetune and
eval alike.

Ids past the model's embedding table crash, sequences longer than its position embeddings
crash, and ids written by another tokenizer are silently other words; so the model's vocabulary
must cover the data's, its positions the data's sequence length, its pad id be the data's, and,
where both tokenizers are at hand, every id must name the same token in both.
"""

from __future__ import annotations

from pathlib import Path

from bertctl.data.tokenizer.specials import special_id
from bertctl.errors import BertctlError
from tokenizers import Tokenizer


def check(where: str, *, model_vocab: int, max_positions: int, pad_id: int | None,
          data_vocab: int, seq_length: int, data_special_ids: dict[str, int] | None = None,
          model_tokenizer=None, data_tokenizer: Path | None = None, hint: str = "",
          positions_note: str = "") -> None:
    """BertctlError (naming `where`) unless the model reads the data as it was written.

    `data_vocab` is the size of the vocabulary the data's ids come from and `seq_length` the
    longest sequence it holds (or will be cut to); `model_tokenizer` (a `tokenizers.Tokenizer`)
    and `data_tokenizer` (a tokenizer.json path) are compared id by id when both are given.
    `hint` follows a tokenizer mismatch (e.g. how to rebuild the data with the model's),
    `positions_note` a sequence too long (the architecture's: bertctl.model.architectures)."""
    if model_vocab < data_vocab:
        raise BertctlError(f"{where}: the model's vocabulary ({model_vocab} tokens) is smaller "
                           f"than the data's ({data_vocab}); ids past the model's embedding "
                           f"table would crash")
    if seq_length > max_positions:
        raise BertctlError(f"{where}: its position embeddings read at most {max_positions} "
                           f"tokens, fewer than the data's max_seq_length "
                           f"{seq_length}{positions_note}")
    special = data_special_ids or {}
    if pad_id is not None and "[PAD]" in special and int(pad_id) != special["[PAD]"]:
        raise BertctlError(f"{where}: the model's pad_token_id is {pad_id} but the data's "
                           f"[PAD] is {special['[PAD]']}")
    if model_tokenizer is None:
        return
    if model_tokenizer.get_vocab_size() != data_vocab:
        raise BertctlError(f"{where}: the model's tokenizer has {model_tokenizer.get_vocab_size()} "
                           f"tokens but the data's {data_vocab}{hint}")
    for name, i in special.items():   # by role: [CLS] is RoBERTa's <s>
        if special_id(model_tokenizer, name) != i:
            raise BertctlError(f"{where}: {name} is id {special_id(model_tokenizer, name)} in "
                               f"the model's tokenizer but {i} in the data{hint}")
    if data_tokenizer is not None and Path(data_tokenizer).is_file():
        theirs = Tokenizer.from_file(str(data_tokenizer)).get_vocab(with_added_tokens=True)
        ours = model_tokenizer.get_vocab(with_added_tokens=True)
        differ = sorted(i for t, i in theirs.items() if ours.get(t) != i)
        if differ:
            by_id = {i: t for t, i in ours.items()}
            data_by_id = {i: t for t, i in theirs.items()}
            i = differ[0]
            raise BertctlError(f"{where}: the model's tokenizer and the data's differ in "
                               f"{len(differ)} tokens (id {i}: {by_id.get(i)!r} in the model, "
                               f"{data_by_id[i]!r} in the data){hint}")
