"""`bertctl finetune` then `bertctl eval` through the CLI, for every task family, on real GLUE
and SWAG rows; the fine-tuned artifacts are checked in transformers."""

import csv
import json

import numpy as np
import pytest
import torch

from helpers import FIXTURES

GLUE = FIXTURES / "glue"
FAST = ["--batch-size", "8", "--log-every", "5", "--device", "cpu", "--max-seq-length", "64"]


def _predictions(eval_dir):
    with open(eval_dir / "predictions.tsv", newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    assert rows[0] == ["index", "prediction"]
    return [r[1] for r in rows[1:]]


@pytest.mark.parametrize("task, folder, hf_class", [
    ("glue/sst2", "SST-2", "BertForSequenceClassification"),
    ("glue/mrpc", "MRPC", "BertForSequenceClassification"),
    ("glue/sts-b", "STS-B", "BertForSequenceClassification"),
])
def test_finetune_eval_and_transformers_agree(tmp_path, tiny_pretrained, cli, task, folder,
                                              hf_class):
    transformers = pytest.importorskip("transformers")
    model = tmp_path / "ft"
    r = cli("finetune", tiny_pretrained, GLUE / folder, "--task", task, "--out", model,
            "--epochs", "1", *FAST, "--json")
    assert r.exit_code == 0, r.stderr
    m = r.json()
    assert m["stats"]["task"] == task and m["stats"]["train_examples"] == 200
    assert [i["role"] for i in m["inputs"]] == ["model", "train", "dev"]
    assert m["metrics"]  # the validation metrics of the kept weights
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == [hf_class]
    if task == "glue/sts-b":
        assert config["problem_type"] == "regression" and len(config["id2label"]) == 1
    else:
        assert config["id2label"] == {"0": "0", "1": "1"}

    ev = tmp_path / "ev"
    r = cli("eval", model, GLUE / folder / "dev.tsv", "--out", ev, "--json")
    assert r.exit_code == 0, r.stderr
    ours = _predictions(ev)
    assert len(ours) == 100

    hf = getattr(transformers, hf_class).from_pretrained(str(model)).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(str(model))
    from bertctl.tasks import make_task_spec
    from helpers import read_examples

    examples = read_examples(make_task_spec(task), GLUE / folder / "dev.tsv",
                             label_list=m["stats"]["label_list"])
    enc = tok(examples.text_a, examples.text_b, truncation="longest_first", max_length=64,
              padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = hf(**enc).logits
    if task == "glue/sts-b":
        np.testing.assert_allclose([float(p) for p in ours], logits[:, 0].numpy(), atol=1e-4)
    else:
        assert ours == [config["id2label"][str(int(i))] for i in logits.argmax(-1)]


def test_multiple_choice(tmp_path, tiny_pretrained, cli):
    transformers = pytest.importorskip("transformers")
    sample = GLUE / "swag" / "sample.jsonl"
    model = tmp_path / "swag"
    r = cli("finetune", tiny_pretrained, sample, "--dev", sample, "--task", "swag", "--out",
            model, "--steps", "3", "--batch-size", "2", "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["BertForMultipleChoice"]
    assert transformers.BertForMultipleChoice.from_pretrained(str(model))
    r = cli("eval", model, sample, "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    assert set(_predictions(tmp_path / "ev")) <= {"0", "1", "2", "3"}
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert 0 <= metrics["accuracy"] <= 1


def test_custom_task_from_flags_and_keep_last(tmp_path, tiny_pretrained, cli):
    """A task no preset knows: RTE's files described with flags alone."""
    r = cli("finetune", tiny_pretrained, GLUE / "RTE" / "train.tsv", "--dev",
            GLUE / "RTE" / "dev.tsv", "--family", "pair", "--text-column", "sentence1",
            "--text-column", "sentence2", "--label-column", "label", "--out", tmp_path / "m",
            "--steps", "4", "--keep", "last", *FAST, "--json")
    assert r.exit_code == 0, r.stderr
    stats = r.json()["stats"]
    assert stats["label_list"] == ["entailment", "not_entailment"]
    assert stats["selection"] == "last" and stats["selected_step"] == 4


def test_bad_task_data(tmp_path, tiny_pretrained, cli):
    train = GLUE / "SST-2" / "train.tsv"
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\ngreat film\t1\nodd label\t7\n")
    r = cli("finetune", tiny_pretrained, train, "--dev", dev, "--task", "glue/sst2",
            "--out", tmp_path / "m", "--steps", "1")
    assert r.exit_code == 2 and str(dev) in r.stderr and "row 2" in r.stderr
    r = cli("finetune", tiny_pretrained, train, "--family", "single", "--text-column", "text",
            "--label-column", "label", "--out", tmp_path / "m", "--steps", "1")
    assert r.exit_code == 2 and "sentence" in r.stderr and "text" in r.stderr
    empty = tmp_path / "empty.tsv"
    empty.write_text("sentence\tlabel\ngood\t1\n\t0\n")
    r = cli("finetune", tiny_pretrained, empty, "--task", "glue/sst2", "--out", tmp_path / "m",
            "--steps", "1")
    assert r.exit_code == 2 and "row 2" in r.stderr and "sentence" in r.stderr
    r = cli("finetune", tiny_pretrained, GLUE / "SST-2", "--out", tmp_path / "m", "--steps", "1")
    assert r.exit_code == 2 and "preset name or a family" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_train_from_a_saved_dataset_directory(tmp_path, tiny_pretrained, cli):
    """`datasets`' save_to_disk output is task data too, not a preset's data directory."""
    datasets = pytest.importorskip("datasets")
    from bertctl.tasks import make_task_spec
    from helpers import read_examples

    rows = read_examples(make_task_spec("glue/sst2"), GLUE / "SST-2" / "train.tsv")
    saved = tmp_path / "sst2-saved"
    datasets.Dataset.from_dict({"text": rows.text_a,
                                "label": [int(x) for x in rows.labels]}).save_to_disk(str(saved))
    r = cli("finetune", tiny_pretrained, saved, "--family", "single", "--text-column", "text",
            "--label-column", "label", "--out", tmp_path / "m", "--steps", "2", *FAST, "--json")
    assert r.exit_code == 0, r.stderr
    m = r.json()
    assert m["stats"]["train_examples"] == 200
    train_ref = next(i for i in m["inputs"] if i["role"] == "train")
    assert train_ref["kind"] == "directory" and len(train_ref["id"]) == 64


def test_sequences_longer_than_the_models_positions_are_refused(cli, tiny_pretrained, tmp_path):
    import json as _json

    positions = _json.loads((tiny_pretrained / "config.json").read_text())["max_position_embeddings"]
    r = cli("finetune", tiny_pretrained, FIXTURES / "glue" / "SST-2", "--task", "glue/sst2",
            "--max-seq-length", str(positions + 8), "--steps", "1", "--out", tmp_path / "m")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert f"read at most {positions} tokens, fewer than the data's max_seq_length" in r.stderr
    assert not (tmp_path / "m").exists()


def test_random_batches_by_default_grouping_on_request(tmp_path, tiny_pretrained, cli):
    """Fine-tuning draws random batches unless --group-by-length asks for length-grouped ones
    (which cost dev quality on small data, see benchmarks/studies/finetune_quality/bench_finetune_quality.py): the default and
    --no-group-by-length train the same weights, --group-by-length other ones."""
    from safetensors.torch import load_file

    def run(name, *flags):
        r = cli("finetune", tiny_pretrained, GLUE / "RTE", "--task", "glue/rte", "--out",
                tmp_path / name, "--steps", "3", "--keep", "last", *FAST, *flags, "--json")
        assert r.exit_code == 0, r.stderr
        return r.json(), load_file(tmp_path / name / "model.safetensors")

    default, w_default = run("default")
    off, w_off = run("off", "--no-group-by-length")
    grouped, w_grouped = run("grouped", "--group-by-length")
    assert default["config"]["group_by_length"] is False and default["id"] == off["id"]
    assert grouped["config"]["group_by_length"] is True and grouped["id"] != default["id"]
    assert all(torch.equal(w_default[k], w_off[k]) for k in w_default)
    assert not all(torch.equal(w_default[k], w_grouped[k]) for k in w_default)


def test_layer_wise_decay_is_a_setting_recorded_in_the_artifact(tmp_path, tiny_pretrained, cli):
    r = cli("finetune", tiny_pretrained, GLUE / "SST-2", "--task", "glue/sst2", "--steps", "2",
            "--batch-size", "8", "--layer-decay", "0.8", "--out", tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    manifest = json.loads((tmp_path / "m" / "artifact.json").read_text())
    assert manifest["config"]["layer_decay"] == 0.8
    for bad in ("0", "1.5"):
        r = cli("finetune", tiny_pretrained, GLUE / "SST-2", "--task", "glue/sst2", "--steps",
                "2", "--layer-decay", bad, "--out", tmp_path / "bad")
        assert r.exit_code == 2 and "layer_decay" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "bad").exists()
