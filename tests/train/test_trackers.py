"""--log-to mlflow: the run read back through MLflow's own API from a file: store (MLflow's
opt-in MLFLOW_ALLOW_FILE_STORE): named by the artifact id, the settings as parameters, every
metrics.jsonl number at its step, the final metrics, the lineage as tags; an interrupted run
resumed by the same command continues the same MLflow run; a tracker failing mid-run costs the
run nothing; a tracker that cannot start is one line before any work."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import FIXTURES, KILLPOINT, one_line_error

mlflow = pytest.importorskip("mlflow")

TRAIN = FIXTURES / "glue" / "SST-2" / "train.tsv"


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return f"file://{tmp_path / 'mlruns'}"


def _args(model, out, store, *extra):
    return ["finetune", model, TRAIN, "--task", "glue/sst2", "--batch-size", "8",
            "--max-seq-length", "32", "--device", "cpu", "--steps", "12", "--log-every", "2",
            "--log-to", f"mlflow:{store}", "--out", out, "--json", *map(str, extra)]


def _runs(store):
    client = mlflow.MlflowClient(store)
    experiment = client.get_experiment_by_name("bertctl")
    return client, client.search_runs([experiment.experiment_id])


def test_a_run_is_in_mlflow_as_the_artifact_records_it(store, cli, tmp_path, tiny_pretrained):
    r = cli(*_args(tiny_pretrained, tmp_path / "m", store))
    assert r.exit_code == 0, r.stderr
    manifest = r.json()
    client, runs = _runs(store)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_name == manifest["id"] and run.info.status == "FINISHED"
    assert run.data.params["lr"] == str(manifest["config"]["lr"])
    assert run.data.params["steps"] == "12"
    assert run.data.tags["bertctl.artifact_id"] == manifest["id"]
    lineage = {v for k, v in run.data.tags.items() if k.startswith("bertctl.input.")}
    assert {f"{i['kind']}:{i['id']}" for i in manifest["inputs"]} == lineage
    records = [json.loads(x) for x in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in records if x["split"] == "train"]
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [(h.step, h.value) for h in history] == [(x["step"], x["loss"]) for x in train]
    assert [h.step for h in client.get_metric_history(run.info.run_id, "train/lr")] == \
        [2, 4, 6, 8, 10, 12]


def test_a_resumed_run_continues_its_mlflow_run(store, tmp_path, tiny_pretrained):
    args = _args(tiny_pretrained, tmp_path / "m", store, "--checkpoint-every", "4")
    first = subprocess.run([sys.executable, str(KILLPOINT), "bertctl.train.checkpoint:"
                            "save_checkpoint", "1", "after", "TERM", "--", *map(str, args)],
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 130, first.stderr
    client, runs = _runs(store)
    assert len(runs) == 1 and runs[0].info.status == "KILLED"
    second = subprocess.run([sys.executable, "-m", "bertctl", *map(str, args)],
                            capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    client, runs = _runs(store)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    steps = [h.step for h in client.get_metric_history(runs[0].info.run_id, "train/loss")]
    assert steps[-1] == 12 and 4 in steps


def test_a_tracker_failing_mid_run_costs_nothing(store, cli, tmp_path, tiny_pretrained,
                                                monkeypatch):
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise ConnectionError("the tracking server went away")

    monkeypatch.setattr(mlflow, "log_metrics", broken)
    r = cli(*_args(tiny_pretrained, tmp_path / "m", store))
    assert r.exit_code == 0, r.stderr
    assert "mlflow failed while logging (the tracking server went away); training goes on" \
        in r.stderr
    assert len(calls) == 1 and (tmp_path / "m" / "artifact.json").is_file()


@pytest.mark.parametrize("spec, parts", [
    ("neptune", ["log_to 'neptune'", "mlflow or wandb"]),
    ("mlflow:file:///proc/no/such/place", ["--log-to mlflow:file:///proc/no/such/place",
                                           "cannot start a run"]),
])
def test_a_tracker_that_cannot_start_is_one_line(spec, parts, store, cli, tmp_path,
                                                 tiny_pretrained):
    args = _args(tiny_pretrained, tmp_path / "m", store)
    args[args.index("--log-to") + 1] = spec
    one_line_error(cli(*args), *parts)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "mlruns") == []


def _wandb_records(run_file: Path) -> list:
    """The records of an offline W&B run file, by its own format: LevelDB's log blocks after a
    7-byte W&B header, each record W&B's protobuf `Record`."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, records, partial = run_file.read_bytes(), 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:   # LevelDB's zero type: padding of a preallocated block, not the end
            pos += block - pos % block
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        partial = chunk if kind in (1, 2) else partial + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(partial)
            records.append(record)
    return records


def test_a_run_is_in_wandb_offline_as_the_artifact_records_it(cli, tmp_path, tiny_pretrained,
                                                             monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wb").mkdir()
    args = _args(tiny_pretrained, tmp_path / "m", "unused")
    args[args.index("--log-to") + 1] = "wandb:bertctl-test"
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    manifest = r.json()
    run_files = list((tmp_path / "wb").rglob("run-*.wandb"))
    assert len(run_files) == 1
    # W&B's own process writes the file; in this process (not a CLI's, which exits) it may
    # still be flushing when finish() returns: read until its exit record is there.
    deadline = time.monotonic() + 60
    while True:
        records = _wandb_records(run_files[0])
        kinds = [x.WhichOneof("record_type") for x in records]
        if "exit" in kinds or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "run" in kinds and "exit" in kinds, (kinds, run_files[0].stat().st_size)
    run = next(x.run for x in records if x.WhichOneof("record_type") == "run")
    assert run.display_name == manifest["id"] and run.project == "bertctl-test"
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    value = {k: v["value"] if isinstance(v, dict) and "value" in v else v for k, v in config.items()}
    assert value["lr"] == str(manifest["config"]["lr"])
    assert {v for k, v in value["bertctl_lineage"].items() if k.startswith("bertctl.input.")} == \
        {f"{i['kind']}:{i['id']}" for i in manifest["inputs"]}
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in x.history.item} for x in records
               if x.WhichOneof("record_type") == "history"]
    losses = [(h["_step"], h["train/loss"]) for h in history if "train/loss" in h]
    train = [json.loads(x) for x in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()
             if json.loads(x)["split"] == "train"]
    assert losses == [(x["step"], pytest.approx(x["loss"])) for x in train]
