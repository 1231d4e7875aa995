"""`eval --expect`: quality gates a CI pipeline can tell from crashes (exit 3)."""

import json

import pytest

from bertctl.contract import expectations
from bertctl.errors import BertctlError

from helpers import FIXTURES, run_bertctl

DEV = FIXTURES / "glue" / "SST-2" / "dev.tsv"


def _metrics(eval_dir):
    return json.loads((eval_dir / "artifact.json").read_text())["metrics"]


@pytest.mark.parametrize("text, metric, op, value", [
    ("accuracy>=0.85", "accuracy", ">=", 0.85), (" f1 < 1e-1 ", "f1", "<", 0.1),
    ("per_type.PER.f1==1", "per_type.PER.f1", "==", 1.0), ("HasAns_exact>50", "HasAns_exact", ">", 50)])
def test_parse(text, metric, op, value):
    assert expectations.parse(text) == expectations.Expectation(metric, op, value)


@pytest.mark.parametrize("text", ["accuracy", "accuracy=>0.8", "accuracy>=high", ">=0.5",
                                  "accuracy>=nan", "accuracy>=0.5 extra"])
def test_bad_syntax_is_a_usage_error(text):
    with pytest.raises(BertctlError, match="--expect"):
        expectations.parse(text)


def test_unmet_lines_and_nested_metrics():
    metrics = {"accuracy": 0.8, "mlm_loss": None, "per_type": {"PER": {"f1": 0.9}}}
    parse = expectations.parse
    assert expectations.unmet([parse("accuracy>=0.8"), parse("per_type.PER.f1>0.5")], metrics,
                              "x") == []
    lines = expectations.unmet([parse("accuracy>0.8"), parse("mlm_loss<3"),
                                parse("per_type.PER.f1<=0.5")], metrics, "x")
    assert len(lines) == 3 and all(line.startswith("expectation not met: ") for line in lines)
    assert "accuracy = 0.8" in lines[0] and "None" in lines[1]
    with pytest.raises(BertctlError, match="no metric 'f2'.*accuracy"):
        expectations.unmet([parse("f2>0")], metrics, "x")


@pytest.mark.parametrize("gate", ["per_type>0", "per_type.PER>0.5", "labels>=1", "name>0"])
def test_a_gate_on_something_that_is_no_number_is_a_usage_error(gate):
    """Exit 2, not 3 (issue #26, item 10): the gate is malformed, not the model's quality."""
    metrics = {"per_type": {"PER": {"f1": 0.9}}, "labels": [1, 2], "name": "x"}
    with pytest.raises(BertctlError, match="not a number") as info:
        expectations.unmet([expectations.parse(gate)], metrics, "x")
    assert info.value.exit_code == 2


@pytest.mark.slow
def test_gates_through_the_cli(sst2_seed_runs, tmp_path):
    model, _, done = sst2_seed_runs
    accuracy = _metrics(done)["accuracy"]
    out = tmp_path / "ev"
    # met: exit 0, the artifact written
    ok = run_bertctl("eval", model, DEV, "--out", out, "--expect", f"accuracy>={accuracy}",
                     "--expect", "accuracy<=1")
    assert ok.returncode == 0, ok.stderr
    assert _metrics(out)["accuracy"] == accuracy
    # unmet, on the now up-to-date artifact: exit 3, one line per unmet gate, artifact kept,
    # and with --json the manifest is still the one object on stdout
    bad = run_bertctl("eval", model, DEV, "--out", out, "--json", "--expect",
                      f"accuracy>{accuracy}", "--expect", "accuracy<=1", "--expect",
                      "macro_f1>1")
    assert bad.returncode == expectations.EXIT_UNMET
    assert json.loads(bad.stdout)["id"] == json.loads((out / "artifact.json").read_text())["id"]
    unmet = [line for line in bad.stderr.splitlines() if "expectation not met" in line]
    assert len(unmet) == 2 and "accuracy" in unmet[0] and "macro_f1" in unmet[1]
    # a typo is a usage error before any work: nothing written
    typo = run_bertctl("eval", model, DEV, "--out", tmp_path / "never", "--expect", "acc>>1")
    assert typo.returncode == 2 and len(typo.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists()
    # a metric the artifact lacks: exit 2 naming what it has
    missing = run_bertctl("eval", model, DEV, "--out", out, "--expect", "spearman>0")
    assert missing.returncode == 2 and "no metric 'spearman'" in missing.stderr
