"""An architecture added from outside bertctl (#54): tests/toy_architecture/, a folder in the
shape of bertctl's own (config.py, modeling.py, and its `Architecture` entry in __init__.py),
written on the shared parts (the config base, the encoder base, the roles) and registered for
the length of a test. Its name and size become choices of `pretrain --architecture` and
`--model-size`, and it runs the chain pretrain -> finetune -> eval -> export with no stage, CLI
or model-core change (as tests/objectives/test_objective_plugin.py shows for objectives and
test_family_plugin.py for families).

The toy encoder is deliberately not BERT-shaped: pre-norm blocks with one fused projection, no
segment embeddings, no biases, weights under its own names (`toy.blocks.N...`)."""

import json

import pytest

from bertctl.model import architectures

from helpers import EXAMPLES, with_plugin
from toy_architecture import TOY
from toy_architecture.config import ToyConfig
from toy_architecture.modeling import ToyMaskedLMHead, ToyModel


@pytest.fixture
def toy_cli():
    yield from with_plugin(architectures.ARCHITECTURES, TOY)


def test_the_toy_fulfils_the_contract():
    config = ToyConfig.from_preset("pico", vocab_size=50)
    assert isinstance(config, architectures.ArchitectureConfig)
    assert isinstance(ToyModel(config), architectures.Encoder)


def test_a_registered_architecture_exports_its_classes(toy_cli):
    """bertctl.model's names come from the registry: the toy's config and model classes are
    there while it is registered, as BERT's and ModernBERT's are."""
    import bertctl.model as model

    assert model.ToyConfig is ToyConfig and model.ToyForMaskedLM.head_class is ToyMaskedLMHead
    assert "ToyForSequenceClassification" in dir(model)
    assert model.ModernBertForMaskedLM.__name__ == "ModernBertForMaskedLM"


def test_a_registered_architecture_runs_the_whole_chain(toy_cli, continuous_data, tmp_path):
    code, out, _ = toy_cli("pretrain", "--help")
    out = " ".join(out.split())   # the help wraps where the registry's list reaches
    assert code == 0 and "toy, a test's" in out and "pico 1/32/2" in out

    model = tmp_path / "model"
    code, _, err = toy_cli("pretrain", continuous_data, "--architecture", "toy", "--objective",
                           "mlm", "--model-size", "pico", "--steps", "3", "--batch-size", "8",
                           "--eval-batches", "1", "--out", model)
    assert code == 0, err
    manifest = json.loads((model / "artifact.json").read_text())
    assert manifest["stats"]["architecture"] == "toy"
    hf = json.loads((model / "config.json").read_text())
    assert hf["model_type"] == "toy" and hf["architectures"] == ["ToyForMaskedLM"]
    assert any(k.startswith("toy.blocks.0.qkv") for k in _weights(model))

    # an architecture without the role an objective trains is refused, naming both
    code, _, err = toy_cli("pretrain", continuous_data, "--architecture", "toy",
                           "--objective", "bert", "--model-size", "pico", "--steps", "1",
                           "--out", tmp_path / "nsp")
    assert code == 2 and "--objective bert cannot train --architecture toy" in err

    sst2 = EXAMPLES / "glue" / "SST-2"
    tuned = tmp_path / "tuned"
    code, _, err = toy_cli("finetune", model, sst2, "--task", "glue/sst2", "--steps", "3",
                           "--batch-size", "8", "--max-seq-length", "64", "--out", tuned)
    assert code == 0, err
    assert json.loads((tuned / "artifact.json").read_text())["stats"]["architecture"] == "toy"

    code, _, err = toy_cli("eval", tuned, sst2 / "dev.tsv", "--out", tmp_path / "eval")
    assert code == 0, err
    pytorch = json.loads((tmp_path / "eval" / "metrics.json").read_text())

    code, _, err = toy_cli("export", tuned, "--check", sst2 / "dev.tsv", "--out",
                           tmp_path / "onnx")
    assert code == 0, err
    check = json.loads((tmp_path / "onnx" / "artifact.json").read_text())["stats"]["check"]
    assert check["drop_points"] == 0 and check["agreement"] == 1.0
    assert pytorch["accuracy"] == pytest.approx(check["pytorch"]["accuracy"])

    # #63 class 5: the stages that read hidden states (embed, a frozen encoder's head) call
    # the encoder with num_layers, which the contract states
    code, _, err = toy_cli("embed", tuned, sst2 / "dev.tsv", "--text-column", "sentence",
                           "--layers", "-1,-2", "--pool", "mean", "--out", tmp_path / "emb")
    assert code == 0, err
    code, _, err = toy_cli("finetune", model, sst2, "--task", "glue/sst2", "--steps", "2",
                           "--batch-size", "8", "--max-seq-length", "64", "--freeze-encoder",
                           "--head", "linear", "--out", tmp_path / "frozen")
    assert code == 0, err


def _weights(model_dir):
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return list(f.keys())
