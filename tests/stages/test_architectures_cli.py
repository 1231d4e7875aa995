"""Every shipped architecture but BERT (whose stages the rest of the suite runs) through every
stage on the command line, from one table, ARCHS: pretrain (mlm) to what transformers loads with
bertctl's outputs, the pretraining metrics, every family's finetune and eval as transformers'
own class, export (fp32 and int8, checked, then evaluated), retrieval, mining and reranking as
sentence-transformers reads them, embed, distill and the frozen encoder.

What one architecture has follows the table's tests, under its name: RoBERTa's byte-level
vocabulary and positions past the padding, DeBERTa's relative attention in int8 and its
Unigram vocabulary, ModernBERT's rotary positions, windows and context extension; and each
one's bad inputs, one line and exit 2 before any work. The models are built once for the
file, when a test first asks for them (`models`)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import CORPUS, EXAMPLES, FAMILY_DATA, made, one_line_error
from tolerance import MODEL_FP32, TINY_FP32  # (each tolerance's reason)

TINY = ("--model-size", "tiny", "--hidden-size", "32", "--num-attention-heads", "2")


@dataclass(frozen=True)
class Row:
    prefix: str                  # transformers' class names: prefix + Model, ForMaskedLM, ...
    flags: tuple[str, ...]       # the tiny model's, past TINY
    bpe: bool = False            # pretrained on a byte-level BPE vocabulary (RoBERTa's)
    # --max-drop of the int8 export's check. The check runs and is recorded either way; a
    # model six steps from random scores every example near 0.5, where int8's rounding flips
    # some (4 points on AVX2 kernels for ELECTRA): its gate is not these tests'.
    int8_max_drop: str | None = None


ARCHS = {
    "electra": Row("Electra", ("--intermediate-size", "64", "--max-position-embeddings", "128"),
                   int8_max_drop="100"),
    "distilbert": Row("DistilBert", ("--intermediate-size", "64",
                                     "--max-position-embeddings", "128"), int8_max_drop="100"),
    "roberta": Row("Roberta", ("--intermediate-size", "64", "--max-position-embeddings", "130"),
                   bpe=True),
    "deberta-v2": Row("DebertaV2", ("--intermediate-size", "64",
                                    "--max-position-embeddings", "128")),
    "modernbert": Row("ModernBert", ("--intermediate-size", "48",
                                     "--max-position-embeddings", "256")),
}


def tiny(arch: str) -> list[str]:
    return ["--architecture", arch, *TINY, *ARCHS[arch].flags]


class Models:
    """The file's artifacts, each made once, on first use."""

    def __init__(self, factory, continuous_data: Path):
        self.factory, self.continuous_data, self.made = factory, continuous_data, {}

    def _once(self, key: str, *args) -> Path:
        if key not in self.made:
            self.made[key] = made(self.factory, key, *args)
        return self.made[key]

    def bpe_tokenizer(self) -> Path:
        return self._once("bpe", "tokenize", CORPUS, "--model", "byte-level-bpe", "--cased",
                          "--vocab-size", "2000")

    def data(self, arch: str) -> Path:
        if not ARCHS[arch].bpe:
            return self.continuous_data
        return self._once("bpe-data", "build-pretrain-data", self.bpe_tokenizer(),
                          CORPUS / "alice.txt", "--max-seq-length", "64", "--no-nsp",
                          "--masking", "dynamic", "--validation-fraction", "0.1",
                          "--workers", "1")

    def pretrained(self, arch: str) -> Path:
        return self._once(f"p-{arch}", "pretrain", self.data(arch), "--objective", "mlm",
                          *tiny(arch), "--steps", "6", "--batch-size", "8", "--lr", "2e-3",
                          "--eval-every", "3", "--eval-batches", "2")

    def tuned(self, arch: str, family: str) -> Path:
        data, _ = FAMILY_DATA[family]
        return self._once(f"f-{arch}-{family}", "finetune", self.pretrained(arch), *data,
                          "--steps", "4", "--batch-size", "8")


@pytest.fixture(scope="module")
def models(tmp_path_factory, continuous_data) -> Models:
    return Models(tmp_path_factory, continuous_data)


def _config(directory: Path) -> dict:
    return json.loads((directory / "config.json").read_text())


