"""The artifact layer: ids, up-to-date skips, --force, {id} outputs, atomic writes, verify."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bertctl.contract import artifacts
from bertctl.errors import BertctlError

from helpers import CORPUS, KILLPOINT, ROOT, run_bertctl


def _left(directory):
    """What a run left in `directory`, besides the empty lock files that stay beside outputs
    and the holder notes a killed run could not remove (bertctl/locks.py)."""
    return sorted(p.name for p in directory.iterdir()
                  if not p.name.endswith((".lock", ".lock.info")))


def _build(content="x"):
    def build(tmp: Path):
        (tmp / "data.txt").write_text(content)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "more.bin").write_bytes(b"\x00\x01")
        return {"rows": 1, "metrics": {"acc": 0.5}}
    return build


def test_id_is_stable_and_depends_on_config_and_inputs(tmp_path, monkeypatch):
    f = tmp_path / "in.txt"
    f.write_text("hello")
    ref = artifacts.file_input(f, "corpus")
    a = artifacts.compute_id("tokenizer", {"a": 1, "b": [1, 2]}, [ref])
    assert a == artifacts.compute_id("tokenizer", {"b": [1, 2], "a": 1}, [ref])
    assert a != artifacts.compute_id("tokenizer", {"a": 2, "b": [1, 2]}, [ref])
    assert a != artifacts.compute_id("model", {"a": 1, "b": [1, 2]}, [ref])
    # a new revision of the code behind a kind gives its artifacts new ids
    before = artifacts.compute_id("model", {"a": 1}, [ref])
    monkeypatch.setitem(artifacts.REVISIONS, "model", artifacts.REVISIONS["model"] + 1)
    assert artifacts.compute_id("model", {"a": 1}, [ref]) != before
    # The same content elsewhere is the same input; different content is not.
    g = tmp_path / "copy.txt"
    g.write_text("hello")
    assert a == artifacts.compute_id("tokenizer", {"a": 1, "b": [1, 2]},
                                     [artifacts.file_input(g, "corpus")])
    f.write_text("hellO")
    assert a != artifacts.compute_id("tokenizer", {"a": 1, "b": [1, 2]},
                                     [artifacts.file_input(f, "corpus")])


def test_the_default_architecture_is_left_out_of_a_runs_id():
    """`--architecture bert` (the default) is not in the id: a BERT run keeps the id it had
    before architectures existed; another architecture is in it."""
    from bertctl import settings as settings_mod
    from bertctl.stages.settings.pretrain import PretrainSettings

    default = settings_mod.identity(PretrainSettings(steps=10).resolved())
    assert "architecture" not in default
    modern = settings_mod.identity(PretrainSettings(steps=10, architecture="modernbert"
                                                    ).resolved())
    assert modern["architecture"] == "modernbert"


def test_produce_writes_manifest_and_skips_when_up_to_date(tmp_path):
    out = tmp_path / "art"
    first = artifacts.produce("eval", {"k": 1}, [], artifacts.Target(out), _build())
    assert not first.up_to_date
    m = json.loads((out / "artifact.json").read_text())
    assert m["format"] == "bertctl-artifact" and m["kind"] == "eval" and m["schema_version"] == 1
    assert set(m["files"]) == {"data.txt", "sub/more.bin"}
    assert m["stats"] == {"rows": 1} and m["metrics"] == {"acc": 0.5}
    assert {"python", "platform"} <= set(m["environment"])

    def fail(tmp):
        raise AssertionError("must not rebuild an up-to-date artifact")
    again = artifacts.produce("eval", {"k": 1}, [], artifacts.Target(out), fail)
    assert again.up_to_date and again.manifest.id == first.manifest.id


def test_different_id_needs_force(tmp_path):
    out = tmp_path / "art"
    artifacts.produce("eval", {"k": 1}, [], artifacts.Target(out), _build("one"))
    with pytest.raises(BertctlError, match="pass --force"):
        artifacts.produce("eval", {"k": 2}, [], artifacts.Target(out), _build("two"))
    assert (out / "data.txt").read_text() == "one"
    replaced = artifacts.produce("eval", {"k": 2}, [], artifacts.Target(out, force=True), _build("two"))
    assert (out / "data.txt").read_text() == "two"
    assert artifacts.read_artifact(out).id == replaced.manifest.id
    assert _left(tmp_path) == ["art"]  # no temporary leftovers


def test_id_placeholder_keeps_versions_side_by_side(tmp_path):
    a = artifacts.produce("eval", {"k": 1}, [], artifacts.Target(tmp_path / "run-{id}"), _build())
    b = artifacts.produce("eval", {"k": 2}, [], artifacts.Target(tmp_path / "run-{id}"), _build())
    assert a.path != b.path
    assert Path(a.path).name == f"run-{a.manifest.id}" and Path(b.path).is_dir()


def test_failed_build_leaves_nothing(tmp_path):
    out = tmp_path / "art"

    def broken(tmp):
        (tmp / "half.txt").write_text("half")
        raise BertctlError("boom")
    with pytest.raises(BertctlError):
        artifacts.produce("eval", {}, [], artifacts.Target(out), broken)
    assert _left(tmp_path) == []


def test_out_that_is_a_file_or_other_kind_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(BertctlError, match="not a directory"):
        artifacts.produce("eval", {}, [], artifacts.Target(f), _build())
    other = tmp_path / "model"
    artifacts.produce("model", {}, [], artifacts.Target(other), _build())
    with pytest.raises(BertctlError, match="holds a model artifact"):
        artifacts.produce("eval", {}, [], artifacts.Target(other), _build())
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    with pytest.raises(BertctlError, match="not an artifact"):
        artifacts.produce("eval", {}, [], artifacts.Target(plain), _build())
    assert (plain / "notes.txt").read_text() == "mine"


def test_reading_checks_kind_schema_and_corruption(tmp_path):
    out = tmp_path / "art"
    artifacts.produce("eval", {}, [], artifacts.Target(out), _build())
    with pytest.raises(BertctlError, match="is an eval artifact, expected tokenizer"):
        artifacts.read_artifact(out, "tokenizer")
    manifest = out / "artifact.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "schema_version": 99}))
    with pytest.raises(BertctlError, match="newer than this bertctl"):
        artifacts.read_artifact(out)
    manifest.write_text(json.dumps(data)[:50])
    with pytest.raises(BertctlError, match="corrupted manifest"):
        artifacts.read_artifact(out)
    manifest.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(BertctlError, match="not a bertctl artifact"):
        artifacts.read_artifact(out)


def test_verify_catches_one_changed_byte_and_a_missing_file(tmp_path, cli):
    out = tmp_path / "art"
    artifacts.produce("eval", {}, [], artifacts.Target(out), _build("abcdef"))
    assert cli("inspect", out, "--verify").exit_code == 0
    (out / "data.txt").write_text("abcdeF")
    r = cli("inspect", out, "--verify")
    assert r.exit_code == 1 and "data.txt" in r.stderr and "changed" in r.stderr
    (out / "sub" / "more.bin").unlink()
    r = cli("inspect", out, "--verify")
    assert r.exit_code == 1 and "more.bin: missing" in r.stderr


KILLABLE = r"""
import signal, sys, time
from pathlib import Path
from bertctl.contract import artifacts
# A process started in the background by a non-interactive shell (as CI may run the tests)
# inherits SIGINT ignored; the test is about what Ctrl-C does, so restore Python's handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
def build(tmp):
    (tmp / "part.txt").write_text("partial")
    print("started", flush=True)
    time.sleep(60)
    return {}
