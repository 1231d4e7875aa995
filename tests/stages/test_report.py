"""`bertctl report` through the CLI: the page is parsed and every plot and number is checked
against the artifacts' own files (manifests, metrics.jsonl, metrics.json)."""

import json
import math
import re
import statistics
from html.parser import HTMLParser

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="pip install 'bertctl[report]'")


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], ""

    def all(self, tag=None, **attrs):
        for child in self.children:
            if (tag is None or child.tag == tag) and all(
                    child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                yield child
            yield from child.all(tag, **attrs)

    def one(self, tag=None, **attrs):
        found = list(self.all(tag, **attrs))
        assert len(found) == 1, (tag, attrs, len(found))
        return found[0]

    def full_text(self):
        return self.text + "".join(c.full_text() for c in self.children)


class Tree(HTMLParser):
    VOID = {"meta", "br", "img", "link", "input", "hr"}

    def __init__(self, text):
        super().__init__()
        self.root = self.current = Node("root", {}, None)
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.current)
        self.current.children.append(node)
        if tag not in self.VOID:
            self.current = node

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Node(tag, attrs, self.current))

    def handle_endtag(self, tag):
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None:
            self.current = node.parent

    def handle_data(self, data):
        self.current.text += data


def _records(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def _manifest(path):
    return json.loads((path / "artifact.json").read_text())


def _vertices(g):
    """The (x, y) vertices of a line's SVG path (its first path element)."""
    d = next(g.all("path")).attrs["d"]
    numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", d)]
    return np.array(numbers).reshape(-1, 2)


def _axis_map(figure, axis):
    """pixel = a * value + b for one axis, from the plot's tick marks and their labels."""
    pixels, values = [], []
    for tick in figure.all("g"):
        if tick.attrs.get("id", "").startswith(f"{axis}tick_"):
            use = next(tick.all("use"))
            pixels.append(float(use.attrs[axis]))
            values.append(float(next(tick.all("text")).full_text().replace("\u2212", "-")))
    assert len(pixels) >= 2
    a, b = np.polyfit(values, pixels, 1)
    assert np.abs(np.polyval([a, b], values) - pixels).max() < 1e-3
    return a, b


def _assert_draws(figure, gid, steps, values):
    """The line's path vertices are the points (step, value), in order, at the places the
    plot's own axes give them: the plot shows exactly these numbers."""
    xy = _vertices(figure.one("g", id=gid))
    assert len(xy) == len(steps)
    for k, (axis, data) in enumerate((("x", steps), ("y", values))):
        a, b = _axis_map(figure, axis)
        expected = a * np.array(data, float) + b
        assert np.abs(xy[:, k] - expected).max() < 0.01, (gid, axis)


def _check_cell(td, value):
    assert json.loads(td.attrs["data-value"]) == value
    text = td.full_text()
    if value is None:
        assert text == ""                       # no literal "null" on the page
    elif isinstance(value, float):
        assert float(text) == pytest.approx(value, rel=1e-5)
    elif isinstance(value, (str, int)) and not isinstance(value, bool):
        assert text == str(value)
    else:
        assert json.loads(text) == value


def test_report_of_several_runs(tmp_path, tiny_pretrained, sst2_seed_runs, cli):
    ft0, ft1, ev = sst2_seed_runs
    shown = [tiny_pretrained, ft0, ft1, ev]
    out = tmp_path / "report"
    r = cli("report", *shown, "--out", out, "--json")
    assert r.exit_code == 0, r.stderr
    m = r.json()
    manifests = [_manifest(p) for p in shown]
    assert m["kind"] == "report"
    assert [(i["role"], i["id"]) for i in m["inputs"]] == [
        (f"artifact-{k}", x["id"]) for k, x in enumerate(manifests, 1)]
    assert m["stats"]["seed_groups"] == [[manifests[1]["id"], manifests[2]["id"]]]
    assert set(m["files"]) == {"report.html"}

    text = (out / "report.html").read_text()
    doc = Tree(text).root
    # Self-contained: no scripts, nothing loaded from elsewhere.
    assert not list(doc.all("script")) and not list(doc.all("link")) and not list(doc.all("img"))
    assert not re.search(r'(src|href)="(https?:)?//', text)

    # -- every curve of every run, drawn from its metrics.jsonl
    expected, timed = {}, {}
    for k, path in enumerate(shown, 1):
        if not (path / "metrics.jsonl").is_file():
            continue
        for rec in _records(path):
            for key, value in rec.items():
                if key in ("split", "step", "epoch", "tokens", "examples", "masked_tokens",
                           "elapsed_s"):
                    continue
                if isinstance(value, (int, float)) and math.isfinite(value):
                    expected.setdefault((rec["split"], key, k), []).append((rec["step"], value))
                    if key == "loss" or rec["split"] != "train":
                        timed.setdefault((rec["split"], key, k), []).append(
                            (rec["elapsed_s"], value))
    assert ("train", "loss", 1) in expected and ("validation", "mlm_loss", 1) in expected
    assert ("validation", "accuracy", 2) in expected and ("train", "lr", 3) in expected
    figures = {f.attrs["id"]: f for f in doc.all("figure")}
    # Pretraining and fine-tuning on their own axes: a loss near 6 beside one near 0.3.
    kind = {1: "pretraining", 2: "fine-tuning", 3: "fine-tuning"}
    for (split, key, k), points in expected.items():
        figure = figures[f"curve-{kind[k]}-{split}-{key}"]
        assert len(list(figure.all("svg"))) == 1
        _assert_draws(figure, f"line-{split}-{key}-{k}", *zip(*points))
    # The loss and the validation metrics also against the wall-clock time of the run.
    assert ("train", "loss", 1) in timed and ("validation", "mlm_loss", 1) in timed
    for (split, key, k), points in timed.items():
        figure = figures[f"curve-time-{kind[k]}-{split}-{key}"]
        _assert_draws(figure, f"time-{split}-{key}-{k}", *zip(*points))
    assert {f for f in figures if f.startswith("curve-")} == {
        f"curve-{kind[i]}-{s}-{k}" for s, k, i in expected} | {
        f"curve-time-{kind[i]}-{s}-{k}" for s, k, i in timed}
    assert [h.full_text() for h in doc.all("h3", **{"class": "run-kind"})] == [
        "Pretraining (1 run)", "Fine-tuning (2 runs)"]

    # -- mean +- sd of the two seeds: the table and the curves
    group = doc.one("table", **{"class": "seed-group"})
    for key in ("accuracy", "macro_f1"):
        values = [manifests[1]["metrics"][key], manifests[2]["metrics"][key]]
        row = group.one("tr", **{"data-metric": key})
        mean_cell = next(td for td in row.all("td") if "data-mean" in td.attrs)
        assert json.loads(mean_cell.attrs["data-mean"]) == pytest.approx(np.mean(values))
        assert json.loads(mean_cell.attrs["data-sd"]) == pytest.approx(np.std(values, ddof=1))
        cells = [td for td in row.all("td") if "data-artifact" in td.attrs]
        for td, value in zip(cells, values):
            _check_cell(td, value)
    steps0 = dict(expected[("train", "loss", 2)])
    steps1 = dict(expected[("train", "loss", 3)])
    common = sorted(set(steps0) & set(steps1))
    _assert_draws(figures["seed-curve-1-train-loss"], "mean-train-loss-1", common,
                  [statistics.fmean([steps0[s], steps1[s]]) for s in common])
    assert list(figures["seed-curve-1-train-loss"].all("g", id="band-mean-train-loss-1"))

    # -- the overview and each artifact's tables hold the manifests' numbers
    overview = doc.one("table", id="overview")
    for man in manifests:
        for key, value in man["metrics"].items():
            if isinstance(value, (int, float)) and key not in ("step", "epoch", "examples",
                                                              "masked_tokens"):
                _check_cell(overview.one("td", **{"data-key": f"metrics.{key}",
                                                  "data-artifact": man["id"]}), value)
    # the settings come after the metrics and curves: only those that differ, the rest folded
    assert not [td for td in overview.all("td")
                if td.attrs.get("data-key", "").startswith("settings.")]
    differing = {td.attrs["data-key"] for td in doc.one("table", id="differences").all("td")
                 if td.attrs.get("data-key", "").startswith("settings.")}
    assert "settings.seed" in differing and "settings.task" in differing
    same = {f"settings.{k}" for k in manifests[0]["config"]
            if all(k in m["config"] and m["config"][k] == manifests[0]["config"][k]
                   for m in manifests)}
    assert same and not same & differing
    assert text.index('id="overview"') < text.index('class="plots"') < text.index(
        'id="differences"') < text.index('<details class="all">')
    for k, (path, man) in enumerate(zip(shown, manifests), 1):
        section = doc.one("section", id=f"artifact-{k}")
        assert section.attrs["data-id"] == man["id"]
        for td in section.one("table", **{"class": "settings"}).all("td"):
            _check_cell(td, man["config"][td.attrs["data-key"]])
        metrics = {k2: v for k2, v in man["metrics"].items() if k2 != "confusion_matrix"}
        tds = list(section.one("table", **{"class": "metrics"}).all("td"))
        assert {td.attrs["data-key"] for td in tds} == set(metrics)
        for td in tds:
            _check_cell(td, metrics[td.attrs["data-key"]])
        # the lineage reaches the corpus files, by content hash
        ids = {li.attrs["data-id"] for li in section.all("li")}
        walk = [man["inputs"]]
        while walk:
            for ref in walk.pop():
                assert ref["id"] in ids
                walk.append(ref["inputs"])
    corpus = _manifest(tiny_pretrained)["inputs"][0]["inputs"]
    assert any(ref["role"] == "corpus" for ref in corpus)

    # -- the eval artifact's confusion matrix, cell by cell
    cm = json.loads((ev / "metrics.json").read_text())["confusion_matrix"]
    table = doc.one("section", id="artifact-4").one("table", **{"class": "confusion"})
    rows = [tr for tr in table.all("tr")][1:]
    assert [tr.one("th").full_text() for tr in rows] == [str(x) for x in cm["labels"]]
    for tr, expected_row in zip(rows, cm["matrix"]):
        cells = list(tr.all("td"))
        assert len(cells) == len(expected_row)
        for td, value in zip(cells, expected_row):
            _check_cell(td, value)

    # -- it reads like results: a title in words, no "null", each model's size in its column
    title = doc.one("h1").full_text()
    pretrained = _manifest(tiny_pretrained)
    assert title.startswith("glue/sst2: accuracy on dev.tsv, an evaluation of a model from ")
    assert tiny_pretrained.name in title and "pretraining of" in title, title
    assert not re.search(r"\b[0-9a-f]{16}\b", title)
    assert not [td for td in doc.all("td") if td.full_text() == "null"]
    sizes = {td.attrs["data-artifact"]: json.loads(td.attrs["data-value"])
             for td in overview.all("td", **{"data-key": "model MB"})}
    for path, man in zip(shown[:3], manifests[:3]):
        assert sizes[man["id"]] == round((path / "model.safetensors").stat().st_size / 1e6, 1)
    assert sizes[manifests[3]["id"]] is None     # the eval's model has its own column
    assert pretrained["id"] in sizes

    r = cli("report", *shown, "--out", out)
    assert r.exit_code == 0 and "up to date" in r.stdout


def test_a_run_of_a_point_or_two_is_named_with_its_count():
    from bertctl.report import plots

    svg = plots.line_plot("t", "step", [plots.Line("a", "run (1 point)", [5], [0.7])])
    assert "run (1 point)" in svg                # in a legend, though the line is alone


def test_the_eval_of_a_model_not_shown_carries_that_models_size(tmp_path, sst2_seed_runs, cli):
    """A teacher's and a student's evals side by side: each eval's column has the size of the
    weights it ran (their models are not on the page)."""
    ft0, _, ev = sst2_seed_runs
    out = tmp_path / "report"
    assert cli("report", ev, "--out", out).exit_code == 0
    doc = Tree((out / "report.html").read_text()).root
    td = doc.one("table", id="overview").one("td", **{"data-key": "model MB"})
    assert json.loads(td.attrs["data-value"]) == round(
        (ft0 / "model.safetensors").stat().st_size / 1e6, 1)
    assert doc.one("h1").full_text() == (
        f"glue/sst2: accuracy on dev.tsv, an evaluation of a model from "
        f"{'/'.join(_manifest(ft0)['inputs'][0]['path'].split('/')[-2:])}")  # .../tmp/model


def test_report_bad_input(tmp_path, tiny_pretrained, cli, monkeypatch):
    r = cli("report", tmp_path, "--out", tmp_path / "r")
    assert r.exit_code == 2 and "not a bertctl artifact" in r.stderr
    r = cli("report", tiny_pretrained, tiny_pretrained, "--out", tmp_path / "r")
    assert r.exit_code == 2 and "given twice" in r.stderr
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    r = cli("report", tiny_pretrained, "--out", tmp_path / "r")
    assert r.exit_code == 2 and "pip install 'bertctl[report]'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_groups_are_compared_in_standard_errors_as_welch_does():
    from types import SimpleNamespace

    from scipy import stats

    from bertctl.report.page import Run, group_comparison

    def run(i, value):
        manifest = SimpleNamespace(metrics={"accuracy": value, "label": "x"})
        return Run(i, SimpleNamespace(manifest=manifest, id=f"a{i}"))

    a, b = [0.70, 0.72, 0.69, 0.71], [0.74, 0.73, 0.76]
    html = group_comparison([[run(i, v) for i, v in enumerate(a)],
                             [run(10 + i, v) for i, v in enumerate(b)]])
    row = Tree(html).root.one("tr", **{"data-metric": "accuracy"})
    diff, se, ratio = (json.loads(td.attrs["data-value"]) for td in row.all("td"))
    assert diff == pytest.approx(np.mean(b) - np.mean(a))
    assert ratio == pytest.approx(stats.ttest_ind(b, a, equal_var=False).statistic)
    assert se == pytest.approx(diff / ratio)
    assert group_comparison([[run(0, 0.5), run(1, 0.6)]]) == ""


def test_seed_groups_of_evals_name_their_models_seeds(cli, sst2_seed_runs, tmp_path):
    """#52 class 8: evals of runs that differ in their seed were headed `seed None` (an eval
    has no seed of its own: its model's is the one)."""
    from helpers import FIXTURES

    first, second, ev0 = sst2_seed_runs
    ev1 = tmp_path / "ev1"
    assert cli("eval", second, FIXTURES / "glue" / "SST-2" / "dev.tsv", "--out",
               ev1).exit_code == 0
    r = cli("report", ev0, ev1, "--out", tmp_path / "rep")
    assert r.exit_code == 0, r.stderr
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "<th>seed 0</th><th>seed 1</th>" in page and "seed None" not in page
