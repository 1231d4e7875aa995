"""Property-based fuzzing of every reader of user input (#13's fault matrix): whatever the bytes,
a reader returns or raises BertctlError (the CLI's one-line exit 2), never anything else (a
traceback, exit 1), and never writes a file.

The readers are called directly: the CLI wraps exactly these calls in its BertctlError handler
(tests/test_usage_errors.py and the stage tests check that path), and in-process calls let
hypothesis try many inputs in seconds.
"""

import json
import string

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bertctl import tasks  # noqa: E402

from bertctl.stages import settings as config
from bertctl.contract import artifacts
from bertctl.data import corpus  # noqa: E402
from bertctl.errors import BertctlError  # noqa: E402
from bertctl.settings import resolve  # noqa: E402
from bertctl.stages.settings.assembled import finetune_settings  # noqa: E402
from bertctl.tasks.span.reader import read_span_examples  # noqa: E402
from bertctl.tasks.tagging.reader import read_tagged  # noqa: E402
from helpers import read_examples  # noqa: E402

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# Text that looks like the formats (tabs, commas, quotes, tags, JSON punctuation) more often than
# uniform bytes would, plus raw bytes for encodings.
_ALPHABET = string.ascii_letters + string.digits + " \t\n\r,\"'{}[]:-_.\\\x00\u00a0\u200b\ufeffé"
text_like = st.text(alphabet=_ALPHABET, max_size=400)
raw_bytes = st.binary(max_size=400)
content = st.one_of(text_like.map(lambda t: t.encode("utf-8")), raw_bytes)


def _only_bertctl_errors(fn, *args, **kwargs):
    try:
        result = fn(*args, **kwargs)
        if hasattr(result, "__iter__") and not isinstance(result, (str, bytes, dict)):
            for _ in result:
                pass
    except BertctlError as exc:
        assert "\n" not in str(exc).strip(), str(exc)


def _write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _files(tmp_path):
    return sorted(p.name for p in tmp_path.rglob("*"))


@FUZZ
@given(data=content, suffix=st.sampled_from([".tsv", ".csv", ".jsonl"]))
def test_task_files(tmp_path, data, suffix):
    path = _write(tmp_path, "task" + suffix, data)
    before = _files(tmp_path)
    spec = tasks.make_task_spec(family="pair", text_columns=["a", "b"], label_column="label")
    _only_bertctl_errors(read_examples, spec, path, require_labels=True)
    assert _files(tmp_path) == before


@FUZZ
@given(data=content)
def test_glue_presets(tmp_path, data):
    path = _write(tmp_path, "dev.tsv", data)
    for preset in ("glue/cola", "glue/mrpc", "glue/sts-b"):
        _only_bertctl_errors(read_examples, tasks.make_task_spec(preset), path)


@FUZZ
@given(data=content)
def test_corpus_files(tmp_path, data):
    path = _write(tmp_path, "corpus.txt", data)
    _only_bertctl_errors(corpus.iter_documents, [path])


@FUZZ
@given(data=content)
def test_conll_files(tmp_path, data):
    path = _write(tmp_path, "train.txt", data)
    spec = tasks.make_task_spec("conll2003")
    _only_bertctl_errors(read_examples, spec, path, require_labels=True)
    _only_bertctl_errors(read_tagged, path)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["data", "paragraphs", "qas", "context", "question", "id", "answers",
                        "text", "answer_start", "is_impossible", "title", "x"]), inner,
        max_size=5),
    max_leaves=25)


@FUZZ
@given(doc=json_values, version_2=st.booleans())
def test_squad_json(tmp_path, doc, version_2):
    path = _write(tmp_path, "dev.json", json.dumps(doc).encode())
    _only_bertctl_errors(read_span_examples, path, version_2)


@FUZZ
@given(data=content)
def test_yaml_configs(tmp_path, data):
    path = _write(tmp_path, "config.yaml", data)
    for cls in (config.TokenizeSettings, finetune_settings(), config.EmbedSettings):
        _only_bertctl_errors(resolve, cls, path, {})


manifest_like = st.dictionaries(
    st.sampled_from(["format", "schema_version", "kind", "id", "created_at", "bertctl_version",
                     "config", "inputs", "files", "environment", "stats", "metrics"]),
    json_values, max_size=12)


@FUZZ
@given(manifest=st.one_of(manifest_like, json_values), files=st.dictionaries(
    st.sampled_from(["../x", "/etc/passwd", "a/../../b", "ok.txt", "", "."]),
    st.fixed_dictionaries({"sha256": st.text(max_size=4), "size": st.integers(-1, 5)}),
    max_size=3))
def test_manifests(tmp_path, manifest, files):
    art = tmp_path / "art"
    art.mkdir(exist_ok=True)
    if isinstance(manifest, dict) and files:
        manifest = {**manifest, "files": files}
    (art / artifacts.MANIFEST).write_text(json.dumps(manifest))
    before = _files(tmp_path)

    def read_and_verify():
        a = artifacts.read_artifact(art)
        artifacts.verify(a)
        for name in a.manifest.files:
            artifacts.checked_file(art, name)
    _only_bertctl_errors(read_and_verify)
    assert _files(tmp_path) == before


@pytest.mark.parametrize("text,needle", [
    ("null\n", "first row is not an object"),
    ('[null, {"a": 1}]', "row 1 is not a JSON object"),
    ('{"a": 1}\n[1]\n', ":2: not a JSON object"),
])
def test_json_rows_that_crash_the_datasets_reader_are_refused_first(tmp_path, text, needle):
    """Found by the fuzzing above: datasets' JSON reader segfaults on these (the whole process
    dies, no error at all); they are refused before it reads them."""
    path = _write(tmp_path, "t.jsonl", text.encode())
    spec = tasks.make_task_spec(family="single", text_columns=["a"], label_column="label")
    with pytest.raises(BertctlError, match=needle):
        read_examples(spec, path)
