"""A sentence-transformers model is computed as sentence-transformers computes it, or refused
(#63, class 1). Each model here is built and saved by the installed sentence-transformers on
all-MiniLM-L6-v2's encoder cut to two layers: every pooling mode it has, Dense layers (with
and without bias, each activation, residual), Normalize and prompts.
`SentenceTransformer(DIR).encode` (or encode_query) must equal `bertctl embed`, before and
after `finetune --task retrieval`, and a module or setting bertctl does not compute is one
line naming it, exit 2, nothing written.

Tolerance: MiniLM (two layers) in float32 two ways (tolerance.MODEL_FP32's reasoning: 3e-5 of
activations of size about 1) through a pooling and a 384 -> 128 Dense layer, whose dot
products over 384 terms add fp32_sum(384) = 5e-5 of values of size about 0.1; the vectors
compared are unit length with entries about 0.09: 1e-5 absolute, as the issue asks, holds
with the rounding seen (3e-7)."""

import json

import numpy as np
import pytest
import torch

from helpers import EXAMPLES, one_line_error

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.base.modules import Dense, Normalize  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Pooling  # noqa: E402

TEXTS = ["The Normans gave their name to Normandy.", "A fox jumps over the lazy dog.",
         "short", "Computational complexity theory classifies problems by difficulty."]
ATOL = 1e-5
PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(scope="module")
def encoder(minilm_l2):
    return st.SentenceTransformer(str(minilm_l2), device="cpu")[0]


def _saved(encoder, directory, pooling="mean", dense=(), normalize=True, **kwargs):
    torch.manual_seed(0)
    modes = pooling.split("+")
    modules = [encoder, Pooling(384, pooling_mode=modes if len(modes) > 1 else pooling)]
    modules += [Dense(**d) for d in dense]
    if normalize:
        modules.append(Normalize())
    st.SentenceTransformer(modules=modules, device="cpu", **kwargs).save(str(directory))
    return directory


def _embedded(cli, model, tmp_path, *flags, name="emb"):
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    r = cli("embed", model, data, "--out", tmp_path / name, "--precision", "fp32", *flags)
    assert r.exit_code == 0, r.stderr
    return np.load(tmp_path / name / "vectors-00000.npy")


def _theirs(model, how="encode"):
    return getattr(st.SentenceTransformer(str(model), device="cpu"), how)(TEXTS)


TANH = {"in_features": 384, "out_features": 128, "activation_function": torch.nn.Tanh()}


@pytest.mark.parametrize("pooling", ["cls", "mean", "max", "mean_sqrt_len_tokens",
                                     "weightedmean", "lasttoken", "mean+max"])
def test_every_pooling_mode_with_a_dense_layer_is_what_encode_gives(cli, encoder, tmp_path,
                                                                     pooling):
    width = 384 * len(pooling.split("+"))
    model = _saved(encoder, tmp_path / "st", pooling, [{**TANH, "in_features": width}])
    ours = _embedded(cli, model, tmp_path)
    assert ours.shape == (len(TEXTS), 128)
    np.testing.assert_allclose(ours, _theirs(model), atol=ATOL, rtol=0)


@pytest.mark.parametrize("dense", [
    [{"in_features": 384, "out_features": 64, "bias": False, "activation_function": None}],
    [{"in_features": 384, "out_features": 384, "activation_function": torch.nn.GELU(),
      "use_residual": True}],
    [{"in_features": 384, "out_features": 96, "activation_function": torch.nn.ReLU(),
      "use_residual": True},
     {"in_features": 96, "out_features": 32, "activation_function": torch.nn.Sigmoid()}],
], ids=["identity-no-bias", "gelu-residual", "two-layers"])
def test_dense_layers_of_every_kind_are_what_encode_gives(cli, encoder, tmp_path, dense):
    model = _saved(encoder, tmp_path / "st", "mean", dense, normalize=False)
    np.testing.assert_allclose(_embedded(cli, model, tmp_path), _theirs(model), atol=ATOL,
                               rtol=0)


