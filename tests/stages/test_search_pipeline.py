"""The search recipe (pipelines/search.mk) through `make` as a user runs it: the commands it
plans (make -n) for each setting, and the whole recipe in miniature, every automatic choice
made on a dev set held out of the training pairs and none on the test queries."""

import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from helpers import ROOT
from test_pipelines import _small_search_set, make, manifest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("make") is None, reason="needs make")]

EXAMPLE = ROOT / "examples" / "retrieval"


def _per_query(path: Path) -> dict[str, float]:
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    column = rows[0].index("ndcg@10")
    return {r[0]: float(r[column]) for r in rows[1:]}


def _without_sentence_layout(model: Path, out: Path) -> Path:
    """A copy of a sentence-transformers model less its sentence-transformers files: what a
    pretraining checkpoint looks like to the search pipeline's auto settings."""
    shutil.copytree(model, out, ignore=shutil.ignore_patterns(
        "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
        "1_Pooling"))
    return out


def _planned(variables, start) -> list[str]:
    r = make("search", variables, "-n", makefile=None, start=start)
    assert r.returncode == 0, r.stderr
    return [" ".join(x.split()) for x in r.stdout.replace("\\\n", " ").splitlines()]


def _one(commands, out: str) -> str:
    found = [x for x in commands if f"--out {out} " in x]
    assert len(found) == 1, (out, found)
    return found[0]


def test_search_pipeline_mines_with_the_in_batch_model_when_asked(tmp_path, minilm_dir):
    """MINE_WITH=inbatch: the in-batch model mines (made first) the training rows and the
    dev rows, the original is fine-tuned on its rows; auto (the default) is original for a
    model with a sentence-embedding layout (modules.json) and inbatch for one without (a
    pretraining checkpoint's files: the same model less its sentence-transformers files);
    another value is one line before any work."""
    bare = _without_sentence_layout(minilm_dir, tmp_path / "bare")
    _small_search_set(EXAMPLE, tmp_path / "ret", queries=8, pairs=8)
    runs = tmp_path / "runs"
    for model, value, mines in ((minilm_dir, "original", "original"),
                                (minilm_dir, "inbatch", "inbatch"),
                                (minilm_dir, None, "original"), (bare, None, "inbatch"),
                                (bare, "original", "original")):
        commands = _planned({"MODEL": str(model), "TRAIN": "ret/train.tsv", "BEIR": "ret/beir",
                             "RUNS": "runs", **({"MINE_WITH": value} if value else {})},
                            tmp_path)
        miner = f"{runs}/inbatch" if mines == "inbatch" else str(model)
        for out, rows in ((f"{runs}/mined", f"{runs}/split/train.jsonl"),
                          (f"{runs}/dev-rows", f"{runs}/split/dev-pairs.jsonl")):
            assert f" mine {miner} {rows} " in _one(commands, out), (model.name, value)
        mine = next(i for i, x in enumerate(commands) if f"--out {runs}/mined " in x)
        inbatch = next(i for i, x in enumerate(commands) if f"--out {runs}/inbatch " in x)
        if mines == "inbatch":   # its model is made before it mines
            assert inbatch < mine
        assert f"finetune {model} {runs}/mined/pairs.jsonl" in _one(commands,
                                                                    f"{runs}/mined-model")
    r = make("search", {"MODEL": str(minilm_dir), "TRAIN": "ret/train.tsv", "BEIR": "ret/beir",
                        "RUNS": "runs", "MINE_WITH": "teacher"}, "-n", makefile=None,
             start=tmp_path)
    assert r.returncode != 0
    assert "MINE_WITH=teacher: must be auto, original or inbatch" in r.stderr
    assert not runs.exists()


