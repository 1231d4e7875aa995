"""LoRA adapters (#106): the layer is the paper's definition, merging it changes no output,
`finetune --lora-rank` trains only the adapters and the head and writes them in peft's format
naming the base, peft reads them onto transformers' model with bertctl's predictions, every
reader runs the merged model, and a missing or different base is one line."""

import json
import shutil

import pytest
import torch

from bertctl.model import lora
from bertctl.model.hf import load_model, read_safetensors
from helpers import FIXTURES, one_line_error

SST2 = FIXTURES / "glue" / "SST-2"


def test_the_layer_is_the_papers_and_merging_changes_nothing():
    """y = W x + b + (alpha / r) B A x; merged, W + (alpha / r) B A. Tolerance: float32
    products summed in another order."""
    torch.manual_seed(0)
    base = torch.nn.Linear(6, 5)
    layer = lora.LoraLinear(base, rank=2, alpha=3.0)
    assert torch.equal(layer.lora_B.weight, torch.zeros(5, 2))   # starts as the base
    torch.nn.init.normal_(layer.lora_B.weight)
    x = torch.randn(4, 6)
    W, b = base.weight.detach().clone(), base.bias.detach().clone()
    A, B = layer.lora_A.weight.detach(), layer.lora_B.weight.detach()
    expected = x @ W.T + b + 1.5 * (x @ A.T @ B.T)
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        merged = layer.merged()(x)
    torch.testing.assert_close(merged, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, tiny_pretrained):
    from helpers import invoke

    out = tmp_path_factory.mktemp("lora") / "adapter"
    r = invoke("finetune", tiny_pretrained, SST2, "--task", "glue/sst2", "--out", out,
               "--steps", "8", "--batch-size", "8", "--lr", "5e-3", "--lora-rank", "4",
               "--device", "cpu", "--max-seq-length", "64", "--seed", "1")
    assert r.exit_code == 0, r.stderr
    return out


def test_finetune_trains_only_the_adapters_and_the_head(adapter, tiny_pretrained):
    assert not (adapter / "model.safetensors").exists()   # the base is never copied
    config = json.loads((adapter / lora.CONFIG).read_text())
    assert config["base_model_name_or_path"] == str(tiny_pretrained.resolve())
    assert (config["r"], config["lora_alpha"]) == (4, 8.0)
    assert config["target_modules"] == ["query", "value"]
    assert config["modules_to_save"] == ["classifier"]
    stats = json.loads((adapter / "artifact.json").read_text())["stats"]["lora"]
    assert stats["adapted_layers"] == 4                  # 2 layers x query, value
    assert stats["trained_parameters"] < 0.02 * stats["parameters"]
    assert stats["merged_max_abs_difference"] < 1e-4      # float32 rounding of W + BA
    # the merged model: the base's weights everywhere but the adapted layers and the head
    model, _ = load_model(adapter)
    base = read_safetensors(tiny_pretrained)
    changed = {k for k, v in model.state_dict().items()
               if k in base and not torch.equal(v, base[k])}
    assert changed and all(k.endswith(("query.weight", "value.weight")) for k in changed)


