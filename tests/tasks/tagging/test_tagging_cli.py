"""Token tagging through the CLI: tiny fine-tunes and evals of CoNLL-2003 on real rows, in IOB2
and in the original IOB1.

The model is the real all-MiniLM-L6-v2 encoder with a new token head, trained a few steps on
windows short enough that long sentences are split; the checks are about the plumbing (word
alignment, windows, schemes, conlleval's figures from the written predictions), not accuracy.
"""

import json

import numpy as np
import pytest

from bertctl.tasks.tagging.metrics import score_lines
from bertctl.tasks.tagging.reader import read_tagged
from bertctl.tasks.tagging.schemes import convert, detect

from helpers import FIXTURES

CONLL = FIXTURES / "conll2003"
IOB1_TRAIN, IOB1_DEV = CONLL / "original_iob1" / "eng.train", CONLL / "original_iob1" / "eng.testa"
# 24 tokens: sentences over 22 pieces are split into windows sharing 8 pieces.
SHORT = ["--max-seq-length", "24", "--doc-stride", "8"]
IOB2_LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def _finetune(cli, minilm_dir, out, data, *extra):
    # A learning rate this small leaves the new head nearly as initialised: its predictions are
    # varied tags of every type, which exercises chunking and scheme conversion better than the
    # all-O output a few real steps give.
    r = cli("finetune", minilm_dir, data, "--task", "conll2003", "--out", out, "--steps", "4",
            "--batch-size", "16", "--lr", "1e-7", "--precision", "fp32", "--device", "cpu",
            *SHORT, *extra, "--json")
    assert r.exit_code == 0, r.stderr
    return r.json()


@pytest.fixture(scope="module")
def iob1_model(tmp_path_factory, minilm_dir):
    """A model fine-tuned on the original IOB1 files (train and dev)."""
    from helpers import invoke as cli

    out = tmp_path_factory.mktemp("tagging") / "iob1"
    return out, _finetune(cli, minilm_dir, out, IOB1_TRAIN, "--dev", IOB1_DEV)


def _flat(metrics, prefix=""):
    out = {}
    for k, v in metrics.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out


def _predictions(path):
    """predictions.txt as (token, gold, predicted) rows and sentence offsets."""
    rows, offsets = [], [0]
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line:
            offsets.append(len(rows))
            continue
        rows.append(line.split(" "))
    return rows, np.array(offsets)


def test_iob1_training_uses_iob2_labels_and_windows(iob1_model):
    out, manifest = iob1_model
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForTokenClassification"]
    assert [config["id2label"][str(i)] for i in range(9)] == IOB2_LABELS
    task = json.loads((out / "bertctl_task.json").read_text())
    assert task["spec"]["family"] == "tagging" and task["label_list"] == IOB2_LABELS
    stats = manifest["stats"]["train_features"]
    assert stats["sentences"] == 138 and stats["words"] == 2395
    assert stats["windowed_sentences"] > 0 and stats["windows"] > 138
    assert stats["tag_scheme"] == "IOB1 (detected)"
    assert manifest["stats"]["selection"] == "best f1"


@pytest.mark.parametrize("data", [IOB1_DEV, CONLL / "valid.txt"], ids=["iob1", "iob2"])
def test_eval_writes_every_word_once_in_the_files_scheme(iob1_model, cli, tmp_path, data):
    model, _ = iob1_model
    ev = tmp_path / "ev"
    r = cli("eval", model, data, "--out", ev, "--json")
    assert r.exit_code == 0, r.stderr
    gold = read_tagged(data)
    rows, offsets = _predictions(ev / "predictions.txt")
    # every word exactly once, in order, with its gold tag as written in the file
    assert [w for w, _, _ in rows] == gold.words
    assert np.array_equal(offsets, gold.offsets)
    assert [g for _, g, _ in rows] == gold.tags.tolist()
    predicted = np.array([p for _, _, p in rows])
    # predictions are written in the file's scheme: converting them to it changes nothing
    scheme = detect(gold.tags, gold.offsets).scheme
    assert np.array_equal(convert(predicted, offsets, scheme), predicted)
    # metrics.json holds what conlleval prints for predictions.txt
    metrics = json.loads((ev / "metrics.json").read_text())
    with open(ev / "predictions.txt", encoding="utf-8") as f:
        assert _flat(metrics) == pytest.approx(_flat(score_lines(f)))
    assert metrics["tokens"] == 1948 and metrics["gold_entities"] == 267
    assert metrics["predicted_entities"] > 50 and len(metrics["per_type"]) == 4
    manifest = r.json()
    assert manifest["stats"]["features"]["windowed_sentences"] > 0


