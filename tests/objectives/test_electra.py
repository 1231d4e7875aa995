"""The `electra` objective: its loss against a plain reference of the definition, the
discriminator's input and target (no [MASK], no original leaked, a sampled original counts as
not replaced), and the CLI chain: pretrain, eval on pretraining data, finetune, and the encoder
loaded by transformers as BertModel with the same outputs; its bad inputs."""

import json
import math

import numpy as np
import pytest
import torch

from bertctl.data.pretraining.dataset import PretrainingDataset
from bertctl.model import BertConfig, BertForElectraPreTraining
from bertctl.model.electra.pretraining import generator_config, replace_masked

from helpers import TINY_MODEL
from tolerance import MODEL_FP32  # (each tolerance's reason)

MASK = 4


def toy_batch():
    g = torch.Generator().manual_seed(1)
    original = torch.randint(5, 50, (3, 9), generator=g)
    labels = torch.full_like(original, -100)
    where = torch.zeros_like(original, dtype=torch.bool)
    where[0, [1, 4]] = where[1, [2]] = where[2, [0, 5, 7]] = True
    labels[where] = original[where]
    input_ids = original.masked_fill(where, MASK)
    attention = torch.ones_like(original)
    attention[1, 6:] = 0
    return original, input_ids, labels, attention


def tiny_model(**kwargs) -> BertForElectraPreTraining:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=16)
    return BertForElectraPreTraining(config, **kwargs).eval()


def test_loss_is_the_generator_mlm_loss_plus_weighted_token_bce():
    model = tiny_model(discriminator_weight=7.0)
    original, input_ids, labels, attention = toy_batch()
    with torch.no_grad():
        out = model(input_ids, None, attention, labels=labels,
                    sample_generator=torch.Generator().manual_seed(3))
        # The reference, position by position from the definition.
        logits = out["mlm_logits"].double()
        mlm = [-(logits[i, t] - torch.logsumexp(logits[i], 0))
               for i, t in enumerate(labels[labels != -100].tolist())]
        disc, n = 0.0, 0
        for b in range(3):
            for t in range(9):
                if attention[b, t]:
                    z = float(out["disc_logits"][b, t])
                    y = float(out["corrupted"][b, t] != original[b, t])
                    p = 1 / (1 + math.exp(-z))
                    disc -= y * math.log(p) + (1 - y) * math.log(1 - p)
                    n += 1
    expected = float(sum(mlm) / len(mlm)) + 7.0 * disc / n
    assert float(out["loss"]) == pytest.approx(expected, rel=1e-5)
    # Sampled from the generator's predictions: the seed decides, the draw follows them.
    with torch.no_grad():
        again = model(input_ids, None, attention, labels=labels,
                      sample_generator=torch.Generator().manual_seed(3))
    assert torch.equal(again["corrupted"], out["corrupted"])


def test_discriminator_input_and_target_never_leak_the_original():
    original, input_ids, labels, attention = toy_batch()
    masked = labels != -100
    n = int(masked.sum())
    # Samples equal to the originals: nothing counts as replaced, and no [MASK] is left.
    corrupted, replaced = replace_masked(input_ids, labels, original[masked])
    assert torch.equal(corrupted, original) and not replaced.any()
    # Other tokens: replaced exactly where masked, and the masked positions hold the samples.
    samples = (original[masked] + 1) % 50
    corrupted, replaced = replace_masked(input_ids, labels, samples)
    assert torch.equal(replaced, masked) and torch.equal(corrupted[masked], samples)
    assert torch.equal(corrupted[~masked], original[~masked]) and not (corrupted == MASK).any()
    # Through the model, with a generator that always proposes token 7: the discriminator reads
    # 7 at every masked position, whatever the original, and its target is 1 exactly where the
    # original was not 7.
    model = tiny_model()
    with torch.no_grad():
        model.generator.bias.fill_(-1e4)
        model.generator.bias[7] = 1e4
        out = model(input_ids, None, attention, labels=labels)
    assert (out["corrupted"][masked] == 7).all() and n == int(masked.sum())
    assert torch.equal(out["replaced"], masked & (original != 7))


def test_generator_is_a_fraction_of_the_discriminator():
    config = BertConfig.from_preset("mini", vocab_size=100)
    gen = generator_config(config, 0.25)
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size,
            gen.num_hidden_layers) == (64, 1, 256, 4)
    model = BertForElectraPreTraining(config)
    shared = model.bert.embeddings.word_embeddings.weight
    assert not any(p is shared for n, p in model.generator.named_parameters())
    # The generator's output layer is the shared table: its gradient reaches the embeddings.
    original, input_ids, labels, attention = toy_batch()
    out = model(input_ids, None, attention, labels=labels)
    out["mlm_loss"].backward()
    assert shared.grad is not None and shared.grad.abs().sum() > 0
    assert model.discriminator_predictions.dense.weight.grad is None


def test_electra_chain_and_transformers_loads_the_encoder(cli, electra_model, electra_data,
                                                           tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertctl.model import BertModel, load_model

    manifest = json.loads((electra_model / "artifact.json").read_text())
    assert manifest["stats"]["objective"] == "electra"
    assert {"mlm_loss", "disc_loss", "disc_accuracy", "replaced_share"} <= set(manifest["metrics"])
    config = json.loads((electra_model / "config.json").read_text())
    assert config["bertctl_electra"]["generator_size"] == 0.5

    ours, report = load_model(electra_model)
    assert isinstance(ours, BertForElectraPreTraining) and report.complete
    assert ours.generator.embeddings_project.out_features == 16

    # The encoder fine-tuning keeps: transformers' BertModel computes what ours does.
    hf = transformers.BertModel.from_pretrained(str(electra_model), add_pooling_layer=False)
    encoder, _ = load_model(electra_model, BertModel)
    batch = PretrainingDataset(electra_data, "validation").batch(np.arange(4))
    with torch.no_grad():
        theirs = hf.eval()(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                           attention_mask=batch["attention_mask"]).last_hidden_state
        mine = encoder.eval()(batch["input_ids"], batch["token_type_ids"],
                              batch["attention_mask"])["last_hidden_state"]
    torch.testing.assert_close(mine, theirs, **MODEL_FP32)

    r = cli("eval", electra_model, electra_data, "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    first = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert set(first) >= {"mlm_loss", "disc_loss", "disc_accuracy", "replaced_share"}
    r = cli("eval", electra_model, electra_data, "--out", tmp_path / "ev2")
    assert json.loads((tmp_path / "ev2" / "metrics.json").read_text()) == first   # seeded

    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "".join(
        f"{w} story {i}\t{i % 2}\n" for i, w in enumerate(["a good", "a bad"] * 8)))
    r = cli("finetune", electra_model, train, "--task", "glue/sst2", "--epochs", "1",
            "--batch-size", "8", "--out", tmp_path / "ft")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("args,message", [
    (["--objective", "mlm", "--generator-size", "0.5"], "--generator-size applies to another objective, not to --objective mlm"),
    (["--objective", "electra"], "--masking dynamic"),
])
def test_bad_electra_use(cli, electra_data, pretrain_data, tmp_path, args, message):
    data = pretrain_data if "--masking" in message else electra_data
    if data is pretrain_data:   # static NSP data: the --no-nsp refusal comes first
        message = "--no-nsp"
    r = cli("pretrain", data, *args, *TINY_MODEL, "--steps", "2", "--out", tmp_path / "m")
    assert r.exit_code == 2 and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "m").exists()
