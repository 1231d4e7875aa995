"""`bertctl embed MODEL DATA --out DIR`: a frozen encoder's hidden states as vectors, in an
embeddings artifact (layout and pooling: bertctl/embeddings.py)."""

from __future__ import annotations

import time
from pathlib import Path

from bertctl import artifacts, console, embeddings, evaluation, hardware
from bertctl.config import EmbedSettings
from bertctl.errors import BertctlError
from bertctl.model.features import parse_layers
from bertctl.stages.common import models


def run(config: EmbedSettings, target: artifacts.Target, model_dir: Path, data: Path):
    hardware.set_threads(config.threads)
    source = models.open_model(model_dir, "model", exports=True)
    tok, _ = source.tokenizer()
    max_len = config.max_seq_length or models.model_length(source)   # unset: the model's
    models.check_reads_task(source, tok, max_len)
    layers = parse_layers(config.layers, int(source.hf_config["num_hidden_layers"]))
    if not data.exists():
        raise BertctlError(f"{data}: no such file or directory")
    # Unset pooling is the model's own (an embedding model's, sentence-transformers'), so the
    # vectors are the ones it was trained to give; a pooling given is the user's, normalised
    # only if asked. The resolved values are recorded.
    own = source.hf_config.get("bertctl_embedding") or {} if config.pool is None else {}
    config = config.model_copy(update={
        "pool": config.pool or own.get("pooling", "mean"),
        "normalize": own.get("normalize", False) if config.normalize is None
        else config.normalize})
    config = source.applied(config)
    device, precision, recorded = source.runtime(config.device, config.precision)
    opts = embeddings.EmbedOptions(layers=layers, combine=config.combine, pool=config.pool,
                                   normalize=config.normalize, dtype=config.dtype,
                                   max_seq_length=max_len,
                                   stride=config.doc_stride, batch_size=config.batch_size)
    inputs = [source.ref, models.data_input(data)]

    def build(tmp: Path) -> dict:
        model = models.load_encoder(source)
        model.to(device)
        started = time.monotonic()
        with console.progress("embedding", total=None, unit="rows") as bar, \
                evaluation.inference(model, device, precision):
            stats = embeddings.write(model, tok, embeddings.read_chunks(
                data, config.text_column, token_column=config.token_column,
                id_column=config.id_column), opts, tmp, device, config.shard_rows,
                progress=lambda n: bar.update(n), where=f"{source.path} on {data}",
                ids=config.id_column is not None)
        seconds = time.monotonic() - started
        console.log(f"{stats['rows']:,} rows -> {stats['vectors']:,} vectors of {stats['dim']} "
                    f"in {stats['shards']} shard(s), {seconds:.1f}s")
        return {**stats, "layers": list(layers), "model": str(source.path),
                "data": str(data), "precision": recorded, "device": str(device),
                "seconds": round(seconds, 3),
                "rows_per_second": round(stats["rows"] / seconds, 1) if seconds else None}

    return artifacts.produce("embeddings", config, inputs, target, build)
