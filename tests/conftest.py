import json
import os
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

# A few test modules import what another room's module defines (test_train_loop's tiny
# pretraining, test_pipelines' search set): every room is importable, whatever the order of
# collection or the files a run names.
_TESTS = Path(__file__).resolve().parent
sys.path[:0] = [str(_TESTS / room) for room in ("model", "data", "train", "objectives", "tasks",
                                                "stages", "contract", "faults")]

from bertctl.cli import app  # noqa: E402
from helpers import (CORPUS, EXAMPLES, FIXTURES, TINY_MODEL, invoke, made, minilm_path)

# The tests' models are tiny: a second thread costs more in synchronisation than it gains, and
# one thread keeps timings steady when the machine is shared.
torch.set_num_threads(1)
os.environ["OMP_NUM_THREADS"] = "1"  # the same for the bertctl processes tests start
# `--precision auto` resolves to fp32 in every test on every machine (AMX or not); the tests of
# the detection itself set this variable themselves.
os.environ["BERTCTL_CPU_BF16"] = "0"


@pytest.fixture
def cli():
    return invoke


@pytest.fixture(scope="session")
def minilm_dir():
    return minilm_path()


@pytest.fixture(scope="session")
def minilm_l2(tmp_path_factory, minilm_dir):
    """all-MiniLM-L6-v2 cut to its first two layers (config.json and weights), its
    sentence-transformers layout kept: a real embedding model for the tests that prove the
    search recipe's plumbing, at a third of the compute (its quality is the benchmarks')."""
    import shutil

    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("minilm-short") / "model"
    shutil.copytree(minilm_dir, out)
    config = json.loads((out / "config.json").read_text())
    config["num_hidden_layers"] = 2
    (out / "config.json").write_text(json.dumps(config, indent=2))
    weights = load_file(out / "model.safetensors")
    kept = {k: v for k, v in weights.items()
            if ".layer." not in k or int(k.split(".layer.")[1].split(".")[0]) < 2}
    save_file(kept, out / "model.safetensors", metadata={"format": "pt"})
    return out


@pytest.fixture(scope="session")
def example_index(tmp_path_factory, minilm_l2):
    """The two-layer MiniLM's own vectors of the example BEIR corpus, with ids and texts: what
    `bertctl search` and `bertctl index` read (fp32, so hits compare with numpy's)."""
    out = tmp_path_factory.mktemp("example-index") / "index"
    r = invoke("embed", minilm_l2, EXAMPLES / "retrieval" / "beir" / "corpus.jsonl",
               "--text-column", "text", "--id-column", "_id", "--store-text",
               "--precision", "fp32", "--out", out)
    assert r.exit_code == 0, r.stderr
    return out


