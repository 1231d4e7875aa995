"""Every architecture against transformers' own classes (the reference), both directions, on
the same weights: bertctl's masked LM saves what `AutoModel`/`AutoModelForMaskedLM` load with no
remote code and gives their hidden states and logits; every task head transformers has, saved
by transformers, loads into bertctl with nothing missing and gives its outputs; a packed row
computes for each sequence what it computes alone. Padded batches throughout.

An architecture is a row of CASES (with its variants: ELECTRA's narrow embeddings, DeBERTa's
v2 and v3 attention, ModernBERT's local windows). What only one architecture has is at the end
of this file, under its name (BERT's in test_model.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from bertctl.model import ARCHITECTURES, build, load_model, save_model
from parity import check_packed_row, close_where, padded_batch, shaken
from tolerance import TINY_FP32  # (each tolerance's reason)

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

VOCAB = 211
# Small enough to run in a second, big enough that every weight matters: 3 layers, 4 heads and
# a feed-forward width that is not 4 x hidden.
SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, max_position_embeddings=64, pad_token_id=0)
HEADS = {"SequenceClassification": {"num_labels": 3}, "TokenClassification": {"num_labels": 5},
         "QuestionAnswering": {}, "MultipleChoice": {}}


@dataclass(frozen=True)
class Case:
    """One architecture (or variant): the values its config takes (ours and transformers'
    alike), transformers' class prefix, the padding id, and what its inputs carry."""

    architecture: str
    prefix: str
    values: dict
    pad: int = 0
    token_types: bool = False       # a second segment in every row
    starts_with: int | None = None  # a first token every row has (RoBERTa's <s>)
    lengths: tuple[int, ...] = (40,)
    # the sequences of a packed row, in each row checked
    packed: tuple[tuple[int, ...], ...] = ((9, 30, 17),)
    head_values: dict = field(default_factory=dict)   # what transformers' heads need besides


ROBERTA = dict(SHAPE, max_position_embeddings=66, pad_token_id=1, bos_token_id=0,
               eos_token_id=2)
CASES = {
    "bert": Case("bert", "Bert", dict(SHAPE), token_types=True),
    "roberta": Case("roberta", "Roberta", ROBERTA, pad=1, starts_with=0, lengths=(40, 64)),
    "xlm-roberta": Case("xlm-roberta", "XLMRoberta", ROBERTA, pad=1, starts_with=0),
    # ELECTRA-small's shape: embeddings narrower than the width, projected up; and as wide.
    "electra-narrow": Case("electra", "Electra", dict(SHAPE, embedding_size=32),
                           token_types=True),
    "electra-wide": Case("electra", "Electra", dict(SHAPE, embedding_size=64),
                         token_types=True),
    "distilbert": Case("distilbert", "DistilBert",
                       dict(vocab_size=VOCAB, dim=64, hidden_dim=96, n_layers=3, n_heads=4,
                            max_position_embeddings=64, pad_token_id=0)),
    "distilbert-sinusoidal": Case("distilbert", "DistilBert",
                                  dict(vocab_size=VOCAB, dim=64, hidden_dim=96, n_layers=3,
                                       n_heads=4, max_position_embeddings=64, pad_token_id=0,
                                       sinusoidal_pos_embds=True)),
    # v3: 16 buckets over 40-token inputs, so distances past 8 take the log buckets; shared
    # keys, both disentangled terms, no absolute positions.
    "deberta-v3": Case("deberta-v2", "DebertaV2", dict(
        SHAPE, max_position_embeddings=128, relative_attention=True, position_buckets=16,
        norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
        position_biased_input=False, type_vocab_size=0, max_relative_positions=-1)),
    # v2: separate position projections, absolute positions, token types, no buckets.
    "deberta-v2": Case("deberta-v2", "DebertaV2", dict(
        SHAPE, max_position_embeddings=128, relative_attention=True, position_buckets=-1,
        max_relative_positions=24, norm_rel_ebd="none", share_att_key=False,
        pos_att_type=["c2p", "p2c"], position_biased_input=True, type_vocab_size=2),
        token_types=True),
    # local_attention 32 (half window 16): 16 tokens fit in one window, 40 take the full local
    # mask, 300 the blocked path; 4 layers: global, local, local, global. Biases everywhere,
    # so a misplaced one shows.
    "modernbert": Case("modernbert", "ModernBert", dict(
        SHAPE, num_hidden_layers=4, local_attention=32, max_position_embeddings=512,
        cls_token_id=2, sep_token_id=3, decoder_bias=True), lengths=(16, 40, 300),
        # near a neighbour's edge in a local window, and across windows
        packed=((9, 30), (50, 70, 11), (130, 170)),
        head_values=dict(bos_token_id=2, eos_token_id=3, norm_bias=True, attention_bias=True,
                         mlp_bias=True, classifier_bias=True)),
    "modernbert-mean": Case("modernbert", "ModernBert", dict(
        SHAPE, num_hidden_layers=4, local_attention=32, max_position_embeddings=512,
        cls_token_id=2, sep_token_id=3), lengths=(16, 300),
        head_values=dict(classifier_pooling="mean", norm_bias=True, attention_bias=True,
                         mlp_bias=True, classifier_bias=True)),
}