def test_search_pipeline_trains_the_reranker_on_rows_of_its_own_when_asked(tmp_path,
                                                                          minilm_dir):
    """RERANK_NEGATIVES other than NEGATIVES: the reranker's rows are mined apart (by the same
    miner, with that many negatives and the same guards); by default it trains on the mined
    rows. Either way it trains until the dev rows stop improving (RERANK_PATIENCE, 2), at most
    RERANK_EPOCHS (10), and keeps its best epoch by them."""
    _small_search_set(EXAMPLE, tmp_path / "ret", queries=8, pairs=8)
    runs = tmp_path / "runs"
    base = {"MODEL": str(minilm_dir), "TRAIN": "ret/train.tsv", "BEIR": "ret/beir",
            "RUNS": "runs", "MINE_FLAGS": "--relative-margin 0.05", "EPOCHS": "2"}
    for extra, rows, epochs in (({}, "mined", "10"),
                                ({"RERANK_NEGATIVES": "15", "RERANK_EPOCHS": "4"},
                                 "rerank-rows", "4")):
        commands = _planned({**base, **extra}, tmp_path)
        reranker = _one(commands, f"{runs}/reranker")
        assert f"finetune {minilm_dir} {runs}/{rows}/pairs.jsonl --task reranking" in reranker
        assert f"--epochs {epochs} --patience 2" in reranker
        assert f"--dev {runs}/dev-rows/pairs.jsonl" in reranker
        own = [x for x in commands if f"--out {runs}/rerank-rows " in x]
        assert len(own) == (1 if extra else 0)
        if extra:
            assert f"mine {minilm_dir} {runs}/split/train.jsonl " in own[0]
            assert "--negatives 15 --relative-margin 0.05" in own[0]
    assert not runs.exists()


