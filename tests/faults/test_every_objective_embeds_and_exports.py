"""Every pretraining objective's model is a complete encoder: `embed` and `export` take it.

A model from `--objective mlm` (the budget recipe) or `electra` has no pooler, as transformers'
BertForMaskedLM has none; embed and export used to refuse it for lacking `pooler.*`. The
encoder is exported without a pooler output, and its hidden states equal transformers'
BertModel on the same weights; the pooler is exported only where the checkpoint trained one.
"""

import json

import numpy as np
import pytest
import torch

from helpers import FIXTURES
from tolerance import MODEL_FP32  # (each tolerance's reason)

pytest.importorskip("onnxruntime")
OBJECTIVES = {"bert": "tiny_pretrained", "mlm": "mlm_model", "electra": "electra_model"}


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_every_objective_exports_an_encoder_equal_to_transformers(objective, request, cli,
                                                                   tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertctl.model.onnx_model import OnnxModel

    model_dir = request.getfixturevalue(OBJECTIVES[objective])
    r = cli("export", model_dir, "--out", tmp_path / "enc")
    assert r.exit_code == 0, r.stderr
    onnx = json.loads((tmp_path / "enc" / "artifact.json").read_text())["stats"]["onnx"]
    layers = json.loads((model_dir / "config.json").read_text())["num_hidden_layers"]
    pooled = objective == "bert"   # the one objective whose checkpoint trained a pooler
    assert onnx["graph"] == "BertModel"
    assert onnx["outputs"] == ([f"hidden_states.{i}" for i in range(layers + 1)]
                               + (["pooler_output"] if pooled else []))

    hf = transformers.BertModel.from_pretrained(str(model_dir), add_pooling_layer=pooled).eval()
    torch.manual_seed(0)
    ids = torch.randint(5, 400, (3, 21))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    types = torch.zeros_like(ids)
    types[0, 9:] = 1
    got = OnnxModel(tmp_path / "enc" / "model.onnx", threads=1)(ids, types, mask)
    with torch.no_grad():
        ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask,
                 output_hidden_states=True)
    real = mask.bool()
    assert len(got["hidden_states"]) == len(ref.hidden_states) == layers + 1
    for a, b in zip(got["hidden_states"], ref.hidden_states):
        torch.testing.assert_close(a[real], b[real], **MODEL_FP32)
    if pooled:
        torch.testing.assert_close(got["pooler_output"], ref.pooler_output, **MODEL_FP32)


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_every_objective_embeds_from_pytorch_and_from_its_export(objective, request, cli,
                                                                 tmp_path):
    model_dir = request.getfixturevalue(OBJECTIVES[objective])
    r = cli("export", model_dir, "--out", tmp_path / "enc")
    assert r.exit_code == 0, r.stderr
    text = FIXTURES / "glue" / "SST-2" / "dev.tsv"
    for name, model in (("pt", model_dir), ("onnx", tmp_path / "enc")):
        r = cli("embed", model, text, "--text-column", "sentence", "--pool", "cls",
                "--layers", "-1", "--precision", "fp32", "--out", tmp_path / f"emb-{name}")
        assert r.exit_code == 0, r.stderr
    a = np.load(tmp_path / "emb-pt" / "vectors-00000.npy")
    b = np.load(tmp_path / "emb-onnx" / "vectors-00000.npy")
    assert a.shape == b.shape and np.isfinite(a).all()
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_a_missing_encoder_weight_is_still_refused(tiny_pretrained, cli, tmp_path):
    """Only the pooler may be absent: a checkpoint missing a layer's weight is one line, exit 2,
    nothing written (for embed and export alike)."""
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    broken.mkdir()
    for f in tiny_pretrained.iterdir():
        if f.name not in ("artifact.json", "model.safetensors"):
            (broken / f.name).write_bytes(f.read_bytes())
    tensors = load_file(str(tiny_pretrained / "model.safetensors"))
    del tensors["bert.encoder.layer.0.attention.self.query.weight"]
    save_file(tensors, str(broken / "model.safetensors"))
    text = FIXTURES / "glue" / "SST-2" / "dev.tsv"
    for args in (("export", broken), ("embed", broken, text, "--text-column", "sentence")):
        out = tmp_path / f"out-{args[0]}"
        r = cli(*args, "--out", out)
        assert r.exit_code == 2, (r.exit_code, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and str(broken) in lines[0] and "query.weight" in lines[0], r.stderr
        assert not out.exists()


def test_every_stage_refuses_a_model_smaller_than_its_tokenizer(tiny_pretrained, cli, tmp_path):
    """A Hugging Face directory whose embedding table (vocab_size) is smaller than its
    tokenizer: export wrote a graph that embed then refused; now export, embed and finetune
    refuse it with the same one line (bertctl.stages.common.agreement's), before any work."""
    import json

    from safetensors.torch import load_file, save_file

    small = tmp_path / "small"
    small.mkdir()
    for f in tiny_pretrained.iterdir():
        if f.name not in ("artifact.json", "model.safetensors", "config.json"):
            (small / f.name).write_bytes(f.read_bytes())
    config = json.loads((tiny_pretrained / "config.json").read_text())
    cut = config["vocab_size"] - 22
    config["vocab_size"] = cut
    (small / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(tiny_pretrained / "model.safetensors"))
    tensors = {k: (v[:cut] if v.shape and v.shape[0] == cut + 22 else v)
               for k, v in tensors.items()}
    save_file(tensors, str(small / "model.safetensors"))
    text = FIXTURES / "glue" / "SST-2" / "dev.tsv"
    for name, args in (("export", ("export", small)),
                       ("embed", ("embed", small, text, "--text-column", "sentence")),
                       ("finetune", ("finetune", small, FIXTURES / "glue" / "SST-2", "--task",
                                     "glue/sst2", "--steps", "1"))):
        out = tmp_path / f"out-{name}"
        r = cli(*args, "--out", out)
        assert r.exit_code == 2, (name, r.exit_code, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and str(small) in lines[0], (name, r.stderr)
        assert f"vocabulary ({cut} tokens) is smaller" in lines[0], (name, lines[0])
        assert not out.exists(), name


@pytest.mark.parametrize("opset", ["18", "20", "23"])
@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_every_accepted_export_option_loads_and_runs_or_is_one_line(tiny_pretrained, cli,
                                                                     tmp_path, opset, quantize):
    """Every --opset the settings accept (18-23) with and without int8: the export is published
    only if the installed onnxruntime loads it and runs a batch; otherwise one line naming the
    artifact (not the hidden temporary directory) and the options, exit 2, nothing written."""
    from bertctl.model.onnx_model import OnnxModel

    out = tmp_path / "enc"
    r = cli("export", tiny_pretrained, "--opset", opset, "--quantize", quantize, "--out", out)
    if r.exit_code == 0:
        got = OnnxModel(out / "model.onnx", threads=1)(torch.randint(5, 300, (2, 9)))
        assert np.isfinite(got["last_hidden_state"].numpy()).all()
        return
    assert r.exit_code == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: {out / 'model.onnx'}: onnxruntime") and \
        f"--opset {opset}" in lines[0] and ".tmp-" not in lines[0], lines[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []
