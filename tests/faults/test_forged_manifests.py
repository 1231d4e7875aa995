"""A manifest is plain JSON, so its id is checked against what it records (#26 item 5) and its
digest against everything else it holds (#103): a setting, an input id, an ancestor's recorded
settings, a stat or any other field edited after the artifact was written (the id left as it
was) is noticed by `inspect --verify`, by every stage reading the artifact, by `diff`, and by a
rerun that would otherwise call it up to date."""

import json
import shutil

import pytest

from bertctl.contract import artifacts


def _edit(path, change):
    manifest = json.loads((path / "artifact.json").read_text())
    change(manifest)
    (path / "artifact.json").write_text(json.dumps(manifest, indent=2))


def _set_seed(m):
    m["config"]["seed"] = m["config"]["seed"] + 1


def _set_input_id(m):
    m["inputs"][0]["id"] = "0" * 16


def _set_ancestor_setting(m):
    # the tokenizer's vocab size as recorded in the pretrain data's lineage, two levels up
    tok = m["inputs"][0]["inputs"][0]
    assert tok["kind"] == "tokenizer"
    tok["config"]["vocab_size"] += 1


def _set_stat(m):
    # what the model card says it trained on; no id covers it (#103: the card said 5)
    m["stats"]["step"] = 5


def _set_version(m):
    m["bertctl_version"] = "0.0.1"


EDITS = {"a setting": _set_seed, "an input's id": _set_input_id,
         "an ancestor's setting": _set_ancestor_setting, "a stat": _set_stat,
         "the version": _set_version}


@pytest.fixture
def forged(tiny_pretrained, tmp_path, request):
    model = tmp_path / "model"
    shutil.copytree(tiny_pretrained, model)
    _edit(model, EDITS[request.param])
    return model


@pytest.mark.parametrize("forged", list(EDITS), indirect=True)
def test_verify_and_every_reader_notice(forged, cli, tmp_path):
    r = cli("inspect", forged, "--verify")
    assert r.exit_code != 0 and "was edited" in r.stderr, r.stderr
    # inspect without --verify still shows it (a user must be able to look at it)
    assert cli("inspect", forged).exit_code == 0
    for args in (("diff", forged, forged),
                 ("export", forged, "--out", tmp_path / "ex"),
                 ("embed", forged, tmp_path / "t.txt", "--out", tmp_path / "emb")):
        (tmp_path / "t.txt").write_text("one line\n")
        r = cli(*args)
        assert r.exit_code == 2, (args, r.exit_code, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "artifact.json" in lines[0] and "edited" in lines[0], lines
    assert not (tmp_path / "ex").exists() and not (tmp_path / "emb").exists()


def test_edited_stats_of_data_and_tokenizers_are_refused(pretrain_data, small_tokenizer, cli,
                                                       tmp_path):
    """The probe's cases: a pretraining-data artifact's train instances set to 5 (the model
    card said "train instances 5"; true: 741) and a tokenizer's stats, each read by the next
    stage under its unchanged id."""
    data, tok = tmp_path / "data", tmp_path / "tok"
    shutil.copytree(pretrain_data, data)
    shutil.copytree(small_tokenizer, tok)
    _edit(data, lambda m: m["stats"]["splits"]["train"].update(instances=5))
    _edit(tok, lambda m: m["stats"].update(documents=1))
    for args in (("pretrain", data, "--model-size", "tiny", "--steps", "1",
                  "--out", tmp_path / "m"),
                 ("build-pretrain-data", tok, tmp_path / "t.txt", "--out", tmp_path / "d")):
        (tmp_path / "t.txt").write_text("one line.\nanother line.\n")
        r = cli(*args)
        assert r.exit_code == 2, (args, r.stderr)
        assert "artifact.json" in r.stderr and "stats or metrics" in r.stderr
    assert not (tmp_path / "m").exists() and not (tmp_path / "d").exists()
    for art in (data, tok):
        r = cli("inspect", art, "--verify")
        assert r.exit_code != 0 and "was edited" in r.stderr


def test_the_unedited_artifacts_verify(tiny_pretrained, pretrain_data, small_tokenizer, cli):
    for art in (tiny_pretrained, pretrain_data, small_tokenizer):
        r = cli("inspect", art, "--verify")
        assert r.exit_code == 0, r.stderr


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(f"sentence number {i} of a tiny corpus." for i in range(200)))
    return path


def test_a_rerun_does_not_call_an_edited_artifact_up_to_date(corpus, cli, tmp_path):
    out = tmp_path / "tok"
    args = ["tokenize", corpus, "--out", out, "--vocab-size", "200"]
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    first = json.loads((out / "artifact.json").read_text())["id"]
    _edit(out, lambda m: m["config"].update(min_frequency=m["config"]["min_frequency"] + 5))
    r = cli(*args)
    assert r.exit_code == 2 and "edited" in r.stderr and "--force" in r.stderr, r.stderr
    r = cli(*args, "--force")
    assert r.exit_code == 0, r.stderr
    rewritten = json.loads((out / "artifact.json").read_text())
    assert rewritten["id"] == first
    assert artifacts.lineage_problem(artifacts.Manifest(**rewritten)) is None


def test_a_parent_replaced_after_the_child_was_made(corpus, tmp_path, cli):
    """The child's recorded parent id is compared with the parent still where it was read."""
    tok = tmp_path / "tok"
    assert cli("tokenize", corpus, "--out", tok, "--vocab-size", "200").exit_code == 0
    data = tmp_path / "data"
    r = cli("build-pretrain-data", tok, corpus, "--out", data, "--max-seq-length", "32")
    assert r.exit_code == 0, r.stderr
    assert cli("inspect", data, "--verify").exit_code == 0
    r = cli("tokenize", corpus, "--out", tok, "--vocab-size", "210", "--force")
    assert r.exit_code == 0, r.stderr
    r = cli("inspect", data, "--verify")
    assert r.exit_code != 0 and "it was made from" in r.stderr, r.stderr
