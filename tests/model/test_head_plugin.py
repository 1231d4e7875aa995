"""A task family with a head of its own, added from outside bertctl (#65 item 1): a `Head`
written here (prototype classification: each class a learned point, a text's scores its
negative squared distances to them; no architecture has such a model), registered once with
`register_head`, and a family that fine-tunes it. It runs finetune -> eval -> export through
BERT, ModernBERT and the toy architecture of tests/toy_architecture, which know nothing
of it: one `build` pairs the head with each encoder, and the model class config.json names
comes from the mapping (the encoder's prefix + the head's suffix)."""

import json
import pickle

import pytest
import torch
from torch import nn

from bertctl.data import label_columns
from bertctl.model import architectures
from bertctl.model.composed import Head
from bertctl.tasks import registry
from bertctl.tasks.classification import model_labels
from bertctl.tasks.sequence import SequenceFamily

from helpers import EXAMPLES, make_app
from toy_architecture import TOY

SST2 = EXAMPLES / "glue" / "SST-2"
WIDTH = 8   # the space the prototypes live in


class PrototypeHead(Head):
    """Mean-pooled hidden states projected to WIDTH values; logits = -|v - c_k|^2 for each
    class's prototype c_k (a prototypical network), trained by cross-entropy."""

    attribute = "prototypes"

    def __init__(self, config, num_labels: int = 2):
        super().__init__()
        self.project = nn.Linear(config.hidden_size, WIDTH)
        self.centres = nn.Embedding(num_labels, WIDTH)
        for module in (self.project, self.centres):
            nn.init.normal_(module.weight, std=0.5)

    def forward(self, model, input_ids, token_type_ids=None, attention_mask=None, labels=None):
        hidden = model.sequence(input_ids, token_type_ids, attention_mask).float()
        mask = (torch.ones_like(input_ids) if attention_mask is None else attention_mask)
        mask = mask.unsqueeze(-1).float()
        v = self.project((hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0))
        logits = -((v[:, None, :] - self.centres.weight[None]) ** 2).sum(-1)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels.reshape(-1))
        return out

    def hf_config(self):
        return {"prototype_count": self.centres.num_embeddings}

    @classmethod
    def kwargs_from_hf(cls, hf_config):
        return {"num_labels": hf_config["prototype_count"]}


class Prototypes(SequenceFamily):
    """One text, one class, scored by the nearest prototype (reading, encoding and writing as
    every one-sequence family: SequenceFamily, the shared base, not a registered family)."""

    name = "prototypes"
    title = "Prototype classification"
    default_metric = "accuracy"
    label_list = True
    head = "prototypes"

    def check_spec(self, spec):
        if len(spec.text_columns) != 1:
            raise ValueError("a 'prototypes' task takes one text column")

    def read_labels(self, values, path, column, spec, label_list, first_row=0):
        return label_columns.class_labels(values, path, column, label_list, first_row)

    def head_kwargs(self, spec, label_list):
        return {"num_labels": len(label_list)}

    def resolve_labels(self, spec, model_task, hf_config, given, where):
        return model_labels(model_task, hf_config)


HEAD = architectures.HeadSpec("prototypes", "ForPrototypes", PrototypeHead)


@pytest.fixture(scope="module")
def plugin_cli():
    """The head, the family and the toy architecture registered; a runner of the command tree
    made with them."""
    from typer.testing import CliRunner

    architectures.register_head(HEAD)
    family = registry.FAMILIES.register(Prototypes())
    architectures.ARCHITECTURES.register(TOY)
    try:
        app = make_app()

        def run(*args):
            result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
            return result.exit_code, result.stdout, result.stderr
        yield run
    finally:
        architectures.HEADS.pop(HEAD.name)
        registry.FAMILIES.pop(family.name)
        architectures.ARCHITECTURES.pop(TOY.name)


SIZES = {"bert": ["--model-size", "tiny", "--hidden-size", "32", "--num-attention-heads", "2",
                  "--intermediate-size", "48"],
         "modernbert": ["--model-size", "tiny", "--hidden-size", "32",
                        "--num-attention-heads", "2", "--intermediate-size", "48",
                        "--max-position-embeddings", "256"],
         "toy": ["--model-size", "pico"]}
