"""`--architecture deberta-v2` through every stage, on the command line: pretrain (mlm) from a
WordPiece vocabulary and from a Unigram one spelled BERT's way (DeBERTa-v3's kind), every
family's finetune and eval, retrieval and reranking, the frozen encoder, embed, export (fp32 and
int8, with --check), distill; the artifacts are transformers' DebertaV2 directories."""

import json

import pytest
import torch

from helpers import CORPUS, EXAMPLES, FAMILY_DATA, made
from tolerance import TINY_FP32  # (each tolerance's reason)

TINY_DEBERTA = ["--architecture", "deberta-v2", "--model-size", "tiny", "--hidden-size", "32",
                "--num-attention-heads", "2", "--intermediate-size", "64",
                "--max-position-embeddings", "128"]


@pytest.fixture(scope="module")
def deberta(tmp_path_factory, continuous_data):
    return made(tmp_path_factory, "deberta", "pretrain", continuous_data, "--objective", "mlm",
                 *TINY_DEBERTA, "--steps", "6", "--batch-size", "8", "--lr", "2e-3",
                 "--eval-every", "3", "--eval-batches", "2")


@pytest.fixture(scope="module")
def deberta_tasks(tmp_path_factory, deberta):
    return {family: made(tmp_path_factory, f"d-{family}", "finetune", deberta, *data,
                          "--steps", "4", "--batch-size", "8")
            for family, (data, _) in FAMILY_DATA.items()}


def test_pretrained_deberta_is_what_transformers_loads(deberta):
    transformers = pytest.importorskip("transformers")
    config = json.loads((deberta / "config.json").read_text())
    assert config["model_type"] == "deberta-v2"
    assert config["architectures"] == ["DebertaV2ForMaskedLM"]
    assert config["position_buckets"] == 256 and config["relative_attention"]
    tok = transformers.AutoTokenizer.from_pretrained(str(deberta))
    enc = tok(["Alice was beginning to get very tired.", "Down the rabbit hole."],
              padding=True, return_tensors="pt")
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(deberta)).eval()
    from bertctl.model import load_model

    ours, report = load_model(deberta)
    assert report.complete, report
    with torch.no_grad():
        got = ours.eval()(enc["input_ids"], None, enc["attention_mask"])["mlm_logits"]
        ref = hf(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(got[real], ref[real], **TINY_FP32)


@pytest.mark.parametrize("family", sorted(FAMILY_DATA))
def test_every_family_finetunes_and_evaluates_a_deberta(family, deberta_tasks, cli, tmp_path):
    model = deberta_tasks[family]
    assert json.loads((model / "config.json").read_text())["architectures"][0].startswith(
        "DebertaV2For")
    r = cli("eval", model, FAMILY_DATA[family][1], "--out", tmp_path / "eval")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_export_of_a_deberta_is_checked_and_runs(quantize, deberta_tasks, cli, tmp_path):
    r = cli("export", deberta_tasks["single"], "--quantize", quantize, "--check",
            FAMILY_DATA["single"][1], "--out", tmp_path / "onnx")
    assert r.exit_code == 0, r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("attention, projections", [
    ({"pos_att_type": ["c2p"], "share_att_key": True}, 1),            # the shared key's
    ({"pos_att_type": ["p2c", "c2p"], "share_att_key": False}, 2)])   # its own key's and query's
def test_int8_export_of_each_relative_attention_runs(attention, projections, cli,
                                                     small_tokenizer, tmp_path):
    """The probe's configurations (#103: onnxruntime refused the DynamicQuantizeMatMul of
    `pos_att_type ["c2p"]` or `share_att_key: false`). Their position projections are products
    of constants: they stay fp32, the layers' matrices int8."""
    transformers = pytest.importorskip("transformers")
    import collections
    import shutil

    import onnx

    from bertctl.model.onnx_model import constant_products

    config = transformers.DebertaV2Config(
        vocab_size=4000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, relative_attention=True,
        position_buckets=32, max_relative_positions=64, norm_rel_ebd="layer_norm",
        type_vocab_size=0, pad_token_id=0, **attention)
    hf = tmp_path / "hf"
    transformers.DebertaV2ForMaskedLM(config).save_pretrained(hf)
    for name in ("tokenizer.json", "vocab.txt"):
        shutil.copy(small_tokenizer / name, hf / name)
    data, dev = FAMILY_DATA["single"]
    r = cli("finetune", hf, *data, "--steps", "1", "--batch-size", "8", "--out", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    for quantize in ("none", "int8"):
        r = cli("export", tmp_path / "m", "--quantize", quantize, "--check", dev,
                "--out", tmp_path / quantize)
        assert r.exit_code == 0, r.stderr
    constants = constant_products(tmp_path / "none" / "model.onnx")
    assert len(constants) == 2 * projections * 2   # per layer, each named as Gemm and MatMul
    ops = collections.Counter(n.op_type for n in onnx.load(
        str(tmp_path / "int8" / "model.onnx")).graph.node)
    assert ops["MatMulInteger"] == 2 * 6 + 2   # q, k, v, out, two feed-forward; the head's


def test_search_embed_distill_and_a_unigram_vocabulary_take_a_deberta(deberta, deberta_tasks,
                                                                      cli, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    rows = EXAMPLES / "retrieval" / "train.tsv"
    assert cli("finetune", deberta, rows, "--task", "retrieval", "--steps", "2",
               "--batch-size", "8", "--out", tmp_path / "emb").exit_code == 0
    assert cli("mine", tmp_path / "emb", rows, "--out", tmp_path / "mined").exit_code == 0
    r = cli("finetune", deberta, tmp_path / "mined" / "pairs.jsonl", "--task", "reranking",
            "--steps", "2", "--batch-size", "4", "--out", tmp_path / "rr")
    assert r.exit_code == 0, r.stderr
    embedder = st.SentenceTransformer(str(tmp_path / "emb"), device="cpu")
    assert type(embedder[0].auto_model).__name__ == "DebertaV2Model"
    assert cli("embed", deberta, CORPUS / "alice.txt", "--out", tmp_path / "e").exit_code == 0
    data, _ = FAMILY_DATA["single"]
    r = cli("distill", deberta_tasks["single"], *data, "--student-layers", "0", "--steps", "2",
            "--batch-size", "8", "--out", tmp_path / "d")
    assert r.exit_code == 0, r.stderr
    r = cli("finetune", deberta, *data, "--freeze-encoder", "--steps", "2", "--batch-size", "8",
            "--out", tmp_path / "f")
    assert r.exit_code == 0, r.stderr
    # DeBERTa-v3's kind of vocabulary: Unigram, BERT's spelling
    assert cli("tokenize", CORPUS / "alice.txt", "--model", "unigram", "--special-tokens",
               "bert", "--vocab-size", "1200", "--out", tmp_path / "u").exit_code == 0
    assert cli("build-pretrain-data", tmp_path / "u", CORPUS / "alice.txt", "--max-seq-length",
               "64", "--no-nsp", "--masking", "dynamic", "--whole-word-mask", "--workers", "1",
               "--out", tmp_path / "ud").exit_code == 0
    r = cli("pretrain", tmp_path / "ud", "--objective", "mlm", *TINY_DEBERTA, "--steps", "2",
            "--batch-size", "8", "--out", tmp_path / "up")
    assert r.exit_code == 0, r.stderr