artifacts.produce("eval", {}, [], artifacts.Target(sys.argv[1]), build)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_write_leaves_no_artifact_and_rerun_works(tmp_path, sig):
    out = tmp_path / "art"
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE, str(out)], stdout=subprocess.PIPE,
                            text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert not out.exists()
    leftovers = _left(tmp_path)
    # SIGKILL gives no chance to clean up: only a hidden temporary sibling may remain.
    assert all(name.startswith(".art.tmp-") for name in leftovers)
    if sig == signal.SIGINT:
        assert leftovers == []
    artifacts.produce("eval", {}, [], artifacts.Target(out), _build())
    assert artifacts.read_artifact(out).kind == "eval"
    assert _left(tmp_path) == ["art"]  # the stale sibling was removed


def test_killed_cli_stage_leaves_no_artifact(tmp_path):
    """SIGTERM to a real `bertctl tokenize` run mid-write: no artifact, no temporary directory."""
    big = tmp_path / "big.txt"
    big.write_text((CORPUS / "sherlock_holmes.txt").read_text() * 10)
    out = tmp_path / "tok"
    # The signal comes just before the written files are hashed (tests/faults/killpoint.py):
    # a signal timed from outside could come after the run finished on a fast machine.
    killpoint = KILLPOINT
    proc = subprocess.run([sys.executable, str(killpoint), "bertctl.contract.artifacts:_hash_files", "1",
                           "before", "TERM", "--", "tokenize", str(big), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 130, proc.stderr
    assert "interrupted" in proc.stderr
    assert _left(tmp_path) == ["big.txt"]
    assert run_bertctl("tokenize", big, "--out", out, "--vocab-size", "3000").returncode == 0
