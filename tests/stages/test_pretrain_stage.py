"""`bertctl pretrain` end to end on real text: the artifact, resume, phases and bad input."""

import json
import signal
import subprocess
import sys

import pytest

from helpers import KILLPOINT, TINY_MODEL, one_line_error
from tolerance import TINY_FP32  # (each tolerance's reason)

SAVE_CHECKPOINT = "bertctl.train.checkpoint:save_checkpoint"


def _records(path, split="train"):
    lines = (path / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("split", "train") == split]


def test_pretrained_artifact_loads_in_transformers(tiny_pretrained, pretrain_data, cli):
    transformers = pytest.importorskip("transformers")
    import torch

    from bertctl.data.pretraining.dataset import PretrainingDataset
    from bertctl.model import BertForPreTraining, load_model

    m = cli("inspect", tiny_pretrained, "--json").json()
    assert m["kind"] == "model" and m["stats"]["architecture"] == "bert"
    assert m["stats"]["step"] == 10
    assert {"mlm_loss", "mlm_accuracy", "perplexity", "nsp_accuracy"} <= set(m["metrics"])
    assert [i["role"] for i in m["inputs"]] == ["data"]
    config = json.loads((tiny_pretrained / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"] and config["hidden_size"] == 32
    hf = transformers.BertForPreTraining.from_pretrained(str(tiny_pretrained)).eval()
    ours, report = load_model(tiny_pretrained, BertForPreTraining)
    assert report.complete
    batch = PretrainingDataset(pretrain_data, "validation").batch([0, 1, 2])
    with torch.no_grad():
        mine = ours.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        theirs = hf(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                    attention_mask=batch["attention_mask"])
    torch.testing.assert_close(mine["mlm_logits"], theirs.prediction_logits, **TINY_FP32)
    tok = transformers.BertTokenizerFast.from_pretrained(str(tiny_pretrained))
    assert tok.vocab_size == config["vocab_size"]


def test_mlm_loss_falls_and_validation_is_reported(tmp_path, pretrain_data, cli):
    out = tmp_path / "m"
    r = cli("pretrain", pretrain_data, "--out", out, *TINY_MODEL, "--steps", "40",
            "--batch-size", "16", "--lr", "3e-3", "--warmup", "4", "--log-every", "4",
            "--eval-every", "20", "--eval-batches", "4", "--device", "cpu", "--json")
    assert r.exit_code == 0, r.stderr
    train = _records(out)
    first, last = train[0]["loss"], sum(x["loss"] for x in train[-3:]) / 3
    assert last < first - 1.0, (first, last)
    val = _records(out, "validation")
    assert [v["step"] for v in val] == [20, 40]
    assert val[-1]["mlm_loss"] < val[0]["mlm_loss"]
    assert "validation at step 40" in r.stderr
    r = cli("pretrain", pretrain_data, "--out", out, *TINY_MODEL, "--steps", "40",
            "--batch-size", "16", "--lr", "3e-3", "--warmup", "4", "--log-every", "100",
            "--eval-every", "20", "--eval-batches", "4", "--device", "cpu")
    assert r.exit_code == 0 and "up to date" in r.stdout  # run-only settings keep the id


@pytest.mark.slow
def test_killed_run_resumes_with_identical_losses(tmp_path, pretrain_data):
    # The kill comes from tests/faults/killpoint.py right after the first checkpoint is saved:
    # a kill timed by polling the work directory missed it on a fast machine (the run finished
    # between two polls).
    args = ["pretrain", str(pretrain_data), *TINY_MODEL, "--steps", "24", "--batch-size", "8",
            "--log-every", "2", "--checkpoint-every", "8", "--eval-batches", "1",
            "--device", "cpu"]
    bertctl = [sys.executable, "-m", "bertctl"]
    straight = subprocess.run(bertctl + args + ["--out", str(tmp_path / "a")],
                              capture_output=True, text=True, timeout=600)
    assert straight.returncode == 0, straight.stderr
    out = tmp_path / "b"
    killed = subprocess.run([sys.executable, str(KILLPOINT), SAVE_CHECKPOINT, "1", "after",
                             "KILL", "--", *args, "--out", str(out)],
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not out.exists()
    assert list(tmp_path.glob(".b.run-*"))  # the checkpoints a rerun resumes from
    resumed = subprocess.run(bertctl + args + ["--out", str(out)], capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    manifest = json.loads((out / "artifact.json").read_text())
    assert manifest["stats"]["resumed_from_step"] == 8
    assert [r["loss"] for r in _records(out)] == [r["loss"] for r in _records(tmp_path / "a")]
    assert "resuming from the checkpoint of step 8 (" in resumed.stderr
    assert not list(tmp_path.glob(".b.run-*"))  # the work directory is gone once complete


def test_second_phase_continues_step_count_and_schedule(tmp_path, pretrain_data, cli):
    p1 = tmp_path / "p1"
    r = cli("pretrain", pretrain_data, "--out", p1, *TINY_MODEL, "--steps", "6",
            "--total-steps", "10", "--batch-size", "8", "--log-every", "2", "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    r = cli("pretrain", pretrain_data, "--out", tmp_path / "p2", "--init-from", p1,
            "--continue-schedule", "--steps", "4", "--batch-size", "8", "--log-every", "2",
            "--device", "cpu", "--json")
    assert r.exit_code == 0, r.stderr
    m = r.json()
    assert m["stats"]["step"] == 10 and m["stats"]["total_steps"] == 10
    steps = [x["step"] for x in _records(tmp_path / "p2")]
    assert steps[0] == 8 and steps[-1] == 10
    assert _records(tmp_path / "p2")[-1]["lr"] < _records(p1)[-1]["lr"]
    assert [i["role"] for i in m["inputs"]] == ["data", "init"]


def test_bad_inputs(tmp_path, pretrain_data, small_tokenizer, minilm_dir, cli):
    out = tmp_path / "m"
    r = cli("pretrain", small_tokenizer, "--out", out, "--steps", "1")
    assert r.exit_code == 2 and "expected pretrain-data" in r.stderr
    r = cli("pretrain", pretrain_data, "--out", out, "--init-from", small_tokenizer, "--steps", "1")
    assert r.exit_code == 2 and "expected model" in r.stderr
    r = cli("pretrain", pretrain_data, "--out", out, "--init-from", tmp_path, "--steps", "1")
    assert r.exit_code == 2 and "config.json" in r.stderr
    r = cli("pretrain", pretrain_data, "--out", out, "--init-from", minilm_dir, "--steps", "1",
            "--batch-size", "4")
    assert r.exit_code == 2 and "build the data with the model's tokenizer" in r.stderr
    r = cli("pretrain", pretrain_data, "--out", out, *TINY_MODEL, "--steps", "1",
            "--batch-size", "10", "--micro-batch-size", "4", "--device", "cpu")
    assert r.exit_code == 2 and "not a multiple of micro_batch_size" in r.stderr
    r = cli("pretrain", pretrain_data, "--out", out, "--model-size", "tiny",
            "--max-position-embeddings", "32", "--steps", "1")
    assert r.exit_code == 2 and "fewer than the data's max_seq_length 64" in r.stderr
    r = cli("pretrain", pretrain_data, "--out", out, "--model-size", "tiny")
    assert r.exit_code == 2 and "give exactly one of --steps, --epochs and --time-budget" in r.stderr
    r = cli("pretrain", pretrain_data, "--out", out, *TINY_MODEL, "--steps", "1",
            "--precision", "fp16", "--device", "cpu")
    assert r.exit_code == 2 and "bf16" in r.stderr
    assert not out.exists()


def test_validation_is_shared_between_ranks(tiny_pretrained, pretrain_data, monkeypatch):
    """Under torchrun each rank scores every world-th validation batch and the sums are added:
    rank 0's result after the reduction equals one process scoring everything."""
    import torch

    from bertctl.data.pretraining.dataset import PretrainingDataset
    from bertctl.model.hf import load_model
    from bertctl.objectives import scoring as evaluation
    from bertctl.objectives.scoring import evaluate_pretraining

    torch.manual_seed(0)
    model, _ = load_model(tiny_pretrained)
    data = PretrainingDataset(pretrain_data, "validation")
    whole = evaluate_pretraining(model, data, 4, "cpu")
    assert len(data) > 8  # several batches to share out

    sums = {}
    monkeypatch.setattr(evaluation.dist, "world_size", lambda: 2)
    for rank in (1, 0):  # rank 1 first; rank 0's "all-reduce" then adds rank 1's sums
        monkeypatch.setattr(evaluation.dist, "rank", lambda rank=rank: rank)
        monkeypatch.setattr(evaluation.dist, "all_reduce_sum",
                            lambda t, rank=rank: sums.setdefault(rank, t.clone())
                            + (sums[1] if rank == 0 else 0))
        shared = evaluate_pretraining(model, data, 4, "cpu")
    assert sums[0][2] > 0 and sums[1][2] > 0  # each rank predicted part of the masked tokens
    assert shared.keys() == whole.keys()
    for key, value in whole.items():
        assert shared[key] == pytest.approx(value, rel=1e-6), key


def test_sigterm_keeps_the_checkpoints_and_says_so(tmp_path, pretrain_data):
    out = tmp_path / "m"
    proc = subprocess.run([sys.executable, str(KILLPOINT), SAVE_CHECKPOINT, "1", "after", "TERM",
                           "--", "pretrain", str(pretrain_data), *TINY_MODEL,
                           "--steps", "400", "--batch-size", "8", "--log-every", "2",
                           "--checkpoint-every", "4", "--eval-batches", "1", "--device", "cpu",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 130, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    work = list(tmp_path.glob(".m.run-*"))
    kept = work[0] / "checkpoints"
    assert last == (f"error: interrupted; no artifact was written; checkpoints kept in {kept}: "
                    f"rerun the same command to resume")
    assert not (tmp_path / "m").exists() and any(kept.glob("step-*"))


def test_train_only_new_trains_what_the_init_model_lacked(tiny_pretrained, pretrain_data,
                                                          tmp_path, cli):
    """A checkpoint saved without its pretraining heads (as sentence-transformers models are):
    --train-only new trains those heads and leaves every loaded weight bit-identical."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    bare = tmp_path / "bare"
    shutil.copytree(tiny_pretrained, bare)
    (bare / "artifact.json").unlink()   # a plain Hugging Face directory now
    weights = {k: v for k, v in load_file(bare / "model.safetensors").items()
               if not k.startswith("cls.")}
    save_file(weights, bare / "model.safetensors")
    heads = {}
    for lr in ("1e-2", "1e-9"):
        out = tmp_path / f"m{lr}"
        r = cli("pretrain", pretrain_data, "--init-from", bare, "--train-only", "new",
                "--steps", "2", "--batch-size", "4", "--lr", lr, "--warmup", "0",
                "--device", "cpu", "--out", out)
        assert r.exit_code == 0, r.stderr
        assert "training only the" in r.stderr and "cls.predictions.transform" in r.stderr
        saved = load_file(out / "model.safetensors")
        for k, v in weights.items():
            assert torch.equal(saved[k], v), k
        heads[lr] = {k: v for k, v in saved.items() if k.startswith("cls.")}
    # the same seed draws the same new head: only training moved the lr 1e-2 run's
    assert {"cls.predictions.transform.dense.weight", "cls.seq_relationship.weight"} <= set(
        heads["1e-2"])
    for k in ("cls.predictions.transform.dense.weight", "cls.seq_relationship.weight"):
        assert (heads["1e-2"][k] - heads["1e-9"][k]).abs().max() > 1e-4, k


def test_train_only_new_needs_something_new(tiny_pretrained, pretrain_data, tmp_path, cli):
    out = tmp_path / "m"
    r = cli("pretrain", pretrain_data, *TINY_MODEL, "--train-only", "new", "--steps", "1",
            "--out", out)
    one_line_error(r, "give --init-from")
    r = cli("pretrain", pretrain_data, "--init-from", tiny_pretrained, "--train-only", "new",
            "--steps", "1", "--batch-size", "4", "--device", "cpu", "--out", out)
    one_line_error(r, str(tiny_pretrained), "--train-only new has nothing to train")
    assert not out.exists()