def test_peft_reads_the_adapter_with_bertctls_predictions(adapter, tiny_pretrained):
    """peft's PeftModel over transformers' BertForSequenceClassification of the base: the
    logits of bertctl's merged model. Tolerance: float32 sums in other orders."""
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(tiny_pretrained,
                                                                         num_labels=2)
    theirs = peft.PeftModel.from_pretrained(hf, adapter).eval()
    ours = load_model(adapter)[0].eval()
    ids = torch.tensor([[2, 10, 11, 12, 3], [2, 20, 21, 3, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).logits
        got = ours(input_ids=ids, attention_mask=mask)["logits"]
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(expected[0], expected[1])   # the inputs are told apart


def test_every_reader_runs_the_adapter(adapter, cli, tmp_path):
    r = cli("eval", adapter, SST2 / "dev.tsv", "--out", tmp_path / "ev", "--json")
    assert r.exit_code == 0, r.stderr
    assert "accuracy" in json.loads(r.stdout)["metrics"]
    # embed reads the adapted encoder alone: the merged model's encoder, not the base's
    r = cli("embed", adapter, SST2 / "dev.tsv", "--text-column", "sentence", "--out",
            tmp_path / "emb", "--precision", "fp32")
    assert r.exit_code == 0, r.stderr
    from bertctl.model.hf import load_model as load

    adapted, _ = load(adapter, "encoder")
    base, _ = load(json.loads((adapter / lora.CONFIG).read_text())["base_model_name_or_path"],
                   "encoder")
    query = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(adapted.state_dict()[query], base.state_dict()[query])
    pytest.importorskip("onnxruntime")
    r = cli("export", adapter, "--check", SST2 / "dev.tsv", "--out", tmp_path / "ex")
    assert r.exit_code == 0, r.stderr


def _edited(adapter, to, base) -> None:
    """A copy of the adapter naming another base, its manifest's checksum of the config
    recomputed (as a user who moved a base and edited the path would)."""
    import hashlib

    from helpers import write_manifest

    shutil.copytree(adapter, to)
    config = json.loads((to / lora.CONFIG).read_text())
    config["base_model_name_or_path"] = str(base)
    text = json.dumps(config).encode()
    (to / lora.CONFIG).write_bytes(text)
    manifest = json.loads((to / "artifact.json").read_text())
    manifest["files"][lora.CONFIG].update(sha256=hashlib.sha256(text).hexdigest(),
                                          size=len(text))
    write_manifest(to, manifest)


def test_a_missing_or_other_base_is_one_line(adapter, tiny_pretrained, cli, tmp_path):
    _edited(adapter, tmp_path / "moved", tmp_path / "gone")
    r = cli("eval", tmp_path / "moved", SST2 / "dev.tsv", "--out", tmp_path / "a")
    one_line_error(r, "its base model", "gone is missing")
    # another base in the recorded one's place: told by its id
    other = tmp_path / "other"
    shutil.copytree(tiny_pretrained, other)
    weights = read_safetensors(other)
    weights["bert.embeddings.word_embeddings.weight"] += 1.0
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in weights.items()}, str(other / "model.safetensors"))
    (other / "artifact.json").unlink()        # a plain Hugging Face directory now
    elsewhere = tmp_path / "elsewhere"
    _edited(adapter, elsewhere, other)
    r = cli("eval", elsewhere, SST2 / "dev.tsv", "--out", tmp_path / "b")
    one_line_error(r, "is not the one it was trained on")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("flags, message", [
    (["--lora-rank", "0"], "'lora_rank' = 0"),
    (["--lora-rank", "64"], "--lora-rank 64 must be 1 to 32"),
    (["--lora-rank", "2", "--lora-targets", "query,wq"], "--lora-targets wq name no linear"),
    (["--lora-alpha", "4"], "add --lora-rank"),
    (["--lora-rank", "2", "--freeze-encoder"], "choose one"),
])
def test_settings_that_cannot_apply_are_one_line(flags, message, tiny_pretrained, cli,
                                                  tmp_path):
    r = cli("finetune", tiny_pretrained, SST2, "--task", "glue/sst2", "--out",
            tmp_path / "out", "--steps", "1", *flags)
    one_line_error(r, message)
    assert not (tmp_path / "out").exists()


def test_an_adapter_is_not_adapted_again(adapter, cli, tmp_path):
    r = cli("finetune", adapter, SST2, "--task", "glue/sst2", "--out", tmp_path / "out",
            "--steps", "1", "--lora-rank", "2")
    one_line_error(r, "is a LoRA adapter itself")


def test_a_plain_adapter_directory_is_identified_by_its_weights_and_its_base(adapter, tmp_path):
    """Without a manifest an adapter is a Hugging Face directory: its id hashes its adapter
    files and its base's, so another adapter (or base) is never taken for a finished run's."""
    from safetensors.torch import load_file, save_file

    from bertctl.stages.common import models

    plain = tmp_path / "plain"
    shutil.copytree(adapter, plain)
    (plain / "artifact.json").unlink()
    before = models.open_model(plain).ref.id
    weights = load_file(str(plain / lora.WEIGHTS))
    key = next(k for k in weights if ".lora_B." in k)
    weights[key] = weights[key] * 2
    save_file(weights, str(plain / lora.WEIGHTS))
    assert models.open_model(plain).ref.id != before