def test_every_automatic_choice_is_made_on_dev_and_a_given_value_skips_it(tmp_path,
                                                                         minilm_dir):
    """By default: TRAIN split (DEV_SHARE, DEV_MIN, SEED); every choice (rounds by chain up to
    MAX_ROUNDS, the teacher, FINAL, the second stage at each of RERANK_DEPTHS) reads evals of
    the split's dev set alone; the steps after a choice read what it chose when they run; the
    test set is read by the evals the report shows and by nothing a choice reads. A fixed
    ROUNDS, TEACHER and FINAL make no choice; DEV= is checked by split --dev; a value out of
    range is one line before any work."""
    _small_search_set(EXAMPLE, tmp_path / "ret", queries=8, pairs=8)
    runs, beir = tmp_path / "runs", tmp_path / "ret" / "beir"
    base = {"MODEL": str(minilm_dir), "TRAIN": "ret/train.tsv", "BEIR": "ret/beir",
            "RUNS": "runs", "SEED": "7"}
    commands = _planned(base, tmp_path)
    split = _one(commands, f"{runs}/split")
    assert f"split {tmp_path}/ret/train.tsv --dev-share 0.1 --min-dev-queries 50 --seed 7" \
        in split
    chooses = {x.split("--out ")[1].split()[0].rsplit("/", 1)[1]: x
               for x in commands if " choose " in x}
    assert sorted(chooses) == ["choose-final", "choose-rounds", "choose-search",
                               "choose-teacher"]
    candidates = {name: [w for w in x.split(" choose ")[1].split() if "=" in w]
                  for name, x in chooses.items()}
    assert candidates["choose-rounds"] == [f"mined-model={runs}/dev-mined-model",
                                           f"round-2={runs}/dev-round-2"]
    assert "--rule chain" in chooses["choose-rounds"]
    assert [c.split("=")[0] for c in candidates["choose-teacher"]] == ["none", "reranker",
                                                                       "late"]
    assert [c.split("=")[0] for c in candidates["choose-final"]] == [
        "original", "inbatch", "last", "remined", "distilled"]
    assert [c.split("=")[0] for c in candidates["choose-search"]] == [
        "none", "reranked-10", "reranked-20", "reranked-50", "late", "head"]
    dev_evals = {c.split("=")[1].split(":")[0] for cs in candidates.values() for c in cs}
    assert all(Path(d).name.startswith("dev-") for d in dev_evals)
    for d in dev_evals:
        step = _one(commands, d)
        assert f" {runs}/split/dev --task retrieval" in step and str(beir) not in step
    # After a choice, the steps read it when they run.
    last = f"$(cat {runs}/choose-rounds/model.txt)"
    assert f" mine {last} {runs}/split/train.jsonl " in _one(commands, f"{runs}/taught")
    assert f"t=$(cat {runs}/choose-teacher/chosen.txt)" in _one(commands, f"{runs}/taught")
    assert f" finetune {last} {runs}/taught/pairs.jsonl --task retrieval --loss infonce" in \
        _one(commands, f"{runs}/remined")
    distilled = _one(commands, f"{runs}/distilled")
    assert f'[ "$t" = none ]; then rm -rf {runs}/distilled && cp -R {runs}/remined' in distilled
    final = f"$(cat {runs}/choose-final/model.txt)"
    assert f" export {final} --quantize int8" in _one(commands, f"{runs}/export")
    assert f" finetune {final} {runs}/taught/pairs.jsonl --task retrieval --late-dim 128" in \
        _one(commands, f"{runs}/late-head")
    report = next(x for x in commands if " report " in x).split(" --title")[0]
    assert report.split(" report ")[1].split() == [
        f"{runs}/{x}" for x in ("eval-original", "eval-inbatch", "eval-mined-model-reranked",
                                "eval-round-2", "eval-remined", "eval-distilled",
                                "eval-final-reranked", "eval-final-late",
                                "eval-late-head-late", "eval-export", "choose-rounds",
                                "choose-teacher", "choose-final", "choose-search")]
    for name in ("eval-final-reranked", "eval-final-late", "eval-export"):
        assert str(beir) in _one(commands, f"{runs}/{name}")

    # Given values: no choice, the paths fixed; a user's dev set checked by split --dev.
    (tmp_path / "dev").mkdir()
    commands = _planned({**base, "ROUNDS": "3", "TEACHER": "late", "FINAL": "remined",
                         "LATE_DIM": "none", "DEV": "dev"}, tmp_path)
    assert f"split {tmp_path}/ret/train.tsv --dev {tmp_path}/dev --min-dev-queries 50" in \
        _one(commands, f"{runs}/split")
    assert [x.split("--out ")[1].split()[0] for x in commands if " choose " in x] == [
        f"{runs}/choose-search"]
    assert f" mine {runs}/round-3 {runs}/split/train.jsonl " in _one(commands,
                                                                    f"{runs}/taught")
    assert f" mine {runs}/round-2 {runs}/split/train.jsonl " in _one(commands,
                                                                    f"{runs}/round-3-rows")
    assert f" export {runs}/remined --quantize int8" in _one(commands, f"{runs}/export")
    assert not any(f"--out {runs}/late-head " in x for x in commands)
    for extra, message in (({"ROUNDS": "0"}, "ROUNDS=0: must be auto or a whole number"),
                           ({"MAX_ROUNDS": "x"}, "MAX_ROUNDS=x: must be a whole number"),
                           ({"FINAL": "best"}, "FINAL=best: must be auto, distilled or remined"),
                           ({"TEACHER": "bert"}, "TEACHER=bert: must be auto, reranker or late"),
                           ({"LATE_DIM": "0"}, "LATE_DIM=0: must be auto, none or a size"),
                           ({"RERANK_DEPTHS": "10 deep"}, "RERANK_DEPTHS=10 deep: must be"),
                           ({"DEV": "nowhere"}, f"DEV={tmp_path}/nowhere: no such file")):
        r = make("search", {**base, **extra}, "-n", makefile=None, start=tmp_path)
        assert r.returncode != 0 and message in r.stderr, r.stderr
    assert not runs.exists()


def _table(page: str, table_id: str) -> list[list[str]]:
    table = page.split(f'<table id="{table_id}">')[1].split("</table>")[0]
    return [[cell.split("</td>")[0] for cell in row.split("<td>")[1:]]
            for row in table.split("<tr>")[2:]]


