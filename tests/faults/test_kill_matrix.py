"""Kill -9 and SIGTERM at exact points of every stage, then rerun (#13's fault matrix).

A killed run may leave only hidden siblings of its output (a temporary directory, lock files, a
training run's checkpoints); the rerun of the same command must clean them up and produce the
artifact an uninterrupted run produces: the same id and the same bytes in every file but those
that record how long things took. Training resumes from its last checkpoint and, in fp32, ends
with bit-identical weights. SIGTERM exits 130 after one line, and leaves only what the README's
"Exit codes" section lists: a training run's checkpoints, nothing else.

The signals come from tests/faults/killpoint.py, which wraps one bertctl function (the N-th
call signals just before or after it runs), so the point hit is the same on every machine.
"""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

import forkserver
from helpers import CORPUS, FIXTURES, TINY_MODEL

pytestmark = pytest.mark.slow

KILLPOINT = Path(__file__).with_name("killpoint.py")
# Files whose content records timings (throughput in the training log and the model card that
# quotes it); every other file must be byte-identical.
TIMED = {"metrics.jsonl", "README.md"}

BEFORE_PUBLISH = ("bertctl.contract.placement:replace", 1, "before")     # all written, not yet renamed
BUILT = ("bertctl.contract.artifacts:_hash_files", 1, "before")          # the stage's files written
FIRST_SHARD = ("bertctl.data.pretraining.shards:ShardWriter._close", 1, "after")
FIRST_CHECKPOINT = ("bertctl.train.checkpoint:save_checkpoint", 1, "after")
SECOND_CHECKPOINT = ("bertctl.train.checkpoint:save_checkpoint", 2, "before")


def _env():
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}


def run(args, point=None, sig="KILL"):
    """bertctl ARGS as its own process, through the fork server (tests/forkserver.py: the same
    process less its imports), killed by itself at `point` when given."""
    prefix = ["-m", "bertctl"]
    if point is not None:
        target, n, when = point
        prefix = [str(KILLPOINT), target, str(n), when, sig, "--"]
    return subprocess.run(forkserver.command(*prefix, *map(str, args)), capture_output=True,
                          text=True, timeout=600, env=forkserver.environment(_env()))


def manifest(out: Path) -> dict:
    return json.loads((out / "artifact.json").read_text())


def same_artifact(a: Path, b: Path) -> None:
    ma, mb = manifest(a), manifest(b)
    assert ma["id"] == mb["id"]
    fa = {k: v["sha256"] for k, v in ma["files"].items() if k not in TIMED}
    fb = {k: v["sha256"] for k, v in mb["files"].items() if k not in TIMED}
    assert set(ma["files"]) == set(mb["files"])
    assert fa == fb, [k for k in fa if fa[k] != fb.get(k)]


@pytest.fixture(scope="module")
def stages(tmp_path_factory, small_tokenizer, pretrain_data, tiny_pretrained):
    """The command line (without --out) of each stage on tiny inputs, and its straight run."""
    sst2 = FIXTURES / "glue" / "SST-2"
    root = tmp_path_factory.mktemp("straight")
    commands = {
        "tokenize": ["tokenize", CORPUS / "alice.txt", "--vocab-size", "2000"],
        "build-pretrain-data": ["build-pretrain-data", small_tokenizer, CORPUS / "alice.txt",
                                "--max-seq-length", "64", "--dupe-factor", "2",
                                "--validation-fraction", "0.1", "--workers", "1"],
        "pretrain": ["pretrain", pretrain_data, *TINY_MODEL, "--steps", "12", "--batch-size",
                     "8", "--checkpoint-every", "4", "--log-every", "2", "--eval-batches", "1",
                     "--device", "cpu", "--precision", "fp32"],
        "finetune": ["finetune", tiny_pretrained, sst2, "--task", "glue/sst2", "--steps", "12",
                     "--batch-size", "8", "--checkpoint-every", "4", "--eval-every", "6",
                     "--log-every", "2", "--max-seq-length", "64", "--lr", "1e-3",
                     "--device", "cpu", "--precision", "fp32"],
    }
    straight = {}
    for stage, args in commands.items():
        out = root / stage
        r = run([*args, "--out", out])
        assert r.returncode == 0, r.stderr
        straight[stage] = out
    commands["eval"] = ["eval", straight["finetune"], sst2 / "dev.tsv", "--task", "glue/sst2",
                        "--max-seq-length", "64", "--precision", "fp32"]
    commands["embed"] = ["embed", tiny_pretrained, CORPUS / "bert_sample_text.txt",
                         "--layers", "-1,-2", "--pool", "mean", "--batch-size", "4",
                         "--max-seq-length", "64"]
    for stage in ("eval", "embed"):
        out = root / stage
        r = run([*commands[stage], "--out", out])
        assert r.returncode == 0, r.stderr
        straight[stage] = out
    return commands, straight


