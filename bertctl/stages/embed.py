"""`bertctl embed MODEL DATA --out DIR`: a frozen encoder's hidden states as vectors, in an
embeddings artifact (layout and pooling: bertctl/frozen_features.py)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from bertctl import console, evaluation, frozen_features
from bertctl.contract import artifacts
from bertctl.data import tables
from bertctl.stages.settings.embed import EmbedSettings
from bertctl.errors import BertctlError
from bertctl.model import architectures, sentence_layout
from bertctl.model.features import parse_layers
from bertctl.stages.common import models, runtime


def run(settings: EmbedSettings, target: artifacts.Target, model_dir: Path, data: Path):
    settings = runtime.applied(settings)
    source = models.open_model(model_dir, "model", exports=True)
    tok, _ = source.tokenizer()
    max_len = settings.max_seq_length or models.model_length(source)   # unset: the model's
    models.check_reads_task(source, tok, max_len)
    layers = parse_layers(settings.layers, source.num_layers)
    if not data.exists():
        raise tables.no_such_path(data)
    # Unset pooling on an embedding model (bertctl's, sentence-transformers') gives the model's
    # own vectors, as it was trained to give them; a pooling given is the user's, over the
    # layers asked, normalised only if asked. The resolved values are recorded.
    embedder = source.hf_config.get(sentence_layout.KEY) is not None or architectures.role_of(
        (source.hf_config.get("architectures") or [""])[0]) == "embedding"
    own = settings.pool == "model" or (settings.pool is None and embedder)
    if own and not embedder:
        raise BertctlError(f"--pool model: {source.path} is not an embedding model (it has no "
                           f"sentence head of its own); give --pool cls or mean")
    # (a sentence head bertctl does not compute is refused here, not for the hidden states)
    record = sentence_layout.record_of(source.hf_config) if own else None
    prompt = _prompt(settings, record, source.path) if own else ""
    if own:
        if settings.layers != "-1" or settings.combine != "concat":
            raise BertctlError("--layers and --combine choose hidden states for a --pool you "
                               f"give; {source.path} is an embedding model, whose own vectors "
                               f"are its sentence head's (give --pool to take hidden states)")
        unit = (record or {}).get("normalize", True)
        if settings.normalize is False and unit:
            raise BertctlError(f"--no-normalize: {source.path}'s own vectors are unit length "
                               f"(its Normalize module); give --pool to take hidden states")
        settings = settings.model_copy(update={"pool": "model", "normalize": bool(
            unit if settings.normalize is None else settings.normalize)})
    elif settings.store_pieces:
        raise BertctlError("--store-pieces keeps an embedding model's pieces beside its own "
                           "vectors (--pool model), for late interaction; --pool tokens writes "
                           "every piece's hidden state as the vectors")
    elif settings.prompt_name is not None or settings.prompt is not None:
        raise BertctlError("--prompt and --prompt-name apply to an embedding model's own "
                           "vectors (--pool model)")
    else:
        settings = settings.model_copy(update={"pool": settings.pool or "mean",
                                           "normalize": bool(settings.normalize)})
    if settings.store_pieces and source.onnx is not None:
        raise BertctlError(f"--store-pieces: {source.path} is an export, whose graph gives the "
                           f"pooled vectors only; embed with the model it was exported from")
    settings = source.applied(settings)
    device, precision, recorded = source.runtime(settings.device, settings.precision)
    opts = frozen_features.EmbedOptions(layers=layers, combine=settings.combine, pool=settings.pool,
                                   normalize=settings.normalize, dtype=settings.dtype,
                                   max_seq_length=max_len,
                                   stride=settings.doc_stride, batch_size=settings.batch_size,
                                   own=own, prompt=prompt, store_text=settings.store_text,
                                   store_pieces=settings.store_pieces)
    if own:   # its sentence head normalises what it should; a unit vector again is itself
        opts = dataclasses.replace(opts, normalize=False)
    inputs = [source.ref, models.data_input(data)]

    def build(tmp: Path) -> dict:
        model = (models.load_task_model(source, "embedding") if own
                 else models.load_encoder(source))
        model.to(device)
        started = time.monotonic()
        with console.progress("embedding", total=None, unit="rows") as bar, \
                evaluation.inference(model, device, precision):
            stats = frozen_features.write(model, tok, frozen_features.read_chunks(
                data, settings.text_column, token_column=settings.token_column,
                id_column=settings.id_column), opts, tmp, device, settings.shard_rows,
                progress=lambda n: bar.update(n), where=f"{source.path} on {data}",
                ids=settings.id_column is not None)
        seconds = time.monotonic() - started
        console.log(f"{stats['rows']:,} rows -> {stats['vectors']:,} vectors of {stats['dim']} "
                    f"in {stats['shards']} shard(s), {seconds:.1f}s")
        if stats["truncated_rows"]:
            console.log(f"note: {stats['truncated_rows']:,} text(s) longer than {max_len} "
                        f"pieces were truncated, as the model's own encoding does")
        return {**stats, "layers": list(layers), "model": str(source.path),
                "data": str(data), "precision": recorded, "device": str(device),
                "seconds": round(seconds, 3),
                "rows_per_second": round(stats["rows"] / seconds, 1) if seconds else None}

    return artifacts.produce("embeddings", settings, inputs, target, build)


def _prompt(settings: EmbedSettings, record: dict | None, where: Path) -> str:
    """The text put before every row: --prompt, the model's prompt --prompt-name names, else
    its default prompt (as sentence-transformers' encode)."""
    if settings.prompt is not None and settings.prompt_name is not None:
        raise BertctlError("give --prompt or --prompt-name, not both")
    if settings.prompt is not None:
        return settings.prompt
    prompts = (record or {}).get("prompts") or {}
    if settings.prompt_name is not None:
        if settings.prompt_name not in prompts:
            raise BertctlError(f"--prompt-name {settings.prompt_name}: {where} has "
                               + (f"the prompts {', '.join(prompts)}" if prompts
                                  else "no prompts"))
        return prompts[settings.prompt_name]
    return sentence_layout.prompt_for(record, "text")