def test_every_architecture_has_a_row():
    shipped = {name for name, arch in ARCHITECTURES.items()
               if arch.config_class.__module__.startswith("bertctl.model.")}
    assert {case.architecture for case in CASES.values()} == shipped


def _ours(case: Case, role: str):
    config_class = ARCHITECTURES[case.architecture].config_class
    return shaken(build(role, config_class(**case.values)))


def _inputs(case: Case, T: int, seed: int = 0) -> dict:
    ids, mask = padded_batch(VOCAB, case.pad, T=T, seed=seed)
    if case.starts_with is not None:
        ids[:, 0] = case.starts_with
    inputs = {"input_ids": ids, "attention_mask": mask}
    if case.token_types:
        inputs["token_type_ids"] = (torch.arange(T) > T // 3).long().expand_as(ids)
    return inputs


def _call(model, inputs: dict, **kwargs):
    return model(inputs["input_ids"], inputs.get("token_type_ids"), inputs["attention_mask"],
                 **kwargs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_ours_saved_is_transformers_with_our_outputs(name, tmp_path):
    case = CASES[name]
    ours = _ours(case, "masked_lm")
    save_model(ours, tmp_path)
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path)).eval()
    assert type(theirs).__name__ == f"{case.prefix}ForMaskedLM"
    bare = transformers.AutoModel.from_pretrained(str(tmp_path)).eval()
    assert type(bare).__name__ == f"{case.prefix}Model"
    encoder = getattr(ours, ARCHITECTURES[case.architecture].encoder_name)
    for T in case.lengths:
        inputs = _inputs(case, T, seed=T)
        real = inputs["attention_mask"].bool()
        with torch.no_grad():
            mine = _call(encoder, inputs, output_hidden_states=True)
            ref = bare(**inputs, output_hidden_states=True)
            logits = _call(ours, inputs)["mlm_logits"]
            ref_logits = theirs(**inputs).logits
        assert len(mine["hidden_states"]) == len(ref.hidden_states)
        for a, b in zip(mine["hidden_states"], ref.hidden_states, strict=True):
            close_where(a, b, real)
        close_where(mine["last_hidden_state"], ref.last_hidden_state, real)
        close_where(logits, ref_logits, real)


@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_transformers_heads_load_into_ours_and_agree(name, head, tmp_path):
    case = CASES[name]
    torch.manual_seed(0)
    hf_config = getattr(transformers, f"{case.prefix}Config")(
        **case.values, **case.head_values, **HEADS[head])
    theirs = shaken(getattr(transformers, f"{case.prefix}For{head}")(hf_config))
    theirs.save_pretrained(str(tmp_path))
    ours, report = load_model(tmp_path)
    assert type(ours).__name__ == f"{case.prefix}For{head}"
    assert report.complete, report
    ours.eval()
    for T in case.lengths:
        inputs = _inputs(case, T, seed=T)
        real = inputs["attention_mask"].bool()
        if head == "MultipleChoice":   # one example, its rows the choices
            inputs = {k: v[None] for k, v in inputs.items()}
        with torch.no_grad():
            got = _call(ours, inputs)
            ref = theirs(**inputs)
        if head == "QuestionAnswering":
            close_where(got["start_logits"], ref.start_logits, real)
            close_where(got["end_logits"], ref.end_logits, real)
        elif head == "TokenClassification":
            close_where(got["logits"], ref.logits, real)
        else:
            torch.testing.assert_close(got["logits"], ref.logits, **TINY_FP32)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_packed_row_keeps_its_sequences_apart(name):
    """Packed rows (sequence numbers in the mask, positions restarting at 0): each sequence's
    states are those it has alone."""
    case = CASES[name]
    model = _ours(case, "encoder")
    for lengths in case.packed:
        check_packed_row(model, VOCAB, case.pad, lengths)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_variable_length_path_computes_what_the_masked_one_does(name):
    """#105: `--attention varlen` (here its one-sequence-at-a-time reference, whose index
    arithmetic the GPU's flash kernel shares) gives the masked model's outputs at every real
    token, in padded batches (ModernBERT's local windows too, at 300 tokens) and packed rows.
    DeBERTa's relative attention cannot take it: one line. Tolerance: TINY_FP32 (the same
    products over the same tokens, summed in another order)."""
    from bertctl.errors import BertctlError

    case = CASES[name]
    ours = _ours(case, "masked_lm")
    policy = ours.encoder.attention_policy
    if case.architecture == "deberta-v2":
        with pytest.raises(BertctlError, match="--attention varlen: this architecture's "
                                               "attention adds a bias to every score"):
            policy.configure("varlen")
        return
    for T in case.lengths:
        inputs = _inputs(case, T)
        with torch.no_grad():
            policy.configure("fused")
            masked = _call(ours, inputs)["mlm_logits"]
            policy.configure("varlen")
            unpadded = _call(ours, inputs)["mlm_logits"]
        close_where(unpadded, masked, inputs["attention_mask"].bool())
    encoder = _ours(case, "encoder")
    encoder.attention_policy.configure("varlen")
    check_packed_row(encoder, VOCAB, case.pad)


