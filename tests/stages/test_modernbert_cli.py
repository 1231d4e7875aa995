"""`--architecture modernbert` through every stage, on the command line: pretrain (mlm), every
family's finetune and eval, embed, export (fp32 and int8, with --check), distill, and the
pretraining metrics; the artifacts are transformers' ModernBERT directories. And the bad
inputs of the architecture, each one line and exit 2 before any work."""

import json

import numpy as np
import pytest
import torch

from helpers import CORPUS, EXAMPLES, FAMILY_DATA, made, one_line_error
from tolerance import MODEL_FP32, TINY_FP32  # (each tolerance's reason)

TINY_MODERN = ["--architecture", "modernbert", "--model-size", "tiny", "--hidden-size", "32",
               "--num-attention-heads", "2", "--intermediate-size", "48",
               "--max-position-embeddings", "256"]


@pytest.fixture(scope="module")
def modern(tmp_path_factory, continuous_data):
    return made(tmp_path_factory, "modern", "pretrain", continuous_data, "--objective", "mlm",
                 *TINY_MODERN, "--steps", "6", "--batch-size", "8", "--lr", "2e-3",
                 "--eval-every", "3", "--eval-batches", "2")


@pytest.fixture(scope="module")
def modern_tasks(tmp_path_factory, modern):
    """One fine-tuned tiny ModernBERT per family."""
    tuned = {}
    for family, (data, _) in FAMILY_DATA.items():
        tuned[family] = made(tmp_path_factory, f"modern-{family}", "finetune", modern, *data,
                              "--steps", "4", "--batch-size", "8")
    return tuned


@pytest.fixture(scope="module")
def long_data(tmp_path_factory, small_tokenizer):
    """512-token rows: longer than the tiny ModernBERT declares (256)."""
    return made(tmp_path_factory, "mlmdata512", "build-pretrain-data", small_tokenizer,
                 CORPUS / "alice.txt", "--max-seq-length", "512", "--no-nsp", "--masking",
                 "dynamic", "--workers", "1")


def test_pretrained_modernbert_is_what_transformers_loads(modern):
    transformers = pytest.importorskip("transformers")
    config = json.loads((modern / "config.json").read_text())
    assert config["model_type"] == "modernbert"
    assert config["architectures"] == ["ModernBertForMaskedLM"]
    manifest = json.loads((modern / "artifact.json").read_text())
    assert manifest["config"]["architecture"] == "modernbert"
    assert manifest["stats"]["architecture"] == "modernbert"
    assert "ModernBertForMaskedLM" in (modern / "README.md").read_text()

    tok = transformers.AutoTokenizer.from_pretrained(str(modern))
    enc = tok(["Alice was beginning to get very tired.", "Down the rabbit hole."],
              padding=True, return_tensors="pt")
    assert config["cls_token_id"] == tok.cls_token_id and config["pad_token_id"] == 0
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(modern)).eval()
    from bertctl.model import load_model

    ours, report = load_model(modern)
    assert report.complete, report
    with torch.no_grad():
        got = ours.eval()(enc["input_ids"], None, enc["attention_mask"])["mlm_logits"]
        ref = hf(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(got[real], ref[real], **TINY_FP32)


def test_pretraining_metrics_of_a_modernbert(cli, modern, continuous_data, tmp_path):
    r = cli("eval", modern, continuous_data, "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert metrics["mlm_accuracy"] >= 0 and metrics["perplexity"] > 1


@pytest.mark.parametrize("family", sorted(FAMILY_DATA))
def test_every_family_finetunes_and_evaluates_a_modernbert(family, modern_tasks, cli, tmp_path):
    model = modern_tasks[family]
    config = json.loads((model / "config.json").read_text())
    assert config["model_type"] == "modernbert"
    assert config["architectures"][0].startswith("ModernBertFor")
    r = cli("eval", model, FAMILY_DATA[family][1], "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert metrics, "no metrics"


def test_a_finetuned_modernbert_is_transformers_own_class(modern_tasks):
    transformers = pytest.importorskip("transformers")
    for family in ("single", "tagging", "span", "multiple_choice"):
        directory = modern_tasks[family]
        name = json.loads((directory / "config.json").read_text())["architectures"][0]
        hf = getattr(transformers, name).from_pretrained(str(directory))
        assert type(hf).__name__ == name


@pytest.mark.parametrize("quantize", [[], ["--quantize", "int8"]])
def test_export_of_a_modernbert_is_checked_and_runs(quantize, modern_tasks, cli, tmp_path):
    pytest.importorskip("onnxruntime")
    data, dev = FAMILY_DATA["single"]
    r = cli("export", modern_tasks["single"], "--out", tmp_path / "ex", "--check", dev,
            *quantize)
    assert r.exit_code == 0, r.stderr
    stats = json.loads((tmp_path / "ex" / "artifact.json").read_text())["stats"]
    assert stats["onnx"]["graph"] == "ModernBertForSequenceClassification"
    assert stats["check"]["agreement"] >= (0.9 if quantize else 0.999)
    r = cli("eval", tmp_path / "ex", dev, "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr


def test_exported_modernbert_encoder_equals_transformers(modern, cli, tmp_path):
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


def test_embed_and_distill_take_a_modernbert(modern, modern_tasks, cli, tmp_path):
    data, dev = FAMILY_DATA["single"]
    r = cli("embed", modern, dev, "--text-column", "sentence", "--out", tmp_path / "emb")
    assert r.exit_code == 0, r.stderr
    r = cli("distill", modern_tasks["single"], *data, "--out", tmp_path / "student",
            "--steps", "3", "--batch-size", "8", "--student-layers", "0,2")
    assert r.exit_code == 0, r.stderr
    config = json.loads((tmp_path / "student" / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["num_hidden_layers"] == 2
    # Each kept layer keeps its kind: layer 0 global, layer 2 local.
    assert config["layer_types"] == ["full_attention", "sliding_attention"]


def test_bad_architecture_inputs_are_one_line_before_any_work(cli, continuous_data,
                                                              tiny_pretrained, modern, tmp_path,
                                                              long_data):
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


def test_a_modernbert_reads_longer_inputs_once_its_config_declares_them(modern, cli, tmp_path):
    """What the refusal above advises: rotary positions have no table, so a copy whose
    config.json declares 512 (the model was pretrained declaring 256) fine-tunes at 512."""
    import shutil

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


def test_context_extension_is_a_step_between_the_stable_phase_and_its_decay(
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

    stable, config = pretrain(continuous_data, "stable", *TINY_MODERN, "--batch-size", "8",
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


def test_a_modernbert_reranker_is_a_crossencoder(modern, cli, tmp_path):
    """A reranker fine-tuned from a ModernBERT (its CLS pooling and head) is read by
    sentence-transformers' CrossEncoder with bertctl's scores."""
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


def test_a_new_rotary_model_reads_the_datas_length(cli, small_tokenizer, tmp_path):
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
