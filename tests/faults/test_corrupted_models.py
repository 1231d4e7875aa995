"""Model artifacts and directories damaged on disk (#13's fault matrix): each stage that reads
a model says which file is wrong in one line, exit 2, and writes nothing."""

import json
import shutil

import pytest

from helpers import FIXTURES

SST2 = FIXTURES / "glue" / "SST-2"


def _damage(model, how):
    weights = model / "model.safetensors"
    if how == "missing":
        weights.unlink()
    elif how == "short":
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        weights.write_bytes(b"\x00" * 64 + b"not a safetensors file" * 10)
    elif how == "bad-config":
        (model / "config.json").write_text("{ not json", encoding="utf-8")
    elif how == "wrong-kind":
        manifest = json.loads((model / "artifact.json").read_text())
        manifest["kind"] = "tokenizer"
        (model / "artifact.json").write_text(json.dumps(manifest))


COMMANDS = {
    "finetune": lambda m, out: ["finetune", m, SST2, "--task", "glue/sst2", "--steps", "1",
                                "--batch-size", "4", "--out", out, "--device", "cpu"],
    "eval": lambda m, out: ["eval", m, SST2 / "dev.tsv", "--task", "glue/sst2", "--out", out,
                            "--device", "cpu"],
    "embed": lambda m, out: ["embed", m, SST2 / "dev.tsv", "--text-column", "sentence",
                             "--max-seq-length", "64", "--out", out, "--device", "cpu"],
}


@pytest.mark.parametrize("how", ["missing", "short", "garbage", "bad-config", "wrong-kind"])
@pytest.mark.parametrize("stage", sorted(COMMANDS))
def test_a_damaged_model_is_one_line_exit_2(cli, tiny_pretrained, tmp_path, stage, how):
    model = tmp_path / "model"
    shutil.copytree(tiny_pretrained, model)
    _damage(model, how)
    out = tmp_path / "out"
    r = cli(*COMMANDS[stage](model, out))
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(model) in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]   # nothing written


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b"[1, 2]"])
def test_a_damaged_task_file_is_one_line(cli, tiny_pretrained, tmp_path, content):
    """A malformed bertctl_task.json was exit 1 with a raw JSONDecodeError and no file named
    (issue #26, item 10): now one line naming it, exit 2, nothing written."""
    model = tmp_path / "model"
    shutil.copytree(tiny_pretrained, model)
    (model / "bertctl_task.json").write_bytes(content)
    r = cli("eval", model, SST2 / "dev.tsv", "--task", "glue/sst2",
            "--out", tmp_path / "ev")
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert "bertctl_task.json" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ev").exists()