def test_prompts_are_put_before_the_texts_as_encode_query_and_the_default_do(cli, encoder,
                                                                            tmp_path):
    model = _saved(encoder, tmp_path / "st", prompts=PROMPTS)
    np.testing.assert_allclose(_embedded(cli, model, tmp_path, "--prompt-name", "query"),
                               _theirs(model, "encode_query"), atol=ATOL, rtol=0)
    np.testing.assert_allclose(_embedded(cli, model, tmp_path, "--prompt-name", "document",
                                         name="doc"),
                               _theirs(model, "encode_document"), atol=ATOL, rtol=0)
    default = _saved(encoder, tmp_path / "st-default", prompts=PROMPTS,
                     default_prompt_name="query")
    np.testing.assert_allclose(_embedded(cli, default, tmp_path, name="default"),
                               _theirs(default), atol=ATOL, rtol=0)
    r = cli("embed", model, tmp_path / "texts.txt", "--prompt-name", "nope", "--out",
            tmp_path / "bad")
    one_line_error(r, "--prompt-name nope", "document, query")
    assert not (tmp_path / "bad").exists()


def test_fine_tuning_keeps_every_module_and_the_prompts(cli, encoder, tmp_path):
    """Dense(max pooling, tanh) + Normalize with query/document prompts: the fine-tuned
    directory is the same chain (its Dense trained), encode still equals embed, and the
    prompts were used in training as they are in search."""
    model = _saved(encoder, tmp_path / "st", "max", [TANH], prompts=PROMPTS)
    out = tmp_path / "ft"
    r = cli("finetune", model, EXAMPLES / "retrieval" / "train.tsv", "--task", "retrieval",
            "--steps", "2", "--batch-size", "8", "--max-seq-length", "64", "--lr", "1e-4",
            "--precision", "fp32", "--out", out)
    assert r.exit_code == 0, r.stderr
    kinds = [m["type"].rsplit(".", 1)[1] for m in json.loads((out / "modules.json").read_text())]
    assert kinds == ["Transformer", "Pooling", "Dense", "Normalize"]
    assert json.loads((out / "config_sentence_transformers.json").read_text())["prompts"] == \
        PROMPTS
    task = json.loads((out / "bertctl_task.json").read_text())["spec"]["options"]
    assert task["query_prompt"] == "query: " and task["document_prompt"] == "passage: "
    before = st.SentenceTransformer(str(model), device="cpu")[2].linear.weight
    after = st.SentenceTransformer(str(out), device="cpu")[2].linear.weight
    assert not torch.equal(before, after)   # the Dense layer is trained, not dropped
    np.testing.assert_allclose(_embedded(cli, out, tmp_path), _theirs(out), atol=ATOL, rtol=0)


