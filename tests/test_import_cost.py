"""The stages that run no model do not import torch (about 2 s and 180 MB of start-up): each is
run in a fresh interpreter, on real inputs, and must leave `torch` out of `sys.modules`.

The chain that once pulled it in: bertctl.stages.settings.declared -> train.settings -> the train package's
__init__ (the loop, DDP) -> torch; and the task families' batching code at module level.
"""

import json
import subprocess
import sys

import pytest

from helpers import CORPUS, EXAMPLES

SST2_DEV = EXAMPLES / "glue" / "SST-2" / "dev.tsv"

from test_glue import make_eval

PROBE = """
import json, sys
from typer.testing import CliRunner
from bertctl.cli import app
result = CliRunner().invoke(app, sys.argv[1:], catch_exceptions=False)
print(json.dumps({"code": result.exit_code, "torch": "torch" in sys.modules,
                  "stderr": result.stderr[-500:]}))
"""


def _run(*args) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("command", [None, "tokenize", "build-pretrain-data", "inspect", "diff",
                                     "report", "glue-summary", "finetune", "pretrain", "audit"])
def test_help_imports_no_torch(command):
    found = _run(*([command] if command else []), "--help")
    assert found["code"] == 0 and not found["torch"], found


@pytest.mark.parametrize("args", [("--warmup", "-1"), ("--min-steps", "0"),
                                  ("--time-budget", "junk")])
def test_a_training_settings_error_is_told_before_torch_is_imported(tmp_path, args):
    """#52 class 5: `pretrain --warmup -1` took 4.7 s and 250 MB: `--precision auto` probed
    the hardware (importing torch) before the other settings were checked."""
    found = _run("pretrain", tmp_path, "--steps", "5", *args, "--out", tmp_path / "m")
    assert found["code"] == 2 and not found["torch"], found


def test_the_stages_without_a_model_import_no_torch(tmp_path):
    tok, data = tmp_path / "tok", tmp_path / "data"
    steps = [
        ("tokenize", CORPUS, "--vocab-size", "2000", "--out", tok),
        ("build-pretrain-data", tok, CORPUS / "alice.txt", "--max-seq-length", "64",
         "--workers", "1", "--out", data),
        ("tokenize", CORPUS, "--extend", tok, "--add", "5", "--out", tmp_path / "extended"),
        ("build-pretrain-data", tok, CORPUS / "alice.txt", "--max-seq-length", "64",
         "--workers", "1", "--exclude", SST2_DEV, "--out", tmp_path / "excluded"),
        ("audit", CORPUS / "alice.txt", "--against", SST2_DEV, "--out", tmp_path / "audit"),
        ("inspect", data, "--verify"),
        ("diff", tok, data),
        ("report", tok, data, "--out", tmp_path / "report"),
    ]
    evals = [make_eval(tmp_path, "glue/sst2", "dev.tsv", 2e-5, seed,
                       metrics={"accuracy": 0.9 - seed / 10, "macro_f1": 0.8})
             for seed in (1, 2)]
    steps.append(("glue-summary", *evals, "--out", tmp_path / "summary"))
    for step in steps:
        found = _run(*step)
        assert found["code"] == 0, (step[0], found)
        assert not found["torch"], f"bertctl {step[0]} imported torch"
    assert (tmp_path / "report" / "artifact.json").is_file()
    assert (tmp_path / "summary" / "artifact.json").is_file()