CASES = [
    ("tokenize", BUILT), ("tokenize", BEFORE_PUBLISH),
    ("build-pretrain-data", FIRST_SHARD), ("build-pretrain-data", BEFORE_PUBLISH),
    ("pretrain", FIRST_CHECKPOINT), ("pretrain", SECOND_CHECKPOINT),
    ("pretrain", BEFORE_PUBLISH),
    ("finetune", FIRST_CHECKPOINT), ("finetune", SECOND_CHECKPOINT),
    ("finetune", BEFORE_PUBLISH),
    ("eval", BUILT), ("eval", BEFORE_PUBLISH),
    ("embed", BUILT), ("embed", BEFORE_PUBLISH),
]


@pytest.mark.parametrize("stage,point", CASES,
                         ids=[f"{s}-{p[0].split(':')[1]}-{p[2]}-{p[1]}" for s, p in CASES])
def test_kill_9_then_rerun_gives_the_uninterrupted_artifact(tmp_path, stages, stage, point):
    commands, straight = stages
    out = tmp_path / "out"
    killed = run([*commands[stage], "--out", out], point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not out.exists()                                    # nothing half-written in place
    left = {p.name for p in tmp_path.iterdir()}
    assert all(name.startswith(".out.") for name in left), left  # only hidden siblings
    rerun = run([*commands[stage], "--out", out])
    assert rerun.returncode == 0, rerun.stderr
    same_artifact(out, straight[stage])
    if point in (FIRST_CHECKPOINT, SECOND_CHECKPOINT):
        assert "resuming from the checkpoint of step" in rerun.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]   # leftovers cleaned up


@pytest.mark.parametrize("stage,point", [("build-pretrain-data", FIRST_SHARD),
                                         ("eval", BUILT), ("embed", BUILT),
                                         ("pretrain", FIRST_CHECKPOINT)])
def test_sigterm_exits_130_with_one_line_and_only_documented_leftovers(tmp_path, stages, stage,
                                                                       point):
    commands, straight = stages
    out = tmp_path / "out"
    r = run([*commands[stage], "--out", out], point, sig="TERM")
    assert r.returncode == 130, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    left = sorted(p.name for p in tmp_path.iterdir())
    if stage == "pretrain":
        # Kept on purpose: the rerun resumes from them (README "Exit codes").
        assert len(left) == 1 and left[0].startswith(".out.run-"), left
        assert f"checkpoints kept in {tmp_path / left[0] / 'checkpoints'}" in last
        assert "rerun the same command to resume" in last
        rerun = run([*commands[stage], "--out", out])
        assert rerun.returncode == 0, rerun.stderr
        same_artifact(out, straight[stage])
    else:
        assert left == [], left
        assert "interrupted" in last or "aborted" in last, r.stderr


@pytest.mark.parametrize("stage", ["tokenize", "build-pretrain-data", "pretrain", "finetune",
                                   "eval", "embed"])
def test_a_second_run_on_the_same_out_fails_at_once_naming_the_holder(tmp_path, stages, stage):
    from bertctl.contract import locks

    commands, _ = stages
    out = tmp_path / "out"
    with locks.output_lock(out):
        r = run([*commands[stage], "--out", out])
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"pid {os.getpid()}" in r.stderr and "--wait" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []    # nothing started, nothing left


# Inside a checkpoint write (between its files) and just after an artifact is published.
IN_CHECKPOINT = ("bertctl.train.checkpoint:_sha256", 1, "before")
PUBLISHED = ("bertctl.contract.placement:replace", 1, "after")


@pytest.mark.parametrize("stage", ["pretrain", "finetune"])
def test_sigterm_inside_a_checkpoint_write_waits_for_the_checkpoint(tmp_path, stages, stage):
    """#26 item 8: the write finishes (its C++ and Rust writers are never unwound mid-way), then
    the run stops with 130, keeping that checkpoint for the rerun."""
    commands, straight = stages
    out = tmp_path / "out"
    r = run([*commands[stage], "--out", out], IN_CHECKPOINT, sig="TERM")
    assert r.returncode == 130, r.stderr
    assert "checkpoints kept in" in r.stderr.strip().splitlines()[-1], r.stderr
    rerun = run([*commands[stage], "--out", out])
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming from the checkpoint of step 4" in rerun.stderr, rerun.stderr
    same_artifact(out, straight[stage])


@pytest.mark.parametrize("stage", ["tokenize", "eval"])
def test_sigterm_as_the_artifact_is_published_says_it_is_complete(tmp_path, stages, stage):
    """Exit 130 (never 0: the run was asked to stop), and the one line says the artifact that
    was published meanwhile is complete, rather than that nothing was written."""
    commands, _ = stages
    out = tmp_path / "out"
    r = run([*commands[stage], "--out", out], PUBLISHED, sig="TERM")
    assert r.returncode == 130, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "complete" in last and str(out) in last, r.stderr
    assert run(["inspect", out, "--verify"]).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
