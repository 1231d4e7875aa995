"""`bertctl merge` (#107): the merged weights are the hand-computed weighted average, the
greedy soup follows Wortsman et al.'s rule on the dev scores eval gives, every parent is in
the lineage, and models that do not fit together are one line with nothing written."""

import json
import shutil

import pytest
import torch

from bertctl.model.hf import read_safetensors
from helpers import FIXTURES, one_line_error

SST2_DEV = FIXTURES / "glue" / "SST-2" / "dev.tsv"


def test_the_merge_is_the_weighted_average(sst2_seed_runs, cli, tmp_path):
    a, b, _ = sst2_seed_runs
    out = tmp_path / "merged"
    r = cli("merge", a, b, "--weights", "3,1", "--out", out, "--json")
    assert r.exit_code == 0, r.stderr
    wa, wb, merged = read_safetensors(a), read_safetensors(b), read_safetensors(out)
    assert set(merged) == set(wa)
    for key, value in merged.items():
        # float32 sums of two products, in the order torch adds them
        torch.testing.assert_close(value, 0.75 * wa[key] + 0.25 * wb[key], rtol=1e-6,
                                   atol=1e-7)
    manifest = json.loads((out / "artifact.json").read_text())
    assert [i["role"] for i in manifest["inputs"]] == ["model 0", "model 1"]
    assert manifest["stats"]["weights"] == [0.75, 0.25]
    # an ordinary model: eval reads it with the first model's task
    assert json.loads((out / "bertctl_task.json").read_text()) == json.loads(
        (a / "bertctl_task.json").read_text())
    r = cli("eval", out, SST2_DEV, "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr


def test_greedy_soup_keeps_a_model_only_where_dev_does_not_drop(sst2_seed_runs, cli, tmp_path):
    a, b, _ = sst2_seed_runs
    out = tmp_path / "soup"
    r = cli("merge", a, b, "--soup", "greedy", "--dev", SST2_DEV, "--out", out, "--json")
    assert r.exit_code == 0, r.stderr
    stats = json.loads((out / "artifact.json").read_text())["stats"]
    alone = stats["dev"]["models"]
    scores = {}
    for name in (a, b):
        ev = tmp_path / f"ev-{name.name}"
        assert cli("eval", name, SST2_DEV, "--out", ev).exit_code == 0
        scores[str(name)] = json.loads((ev / "metrics.json").read_text())["accuracy"]
    assert alone == pytest.approx(scores)    # each model's score is eval's
    best = max(scores, key=scores.get)
    both = tmp_path / "both"
    assert cli("merge", a, b, "--out", both).exit_code == 0
    assert cli("eval", both, SST2_DEV, "--out", tmp_path / "ev-both").exit_code == 0
    average = json.loads((tmp_path / "ev-both" / "metrics.json").read_text())["accuracy"]
    expected = [str(a), str(b)] if average >= scores[best] else [best]
    assert stats["kept"] == expected
    assert stats["dev"]["soup"]["accuracy"] == pytest.approx(max(average, scores[best])
                                                             if len(expected) == 2
                                                             else scores[best])


def test_models_that_do_not_fit_are_one_line(sst2_seed_runs, tiny_pretrained, cli, tmp_path):
    a, b, _ = sst2_seed_runs
    cases = [
        ((a, tiny_pretrained), "another head (architectures"),
        ((a,), "give two or more models"),
        ((a, b, "--weights", "1,2,3"), "--weights: 3 weights for 2 models"),
        ((a, b, "--weights", "1,-1"), "every weight must be a positive number"),
        ((a, b, "--soup", "greedy"), "give --dev"),
    ]
    # another vocabulary: b's tokenizer with one token renamed
    other = tmp_path / "vocab"
    shutil.copytree(b, other)
    (other / "artifact.json").unlink()      # a plain Hugging Face directory
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    name = next(k for k in vocab if k.isalpha() and len(k) > 3)
    vocab["zzz" + name] = vocab.pop(name)
    (other / "tokenizer.json").write_text(json.dumps(tok))
    (other / "vocab.txt").unlink(missing_ok=True)
    cases.append(((a, other), "another vocabulary"))
    # another shape: a config saying another width
    wider = tmp_path / "wider"
    shutil.copytree(b, wider)
    (wider / "artifact.json").unlink()
    config = json.loads((wider / "config.json").read_text())
    config["intermediate_size"] *= 2
    (wider / "config.json").write_text(json.dumps(config))
    cases.append(((a, wider), "another shape (intermediate_size"))
    for i, (args, message) in enumerate(cases):
        r = cli("merge", *args, "--out", tmp_path / f"out{i}")
        one_line_error(r, message)
        assert not (tmp_path / f"out{i}").exists()
