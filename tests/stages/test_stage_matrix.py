"""Every stage that reads a model, on every architecture (#103's hole: `embed` failed on every
DistilBERT, so index, search and mine could not be reached). One tiny model per architecture,
pretrained from the vocabulary its spelling needs, then: embed, index, search, mine, a
retrieval fine-tune and its embed, a classifier's fine-tune, eval, embed and distill; and
(slow) the encoder's int8 export, run by embed. The per-architecture files
(test_*_cli.py) cover every task family and what each architecture adds; this table holds the
stages to all of them."""

from __future__ import annotations

import json

import pytest

from helpers import CORPUS, EXAMPLES, FAMILY_DATA, made
from bertctl.model import ARCHITECTURES

TINY = ["--model-size", "tiny", "--hidden-size", "32", "--num-attention-heads", "2",
        "--intermediate-size", "64", "--max-position-embeddings", "130"]
# RoBERTa's and XLM-R's tokenizers spell their specials RoBERTa's way (pad id 1).
ROBERTA_SPELLED = {"roberta", "xlm-roberta"}


def test_the_table_holds_every_architecture():
    assert set(ARCHITECTURES) == set(MATRIX)


MATRIX = sorted(ARCHITECTURES)


@pytest.fixture(scope="module")
def bpe_data(tmp_path_factory):
    tok = made(tmp_path_factory, "mbpe", "tokenize", CORPUS / "alice.txt", "--model",
                "byte-level-bpe", "--vocab-size", "1200")
    return made(tmp_path_factory, "mbdata", "build-pretrain-data", tok, CORPUS / "alice.txt",
                 "--max-seq-length", "64", "--no-nsp", "--masking", "dynamic", "--workers", "1")


@pytest.fixture(scope="module", params=MATRIX)
def tiny(request, tmp_path_factory, continuous_data, bpe_data):
    arch = request.param
    data = bpe_data if arch in ROBERTA_SPELLED else continuous_data
    return arch, made(tmp_path_factory, f"m-{arch}", "pretrain", data, "--objective", "mlm",
                       "--architecture", arch, *TINY, "--steps", "2", "--batch-size", "8",
                       "--eval-batches", "1")


def _ok(r, what):
    assert r.exit_code == 0, (what, r.stderr)


def test_every_stage_reads_every_architecture(tiny, cli, tmp_path):
    arch, model = tiny
    assert json.loads((model / "config.json").read_text())["model_type"] == \
        ARCHITECTURES[arch].model_type
    rows = EXAMPLES / "retrieval" / "train.tsv"
    beir = EXAMPLES / "retrieval" / "beir"
    docs = beir / "corpus.jsonl"
    # the search path: the encoder embeds; a retrieval model embeds, indexes, searches, mines
    _ok(cli("embed", model, docs, "--text-column", "text", "--out", tmp_path / "emb"), "embed")
    _ok(cli("finetune", model, rows, "--task", "retrieval", "--steps", "1", "--batch-size", "8",
            "--out", tmp_path / "ret"), "finetune retrieval")
    _ok(cli("embed", tmp_path / "ret", docs, "--text-column", "text", "--id-column", "_id",
            "--store-text", "--out", tmp_path / "ret-emb"), "embed retrieval")
    _ok(cli("index", tmp_path / "ret-emb", "--out", tmp_path / "idx"), "index")
    r = cli("search", tmp_path / "idx", "--queries", beir / "queries.jsonl", "--top-k", "2")
    _ok(r, "search")
    assert len(r.stdout.splitlines()) >= 2 and "score" in json.loads(r.stdout.splitlines()[0])
    _ok(cli("mine", tmp_path / "ret", rows, "--out", tmp_path / "mined"), "mine")
    data, dev = FAMILY_DATA["single"]
    _ok(cli("finetune", model, *data, "--steps", "1", "--batch-size", "8",
            "--out", tmp_path / "cls"), "finetune")
    _ok(cli("eval", tmp_path / "cls", dev, "--out", tmp_path / "ev"), "eval")
    _ok(cli("embed", tmp_path / "cls", dev, "--text-column", "sentence",
            "--out", tmp_path / "cls-emb"), "embed classifier")
    _ok(cli("distill", tmp_path / "cls", *data, "--student-layers", "0", "--steps", "1",
            "--batch-size", "8", "--out", tmp_path / "student"), "distill")


@pytest.mark.slow   # an ONNX export takes 3-8 s here
def test_every_architectures_encoder_export_embeds(tiny, cli, tmp_path):
    """The classifiers' fp32 and int8 exports, run by eval, are each architecture's own file's
    (test_export.py, test_*_cli.py); the encoder's, run by embed, are held here."""
    arch, model = tiny
    _, dev = FAMILY_DATA["single"]
    _ok(cli("export", model, "--encoder", "--quantize", "int8", "--out", tmp_path / "enc"),
        "export --encoder")
    _ok(cli("embed", tmp_path / "enc", dev, "--text-column", "sentence",
            "--out", tmp_path / "emb"), "embed an export")
