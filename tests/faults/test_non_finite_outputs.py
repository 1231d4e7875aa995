"""A model whose outputs are not finite is never scored, gated, embedded or exported as valid
(#52, class 1). Before: `eval` took the argmax of NaN logits and reported the share of label 0
as accuracy (exit 0, an `--expect` gate passed), `export --check` a drop of 0 points, `embed`
all-NaN vectors. Now each stops with one line naming the model and the first bad row, exit 2,
and writes nothing; a weight that is NaN is refused when the checkpoint is read."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import FAMILY_DATA, FIXTURES, invoke, write_manifest

# Finite weights whose products overflow float32 (max 3.4e38): the last layer's output
# projection at 3e38 makes every hidden state inf - inf = NaN after its LayerNorm, so every
# head of every family gets NaN, while no weight is itself NaN.
HUGE = 3e38


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, tiny_pretrained):
    root = tmp_path_factory.mktemp("nonfinite")
    models = {}
    for family, (train, _) in FAMILY_DATA.items():
        out = root / family
        r = invoke("finetune", tiny_pretrained, *train, "--out", out, "--steps", "2",
                   "--batch-size", "8", "--lr", "5e-3", "--device", "cpu")
        assert r.exit_code == 0, (family, r.stderr)
        models[family] = out
    return models


def _poisoned(model, directory, value=HUGE, names=()):
    """A copy of `model` as a plain model directory (no manifest to say its weights changed)
    with the tensors `names` (default: the last layer's output projection) set to `value`."""
    shutil.copytree(model, directory)
    (directory / "artifact.json").unlink()
    tensors = load_file(str(directory / "model.safetensors"))
    names = names or sorted(k for k in tensors if k.endswith("output.dense.weight")
                            and "attention" not in k)[-1:]
    for name in names:
        tensors[name] = torch.full_like(tensors[name], value)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def _refused(r, model, tmp_path, *keep):
    """Exit 2 with one error line naming the model (the log lines of the work done before
    it, such as the data read, may precede it), and nothing written."""
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and str(model) in errors[0] and "not finite" in errors[0], r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["bad", *keep])


@pytest.mark.parametrize("family", sorted(FAMILY_DATA))
def test_eval_of_every_family_refuses_non_finite_outputs(cli, finetuned, tmp_path, family):
    bad = _poisoned(finetuned[family], tmp_path / "bad")
    _, dev = FAMILY_DATA[family]
    r = cli("eval", bad, dev, "--out", tmp_path / "ev", "--device", "cpu")
    _refused(r, bad, tmp_path)
    assert "the first: sequence" in r.stderr


def test_a_gate_on_a_broken_model_is_not_passed(cli, finetuned, tmp_path):
    """The issue's case: accuracy >= 0.45 passed on the share of label 0."""
    bad = _poisoned(finetuned["single"], tmp_path / "bad")
    r = cli("eval", bad, FIXTURES / "glue" / "SST-2" / "dev.tsv", "--expect", "accuracy>=0.45",
            "--out", tmp_path / "ev")
    assert r.exit_code == 2
    _refused(r, bad, tmp_path)


def test_embed_refuses_non_finite_vectors(cli, tiny_pretrained, tmp_path):
    bad = _poisoned(tiny_pretrained, tmp_path / "bad")
    r = cli("embed", bad, FIXTURES / "glue" / "SST-2" / "dev.tsv", "--text-column", "sentence",
            "--max-seq-length", "64", "--out", tmp_path / "emb")
    _refused(r, bad, tmp_path)
    assert "the first: row 0" in r.stderr


def test_eval_on_pretraining_data_refuses_non_finite_logits(cli, tiny_pretrained,
                                                            pretrain_data, tmp_path):
    bad = _poisoned(tiny_pretrained, tmp_path / "bad")
    r = cli("eval", bad, pretrain_data, "--out", tmp_path / "ev")
    _refused(r, bad, tmp_path)


def test_export_check_refuses_a_broken_model_and_eval_refuses_its_export(cli, finetuned,
                                                                         tmp_path):
    pytest.importorskip("onnxruntime")
    bad = _poisoned(finetuned["single"], tmp_path / "bad")
    dev = FIXTURES / "glue" / "SST-2" / "dev.tsv"
    r = cli("export", bad, "--check", dev, "--out", tmp_path / "ex")
    _refused(r, bad, tmp_path)
    # Exported without a check, the graph is run by onnxruntime: the same rule. (Its fused
    # LayerNorm keeps the overflowed encoder finite, so here the head overflows: a constant
    # pooler makes every tanh the same +-1, and 32 of them times 3e38 is infinite.)
    shutil.rmtree(bad)
    bad = _poisoned(finetuned["single"], tmp_path / "bad",
                    names=["bert.pooler.dense.weight", "classifier.weight"])
    assert cli("export", bad, "--out", tmp_path / "ex").exit_code == 0
    r = cli("eval", tmp_path / "ex", dev, "--out", tmp_path / "ev")
    _refused(r, tmp_path / "ex", tmp_path, "ex")


def test_an_export_check_without_a_metric_value_is_not_met(cli, finetuned, tmp_path):
    """A regression head with zero weights predicts one constant: Pearson is undefined (null),
    so the drop cannot be measured; that was a pass (exit 0), it is exit 3."""
    pytest.importorskip("onnxruntime")
    flat = _poisoned(finetuned["regression"], tmp_path / "bad", value=1.0)
    tensors = load_file(str(flat / "model.safetensors"))
    for k in [k for k in tensors if k.startswith("classifier.")]:
        tensors[k] = torch.zeros_like(tensors[k])
    save_file(tensors, str(flat / "model.safetensors"), metadata={"format": "pt"})
    r = cli("export", flat, "--check", FAMILY_DATA["regression"][1], "--out", tmp_path / "ex")
    assert r.exit_code == 3, r.stderr
    assert "cannot be measured" in r.stderr
    check = json.loads((tmp_path / "ex" / "artifact.json").read_text())["stats"]["check"]
    assert check["drop_points"] is None