PREFIX = {"bert": "Bert", "modernbert": "ModernBert", "toy": "Toy"}


@pytest.mark.parametrize("arch", sorted(SIZES))
def test_a_family_with_its_own_head_runs_the_chain_on_every_architecture(
        arch, plugin_cli, continuous_data, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"prototypes-{arch}")
    code, _, err = plugin_cli("pretrain", continuous_data, "--architecture", arch,
                              "--objective", "mlm", *SIZES[arch], "--steps", "2",
                              "--batch-size", "8", "--eval-batches", "1",
                              "--out", work / "pretrained")
    assert code == 0, err

    tuned = work / "tuned"
    code, _, err = plugin_cli("finetune", work / "pretrained", SST2 / "train.tsv",
                              "--dev", SST2 / "dev.tsv", "--family", "prototypes",
                              "--text-column", "sentence", "--label-column", "label",
                              "--steps", "4", "--batch-size", "8", "--max-seq-length", "64",
                              "--out", tuned)
    assert code == 0, err
    hf = json.loads((tuned / "config.json").read_text())
    assert hf["architectures"] == [f"{PREFIX[arch]}ForPrototypes"]   # the mapping's name
    assert hf["prototype_count"] == 2
    from safetensors.torch import load_file

    weights = load_file(tuned / "model.safetensors")
    assert {"prototypes.project.weight", "prototypes.centres.weight"} <= set(weights)
    encoder = architectures.ARCHITECTURES[arch].encoder_name
    assert any(k.startswith(f"{encoder}.") for k in weights)

    # eval reads the head back from config.json and the prototypes from the weights: the
    # same metric as finetune's last dev evaluation of the same weights
    code, _, err = plugin_cli("eval", tuned, SST2 / "dev.tsv", "--out", work / "eval")
    assert code == 0, err
    metrics = json.loads((work / "eval" / "metrics.json").read_text())
    manifest = json.loads((tuned / "artifact.json").read_text())
    assert manifest["stats"]["architecture"] == arch
    dev = [json.loads(line) for line in (tuned / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in dev if r["split"] == "validation"][-1]
    assert last["step"] == manifest["stats"]["selected_step"] == 4
    assert metrics["accuracy"] == pytest.approx(last["accuracy"])

    code, _, err = plugin_cli("export", tuned, "--check", SST2 / "dev.tsv",
                              "--out", work / "onnx")
    assert code == 0, err
    check = json.loads((work / "onnx" / "artifact.json").read_text())["stats"]["check"]
    assert check["agreement"] == 1.0 and check["drop_points"] == 0
    assert check["pytorch"]["accuracy"] == pytest.approx(metrics["accuracy"])


def test_the_head_is_one_class_per_architecture_named_by_the_mapping(plugin_cli):
    """build pairs the registered head with each architecture's encoder; the class is made
    once and its name says its role (what save_model and load_model read)."""
    for arch in (architectures.ARCHITECTURES[n] for n in SIZES):
        config = arch.config_class.from_preset("tiny" if arch.name != "toy" else "pico",
                                               vocab_size=64)
        model = architectures.build("prototypes", config, num_labels=3)
        assert type(model) is arch.head("prototypes")
        assert type(model).__name__ == f"{PREFIX[arch.name]}ForPrototypes"
        assert architectures.role_of(type(model).__name__) == "prototypes"
        out = model(torch.tensor([[1, 5, 6, 2]]), labels=torch.tensor([1]))
        assert out["logits"].shape == (1, 3) and out["loss"].requires_grad
        # a model is pickled as any other (its class found again by its name)
        model.eval()
        again = pickle.loads(pickle.dumps(model))
        assert type(again) is type(model)
        torch.testing.assert_close(again(torch.tensor([[1, 5, 6, 2]]))["logits"],
                                   model(torch.tensor([[1, 5, 6, 2]]))["logits"])