def test_a_search_runs_with_the_models_query_and_document_prompts(cli, encoder, tmp_path):
    """eval on a BEIR set embeds its queries as encode_query and its corpus as
    encode_document do: the same nDCG@10 as a search over sentence-transformers' vectors."""
    from bertctl.search import ranking

    model = _saved(encoder, tmp_path / "st", "mean", [TANH], prompts=PROMPTS)
    beir = EXAMPLES / "retrieval" / "beir"
    r = cli("eval", model, beir, "--task", "retrieval", "--precision", "fp32", "--out",
            tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    ours = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    queries = [json.loads(x) for x in (beir / "queries.jsonl").read_text().splitlines()]
    corpus = [json.loads(x) for x in (beir / "corpus.jsonl").read_text().splitlines()]
    qrels = {}
    for line in (beir / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = line.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    queries = [q for q in queries if q["_id"] in qrels]
    m = st.SentenceTransformer(str(model), device="cpu")
    qv = m.encode_query([q["text"] for q in queries])
    dv = m.encode_document([f"{d.get('title') or ''} {d['text']}".strip() for d in corpus])
    top_s, top_i = ranking.search(qv, [dv], 100)
    run = {q["_id"]: [corpus[j]["_id"] for j in i] for q, i in zip(queries, top_i)}
    means, _ = ranking.evaluate(run, qrels)
    # the same vectors to 1e-5 rank alike but for near ties: nDCG to 1e-3
    assert ours["ndcg@10"] == pytest.approx(means["ndcg@10"], abs=1e-3)


def _edit(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


REFUSED = {
    "a module it does not compute": (
        lambda d: _edit_modules(d), "sentence_transformers.models.LayerNorm"),
    "prompts left out of the pooling": (
        lambda d: _edit(d / "1_Pooling" / "config.json", include_prompt=False), "include_prompt"),
    "a dot-product model": (
        lambda d: _edit(d / "config_sentence_transformers.json", similarity_fn_name="dot"),
        "similarity_fn_name"),
    "a Dense layer over the tokens": (
        lambda d: _edit(d / "2_Dense" / "config.json", module_input_name="token_embeddings"),
        "token_embeddings"),
    "an activation it does not compute": (
        lambda d: _edit(d / "2_Dense" / "config.json",
                        activation_function="torch.nn.modules.activation.Softplus"),
        "Softplus"),
    "a module folder outside the model": (
        lambda d: _edit_modules(d, path="../elsewhere"), "../elsewhere"),
}


def _edit_modules(directory, path=None):
    modules = json.loads((directory / "modules.json").read_text())
    if path is None:
        modules.insert(2, {"idx": 2, "name": "ln", "path": "2_LayerNorm",
                           "type": "sentence_transformers.models.LayerNorm"})
    else:
        modules[2]["path"] = path
    (directory / "modules.json").write_text(json.dumps(modules))


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_bertctl_does_not_compute_is_refused_by_every_stage_naming_it(cli, encoder,
                                                                            tmp_path, case):
    edit, named = REFUSED[case]
    model = _saved(encoder, tmp_path / "st", "mean", [TANH], prompts=PROMPTS)
    edit(model)
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    train = EXAMPLES / "retrieval" / "train.tsv"
    for args in (("embed", model, data), ("eval", model, EXAMPLES / "retrieval" / "beir",
                                          "--task", "retrieval"),
                 ("finetune", model, train, "--task", "retrieval", "--steps", "1")):
        r = cli(*args, "--out", tmp_path / "out")
        one_line_error(r, named)
        assert not (tmp_path / "out").exists()


def test_a_fine_tuned_model_loads_without_alarm_and_its_export_embeds_as_encode(
        cli, minilm_l2, tmp_path):
    """#63 class 8: the fine-tuned model keeps its starting checkpoint's pooler (transformers
    reported it 'newly initialized'); an export of a search model embeds (it was refused as
    'not an export of an encoder model'); eval of a BEIR directory needs no --task. The
    export's vectors: onnxruntime against PyTorch in float32 (MODEL_FP32's reasoning), unit
    vectors: 1e-4."""
    pytest.importorskip("onnxruntime")
    from transformers import AutoModel

    out = tmp_path / "ft"
    r = cli("finetune", minilm_l2, EXAMPLES / "retrieval" / "train.tsv", "--task",
            "retrieval", "--steps", "1", "--batch-size", "8", "--max-seq-length", "64",
            "--out", out)
    assert r.exit_code == 0, r.stderr
    _, info = AutoModel.from_pretrained(str(out), output_loading_info=True)
    assert info["missing_keys"] == set() or not info["missing_keys"], info
    assert cli("export", out, "--out", tmp_path / "onnx").exit_code == 0
    np.testing.assert_allclose(_embedded(cli, tmp_path / "onnx", tmp_path), _theirs(out),
                               atol=1e-4, rtol=0)
    r = cli("eval", minilm_l2, EXAMPLES / "retrieval" / "beir", "--out", tmp_path / "ev")
    assert r.exit_code == 0, r.stderr
    assert "read as a retrieval task" in r.stderr


def test_the_hidden_states_of_a_refused_layout_are_still_embedded(cli, encoder, tmp_path):
    """A layout bertctl does not compute refuses the model's own vectors only: --pool mean
    reads the encoder's hidden states, which it computes."""
    model = _saved(encoder, tmp_path / "st", "mean", [TANH])
    _edit_modules(model)
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    one_line_error(cli("embed", model, data, "--out", tmp_path / "own"), "LayerNorm")
    r = cli("embed", model, data, "--pool", "mean", "--out", tmp_path / "states")
    assert r.exit_code == 0, r.stderr