@pytest.mark.parametrize("data", ["SST-2", "SST-2/train.tsv"])
@pytest.mark.parametrize("cache", ["on", "off"])
def test_distill_refuses_a_teacher_with_non_finite_outputs(cli, finetuned, tiny_pretrained,
                                                           tmp_path, cache, data):
    """Before: the NaN targets made the loss NaN and the run said 'training diverged, try a
    lower lr', which points at the student. The teacher is run on the dev file first (a
    directory), else over the training set (its cache) or at each step (no cache)."""
    bad = _poisoned(finetuned["single"], tmp_path / "bad")
    r = cli("distill", bad, FIXTURES / "glue" / data, "--student-init", tiny_pretrained, "--steps", "2",
            "--batch-size", "4", "--teacher-cache", cache, "--out", tmp_path / "st")
    _refused(r, f"the teacher {bad}", tmp_path)


def test_a_nan_weight_is_refused_when_the_checkpoint_is_read(cli, finetuned, tmp_path):
    bad = _poisoned(finetuned["single"], tmp_path / "bad", value=1.0)
    tensors = load_file(str(bad / "model.safetensors"))
    tensors["classifier.bias"][0] = float("nan")
    save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
    dev = FIXTURES / "glue" / "SST-2" / "dev.tsv"
    for args in (("eval", bad, dev, "--out", tmp_path / "ev"),
                 ("finetune", bad, FIXTURES / "glue" / "SST-2", "--task", "glue/sst2",
                  "--steps", "1", "--out", tmp_path / "ft")):
        r = cli(*args)
        _refused(r, bad, tmp_path)
        assert "classifier.bias" in r.stderr


@pytest.mark.parametrize("pool", ["mean", "model"])
def test_embed_checks_the_vectors_it_writes_not_only_the_hidden_states(cli, minilm_dir,
                                                                       tmp_path, pool):
    """#63 class 2: the last LayerNorm's weight scaled by 1e38 leaves every hidden state finite
    (about 1e38) but their sum over a row overflows: the pooled vector was inf (written, exit 0)
    and, normalised, NaN. Both the hidden states' pooling and the model's own (its sentence
    head) are checked after pooling and normalising."""
    bad = tmp_path / "bad"
    shutil.copytree(minilm_dir, bad)
    tensors = load_file(str(bad / "model.safetensors"))
    name = sorted(k for k in tensors if k.endswith("output.LayerNorm.weight"))[-1]
    tensors[name] = tensors[name] * 1e38
    save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
    data = tmp_path / "texts.txt"
    data.write_text("a fox jumps over the lazy dog\nthe normans\n", encoding="utf-8")
    r = cli("embed", bad, data, "--pool", pool, "--precision", "fp32", "--out",
            tmp_path / "emb")
    _refused(r, bad, tmp_path, "texts.txt")
    assert "the first: row 0" in r.stderr


def test_glue_summary_over_a_nan_metric_says_so_and_ranks_it_last(cli, sst2_seed_runs,
                                                                  tmp_path):
    """#63 class 2: a NaN metric crashed statistics.stdev (AttributeError); it is a run
    without a value, as a null metric (docs/commands.md): n/a, ranked last, one note."""
    _, _, ev = sst2_seed_runs
    nan_eval = tmp_path / "eval-nan"
    shutil.copytree(ev, nan_eval)
    manifest = json.loads((nan_eval / "artifact.json").read_text())
    manifest["metrics"]["accuracy"] = float("nan")
    write_manifest(nan_eval, manifest)
    r = cli("glue-summary", nan_eval, "--out", tmp_path / "sum")
    assert r.exit_code == 0, r.stderr
    assert "accuracy is nan (no value)" in r.stderr
    summary = json.loads((tmp_path / "sum" / "summary.json").read_text())
    assert summary["tasks"][0]["selected"]["mean"] is None


def test_verify_names_a_metric_edited_in_metrics_json(cli, sst2_seed_runs, tmp_path):
    """#63 class 2: metrics.json edited (and its checksum rewritten to match) while
    artifact.json's metrics, which every summary reads, say otherwise."""
    import hashlib

    _, _, ev = sst2_seed_runs
    edited = tmp_path / "ev"
    shutil.copytree(ev, edited)
    path = edited / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["accuracy"] = 0.99
    path.write_text(json.dumps(metrics, indent=2) + "\n")
    r = cli("inspect", edited, "--verify")
    assert r.exit_code == 1 and "metrics.json" in r.stderr + r.stdout
    manifest = json.loads((edited / "artifact.json").read_text())
    manifest["files"]["metrics.json"].update(sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                                             size=path.stat().st_size)
    (edited / "artifact.json").write_text(json.dumps(manifest))
    r = cli("inspect", edited, "--verify")
    assert r.exit_code == 1, r.stdout
    assert "accuracy is 0.99 here but" in r.stderr + r.stdout


def test_finetune_names_a_model_whose_outputs_overflow_before_the_first_step(cli, finetuned,
                                                                            tmp_path):
    """#63 class 7: it said "training diverged ... try a lower lr", which blames the rate."""
    bad = _poisoned(finetuned["single"], tmp_path / "bad")
    r = cli("finetune", bad, FIXTURES / "glue" / "SST-2", "--task", "glue/sst2", "--steps", "2",
            "--batch-size", "4", "--out", tmp_path / "ft")
    _refused(r, bad, tmp_path)
    assert "diverged" not in r.stderr
