"""`bertctl diff` through the CLI: settings at every level of the lineage, inputs by content
hash, bertctl versions."""

import json
import shutil

import bertctl

from helpers import CORPUS, write_manifest


def test_runs_that_differ_only_in_seed(sst2_seed_runs, cli):
    ft0, ft1, _ = sst2_seed_runs
    r = cli("diff", ft0, ft1)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines() == ["settings.seed: 0 -> 1"]
    r = cli("diff", ft0, ft1, "--json")
    assert r.json()["differences"] == [{"where": "", "what": "settings.seed", "a": 0, "b": 1}]
    assert r.json()["same"] is False
    r = cli("diff", ft0, ft0, "--json")
    assert r.exit_code == 0 and r.json()["same"] is True and r.json()["differences"] == []


def test_nested_settings_and_versions(tmp_path, sst2_seed_runs, cli, tiny_pretrained):
    ft0, ft1, ev = sst2_seed_runs
    # An eval of the second seed's model: the difference is one level down, in the model.
    ev1 = tmp_path / "ev1"
    dev = json.loads((ev / "artifact.json").read_text())["inputs"][1]["path"]
    assert cli("eval", ft1, dev, "--out", ev1).exit_code == 0
    r = cli("diff", ev, ev1)
    assert r.stdout.splitlines() == ["model: settings.seed: 0 -> 1"]
    # Another bertctl made the copy: the version is a difference of its own.
    copy = tmp_path / "copy"
    shutil.copytree(ft0, copy)
    manifest = json.loads((copy / "artifact.json").read_text())
    manifest["bertctl_version"] = "0.0.1"
    write_manifest(copy, manifest)
    r = cli("diff", ft0, copy)
    assert r.stdout.splitlines() == [f"bertctl_version: {bertctl.__version__} -> 0.0.1"]
    # A fine-tuned model against its base: what fine-tuning did (its settings, its data), not
    # the base's own pretraining lineage, which the two share.
    r = cli("diff", tiny_pretrained, ft0, "--json")
    diffs = r.json()["differences"]
    assert diffs[0]["what"] == "lineage" and "an ancestor" in diffs[0]["a"]
    found = {(d["where"], d["what"]) for d in diffs}
    assert ("", "settings.task") in found and ("train", "input") in found
    assert ("model", "input") not in found and not any(w.startswith("data") for w, _ in found)
    assert all("a" not in d for d in diffs[1:] if d["what"].startswith("settings."))
    # the other way round: the same steps, read backwards
    back = cli("diff", ft0, tiny_pretrained, "--json").json()["differences"]
    assert [(d["where"], d["what"]) for d in back] == [(d["where"], d["what"]) for d in diffs]
    assert all("b" not in d for d in back[1:] if d["what"].startswith("settings."))


def test_inputs_by_content_hash(tmp_path, cli):
    text = (CORPUS / "alice.txt").read_text(encoding="utf-8")[:20000]
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "corpus.txt").write_text(text, encoding="utf-8")
    (b / "corpus.txt").write_text(text.replace("Alice", "Alicia", 1), encoding="utf-8")
    (a / "extra.txt").write_text("one more line\n", encoding="utf-8")
    for corpus, out, size in ((a, "ta", "300"), (b, "tb", "400")):
        r = cli("tokenize", corpus, "--out", tmp_path / out, "--vocab-size", size,
                "--unused-tokens", "0")
        assert r.exit_code == 0, r.stderr
    r = cli("diff", tmp_path / "ta", tmp_path / "tb", "--json")
    diffs = {(d["where"], d["what"]): (d.get("a"), d.get("b")) for d in r.json()["differences"]}
    ma = json.loads((tmp_path / "ta" / "artifact.json").read_text())
    mb = json.loads((tmp_path / "tb" / "artifact.json").read_text())
    sha_a = next(i["id"] for i in ma["inputs"] if i["path"].endswith("corpus.txt"))
    sha_b = next(i["id"] for i in mb["inputs"] if i["path"].endswith("corpus.txt"))
    assert diffs[("", "settings.vocab_size")] == (300, 400)
    assert diffs[("corpus[corpus.txt]", "sha256")] == (sha_a, sha_b)
    assert diffs[("corpus[corpus.txt]", "size")] == (len(text.encode()), len(text.encode()) + 1)
    assert diffs[("corpus", "input")][0].startswith("file extra.txt (sha256 ")
    assert diffs[("corpus", "input")][1] is None
    assert len(diffs) == 4
    text_out = cli("diff", tmp_path / "ta", tmp_path / "tb").stdout.splitlines()
    assert len(text_out) == 4 and "corpus: input: file extra.txt" in "\n".join(text_out)


def test_bad_input(tmp_path, cli, tiny_pretrained):
    r = cli("diff", tiny_pretrained, tmp_path)
    assert r.exit_code == 2 and str(tmp_path) in r.stderr and "not a bertctl artifact" in r.stderr