# ---------------------------------------------------------------------------------------------
# What one architecture has


def test_roberta_reads_any_segment_id_as_its_one_type_and_refuses_length():
    """RoBERTa has one token type; positions count from the padding id, so the longest input
    is two short of the table."""
    case = CASES["roberta"]
    model = _ours(case, "encoder")
    inputs = _inputs(case, 40)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    segments = (torch.arange(ids.size(1)) > 10).long().expand_as(ids)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, segments, mask)["last_hidden_state"],
                                   model(ids, None, mask)["last_hidden_state"])
    table = case.values["max_position_embeddings"]
    assert model.config.longest_input == table - 2
    with pytest.raises(ValueError, match="exceeds"):
        model(torch.full((1, table - 1), 5))


def test_roberta_config_without_room_past_the_padding_is_refused():
    from bertctl.errors import BertctlError
    from bertctl.model.roberta import RobertaConfig, XLMRobertaConfig

    with pytest.raises(BertctlError, match="leaves no position past the padding id"):
        RobertaConfig.from_hf_dict({**ROBERTA, "model_type": "roberta",
                                    "max_position_embeddings": 2})
    with pytest.raises(BertctlError, match="model_type is 'roberta', not 'xlm-roberta'"):
        XLMRobertaConfig.from_hf_dict({**ROBERTA, "model_type": "roberta"})


def test_distilbert_sinusoidal_table_is_transformers():
    from bertctl.model.distilbert.modeling import sinusoidal_table

    torch.manual_seed(0)
    theirs = transformers.DistilBertModel(transformers.DistilBertConfig(
        **CASES["distilbert-sinusoidal"].values))
    torch.testing.assert_close(sinusoidal_table(64, 64),
                               theirs.embeddings.position_embeddings.weight.detach(),
                               atol=1e-6, rtol=0)   # float64 -> float32 rounding, both


def test_electra_discriminator_checkpoint_is_an_encoder(tmp_path):
    """ElectraForPreTraining (replaced-token detection, no bertctl role): its encoder loads
    whole; only the detection head is left out, and said."""
    case = CASES["electra-narrow"]
    torch.manual_seed(0)
    theirs = shaken(transformers.ElectraForPreTraining(transformers.ElectraConfig(
        **case.values)))
    theirs.save_pretrained(str(tmp_path))
    ours, report = load_model(tmp_path, role="sequence_classification", num_labels=2)
    assert not report.missing or all(k.startswith("classifier.") for k in report.missing)
    assert all(k.startswith("discriminator_predictions.") for k in report.unexpected)
    encoder, report = load_model(tmp_path, role="encoder")
    assert not report.missing, report
    inputs = _inputs(case, 40)
    with torch.no_grad():
        got = _call(encoder.eval(), inputs)["last_hidden_state"]
        ref = theirs.electra(**inputs).last_hidden_state
    close_where(got, ref, inputs["attention_mask"].bool())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("packed", [False, True])
def test_modernbert_rotary_positions_are_their_definition_bit_for_bit(dtype, packed):
    """`rotate` against RoFormer's definition as transformers writes it, x * cos +
    rotate_half(x) * sin with rotate_half(x) = (-x2, x1), in fp32: the same products and sums,
    so the output and the input's gradient are equal bit for bit (no tolerance), far positions
    and bf16 inputs included. The input is a view of a fused projection, as the attention
    passes it; packed rows have positions of their own."""
    from bertctl.model.modernbert.modeling import Rotary, rotate

    gen = torch.Generator().manual_seed(0)
    T = 135
    positions = (torch.randint(0, 8192, (2, T), generator=gen) if packed
                 else torch.arange(0, 8192, 61))
    cos, sin = Rotary(64, 160_000.0)(positions)
    qkv = torch.randn(2, T, 3, 4, 64, generator=gen).to(dtype)
    grad = torch.randn(2, 4, T, 64, generator=gen).to(dtype)

    def definition(t):
        t32 = t.float()
        turned = torch.cat((-t32[..., 32:], t32[..., :32]), dim=-1)
        return (t32 * cos + turned * sin).to(dtype)

    ours, theirs = qkv.clone().requires_grad_(), qkv.clone().requires_grad_()
    out = rotate(ours.permute(2, 0, 3, 1, 4)[0], cos, sin)
    want = definition(theirs.permute(2, 0, 3, 1, 4)[0])
    out.backward(grad)
    want.backward(grad)
    assert torch.equal(out, want) and torch.equal(ours.grad, theirs.grad)
    with torch.no_grad():   # evaluation and export take the same arithmetic without autograd
        assert torch.equal(rotate(qkv.permute(2, 0, 3, 1, 4)[0], cos, sin), want)