def _mlm_logits_agree(directory: Path, enc) -> None:
    """bertctl's masked-LM logits are transformers' on the model it saved."""
    transformers = pytest.importorskip("transformers")
    from bertctl.model import load_model

    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(directory)).eval()
    ours, report = load_model(directory)
    assert report.complete, report
    with torch.no_grad():
        got = ours.eval()(enc["input_ids"], None, enc["attention_mask"])["mlm_logits"]
        ref = hf(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(got[real], ref[real], **TINY_FP32)


# ---------------------------------------------------------------------------------------------
# Every architecture


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_a_pretrained_model_is_what_transformers_loads(arch, models):
    transformers = pytest.importorskip("transformers")
    model, prefix = models.pretrained(arch), ARCHS[arch].prefix
    config = _config(model)
    assert config["model_type"] == arch and config["architectures"] == [f"{prefix}ForMaskedLM"]
    manifest = json.loads((model / "artifact.json").read_text())
    assert manifest["config"]["architecture"] == manifest["stats"]["architecture"] == arch
    assert f"{prefix}ForMaskedLM" in (model / "README.md").read_text()
    assert type(transformers.AutoModel.from_pretrained(str(model))).__name__ == f"{prefix}Model"
    tok = transformers.AutoTokenizer.from_pretrained(str(model))
    _mlm_logits_agree(model, tok(["Alice was beginning to get very tired.",
                                  "Down the rabbit hole."], padding=True, return_tensors="pt"))


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_its_pretraining_metrics(arch, models, cli, tmp_path):
    r = cli("eval", models.pretrained(arch), models.data(arch), "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert metrics["mlm_accuracy"] >= 0 and metrics["perplexity"] > 1


@pytest.mark.parametrize("family", sorted(FAMILY_DATA))
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_every_family_finetunes_and_evaluates_as_transformers_class(arch, family, models, cli,
                                                                    tmp_path):
    transformers = pytest.importorskip("transformers")
    model = models.tuned(arch, family)
    config = _config(model)
    name = config["architectures"][0]
    assert config["model_type"] == arch and name.startswith(f"{ARCHS[arch].prefix}For")
    assert type(getattr(transformers, name).from_pretrained(str(model))).__name__ == name
    r = cli("eval", model, FAMILY_DATA[family][1], "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text()), "no metrics"


@pytest.mark.parametrize("family", ["single", "tagging"])
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_lora_adapters_are_what_peft_reads_on_transformers_class(arch, family, models, cli,
                                                                tmp_path):
    """finetune --lora-rank on each architecture's default targets: peft's PeftModel over
    transformers' class of the base gives bertctl's logits, and eval reads the adapter."""
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from bertctl.model import load_model

    data, dev = FAMILY_DATA[family]
    base, out = models.pretrained(arch), tmp_path / "adapter"
    r = cli("finetune", base, *data, "--steps", "3", "--batch-size", "8", "--lr", "5e-3",
            "--lora-rank", "2", "--out", out)
    assert r.exit_code == 0, r.stderr
    assert not (out / "model.safetensors").exists()
    auto = (transformers.AutoModelForSequenceClassification if family == "single"
            else transformers.AutoModelForTokenClassification)
    hf = auto.from_pretrained(str(base), num_labels=len(_config(out)["id2label"]))
    theirs = peft.PeftModel.from_pretrained(hf, str(out)).eval()
    ours = load_model(out)[0].eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    enc = tok(["Alice was beginning to get very tired.", "Down the rabbit hole."],
              padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = theirs(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
        got = ours(enc["input_ids"], None, enc["attention_mask"])["logits"]
    real = enc["attention_mask"].bool() if family == "tagging" else slice(None)
    torch.testing.assert_close(got[real], expected[real], **TINY_FP32)
    r = cli("eval", out, dev, "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("quantize", ["none", "int8"])
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_export_is_checked_and_runs(arch, quantize, models, cli, tmp_path):
    pytest.importorskip("onnxruntime")
    _, dev = FAMILY_DATA["single"]
    drop = ARCHS[arch].int8_max_drop if quantize == "int8" else None
    r = cli("export", models.tuned(arch, "single"), "--quantize", quantize, "--check", dev,
            *(["--max-drop", drop] if drop else []), "--out", tmp_path / "ex")
    assert r.exit_code == 0, r.stderr
    stats = json.loads((tmp_path / "ex" / "artifact.json").read_text())["stats"]
    assert stats["onnx"]["graph"] == f"{ARCHS[arch].prefix}ForSequenceClassification"
    if quantize == "none":   # the same model in fp32: only the kernels' sums differ
        assert stats["check"]["agreement"] >= 0.999
    else:
        assert "agreement" in stats["check"]
    r = cli("eval", tmp_path / "ex", dev, "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_search_embed_distill_and_the_frozen_encoder_take_it(arch, models, cli, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    model, prefix = models.pretrained(arch), ARCHS[arch].prefix
    rows = EXAMPLES / "retrieval" / "train.tsv"
    r = cli("finetune", model, rows, "--task", "retrieval", "--steps", "2", "--batch-size", "8",
            "--out", tmp_path / "emb")
    assert r.exit_code == 0, r.stderr
    assert cli("mine", tmp_path / "emb", rows, "--out", tmp_path / "mined").exit_code == 0
    r = cli("finetune", model, tmp_path / "mined" / "pairs.jsonl", "--task", "reranking",
            "--steps", "2", "--batch-size", "4", "--out", tmp_path / "rr")
    assert r.exit_code == 0, r.stderr
    embedder = st.SentenceTransformer(str(tmp_path / "emb"), device="cpu")
    assert type(embedder[0].auto_model).__name__ == f"{prefix}Model"
    scorer = st.CrossEncoder(str(tmp_path / "rr"), device="cpu")
    assert scorer.predict([("a query", "a passage")]).shape == (1,)
    assert cli("embed", model, CORPUS / "alice.txt", "--out", tmp_path / "e").exit_code == 0
    data, _ = FAMILY_DATA["single"]
    r = cli("distill", models.tuned(arch, "single"), *data, "--student-layers", "0", "--steps",
            "2", "--batch-size", "8", "--out", tmp_path / "d")
    assert r.exit_code == 0, r.stderr
    r = cli("finetune", model, *data, "--freeze-encoder", "--steps", "2", "--batch-size", "8",
            "--out", tmp_path / "f")
    assert r.exit_code == 0, r.stderr


# ---------------------------------------------------------------------------------------------
# RoBERTa


def test_roberta_pretrained_on_byte_level_bpe_keeps_its_specials(models):
    transformers = pytest.importorskip("transformers")
    roberta = models.pretrained("roberta")
    config = _config(roberta)
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (1, 0, 2)
    tok = transformers.AutoTokenizer.from_pretrained(str(roberta))
    enc = tok(["Alice was beginning to get very tired."], return_tensors="pt")
    assert enc["input_ids"][0, 0] == tok.cls_token_id == 0 and "token_type_ids" not in enc


def test_roberta_squad_window_is_its_pair(models):
    """<s> question </s></s> passage </s>: the pair template RoBERTa's tokenizers write."""
    from bertctl.data.tokenizer.files import load
    from bertctl.tasks.span.reader import SpanExamples
    from bertctl.tasks.span.windows import encode_windows

    tok = load(models.bpe_tokenizer() / "tokenizer.json")
    examples = SpanExamples("x", False, ["q1"], ["t"], ["Who ran?"], ["The rabbit ran away."],
                            [["rabbit"]], [[4]], np.zeros(1, bool), ["q1"])
    w = encode_windows(examples, tok, max_seq_length=32, doc_stride=8, max_query_length=8)
    ids = w.input_ids[w.offsets[0]:w.offsets[1]].tolist()
    want = tok.encode("Who ran?", "The rabbit ran away.").ids
    assert ids == want, (tok.decode(ids, skip_special_tokens=False), want)


def test_roberta_checkpoint_transformers_saved_finetunes_and_pretrains_on(models, cli,
                                                                          tmp_path):
    """A RoBERTa and its RobertaTokenizerFast as transformers writes them (its own
    tokenizer.json, RobertaProcessing), read by every stage through that tokenizer."""
    transformers = pytest.importorskip("transformers")
    hf = tmp_path / "hf"
    tok = transformers.RobertaTokenizerFast(
        tokenizer_file=str(models.bpe_tokenizer() / "tokenizer.json"))
    tok.save_pretrained(str(hf))
    torch.manual_seed(0)
    config = transformers.RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64,
                                        max_position_embeddings=130)
    transformers.RobertaForMaskedLM(config).save_pretrained(str(hf))
    data, _ = FAMILY_DATA["tagging"]
    r = cli("finetune", hf, *data, "--steps", "2", "--batch-size", "8", "--out", tmp_path / "t")
    assert r.exit_code == 0, r.stderr
    r = cli("pretrain", models.data("roberta"), "--init-from", hf, "--objective", "mlm",
            "--steps", "2", "--batch-size", "8", "--out", tmp_path / "p")
    assert r.exit_code == 0, r.stderr


def test_roberta_bad_inputs_are_one_line_before_any_work(models, cli, tmp_path):
    r = cli("pretrain", models.continuous_data, "--objective", "mlm", *tiny("roberta"),
            "--steps", "2", "--out", tmp_path / "a")
    one_line_error(r, "tokenizer.json", "--architecture roberta", "<s>")
    r = cli("pretrain", models.data("roberta"), "--objective", "mlm", "--model-size", "tiny",
            "--steps", "2", "--out", tmp_path / "b")
    one_line_error(r, "--architecture bert", "[CLS]")
    other = tmp_path / "deberta"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "funnel", "vocab_size": 10}))
    r = cli("finetune", other, *FAMILY_DATA["single"][0], "--out", tmp_path / "c")
    one_line_error(r, "model_type is 'funnel'", "roberta", "xlm-roberta")
    assert not any((tmp_path / n).exists() for n in "abc")


@pytest.mark.parametrize("arch", ["roberta", "xlm-roberta"])
def test_roberta_checkpoint_with_another_architectures_tokenizer_is_one_line(
        arch, models, cli, small_tokenizer, tmp_path):
    """A RoBERTa or XLM-R checkpoint beside a WordPiece tokenizer (padding at 0, a pair's
    second text type 1) was accepted, and its pair model failed in transformers (IndexError:
    one token type). Refused: first by its padding id, then, the id made to agree, by the
    token type."""
    hf = tmp_path / "hf"
    shutil.copytree(models.pretrained("roberta"), hf, ignore=shutil.ignore_patterns(
        "artifact.json", "*.txt", "tokenizer*", "special*", "merges*", "vocab*"))
    for name in ("tokenizer.json", "vocab.txt"):
        shutil.copy(small_tokenizer / name, hf / name)
    config = _config(hf)
    config.update(model_type=arch)
    (hf / "config.json").write_text(json.dumps(config))
    data, _ = FAMILY_DATA["pair"]
    r = cli("finetune", hf, *data, "--steps", "1", "--out", tmp_path / "a")
    one_line_error(r, str(hf), "pads with id 0", "pad_token_id is 1")
    config.update(pad_token_id=0, max_position_embeddings=config["max_position_embeddings"] - 1)
    (hf / "config.json").write_text(json.dumps(config))
    r = cli("finetune", hf, *data, "--steps", "1", "--out", tmp_path / "b")
    one_line_error(r, str(hf), "token type 1", "1 token type(s)")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_roberta_of_128_positions_fine_tunes_at_its_own_length(models, cli, tmp_path):
    """Its table of 128 rows reads 126 tokens (positions start past the padding id): an unset
    --max-seq-length takes the model's 126, where every fine-tune at the default 128 was
    refused with "126 position embeddings"; 128 asked is refused with the reason."""
    model = tmp_path / "r128"
    args = [a if a != "130" else "128" for a in tiny("roberta")]
    r = cli("pretrain", models.data("roberta"), "--objective", "mlm", *args, "--steps", "1",
            "--batch-size", "8", "--out", model)
    assert r.exit_code == 0, r.stderr
    data, _ = FAMILY_DATA["single"]
    r = cli("finetune", model, *data, "--steps", "1", "--batch-size", "8",
            "--out", tmp_path / "ft", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["config"]["max_seq_length"] == 126
    r = cli("finetune", model, *data, "--max-seq-length", "128", "--steps", "1",
            "--out", tmp_path / "ft128")
    one_line_error(r, "read at most 126 tokens", "max_seq_length 128", "padding id")


# ---------------------------------------------------------------------------------------------
# DeBERTa


def test_deberta_is_saved_with_v3s_relative_attention(models):
    config = _config(models.pretrained("deberta-v2"))
    assert config["position_buckets"] == 256 and config["relative_attention"]


@pytest.mark.slow
@pytest.mark.parametrize("attention, projections", [
    ({"pos_att_type": ["c2p"], "share_att_key": True}, 1),            # the shared key's
    ({"pos_att_type": ["p2c", "c2p"], "share_att_key": False}, 2)])   # its own key's and query's
def test_deberta_int8_export_of_each_relative_attention_runs(attention, projections, cli,
                                                             small_tokenizer, tmp_path):
    """The probe's configurations (#103: onnxruntime refused the DynamicQuantizeMatMul of
    `pos_att_type ["c2p"]` or `share_att_key: false`). Their position projections are products
    of constants: they stay fp32, the layers' matrices int8."""
    transformers = pytest.importorskip("transformers")
    import collections

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


def test_deberta_pretrains_on_a_unigram_vocabulary_spelled_berts_way(cli, tmp_path):
    """DeBERTa-v3's kind of vocabulary: Unigram, BERT's spelling."""
    assert cli("tokenize", CORPUS / "alice.txt", "--model", "unigram", "--special-tokens",
               "bert", "--vocab-size", "1200", "--out", tmp_path / "u").exit_code == 0
    assert cli("build-pretrain-data", tmp_path / "u", CORPUS / "alice.txt", "--max-seq-length",
               "64", "--no-nsp", "--masking", "dynamic", "--whole-word-mask", "--workers", "1",
               "--out", tmp_path / "ud").exit_code == 0
    r = cli("pretrain", tmp_path / "ud", "--objective", "mlm", *tiny("deberta-v2"), "--steps",
            "2", "--batch-size", "8", "--out", tmp_path / "up")
    assert r.exit_code == 0, r.stderr


# ---------------------------------------------------------------------------------------------
# ModernBERT


@pytest.fixture(scope="module")
def long_data(tmp_path_factory, small_tokenizer):
    """512-token rows: longer than the tiny ModernBERT declares (256)."""
    return made(tmp_path_factory, "mlmdata512", "build-pretrain-data", small_tokenizer,
                 CORPUS / "alice.txt", "--max-seq-length", "512", "--no-nsp", "--masking",
                 "dynamic", "--workers", "1")


def test_modernbert_keeps_the_tokenizers_specials_in_its_config(models):
    transformers = pytest.importorskip("transformers")
    modern = models.pretrained("modernbert")
    config = _config(modern)
    tok = transformers.AutoTokenizer.from_pretrained(str(modern))
    assert config["cls_token_id"] == tok.cls_token_id and config["pad_token_id"] == 0


def test_modernbert_exported_encoder_equals_transformers(models, cli, tmp_path):
    modern = models.pretrained("modernbert")
    pytest.importorskip("onnxruntime")
    transformers = pytest.importorskip("transformers")
    from bertctl.model.onnx_model import OnnxModel

    r = cli("export", modern, "--out", tmp_path / "enc")
    assert r.exit_code == 0, r.stderr
    config = json.loads((tmp_path / "enc" / "config.json").read_text())
    assert config["architectures"] == ["ModernBertModel"]
    hf = transformers.AutoModel.from_pretrained(str(modern)).eval()
    torch.manual_seed(0)
    ids = torch.randint(5, 400, (2, 150))    # past the 128-token window: local layers matter
    mask = torch.ones_like(ids)
    mask[1, 90:] = 0
    got = OnnxModel(tmp_path / "enc" / "model.onnx", threads=1)(ids, torch.zeros_like(ids),
                                                                 mask)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    real = mask.bool()
    for a, b in zip(got["hidden_states"], ref.hidden_states):
        torch.testing.assert_close(a[real], b[real], **MODEL_FP32)


def test_modernbert_distilled_keeps_each_layers_kind(models, cli, tmp_path):
    data, _ = FAMILY_DATA["single"]
    r = cli("distill", models.tuned("modernbert", "single"), *data, "--out",
            tmp_path / "student", "--steps", "3", "--batch-size", "8", "--student-layers", "0,2")
    assert r.exit_code == 0, r.stderr
    config = _config(tmp_path / "student")
    assert config["model_type"] == "modernbert" and config["num_hidden_layers"] == 2
    # Each kept layer keeps its kind: layer 0 global, layer 2 local.
    assert config["layer_types"] == ["full_attention", "sliding_attention"]


def test_modernbert_bad_inputs_are_one_line_before_any_work(models, cli, continuous_data,
                                                            tiny_pretrained, tmp_path,
                                                            long_data):
    modern = models.pretrained("modernbert")
    out = tmp_path / "out"
    base = ["pretrain", continuous_data, "--out", out, "--steps", "2", "--batch-size", "4"]
    # (the flag's choices are the registry's)
    one_line_error(cli(*base, "--architecture", "modernbertz", "--objective", "mlm"),
                   "'architecture' = 'modernbertz'", "'bert', 'deberta-v2', 'distilbert', 'electra', 'modernbert', 'roberta' or 'xlm-roberta'")
    one_line_error(cli(*base, "--architecture", "modernbert"),
              "--objective bert cannot train --architecture modernbert", "mlm")
    one_line_error(cli(*base, "--architecture", "modernbert", "--objective", "electra"),
              "--objective electra cannot train --architecture modernbert")
    one_line_error(cli(*base, "--objective", "mlm", "--architecture", "modernbert", "--init-from",
                  tiny_pretrained), str(tiny_pretrained), "is a bert model")
    one_line_error(cli(*base, "--objective", "mlm", "--architecture", "bert", "--init-from", modern),
              "is a modernbert model")
    hf = json.loads((modern / "config.json").read_text())
    hf["rope_parameters"]["sliding_attention"]["rope_type"] = "linear"
    (tmp_path / "config.json").write_text(json.dumps(hf))
    one_line_error(cli(*base, "--objective", "mlm", "--model-config", tmp_path / "config.json"),
              "rope_parameters.sliding_attention.rope_type 'linear' is not supported")
    data, _ = FAMILY_DATA["single"]
    one_line_error(cli("finetune", modern, *data, "--out", out, "--steps", "1",
                  "--max-seq-length", "512"), "512", "only declares the longest input")
    # continuing its pretraining on longer sequences: the same way out
    one_line_error(cli("pretrain", long_data, "--objective", "mlm", "--init-from", modern, "--steps",
                       "1", "--out", out), "max_seq_length 512", "only declares the longest input")
    assert not out.exists()


def test_modernbert_reads_longer_inputs_once_its_config_declares_them(models, cli, tmp_path):
    """What the refusal above advises: rotary positions have no table, so a copy whose
    config.json declares 512 (the model was pretrained declaring 256) fine-tunes at 512."""
    modern = models.pretrained("modernbert")
    longer = tmp_path / "longer"
    shutil.copytree(modern, longer)
    (longer / "artifact.json").unlink()   # an edited copy is the user's own directory now
    config = json.loads((longer / "config.json").read_text())
    (longer / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 512}))
    data, _ = FAMILY_DATA["single"]
    r = cli("finetune", longer, *data, "--out", tmp_path / "ft", "--steps", "1",
            "--max-seq-length", "512")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "ft" / "config.json").read_text())[
        "max_position_embeddings"] == 512


