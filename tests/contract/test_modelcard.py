"""Model cards: the README.md of a model artifact states its lineage's facts, each checked
here against the manifests (and files) it comes from."""

import hashlib
import json
import re
from pathlib import Path

import pytest

from helpers import FIXTURES


def _sections(card: str) -> dict[str, list[list[str]]]:
    """Each '## ' section's table rows, as lists of cells (header and rule rows dropped)."""
    sections, current = {}, None
    for line in card.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:], [])
        elif line.startswith("|") and current is not None and not line.startswith("|---"):
            current.append([c.strip() for c in line.strip("|").split("|")])
    return {name: rows[1:] for name, rows in sections.items()}  # drop each table's header


def _facts(rows):
    return {row[0]: row[1] for row in rows}


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _manifest(path):
    return json.loads((Path(path) / "artifact.json").read_text())


def _records(path):
    return [json.loads(x) for x in (Path(path) / "metrics.jsonl").read_text().splitlines()]


def test_pretrained_model_card(tiny_pretrained, pretrain_data):
    card = (tiny_pretrained / "README.md").read_text()
    model, data = _manifest(tiny_pretrained), _manifest(pretrain_data)
    tokenizer_path = next(i["path"] for i in data["inputs"] if i["kind"] == "tokenizer")
    tokenizer = _manifest(tokenizer_path)
    assert card.startswith(f"# BertForPreTraining {model['id']}\n")
    s = _sections(card)

    # the corpus: every file the tokenizer and the data read, by name, size and content hash
    corpus = {row[0]: row[1:] for row in s["Corpus"]}
    for ref in tokenizer["inputs"]:
        size, sha, users = corpus[Path(ref["path"]).name]
        assert (_number(size), sha) == (ref["size"], ref["id"])
        assert "tokenizer" in users
    data_file = next(i for i in data["inputs"] if i["kind"] == "file")
    assert "pretrain-data" in corpus[Path(data_file["path"]).name][2]
    assert len(corpus) == len({i["id"] for i in tokenizer["inputs"] + data["inputs"]
                               if i["kind"] == "file"})

    tok = _facts(s["Tokenizer"])
    assert tok["tokenizer artifact"] == tokenizer["id"]
    assert _number(tok["vocab_size"]) == tokenizer["stats"]["tokenizer"]["vocab_size"]
    assert _number(tok["pieces per word"]) == pytest.approx(tokenizer["stats"]["pieces_per_word"])
    assert _number(tok["corpus sentences"]) == tokenizer["stats"]["sentences"]

    pdata = _facts(s["Pretraining data"])
    assert pdata["pretrain-data artifact"] == data["id"]
    for split, stats in data["stats"]["splits"].items():
        assert _number(pdata[f"{split} instances"]) == stats["instances"]
        assert _number(pdata[f"{split} tokens"]) == stats["tokens"]
    assert _number(pdata["max_seq_length"]) == data["config"]["max_seq_length"]

    pre = _facts(s["Pretraining"])
    assert _number(pre["steps"]) == model["stats"]["step"]
    assert _number(pre["batch_size"]) == model["config"]["batch_size"]
    assert _number(pre["parameters"]) == model["stats"]["parameters"]
    # tokens trained on: recounted here from the batches the loop's data order gives
    from bertctl.data.pretraining.dataset import PretrainingDataset
    from bertctl.train.order import BatchOrder

    dataset = PretrainingDataset(pretrain_data, "train")
    order = BatchOrder(len(dataset), model["config"]["batch_size"], model["config"]["seed"], None)
    tokens = 0
    # global step t (from 1) trains the run's batch t - 1
    for step in range(model["stats"]["step"]):
        epoch, indices = order.at(step)
        tokens += int(dataset.batch(indices, epoch)["attention_mask"].sum())
    assert _number(pre["tokens trained on"]) == tokens
    assert tokens == sum(r["tokens"] for r in _records(tiny_pretrained) if r["split"] == "train")

    validation = {row[0]: _number(row[1]) for row in s["Pretraining"] if len(row) == 2
                  and row[0] in model["metrics"]}
    for key in ("mlm_loss", "mlm_accuracy", "perplexity", "nsp_loss", "nsp_accuracy"):
        assert validation[key] == pytest.approx(model["metrics"][key], rel=1e-5)

    env = _facts(s["Environment"])
    assert env == {"bertctl": model["bertctl_version"],
                   **{k: str(v) for k, v in model["environment"].items()}}


def test_card_code_loads_the_model_in_transformers(tiny_pretrained):
    transformers = pytest.importorskip("transformers")
    card = (tiny_pretrained / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", card, re.S).group(1)
    scope = {}
    exec(code, scope)  # noqa: S102 - the card's own snippet, as a user would run it
    assert isinstance(scope["model"], transformers.BertForPreTraining)
    assert scope["model"].config.hidden_size == 32
    assert scope["tokenizer"].vocab_size == _manifest(tiny_pretrained)["stats"]["tokenizer"][
        "vocab_size"]


def test_finetuned_model_card(sst2_seed_runs, tiny_pretrained):
    ft0 = sst2_seed_runs[0]
    model, base = _manifest(ft0), _manifest(tiny_pretrained)
    s = _sections((ft0 / "README.md").read_text())
    ft = _facts(s["Fine-tuning"])
    assert ft["task"] == model["stats"]["task"] == "glue/sst2"
    assert ft["labels"] == ", ".join(model["stats"]["label_list"])
    assert _number(ft["training examples"]) == model["stats"]["train_examples"]
    for role in ("train", "dev"):
        path = FIXTURES / "glue" / "SST-2" / f"{role}.tsv"
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        assert ft[f"{role} file"] == f"{role}.tsv (sha256 {sha})"
    assert ft["kept weights"] == (f"{model['stats']['selection']}, step "
                                  f"{model['stats']['selected_step']}")
    dev = {row[0]: _number(row[1]) for row in s["Fine-tuning"] if row[0] in model["metrics"]}
    assert dev.keys() == {k for k, v in model["metrics"].items()
                          if isinstance(v, (int, float)) and k not in ("step", "epoch")}
    for key, value in dev.items():
        assert value == pytest.approx(model["metrics"][key], rel=1e-5)
    title = f"Base model {base['id']} (BertForPreTraining)"
    assert _number(_facts(s[title])["steps"]) == base["stats"]["step"]
    assert "Corpus" in s and "Tokenizer" in s


def test_lineage_resolves_from_another_working_directory(tmp_path, monkeypatch, cli):
    """#26 item 12: stages run from different directories with relative paths: the model card
    still finds the tokenizer's and the data's facts (input paths are stored absolute)."""
    from helpers import CORPUS, TINY_MODEL

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    monkeypatch.chdir(a)
    r = cli("tokenize", CORPUS / "alice.txt", "--vocab-size", "1000", "--out", "tok")
    assert r.exit_code == 0, r.stderr
    r = cli("build-pretrain-data", "tok", CORPUS / "alice.txt", "--out", "data",
            "--max-seq-length", "64", "--dupe-factor", "1", "--workers", "1")
    assert r.exit_code == 0, r.stderr
    monkeypatch.chdir(b)
    r = cli("pretrain", "../a/data", "--out", "m", *TINY_MODEL, "--steps", "2",
            "--batch-size", "4")
    assert r.exit_code == 0, r.stderr
    data = json.loads((a / "data" / "artifact.json").read_text())
    assert data["inputs"][0]["path"] == str(a / "tok")
    facts = _facts(_sections((b / "m" / "README.md").read_text())["Tokenizer"])
    assert "unk rate" in facts and "corpus documents" in facts