@pytest.fixture(scope="session")
def small_tokenizer(tmp_path_factory):
    """A small tokenizer artifact trained on the example corpus, shared by tests that need one."""
    out = tmp_path_factory.mktemp("tok") / "tokenizer"
    result = CliRunner().invoke(app, ["tokenize", str(CORPUS), "--out", str(out),
                                      "--vocab-size", "4000"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return out


@pytest.fixture(scope="session")
def pretrain_data(tmp_path_factory, small_tokenizer):
    """Pretraining data from one real book: 64-token instances, 10% of documents held out."""
    out = tmp_path_factory.mktemp("pdata") / "data"
    result = CliRunner().invoke(app, ["build-pretrain-data", str(small_tokenizer),
                                      str(CORPUS / "alice.txt"), "--out", str(out),
                                      "--max-seq-length", "64", "--dupe-factor", "2",
                                      "--validation-fraction", "0.1", "--workers", "1"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return out


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory, pretrain_data):
    """A tiny BERT pretrained for a few steps through the CLI: the base for fine-tuning tests."""
    out = tmp_path_factory.mktemp("pmodel") / "model"
    result = CliRunner().invoke(app, ["pretrain", str(pretrain_data), "--out", str(out),
                                      *TINY_MODEL, "--steps", "10", "--batch-size", "16",
                                      "--lr", "1e-3", "--log-every", "5", "--eval-batches", "2",
                                      "--device", "cpu"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return out


@pytest.fixture(scope="session")
def continuous_data(tmp_path_factory, small_tokenizer):
    """Pretraining data without next-sentence pairs, masked in training: `--objective mlm`'s."""
    return made(tmp_path_factory, "mlmdata", "build-pretrain-data", small_tokenizer,
                 CORPUS / "alice.txt", "--max-seq-length", "64", "--no-nsp", "--masking",
                 "dynamic", "--validation-fraction", "0.1", "--workers", "1")


@pytest.fixture(scope="session")
def mlm_model(tmp_path_factory, continuous_data):
    return made(tmp_path_factory, "mlm", "pretrain", continuous_data, "--objective", "mlm",
                 *TINY_MODEL, "--steps", "6", "--batch-size", "8", "--eval-every", "3",
                 "--eval-batches", "2")


@pytest.fixture(scope="session")
def electra_data(tmp_path_factory, small_tokenizer):
    """Continuous text cut anywhere, masked in training: `--objective electra`'s."""
    return made(tmp_path_factory, "electradata", "build-pretrain-data", small_tokenizer,
                 CORPUS / "alice.txt", "--max-seq-length", "64", "--no-nsp", "--masking",
                 "dynamic", "--packing", "concatenated", "--validation-fraction", "0.1",
                 "--workers", "1")


@pytest.fixture(scope="session")
def electra_model(tmp_path_factory, electra_data):
    return made(tmp_path_factory, "electra", "pretrain", electra_data, "--objective", "electra",
                 *TINY_MODEL, "--steps", "6", "--batch-size", "8", "--eval-every", "3",
                 "--eval-batches", "2", "--mask-rate", "0.25", "--generator-size", "0.5")


@pytest.fixture(scope="session")
def sst2_seed_runs(tmp_path_factory, tiny_pretrained):
    """Two fine-tunings of the tiny model on SST-2 rows that differ only in their seed, and an
    eval artifact of the first: runs for reports and diffs."""
    root = tmp_path_factory.mktemp("seeds")
    runs = []
    for seed in (0, 1):
        out = root / f"ft-seed{seed}"
        result = CliRunner().invoke(app, [
            "finetune", str(tiny_pretrained), str(FIXTURES / "glue" / "SST-2"), "--task",
            "glue/sst2", "--out", str(out), "--steps", "6", "--batch-size", "8", "--log-every",
            "2", "--eval-every", "3", "--device", "cpu", "--max-seq-length", "64", "--lr", "1e-3",
            "--seed", str(seed)], catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        runs.append(out)
    ev = root / "eval-seed0"
    result = CliRunner().invoke(app, ["eval", str(runs[0]), str(FIXTURES / "glue" / "SST-2" /
                                                                "dev.tsv"), "--out", str(ev)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return runs[0], runs[1], ev


@pytest.fixture
def ten_seconds_a_step(monkeypatch):
    """The training loop's clock (Trainer._now) reads 0 at the run's start and 10 s more at each step."""
    calls = {}

    def now(self):
        n = calls.get(id(self), -1) + 1
        calls[id(self)] = n
        return 10.0 * n
    from bertctl.train.loop import Trainer

    monkeypatch.setattr(Trainer, "_now", now)


# The modules whose tests take the longest in all (docs/development.md's timings), started
# first: xdist deals whole modules to the workers (--dist loadfile), so a long one dealt last
# keeps one worker busy after the other has finished.
LONGEST_FIRST = ("test_search_pipeline.py", "test_pipelines.py", "test_search.py",
                 "test_retrieval.py", "test_late_interaction.py", "test_export.py",
                 "test_reranking.py", "test_kill_matrix.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