def test_modernbert_context_extension_is_a_step_between_the_stable_phase_and_its_decay(
        cli, continuous_data, long_data, tiny_pretrained, tmp_path):
    """ModernBERT's recipe: a WSD stable phase on short rows with the rotary base 10,000; the
    context extension continues its schedule and optimizer on longer rows, declaring more
    positions and the global layers' base raised (no weight changes shape); the decay
    branches from it. transformers reads the extended model as bertctl does, at its new
    length. A learned position table cannot grow; a model without rotary positions takes no
    --rope-theta."""
    transformers = pytest.importorskip("transformers")
    from bertctl.model import load_model

    run = ["--objective", "mlm", "--schedule", "wsd", "--device", "cpu", "--json"]

    def pretrain(data, out, *args):
        r = cli("pretrain", data, "--out", tmp_path / out, *run, *args)
        assert r.exit_code == 0, r.stderr
        return r.json(), json.loads((tmp_path / out / "config.json").read_text())

    def thetas(config):
        return {k: v["rope_theta"] for k, v in config["rope_parameters"].items()}

    stable, config = pretrain(continuous_data, "stable", *tiny("modernbert"), "--batch-size", "8",
                              "--steps", "2", "--total-steps", "6", "--decay", "2",
                              "--rope-theta", "10000")
    assert thetas(config) == {"full_attention": 10000, "sliding_attention": 10000}
    assert "optimizer.pt" in stable["files"]
    longer, config = pretrain(long_data, "longer", "--init-from", tmp_path / "stable",
                              "--continue-schedule", "--batch-size", "2", "--steps", "2",
                              "--decay", "2", "--max-position-embeddings", "512",
                              "--rope-theta", "160000")
    assert config["max_position_embeddings"] == 512
    assert thetas(config) == {"full_attention": 160000, "sliding_attention": 10000}
    assert longer["stats"]["step"] == 4 and longer["stats"]["optimizer_from"] == "init"
    assert longer["config"]["rope_theta"] == 160000 and "optimizer.pt" in longer["files"]
    decay, config = pretrain(long_data, "decay", "--init-from", tmp_path / "longer",
                             "--continue-schedule", "--batch-size", "2", "--steps", "2",
                             "--decay", "2")
    assert decay["stats"]["step"] == 6 and "optimizer.pt" not in decay["files"]
    assert config["max_position_embeddings"] == 512 and thetas(config)["full_attention"] == 160000

    ids = torch.randint(5, config["vocab_size"], (2, 400), generator=torch.Generator().manual_seed(0))
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "decay")).eval()
    ours, report = load_model(tmp_path / "decay")
    assert report.complete, report
    with torch.no_grad():
        got = ours.eval()(ids, None, torch.ones_like(ids))["mlm_logits"]
        ref = hf(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    torch.testing.assert_close(got, ref, **TINY_FP32)

    out = tmp_path / "refused"
    one_line_error(cli("pretrain", continuous_data, "--init-from", tiny_pretrained,
                       "--max-position-embeddings", "1024", "--steps", "1", "--out", out),
                   str(tiny_pretrained), "learned table", "cannot change its size")
    one_line_error(cli("pretrain", continuous_data, "--objective", "mlm", "--rope-theta",
                       "160000", "--steps", "1", "--out", out),
                   "--rope-theta sets a rotary base; bert has no rotary positions")
    assert not out.exists()


def test_modernbert_reranker_is_a_crossencoder_with_our_scores(models, cli, tmp_path):
    """A reranker fine-tuned from a ModernBERT (its CLS pooling and head) is read by
    sentence-transformers' CrossEncoder with bertctl's scores."""
    modern = models.pretrained("modernbert")
    ce_module = pytest.importorskip("sentence_transformers.cross_encoder")
    pairs = [line.split("\t") for line in
             (EXAMPLES / "retrieval" / "train.tsv").read_text().splitlines()[1:25]]
    columns = ["positive", "negative_1", "negative_2"]
    rows = [{"query": q, "positive": p, "negative_1": pairs[(i + 1) % len(pairs)][1],
             "negative_2": pairs[(i + 2) % len(pairs)][1]} for i, (q, p) in enumerate(pairs)]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cli("finetune", modern, data, "--task", "reranking", "--steps", "3", "--batch-size",
            "4", "--max-seq-length", "48", "--precision", "fp32", "--out", tmp_path / "rr")
    assert r.exit_code == 0, r.stderr
    config = json.loads((tmp_path / "rr" / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForSequenceClassification"]
    r = cli("eval", tmp_path / "rr", data, "--precision", "fp32", "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    ours = np.loadtxt(tmp_path / "ev" / "predictions.tsv", skiprows=1)[:, 1:]
    ce = ce_module.CrossEncoder(str(tmp_path / "rr"), device="cpu")
    theirs = ce.predict([(row["query"], row[c]) for row in rows for c in columns],
                        batch_size=8).reshape(len(rows), len(columns))
    # fp32 both, a 2-layer 32-wide encoder then one sigmoid; predictions.tsv keeps 6 decimals
    assert np.abs(ours - theirs).max() < 1e-5


def test_modernbert_new_model_reads_the_datas_length(cli, small_tokenizer, tmp_path):
    """`pretrain DATA-1024 --architecture modernbert` stopped at "512 position embeddings are fewer":
    rotary positions have no table to size, so a new model reads the data's length. A learned
    table's refusal names the flag that sizes it."""
    data = tmp_path / "data"
    r = cli("build-pretrain-data", small_tokenizer, CORPUS / "alice.txt", "--max-seq-length",
            "1024", "--no-nsp", "--masking", "dynamic", "--packing", "concatenated",
            "--workers", "1", "--out", data)
    assert r.exit_code == 0, r.stderr
    tiny = ["--model-size", "tiny", "--hidden-size", "32", "--num-attention-heads", "2",
            "--intermediate-size", "64", "--steps", "1", "--batch-size", "2"]
    r = cli("pretrain", data, "--objective", "mlm", "--architecture", "modernbert", *tiny,
            "--out", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "m" / "config.json").read_text())[
        "max_position_embeddings"] == 1024
    r = cli("pretrain", data, "--objective", "mlm", *tiny, "--out", tmp_path / "b")
    one_line_error(r, "read at most 512 tokens", "1024", "--max-position-embeddings")
    assert not (tmp_path / "b").exists()