@pytest.mark.slow
def test_iob2_model_predicts_the_same_words_windowed_or_not(cli, minilm_dir, tmp_path):
    """A sentence split into windows is predicted word for word like an unsplit one would be
    read: each word once, and with a window as long as the sentence nothing is split."""
    model = tmp_path / "m"
    _finetune(cli, minilm_dir, model, CONLL / "train.txt")
    ids = set()
    for length, extra, windowed in (("24", (), True), ("128", (), False),
                                    ("128", ("--document-context",), False)):
        ev = tmp_path / f"ev{length}{len(extra)}"
        r = cli("eval", model, CONLL / "valid.txt", "--out", ev, "--max-seq-length", length,
                *extra, "--json")
        assert r.exit_code == 0, r.stderr
        manifest = r.json()
        ids.add(manifest["id"])
        stats = manifest["stats"]["features"]
        assert (stats["windowed_sentences"] > 0) == windowed
        assert stats["sentences"] == 140 and stats["words"] == 1948
        assert stats["windows"] == 140 or windowed   # document context: still one per sentence
        rows, _ = _predictions(ev / "predictions.txt")
        assert len(rows) == 1948
    assert len(ids) == 3  # the window settings are part of the eval artifact's identity


def test_table_with_integer_tags_and_labels(cli, minilm_dir, tmp_path):
    """The datasets layout: tokens and integer ner_tags named by --labels."""
    train = read_tagged(CONLL / "train.txt")
    index = {t: i for i, t in enumerate(IOB2_LABELS)}
    path = tmp_path / "train.jsonl"
    with open(path, "w") as f:
        for a, b in zip(train.offsets[:-1], train.offsets[1:]):
            f.write(json.dumps({"tokens": train.words[a:b],
                                "ner_tags": [index[t] for t in train.tags[a:b]]}) + "\n")
    out = tmp_path / "m"
    r = cli("finetune", minilm_dir, path, "--family", "tagging",
            *[x for label in IOB2_LABELS for x in ("--labels", label)], "--out", out,
        "--steps", "2", "--batch-size", "8", *SHORT, "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads((out / "bertctl_task.json").read_text())["label_list"] == IOB2_LABELS
    r = cli("eval", out, path, "--out", tmp_path / "ev", "--json")
    assert r.exit_code == 0, r.stderr
    rows, _ = _predictions(tmp_path / "ev" / "predictions.txt")
    assert [g for _, g, _ in rows] == train.tags.tolist()


def _one_line_error(r, *needles):
    assert r.exit_code == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for needle in needles:
        assert needle in r.stderr


def test_bad_input_is_one_line(cli, minilm_dir, tmp_path):
    lines = (CONLL / "train.txt").read_text().splitlines()

    def finetune(name, text, *extra):
        path = tmp_path / name
        path.write_text(text)
        return cli("finetune", minilm_dir, path, "--task", "conll2003", "--out",
                   tmp_path / "out", "--steps", "1", *SHORT, *extra), path

    ragged = lines.copy()
    ragged[5] = "German JJ B-MISC"           # 3 columns among 4
    r, path = finetune("ragged.txt", "\n".join(ragged) + "\n")
    _one_line_error(r, f"{path}:6", "3 columns")
    bad_tag = lines.copy()
    bad_tag[3] = "EU NNP B-NP X-ORG"
    r, path = finetune("badtag.txt", "\n".join(bad_tag) + "\n")
    _one_line_error(r, f"{path}:4", "X-ORG")
    # a dev tag never seen in training
    unseen = "\n".join(lines).replace("B-MISC", "B-EVENT", 1) + "\n"
    dev = tmp_path / "dev.txt"
    dev.write_text(unseen)
    r, _ = finetune("train.txt", "\n".join(lines) + "\n", "--dev", dev)
    _one_line_error(r, str(dev), "B-EVENT", "never seen in training")
    r, _ = finetune("train.txt", "\n".join(lines) + "\n", "--tag-scheme", "bioes",
                    "--doc-stride", "22")
    _one_line_error(r, "--doc-stride 22")
    r, path = finetune("allo.txt", "a DT B-NP O\nb DT B-NP O\n")
    _one_line_error(r, str(path), "every tag is O")
    # an empty sentence in a table
    table = tmp_path / "t.jsonl"
    table.write_text('{"tokens": ["a"], "ner_tags": ["B-PER"]}\n{"tokens": [], "ner_tags": []}\n')
    r = cli("finetune", minilm_dir, table, "--family", "tagging", "--out", tmp_path / "out",
            "--steps", "1", *SHORT)
    _one_line_error(r, str(table), "row 2", "empty sentence")
    assert not (tmp_path / "out").exists()
