"""An architecture added from outside bertctl (#54): a config, an encoder and two heads written
here on the shared parts (bertctl.model.shared, bertctl.model.roles), and one `register` call.
Its name and size become choices of `pretrain --architecture` and `--model-size`, and it runs
the chain pretrain -> finetune -> eval -> export with no stage, CLI or model-core change (as
tests/test_objective_plugin.py shows for objectives and test_family_plugin.py for families).

The toy encoder is deliberately not BERT-shaped: pre-norm blocks with one fused projection, no
segment embeddings, no biases, weights under its own names (`toy.blocks.N...`)."""

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bertctl.errors import BertctlError
from bertctl.model import architectures
from bertctl.model.attention import AttentionPolicy
from bertctl.model.roles import SequenceClassifier, masked_lm
from bertctl.model.shared import EncoderWithHead, attention_bias, first_tokens, keep_layers

from conftest import EXAMPLES, with_plugin

SIZES = {"pico": (1, 32, 2), "nano": (2, 48, 4)}


@dataclass
class ToyConfig:
    architecture: ClassVar[str] = "toy"
    presets: ClassVar[dict[str, str]] = {n: "/".join(map(str, s)) for n, s in SIZES.items()}

    vocab_size: int = 100
    hidden_size: int = 32
    num_hidden_layers: int = 1
    num_attention_heads: int = 2
    max_position_embeddings: int = 128
    pad_token_id: int | None = 0
    dropout: float = 0.1

    def __post_init__(self):
        architectures.check_config(self, ("vocab_size", "hidden_size", "num_hidden_layers",
                                          "num_attention_heads", "max_position_embeddings"),
                                   rates=("dropout",), activations=())

    @classmethod
    def from_preset(cls, name, *, num_hidden_layers=None, hidden_size=None,
                    num_attention_heads=None, intermediate_size=None, **overrides):
        if name not in SIZES:
            raise BertctlError(f"model size {name!r}: not a toy size ({', '.join(SIZES)})")
        layers, hidden, heads = SIZES[name]
        return cls(num_hidden_layers=num_hidden_layers or layers,
                   hidden_size=hidden_size or hidden,
                   num_attention_heads=num_attention_heads or heads, **overrides)

    @classmethod
    def from_hf_dict(cls, d, source="config.json"):
        if d.get("model_type") != "toy":
            raise BertctlError(f"{source}: not a toy config")
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def to_hf_dict(self):
        return {"model_type": "toy", **asdict(self)}

    def with_layers(self, layers):
        return replace(self, num_hidden_layers=len(layers))

    def sized(self, preset):
        return ToyConfig.from_preset(preset, vocab_size=self.vocab_size,
                                     max_position_embeddings=self.max_position_embeddings)

    def with_special_ids(self, special_ids):
        return self   # it names no special token but the padding

    def matmul_flops(self, rows, seq_len, mlm_fraction=0.15, training=True, pooler=False):
        # a layer: qkv 3h², out h², the MLP 2h² twice, scores and mixing; the tied decoder
        h, per_row = self.hidden_size, (self.hidden_size * 2 if pooler else 0.0)
        per_token = (self.num_hidden_layers * (8 * h * h + 2 * seq_len * h)
                     + mlm_fraction * h * self.vocab_size)
        return architectures.batch_flops(rows, seq_len, per_token, per_row, training=training)


class ToyBlock(nn.Module):
    def __init__(self, config: ToyConfig, policy: AttentionPolicy):
        super().__init__()
        self.policy = policy
        h = config.hidden_size
        self.heads = config.num_attention_heads
        self.norm1, self.norm2 = nn.LayerNorm(h, bias=False), nn.LayerNorm(h, bias=False)
        self.qkv, self.out = nn.Linear(h, 3 * h, bias=False), nn.Linear(h, h, bias=False)
        self.mlp = nn.Sequential(nn.Linear(h, 2 * h, bias=False), nn.GELU(),
                                 nn.Linear(2 * h, h, bias=False))
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x, mask):
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = self.policy.attend(q, k, v, mask)
        x = x + self.drop(self.out(a.transpose(1, 2).reshape(b, t, h)))
        return x + self.drop(self.mlp(self.norm2(x)))


class ToyModel(nn.Module):
    def __init__(self, config: ToyConfig):
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size,
                                   padding_idx=config.pad_token_id)
        self.positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.attention_policy = AttentionPolicy()    # its own, as each architecture's
        self.blocks = nn.ModuleList(ToyBlock(config, self.attention_policy)
                                    for _ in range(config.num_hidden_layers))
        self.norm = nn.LayerNorm(config.hidden_size, bias=False)
        self.gradient_checkpointing = False
        self.apply(lambda m: init(m))

    def compile_layers(self):
        for i, block in enumerate(self.blocks):
            self.blocks[i] = torch.compile(block)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None,
                output_hidden_states=False, position_ids=None, num_layers=None):
        t = input_ids.shape[1]
        x = self.tokens(input_ids) + self.positions.weight[:t]
        mask = attention_bias(attention_mask)
        states = [x]
        for block in self.blocks[:num_layers]:
            if self.gradient_checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, mask, use_reentrant=False)
            else:
                x = block(x, mask)
            states.append(x)
        x = self.norm(x)
        return {"last_hidden_state": x,
                "hidden_states": tuple(states[:-1]) + (x,) if output_hidden_states else None}

    def hidden_state_modules(self):
        return [self.tokens, *self.blocks[:-1], self.norm]

    def layer_state(self, layers, state=None, prefix=""):
        return keep_layers(self.state_dict() if state is None else state, f"{prefix}blocks.",
                           layers)


def init(module):
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)


class ToyWithHead(EncoderWithHead):
    encoder_name = "toy"

    def _build_encoder(self, config):
        return ToyModel(config)

    def _init_module(self, module):
        init(module)

    def _add_classifier(self, num_outputs):
        self.classifier = nn.Linear(self.config.hidden_size, num_outputs)
        self._init_head()

    def _classify(self, x):
        return self.classifier(x)


class ToyForMaskedLM(ToyWithHead):
    def __init__(self, config):
        super().__init__(config)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None,
                position_ids=None):
        hidden = self.toy(input_ids, None, attention_mask)["last_hidden_state"]
        out = masked_lm(lambda h: F.linear(h, self.toy.tokens.weight), hidden, labels)
        if labels is not None:
            out["loss"] = out["mlm_loss"]
        return out


class ToyForSequenceClassification(SequenceClassifier, ToyWithHead):
    def __init__(self, config, num_labels=None, problem_type="single_label_classification",
                 features=None):
        super().__init__(config, features)
        self._add_classifier(self._problem(num_labels, problem_type))

    def _pool(self, input_ids, token_type_ids, attention_mask, position_ids=None,
              sequence_starts=None):
        return first_tokens(self._sequence(input_ids, None, attention_mask), sequence_starts)


TOY = architectures.Architecture(
    name="toy", model_type="toy", config_class=ToyConfig, description="a test's",
    heads={"encoder": ToyModel, "masked_lm": ToyForMaskedLM,
           "sequence_classification": ToyForSequenceClassification},
    encoder_name="toy", bare_prefixes=("tokens.", "positions.", "blocks.", "norm."))


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

    assert model.ToyConfig is ToyConfig and model.ToyForMaskedLM is ToyForMaskedLM
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
