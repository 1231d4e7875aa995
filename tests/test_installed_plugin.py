"""A plug-in from an installed package (#65 item 5): tests/fixtures/plugin_package, built and
installed with pip as a user installs a third party's package (into a directory of its own on
the subprocess's path, so the suite's environment is left as it was), registers a task family
through the `bertctl.plugins` entry point; the `bertctl` command then lists it, fine-tunes and
evaluates with it, and records the package in the artifacts' environment. The package's
second entry point fails, and is skipped with one line naming it."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import FIXTURES, ROOT

GLUE = FIXTURES / "glue" / "SST-2"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    pytest.importorskip("setuptools")
    target = tmp_path_factory.mktemp("site")
    source = tmp_path_factory.mktemp("source") / "plugin_package"   # the build writes beside it
    shutil.copytree(FIXTURES / "plugin_package", source)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--no-build-isolation", "--no-index", "--target", str(target),
                        str(source)], capture_output=True, text=True, cwd=source)
    assert r.returncode == 0, r.stderr
    assert list(target.glob("bertctl_shout-0.1.0.dist-info/entry_points.txt"))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)]),
            "OMP_NUM_THREADS": "1"}


def bertctl(env, *args):
    return subprocess.run([sys.executable, "-m", "bertctl", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=600)


BROKEN = ("bertctl: plug-in broken (bertctl-shout 0.1.0: bertctl_shout.broken:register) not "
          "loaded: RuntimeError: built for another bertctl")


def test_the_installed_family_is_a_choice_of_the_command(installed):
    r = bertctl(installed, "finetune", "--help")
    assert r.returncode == 0
    family = r.stdout[r.stdout.index("--family"):r.stdout.index("--text-column")]
    assert "shouted" in family
    assert r.stderr.strip() == BROKEN
    assert "shouted" not in bertctl({**installed, "PYTHONPATH": str(ROOT)},
                                    "finetune", "--help").stdout


def test_the_installed_family_trains_and_evaluates(installed, tiny_pretrained, tmp_path):
    r = bertctl(installed, "finetune", tiny_pretrained, GLUE / "train.tsv", "--family",
                "shouted", "--text-column", "sentence", "--label-column", "label",
                "--steps", "2", "--batch-size", "8", "--out", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "m" / "artifact.json").read_text())
    assert manifest["environment"]["plugins"] == {"shouted": "bertctl-shout 0.1.0"}
    task = json.loads((tmp_path / "m" / "bertctl_task.json").read_text())
    assert task["spec"]["family"] == "shouted"
    r = bertctl(installed, "eval", tmp_path / "m", GLUE / "dev.tsv", "--out", tmp_path / "e")
    assert r.returncode == 0, r.stderr
    assert 0 <= json.loads((tmp_path / "e" / "metrics.json").read_text())["accuracy"] <= 1
    # Without the package, the model's family is unknown: one line, nothing written.
    r = bertctl({**installed, "PYTHONPATH": str(ROOT)}, "eval", tmp_path / "m",
                GLUE / "dev.tsv", "--out", tmp_path / "e2")
    assert r.returncode == 2 and "shouted" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "e2").exists()
