"""`bertctl export` (#24): ONNX graphs of every family's head and of the bare encoder, run by
onnxruntime through the same `eval` and `embed` as the PyTorch model, and compared with it.

The models are tiny BERTs fine-tuned for a few steps through the CLI on real rows; the checks
are about the graph (outputs equal to PyTorch's within 1e-4 in fp32, any batch and length on one
file, int8 agreeing on most predictions) and about the artifact (checksums, refusals).
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from bertctl.model import onnx_model
from bertctl.errors import BertctlError  # noqa: E402
from bertctl.model import BertConfig, BertForTokenClassification, BertModel  # noqa: E402

from helpers import FAMILY_DATA, FIXTURES  # noqa: E402
from tolerance import MODEL_FP32  # (each tolerance's reason)

GLUE = FIXTURES / "glue"
FAMILIES = FAMILY_DATA   # family: (finetune's data and flags, the check / eval data)


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, tiny_pretrained):
    """family -> a fine-tuned tiny model artifact. A high learning rate for a few steps moves
    the heads enough that predictions differ from example to example."""
    from helpers import invoke

    root = tmp_path_factory.mktemp("export-models")
    models = {}
    for family, (train, _) in FAMILIES.items():
        out = root / family
        r = invoke("finetune", tiny_pretrained, *train, "--out", out, "--steps", "4",
                   "--batch-size", "8", "--lr", "5e-3", "--device", "cpu", "--precision",
                   "fp32")
        assert r.exit_code == 0, (family, r.stderr)
        models[family] = out
    return models


def _manifest(path: Path) -> dict:
    return json.loads((path / "artifact.json").read_text())


def _read_predictions(directory: Path) -> list:
    """The prediction files' contents; JSON parsed, so that the logits and probabilities some
    carry (SQuAD's n-best) compare within float tolerance, and the decisions exactly."""
    files = sorted(p for p in directory.iterdir() if p.suffix in (".tsv", ".json", ".txt",
                                                                  ".jsonl")
                   and p.name not in ("artifact.json", "metrics.json", "README.md"))
    return [json.loads(p.read_text()) if p.suffix == ".json" else p.read_text() for p in files]


def _same_predictions(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, str):
            _same_table(x, y)
        else:
            assert x == pytest.approx(y, abs=1e-4) if not isinstance(x, (dict, list)) else \
                _nested_close(x, y)


def _same_table(x: str, y: str) -> None:
    """Text files cell by cell: numbers (a label set's probabilities) within float
    tolerance, every other cell (the decisions) exactly."""
    rows_x, rows_y = x.splitlines(), y.splitlines()
    assert len(rows_x) == len(rows_y)
    for row_x, row_y in zip(rows_x, rows_y):
        cells_x, cells_y = row_x.split("\t"), row_y.split("\t")
        assert len(cells_x) == len(cells_y), (row_x, row_y)
        for a, b in zip(cells_x, cells_y):
            try:
                numbers = [float(v) for v in a.split()], [float(v) for v in b.split()]
            except ValueError:
                numbers = None
            if numbers is None or not numbers[0]:
                assert a == b, (row_x, row_y)
            else:
                assert numbers[0] == pytest.approx(numbers[1], abs=1e-4), (row_x, row_y)


def _nested_close(x, y) -> bool:
    if isinstance(x, dict):
        assert x.keys() == y.keys()
        return all(_nested_close(x[k], y[k]) for k in x)
    if isinstance(x, list):
        assert len(x) == len(y)
        return all(_nested_close(u, v) for u, v in zip(x, y))
    if isinstance(x, float):
        assert x == pytest.approx(y, abs=1e-4)
    else:
        assert x == y
    return True


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_exports_and_evaluates_as_pytorch(family, finetuned, tmp_path, cli):
    model, data = finetuned[family], FAMILIES[family][1]
    out = tmp_path / "export"
    r = cli("export", model, "--out", out, "--check", data)
    assert r.exit_code == 0, r.stderr
    m = _manifest(out)
    assert m["kind"] == "export" and [i["role"] for i in m["inputs"]] == ["model", "check"]
    check = m["stats"]["check"]
    assert max(check["max_abs_diff"].values()) < 1e-4, check["max_abs_diff"]
    if family == "regression":
        # Scores, not choices: the 1e-4 above is the test. A model fine-tuned for 4 steps
        # predicts nearly one value (spread ~1e-3), so that 1e-4 moves Pearson by ~0.1 point.
        assert abs(check["drop_points"]) < 1
        for k, v in check["pytorch"].items():
            assert check["export"][k] == pytest.approx(v, abs=1e-2), k
    else:
        assert check["drop_points"] == 0 and check["pytorch"] == check["export"]
        assert check["agreement"] == 1.0
    for name in ("model.onnx", "config.json", "tokenizer.json", "vocab.txt",
                 "bertctl_task.json", "README.md"):
        assert (out / name).is_file(), name
    assert "## Checked against the PyTorch model" in (out / "README.md").read_text()

    # eval reads the export as it reads the model: the same metrics and prediction files
    r1 = cli("eval", model, data, "--out", tmp_path / "ev-pt", "--precision", "fp32")
    r2 = cli("eval", out, data, "--out", tmp_path / "ev-onnx")
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.stderr + r2.stderr
    m1, m2 = (json.loads((tmp_path / d / "metrics.json").read_text())
              for d in ("ev-pt", "ev-onnx"))
    if family == "regression":
        assert m1.keys() == m2.keys()
        for k in ("pearson", "spearman"):
            assert m1[k] == pytest.approx(m2[k], abs=1e-2)
    else:
        assert m1 == m2
        _same_predictions(_read_predictions(tmp_path / "ev-pt"),
                          _read_predictions(tmp_path / "ev-onnx"))
    ev = _manifest(tmp_path / "ev-onnx")
    assert ev["inputs"][0]["kind"] == "export" and ev["stats"]["precision"] == "onnxruntime none"


def test_int8_agrees_and_is_smaller(finetuned, tmp_path, cli):
    model, data = finetuned["single"], FAMILIES["single"][1]
    r = cli("export", model, "--out", tmp_path / "fp32", "--check", data)
    assert r.exit_code == 0, r.stderr
    r = cli("export", model, "--out", tmp_path / "int8", "--quantize", "int8", "--check", data,
            "--max-drop", "100")
    assert r.exit_code == 0, r.stderr
    check = _manifest(tmp_path / "int8")["stats"]["check"]
    # Stated share: int8 rounding may flip an example whose two logits nearly tie, no more.
    assert check["agreement"] >= 0.9, check
    # the log ends with the check's table: the manifest's figures
    log = r.stderr[r.stderr.index("check on "):]
    metric_row = next(ln for ln in log.splitlines() if ln.strip().startswith(check["metric"]))
    assert f"{check['pytorch_value']:.4f}" in metric_row
    assert f"{check['export_value']:.4f}" in metric_row
    assert f"predictions agreeing: {check['agreement']:.4f}" in log
    assert f"{check['latency_ms']['export']['median']:.2f}" in log
    assert 0 < max(check["max_abs_diff"].values()) < 0.5
    assert (tmp_path / "int8" / "model.onnx").stat().st_size < \
        (tmp_path / "fp32" / "model.onnx").stat().st_size
    # diff: what the export did to the model
    lines = cli("diff", model, tmp_path / "int8").stdout.splitlines()
    assert lines[0].startswith("lineage: model ") and "settings.quantize: (absent) -> int8" in lines
    assert any(ln.startswith("check: input: (absent) -> file dev.tsv") for ln in lines), lines
    onnx = pytest.importorskip("onnx")
    ops = {n.op_type for n in onnx.load(str(tmp_path / "int8" / "model.onnx")).graph.node}
    assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops


def test_dynamic_axes_one_file_any_batch_and_length(tmp_path):
    """Batch 1 and 7, lengths 5 and 300, on one exported file; padding masked as in PyTorch."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=512, initializer_range=0.3)
    model = BertForTokenClassification(config, num_labels=5).eval()
    path = tmp_path / "m.onnx"
    assert onnx_model.export(model, path, encoder=False, opset=18, max_positions=512) == ["logits"]
    runner = onnx_model.OnnxModel(path, threads=1)
    for batch, length in ((1, 5), (7, 300), (7, 5), (1, 300)):
        ids = torch.randint(5, 500, (batch, length))
        mask = torch.ones_like(ids)
        mask[1:, length // 2:] = 0   # rows after the first padded
        types = torch.zeros_like(ids)
        types[:, length // 3:] = 1
        with torch.no_grad():
            ref = model(ids, types, mask)["logits"]
        got = runner(ids, types, mask)["logits"]
        assert got.shape == ref.shape
        real = mask.bool()
        torch.testing.assert_close(got[real], ref[real], **MODEL_FP32)
    # no mask and no segments given (a batch without padding): ones and zeros, as PyTorch
    ids = torch.randint(5, 500, (3, 9))
    with torch.no_grad():
        torch.testing.assert_close(runner(ids)["logits"], model(ids)["logits"], **MODEL_FP32)


def test_encoder_export_feeds_embed(tiny_pretrained, finetuned, tmp_path, cli):
    r = cli("export", tiny_pretrained, "--out", tmp_path / "enc")
    assert r.exit_code == 0, r.stderr
    onnx = _manifest(tmp_path / "enc")["stats"]["onnx"]
    layers = json.loads((tiny_pretrained / "config.json").read_text())["num_hidden_layers"]
    assert onnx["graph"] == "BertModel"
    assert onnx["outputs"][:layers + 1] == [f"hidden_states.{i}" for i in range(layers + 1)]
    text = FIXTURES / "glue" / "SST-2" / "dev.tsv"
    for name, model in (("pt", tiny_pretrained), ("onnx", tmp_path / "enc")):
        r = cli("embed", model, text, "--text-column", "sentence", "--layers", "-1,-2",
                "--pool", "mean", "--out", tmp_path / f"emb-{name}", "--precision", "fp32")
        assert r.exit_code == 0, r.stderr
    a = np.load(tmp_path / "emb-pt" / "vectors-00000.npy")
    b = np.load(tmp_path / "emb-onnx" / "vectors-00000.npy")
    assert a.shape == b.shape and a.shape[1] == 2 * 32
    np.testing.assert_allclose(a, b, atol=1e-4)

    # a fine-tuned model exports its encoder on request; eval then refuses it (no head)
    r = cli("export", finetuned["single"], "--out", tmp_path / "enc2", "--encoder")
    assert r.exit_code == 0, r.stderr
    assert not (tmp_path / "enc2" / "bertctl_task.json").exists()
    r = cli("eval", tmp_path / "enc2", FAMILIES["single"][1], "--task", "glue/sst2", "--out",
            tmp_path / "ev")
    assert r.exit_code == 2 and "BertModel" in r.stderr and not (tmp_path / "ev").exists()
    # and embed refuses a head's export, naming the flag
    r = cli("export", finetuned["single"], "--out", tmp_path / "head")
    assert r.exit_code == 0, r.stderr
    r = cli("embed", tmp_path / "head", text, "--text-column", "sentence", "--out",
            tmp_path / "emb3")
    assert r.exit_code == 2 and "--encoder" in r.stderr and not (tmp_path / "emb3").exists()


def _one_line(r, *parts):
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    for p in parts:
        assert p in lines[0], lines[0]


def test_bad_inputs(finetuned, pretrain_data, tmp_path, cli):
    model = finetuned["single"]
    out = tmp_path / "ex"
    r = cli("export", model, "--out", out)
    assert r.exit_code == 0, r.stderr

    # an export is not a model to train further
    _one_line(cli("finetune", out, GLUE / "SST-2", "--task", "glue/sst2", "--out",
                  tmp_path / "ft", "--steps", "1"), str(out), "export artifact")
    _one_line(cli("pretrain", pretrain_data, "--init-from", out, "--out", tmp_path / "pt",
                  "--steps", "1"), str(out), "export artifact")
    _one_line(cli("export", out, "--out", tmp_path / "again"), "export artifact")
    # nor a masked-LM scorer
    _one_line(cli("eval", out, pretrain_data, "--out", tmp_path / "ev0"), "export")
    # an encoder export has no task to --check
    _one_line(cli("export", model, "--encoder", "--check", FAMILIES["single"][1], "--out",
                  tmp_path / "enc"), "--check", "encoder")
    # a task file of another family
    _one_line(cli("export", model, "--check", FAMILIES["multiple_choice"][1], "--out",
                  tmp_path / "x"))
    for d in ("ft", "pt", "again", "ev0", "enc", "x"):
        assert not (tmp_path / d).exists(), d

    # the graph changed after export: refused before it runs, whatever changed
    changed = tmp_path / "changed"
    shutil.copytree(out, changed)
    data = bytearray((changed / "model.onnx").read_bytes())
    data[-10] ^= 1
    (changed / "model.onnx").write_bytes(bytes(data))
    _one_line(cli("eval", changed, FAMILIES["single"][1], "--out", tmp_path / "ev1"),
              "model.onnx", "checksum")
    assert not (tmp_path / "ev1").exists()


def test_missing_extra_is_one_line_and_writes_nothing(finetuned, tmp_path, cli, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    _one_line(cli("export", finetuned["single"], "--out", tmp_path / "ex"),
              "onnxruntime", "pip install 'bertctl[export]'")
    assert not (tmp_path / "ex").exists()


def test_check_gate_exits_3_with_the_artifact_written(finetuned, tmp_path, cli, monkeypatch):
    """An export whose predictions differ from the model's (simulated: its logits flipped)
    loses accuracy; beyond --max-drop that is exit 3, the artifact and its evidence kept."""
    forward = onnx_model.OnnxModel.forward

    def flipped(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        return {**out, "logits": -out["logits"]}

    monkeypatch.setattr(onnx_model.OnnxModel, "forward", flipped)
    out = tmp_path / "ex"
    r = cli("export", finetuned["single"], "--out", out, "--check", FAMILIES["single"][1],
            "--max-drop", "0.5")
    check = _manifest(out)["stats"]["check"]
    if check["drop_points"] <= 0.5:   # a model predicting one class half the time
        pytest.skip(f"flipping the logits did not lower accuracy: {check}")
    assert r.exit_code == 3, r.stderr
    assert "dropped" in r.stderr and "--max-drop 0.5" in r.stderr
    assert check["agreement"] < 1 and check["export_value"] < check["pytorch_value"]


def test_frozen_bilstm_head_is_refused_in_one_line(tmp_path):
    """The feature-based BiLSTM head's packed sequences cannot be exported exactly: refused,
    naming what to do instead; its linear counterpart exports."""
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    features = {"layers": [2, 1], "combine": "concat"}
    lstm = BertForTokenClassification(config, num_labels=3, features={**features,
                                                                      "head": "bilstm"})
    with pytest.raises(BertctlError, match="BiLSTM head cannot be exported.*--encoder"):
        onnx_model.export(lstm.eval(), tmp_path / "lstm.onnx", encoder=False, opset=18,
                          max_positions=64)
    assert not (tmp_path / "lstm.onnx").exists()
    linear = BertForTokenClassification(config, num_labels=3, features={**features,
                                                                        "head": "linear"})
    linear.eval()
    path = tmp_path / "linear.onnx"
    onnx_model.export(linear, path, encoder=False, opset=18, max_positions=64)
    ids = torch.randint(5, 100, (2, 11))
    with torch.no_grad():
        ref = linear(ids)["logits"]
    torch.testing.assert_close(onnx_model.OnnxModel(path, threads=1)(ids)["logits"], ref,
                               **MODEL_FP32)


def test_encoder_outputs_match_pytorch(tmp_path):
    torch.manual_seed(1)
    model = BertModel(BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=3,
                                 num_attention_heads=4, intermediate_size=64,
                                 max_position_embeddings=64)).eval()
    path = tmp_path / "enc.onnx"
    names = onnx_model.export(model, path, encoder=True, opset=18, max_positions=64)
    assert names == [f"hidden_states.{i}" for i in range(4)] + ["pooler_output"]
    ids = torch.randint(5, 200, (3, 17))
    mask = torch.ones_like(ids)
    mask[2, 9:] = 0
    got = onnx_model.OnnxModel(path, threads=1)(ids, None, mask)
    with torch.no_grad():
        ref = model(ids, None, mask, output_hidden_states=True)
    for a, b in zip(got["hidden_states"], ref["hidden_states"]):
        torch.testing.assert_close(a[mask.bool()], b[mask.bool()], **MODEL_FP32)
    torch.testing.assert_close(got["pooler_output"], ref["pooler_output"], **MODEL_FP32)


def test_a_rerankers_export_scores_as_the_reranker_everywhere(cli, minilm_l2,
                                                               tmp_path):
    """A reranker's export (its graph scores one sequence a row) takes the grouped batches
    the reranker does: eval EXPORT ROWS, export --check and eval --rerank EXPORT score as
    the PyTorch reranker (fp32 graph: MODEL_FP32), where each failed on the input's rank."""
    from helpers import EXAMPLES

    mined = tmp_path / "mined"
    assert cli("mine", minilm_l2, EXAMPLES / "retrieval" / "train.tsv", "--negatives", "2",
               "--precision", "fp32", "--out", mined).exit_code == 0
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join((mined / "pairs.jsonl").read_text().splitlines(True)[:24]))
    rr = tmp_path / "rr"
    assert cli("finetune", minilm_l2, rows, "--task", "reranking", "--steps", "2",
               "--batch-size", "8", "--max-seq-length", "64", "--out", rr).exit_code == 0
    r = cli("export", rr, "--check", rows, "--out", tmp_path / "onnx")
    assert r.exit_code == 0, r.stderr
    scores = {}
    for name, model in (("pt", rr), ("onnx", tmp_path / "onnx")):
        r = cli("eval", model, rows, "--task", "reranking", "--precision", "fp32",
                "--out", tmp_path / f"ev-{name}")
        assert r.exit_code == 0, r.stderr
        scores[name] = np.loadtxt(tmp_path / f"ev-{name}" / "predictions.tsv", skiprows=1)[:, 1:]
    assert scores["pt"].shape == scores["onnx"].shape == (24, 3)
    np.testing.assert_allclose(scores["onnx"], scores["pt"], **MODEL_FP32)
    beir = EXAMPLES / "retrieval" / "beir"
    metrics = {}
    for name, model in (("pt", rr), ("onnx", tmp_path / "onnx")):
        r = cli("eval", minilm_l2, beir, "--task", "retrieval", "--rerank", model,
                "--rerank-depth", "5", "--precision", "fp32", "--out", tmp_path / f"rr-{name}")
        assert r.exit_code == 0, r.stderr
        metrics[name] = json.loads((tmp_path / f"rr-{name}" / "metrics.json").read_text())
    # (scores within MODEL_FP32 may swap a near tie: one query's rank, at most)
    assert metrics["onnx"]["rerank/ndcg@10"] == pytest.approx(metrics["pt"]["rerank/ndcg@10"],
                                                              abs=0.01)


def test_a_sentence_transformers_directory_exports_its_embedding_head(cli, minilm_dir,
                                                                     tmp_path):
    """A plain sentence-transformers directory (no bertctl task) is an embedding model: its
    export is the embedding head (pooling, normalisation), whose vectors `embed` reads as the
    model's own (fp32 graph: MODEL_FP32), where it exported a bare encoder embed refused."""
    texts = tmp_path / "t.txt"
    texts.write_text("Who were the Normans?\nA recipe for bread, with butter.\n")
    assert cli("export", minilm_dir, "--out", tmp_path / "onnx").exit_code == 0
    config = json.loads((tmp_path / "onnx" / "config.json").read_text())
    assert config["architectures"] == ["BertForEmbedding"]
    vectors = []
    for name, model in (("onnx", tmp_path / "onnx"), ("pt", minilm_dir)):
        r = cli("embed", model, texts, "--precision", "fp32", "--out", tmp_path / f"e-{name}")
        assert r.exit_code == 0, r.stderr
        vectors.append(np.load(tmp_path / f"e-{name}" / "vectors-00000.npy"))
    np.testing.assert_allclose(vectors[0], vectors[1], **MODEL_FP32)
