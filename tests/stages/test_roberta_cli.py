"""`--architecture roberta` through every stage, on the command line, from a byte-level BPE
vocabulary with RoBERTa's special tokens: pretrain (mlm), every family's finetune and eval,
retrieval and reranking (sentence-transformers loads both), the frozen encoder, embed, export
(fp32 and int8, with --check), distill; a checkpoint and tokenizer saved by transformers itself
fine-tuned and pretrained further. The artifacts are transformers' RoBERTa directories. And the
bad inputs of the architecture, each one line and exit 2 before any work."""

import json

import pytest
import torch

from helpers import CORPUS, EXAMPLES, FAMILY_DATA, made, one_line_error
from tolerance import TINY_FP32  # (each tolerance's reason)

TINY_ROBERTA = ["--architecture", "roberta", "--model-size", "tiny", "--hidden-size", "32",
                "--num-attention-heads", "2", "--intermediate-size", "64",
                "--max-position-embeddings", "130"]


@pytest.fixture(scope="module")
def bpe_tokenizer(tmp_path_factory):
    return made(tmp_path_factory, "bpe", "tokenize", CORPUS, "--model", "byte-level-bpe",
                 "--cased", "--vocab-size", "2000")


@pytest.fixture(scope="module")
def roberta_data(tmp_path_factory, bpe_tokenizer):
    return made(tmp_path_factory, "rdata", "build-pretrain-data", bpe_tokenizer,
                 CORPUS / "alice.txt", "--max-seq-length", "64", "--no-nsp", "--masking",
                 "dynamic", "--validation-fraction", "0.1", "--workers", "1")


@pytest.fixture(scope="module")
def roberta(tmp_path_factory, roberta_data):
    return made(tmp_path_factory, "roberta", "pretrain", roberta_data, "--objective", "mlm",
                 *TINY_ROBERTA, "--steps", "6", "--batch-size", "8", "--lr", "2e-3",
                 "--eval-every", "3", "--eval-batches", "2")


@pytest.fixture(scope="module")
def roberta_tasks(tmp_path_factory, roberta):
    return {family: made(tmp_path_factory, f"r-{family}", "finetune", roberta, *data,
                          "--steps", "4", "--batch-size", "8")
            for family, (data, _) in FAMILY_DATA.items()}


def test_pretrained_roberta_is_what_transformers_loads(roberta):
    transformers = pytest.importorskip("transformers")
    config = json.loads((roberta / "config.json").read_text())
    assert config["model_type"] == "roberta" and config["architectures"] == ["RobertaForMaskedLM"]
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (1, 0, 2)
    tok = transformers.AutoTokenizer.from_pretrained(str(roberta))
    enc = tok(["Alice was beginning to get very tired.", "Down the rabbit hole."],
              padding=True, return_tensors="pt")
    assert enc["input_ids"][0, 0] == tok.cls_token_id == 0 and "token_type_ids" not in enc
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(roberta)).eval()
    from bertctl.model import load_model

    ours, report = load_model(roberta)
    assert report.complete, report
    with torch.no_grad():
        got = ours.eval()(enc["input_ids"], None, enc["attention_mask"])["mlm_logits"]
        ref = hf(**enc).logits
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(got[real], ref[real], **TINY_FP32)


@pytest.mark.parametrize("family", sorted(FAMILY_DATA))
def test_every_family_finetunes_and_evaluates_a_roberta(family, roberta_tasks, cli, tmp_path):
    model = roberta_tasks[family]
    config = json.loads((model / "config.json").read_text())
    assert config["model_type"] == "roberta"
    assert config["architectures"][0].startswith("RobertaFor")
    r = cli("eval", model, FAMILY_DATA[family][1], "--out", tmp_path / "eval")
    assert r.exit_code == 0, r.stderr
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics, metrics


def test_a_squad_window_is_robertas_pair(roberta, bpe_tokenizer):
    """<s> question </s></s> passage </s>: the pair template RoBERTa's tokenizers write."""
    import numpy as np

    from bertctl.data.tokenizer.files import load
    from bertctl.tasks.span.reader import SpanExamples
    from bertctl.tasks.span.windows import encode_windows

    tok = load(bpe_tokenizer / "tokenizer.json")
    examples = SpanExamples("x", False, ["q1"], ["t"], ["Who ran?"], ["The rabbit ran away."],
                            [["rabbit"]], [[4]], np.zeros(1, bool), ["q1"])
    w = encode_windows(examples, tok, max_seq_length=32, doc_stride=8, max_query_length=8)
    ids = w.input_ids[w.offsets[0]:w.offsets[1]].tolist()
    want = tok.encode("Who ran?", "The rabbit ran away.").ids
    assert ids == want, (tok.decode(ids, skip_special_tokens=False), want)