def test_search_pipeline_chooses_on_dev_and_reports_each_steps_gain(tmp_path, minilm_l2):
    """The whole recipe in miniature: every step an artifact with its lineage; the report's
    first table each step's test nDCG@10 gain with the paired standard error computed here
    from the evals' per-query files, its second every choice's candidates with their dev
    figures; what is exported is what the final choice took, never under the original model
    on dev. The test queries are never read for a choice: with the test judgements changed,
    make redoes the test evals and the report, and no choice."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("matplotlib")
    _small_search_set(EXAMPLE, tmp_path / "ret", queries=60, pairs=96)
    variables = {"MODEL": str(minilm_l2), "TRAIN": "ret/train.tsv", "BEIR": "ret/beir",
                 "RUNS": "runs", "STEPS": "2", "BATCH": "8", "RERANK_BATCH": "4",
                 "RERANK_LENGTH": "64", "RERANK_EPOCHS": "1", "NEGATIVES": "1",
                 "DEV_NEGATIVES": "3", "DEV_MIN": "20", "DEPTH": "5", "RERANK_DEPTHS": "5",
                 "LATE_DEPTH": "10"}
    r = make("search", variables, makefile=None, start=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = tmp_path / "runs"
    split = manifest(runs / "split")["stats"]
    assert (split["dev_queries"], split["train_queries"]) == (20, 76)
    # The control and the distilled model: the same start and rows.
    remined, distilled = manifest(runs / "remined"), manifest(runs / "distilled")
    assert remined["inputs"][0]["id"] == distilled["inputs"][0]["id"]
    assert remined["inputs"][1]["id"] == distilled["inputs"][1]["id"]
    teacher = (runs / "choose-teacher" / "chosen.txt").read_text().strip()
    if teacher != "none":
        taught = json.loads((runs / "taught" / "pairs.jsonl").read_text().splitlines()[0])
        assert {"score_positive", "score_negative_1"} <= set(taught)
    final = json.loads((runs / "choose-final" / "choice.json").read_text())
    exported = manifest(runs / "export")["inputs"][0]["path"]
    assert Path(exported).resolve() == Path(final["chosen"]["model"]).resolve()
    dev = {c["name"]: c["mean"] for c in final["candidates"]}
    assert dev[final["chosen"]["name"]] >= dev["original"]
    page = (runs / "report" / "report.html").read_text()
    rows = _table(page, "gains")
    assert rows[0][0].startswith("eval-original") and int(rows[0][2]) == 60
    for row in rows:
        label = row[0].split(",")[0]
        kind = ("rerank_fused_per_query.tsv" if "fused" in row[0] else
                "rerank_per_query.tsv" if "," in row[0] else "per_query.tsv")
        mine = _per_query(runs / label / kind)
        assert float(row[1]) == pytest.approx(statistics.fmean(mine.values()), abs=5e-5)
        if row[3]:
            over = row[3].split(" over ")[1].split(";")[0]
            label_b = over.split(",")[0]
            kind_b = ("rerank_fused_per_query.tsv" if "fused" in over else
                      "rerank_per_query.tsv" if "," in over else "per_query.tsv")
            before = _per_query(runs / label_b / kind_b)
            d = [mine[q] - before[q] for q in mine]
            shown = row[3].split(" ")
            assert float(shown[0]) == pytest.approx(statistics.fmean(d), abs=5e-5)
            assert float(shown[2]) == pytest.approx(statistics.stdev(d) / len(d) ** 0.5,
                                                    abs=5e-5)
    picks = _table(page, "choices")
    for name in ("choose-rounds", "choose-teacher", "choose-final", "choose-search"):
        choice = json.loads((runs / name / "choice.json").read_text())
        shown = [r for r in picks if r[0] == name]
        assert [r[1] for r in shown] == [c["name"] for c in choice["candidates"]]
        assert [float(r[2]) for r in shown] == pytest.approx(
            [c["mean"] for c in choice["candidates"]], abs=5e-5)
        assert [r[5] == "chosen" for r in shown] == [c["chosen"] for c in choice["candidates"]]
        assert all(int(r[3]) == 20 for r in shown)
    # The test judgements changed: make would redo every test eval and the report, and no
    # choice (asked with -n: what make decides to redo is the property, not the reruns).
    qrels = tmp_path / "ret" / "beir" / "qrels" / "test.tsv"
    lines = qrels.read_text().splitlines()
    qrels.write_text("\n".join(lines[:len(lines) // 2]) + "\n")
    r = make("search", variables, "-n", makefile=None, start=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    redone = {Path(out).name for out in re.findall(r"--out (\S+)", r.stdout)}
    evals = {p.parent.name for p in runs.glob("eval-*/artifact.json")}
    assert redone == evals | {"report"}, redone
    assert {p.parent.name for p in runs.glob("choose-*/artifact.json")} == {
        "choose-rounds", "choose-teacher", "choose-final", "choose-search"}
