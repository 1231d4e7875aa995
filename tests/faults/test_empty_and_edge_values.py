"""Empty and edge values (#39 item 3): an empty text or list setting is refused, not read as
unset (`distill --student-layers ""` trained the default student under another id); a time
budget has one parser and one upper bound, so 1e308 and 1e18s get the same answer."""

import pytest

from helpers import FIXTURES


def _one_line(r, *parts):
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    for part in parts:
        assert part in lines[0], lines[0]


@pytest.mark.parametrize("args,key", [
    (["distill", "teacher", FIXTURES / "glue" / "SST-2", "--student-layers", ""],
     "student_layers"),
    (["distill", "teacher", FIXTURES / "glue" / "SST-2", "--layer-map", "", "--hidden-loss",
      "1"], "layer_map"),
    (["finetune", "model", FIXTURES / "glue" / "SST-2", "--task", "glue/sst2", "--labels", ""],
     "labels"),
    (["embed", "model", FIXTURES / "glue" / "SST-2" / "dev.tsv", "--text-column", ""],
     "text_column"),
    (["finetune", "model", FIXTURES / "glue" / "SST-2", "--task", "glue/sst2", "--features",
      ""], "features"),
])
def test_an_empty_value_is_refused_before_any_work(cli, tmp_path, args, key):
    out = tmp_path / "out"
    r = cli(*args, "--out", out)
    _one_line(r, key, "empty")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_empty_value_in_a_config_file_is_refused_naming_the_file(cli, tmp_path):
    config = tmp_path / "distill.yaml"
    config.write_text("student_layers: ''\n")
    r = cli("distill", "teacher", FIXTURES / "glue" / "SST-2", "--config", config, "--out",
            tmp_path / "out")
    _one_line(r, "student_layers", "empty")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("budget", ["1e308", "1e18s", "366d", "1e18"])
def test_a_time_budget_has_one_bound(cli, pretrain_data, tmp_path, budget):
    r = cli("pretrain", pretrain_data, "--time-budget", budget, "--out", tmp_path / "m")
    _one_line(r, "time_budget", "less than or equal to 31536000")
    assert not (tmp_path / "m").exists()


def test_a_time_budget_at_the_bound_and_in_units_parses():
    from bertctl.train.settings import parse_duration

    assert parse_duration("365d") == 365 * 86400
    assert parse_duration("1.5e3s") == parse_duration("1500") == parse_duration("25m") == 1500
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("ten minutes")


def test_precision_does_not_apply_to_an_export(cli, tiny_pretrained, tmp_path):
    """onnxruntime runs an export's graph as written: eval and embed of an export record fp32
    whatever --precision says, so --precision bf16 neither changes the id nor claims bf16."""
    pytest.importorskip("onnxruntime")
    import json

    assert cli("export", tiny_pretrained, "--out", tmp_path / "enc").exit_code == 0
    text = FIXTURES / "glue" / "SST-2" / "dev.tsv"
    ids = []
    for precision in ("bf16", "fp32"):
        out = tmp_path / f"emb-{precision}"
        r = cli("embed", tmp_path / "enc", text, "--text-column", "sentence", "--precision",
                precision, "--out", out)
        assert r.exit_code == 0, r.stderr
        manifest = json.loads((out / "artifact.json").read_text())
        assert manifest["config"]["precision"] == "fp32"
        assert manifest["stats"]["precision"] == "onnxruntime none"
        ids.append(manifest["id"])
    assert ids[0] == ids[1]