def test_retrieval_and_reranking_on_roberta_load_in_sentence_transformers(roberta, cli,
                                                                          tmp_path):
    st = pytest.importorskip("sentence_transformers")
    rows = EXAMPLES / "retrieval" / "train.tsv"
    assert cli("finetune", roberta, rows, "--task", "retrieval", "--steps", "2",
               "--batch-size", "8", "--out", tmp_path / "emb").exit_code == 0
    assert cli("mine", tmp_path / "emb", rows, "--out", tmp_path / "mined").exit_code == 0
    r = cli("finetune", roberta, tmp_path / "mined" / "pairs.jsonl", "--task", "reranking",
            "--steps", "2", "--batch-size", "4", "--out", tmp_path / "rr")
    assert r.exit_code == 0, r.stderr
    r = cli("eval", tmp_path / "emb", EXAMPLES / "retrieval" / "beir", "--task", "retrieval",
            "--rerank", tmp_path / "rr", "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    embedder = st.SentenceTransformer(str(tmp_path / "emb"), device="cpu")
    assert type(embedder[0].auto_model).__name__ == "RobertaModel"
    ours = json.loads((tmp_path / "emb" / "config.json").read_text())
    assert ours["model_type"] == "roberta"
    scorer = st.CrossEncoder(str(tmp_path / "rr"), device="cpu")
    assert scorer.predict([("a query", "a passage")]).shape == (1,)


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_export_of_a_roberta_is_checked_and_runs(quantize, roberta_tasks, cli, tmp_path):
    data, dev = FAMILY_DATA["single"]
    r = cli("export", roberta_tasks["single"], "--quantize", quantize, "--check", dev,
            "--out", tmp_path / "onnx")
    assert r.exit_code == 0, r.stderr


def test_embed_distill_and_the_frozen_encoder_take_a_roberta(roberta, roberta_tasks, cli,
                                                             tmp_path):
    data, _ = FAMILY_DATA["single"]
    assert cli("embed", roberta, CORPUS / "alice.txt", "--out", tmp_path / "e").exit_code == 0
    r = cli("distill", roberta_tasks["single"], *data, "--student-layers", "0", "--steps", "2",
            "--batch-size", "8", "--out", tmp_path / "d")
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "d" / "config.json").read_text())["num_hidden_layers"] == 1
    r = cli("finetune", roberta, *data, "--freeze-encoder", "--steps", "2", "--batch-size",
            "8", "--out", tmp_path / "f")
    assert r.exit_code == 0, r.stderr


def test_a_checkpoint_transformers_saved_finetunes_and_pretrains_on(bpe_tokenizer, roberta_data,
                                                                   cli, tmp_path):
    """A RoBERTa and its RobertaTokenizerFast as transformers writes them (its own
    tokenizer.json, RobertaProcessing), read by every stage through that tokenizer."""
    transformers = pytest.importorskip("transformers")
    hf = tmp_path / "hf"
    tok = transformers.RobertaTokenizerFast(tokenizer_file=str(bpe_tokenizer / "tokenizer.json"))
    tok.save_pretrained(str(hf))
    torch.manual_seed(0)
    config = transformers.RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64,
                                        max_position_embeddings=130)
    transformers.RobertaForMaskedLM(config).save_pretrained(str(hf))
    data, dev = FAMILY_DATA["tagging"]
    r = cli("finetune", hf, *data, "--steps", "2", "--batch-size", "8", "--out", tmp_path / "t")
    assert r.exit_code == 0, r.stderr
    r = cli("pretrain", roberta_data, "--init-from", hf, "--objective", "mlm", "--steps", "2",
            "--batch-size", "8", "--out", tmp_path / "p")
    assert r.exit_code == 0, r.stderr


def test_bad_architecture_inputs_are_one_line_before_any_work(cli, continuous_data,
                                                              roberta_data, tmp_path):
    r = cli("pretrain", continuous_data, "--objective", "mlm", *TINY_ROBERTA, "--steps", "2",
            "--out", tmp_path / "a")
    one_line_error(r, "tokenizer.json", "--architecture roberta", "<s>")
    r = cli("pretrain", roberta_data, "--objective", "mlm", "--model-size", "tiny", "--steps",
            "2", "--out", tmp_path / "b")
    one_line_error(r, "--architecture bert", "[CLS]")
    other = tmp_path / "deberta"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "funnel", "vocab_size": 10}))
    r = cli("finetune", other, *FAMILY_DATA["single"][0], "--out", tmp_path / "c")
    one_line_error(r, "model_type is 'funnel'", "roberta", "xlm-roberta")
    assert not any((tmp_path / n).exists() for n in "abc")


@pytest.mark.parametrize("arch", ["roberta", "xlm-roberta"])
def test_a_checkpoint_with_another_architectures_tokenizer_is_one_line(arch, cli, roberta,
                                                                       small_tokenizer, tmp_path):
    """A RoBERTa or XLM-R checkpoint beside a WordPiece tokenizer (padding at 0, a pair's
    second text type 1) was accepted, and its pair model failed in transformers (IndexError:
    one token type). Refused: first by its padding id, then, the id made to agree, by the
    token type."""
    import shutil

    hf = tmp_path / "hf"
    shutil.copytree(roberta, hf, ignore=shutil.ignore_patterns("artifact.json", "*.txt",
                                                               "tokenizer*", "special*",
                                                               "merges*", "vocab*"))
    for name in ("tokenizer.json", "vocab.txt"):
        shutil.copy(small_tokenizer / name, hf / name)
    config = json.loads((hf / "config.json").read_text())
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


def test_a_roberta_of_128_positions_fine_tunes_at_its_own_length(cli, roberta_data, tmp_path):
    """Its table of 128 rows reads 126 tokens (positions start past the padding id): an unset
    --max-seq-length takes the model's 126, where every fine-tune at the default 128 was
    refused with "126 position embeddings"; 128 asked is refused with the reason."""
    model = tmp_path / "r128"
    args = [a if a != "130" else "128" for a in TINY_ROBERTA]
    r = cli("pretrain", roberta_data, "--objective", "mlm", *args, "--steps", "1",
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
