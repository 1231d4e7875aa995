"""model.attention: the written-out attention is the fused kernel's function (outputs and
gradients, under every mask the encoders build), and a model's AttentionPolicy takes it only
where its timing says so."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertctl.model import attention
from bertctl.model.attention import AttentionPolicy, time_both, written_attention
from bertctl.model.modernbert.modeling import local_mask
from bertctl.model.shared import attention_bias

from tolerance import fp32_sum  # noqa: E402

B, HEADS, T, D = 3, 2, 24, 16


def inputs(dtype=torch.float32, length: int = T, seed: int = 0, batch: int = B):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, HEADS, length, D, generator=g).to(dtype).requires_grad_()
            for _ in range(3)]


def masks(length: int = T) -> dict:
    lengths = torch.tensor([length, length - 5, 7])
    padding = (torch.arange(length)[None] < lengths[:, None]).long()
    packed = padding.clone()
    packed[0, length // 2:] = 2                 # row 0 holds two sequences
    return {"none": None,
            "padding": attention_bias(padding),
            "packed": attention_bias(packed, packed=True),
            "local band": local_mask(packed, length, 4, torch.device("cpu"))}


def outputs_and_grads(fn, q, k, v, mask):
    out = fn(q, k, v, mask)
    out.float().pow(2).sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    return out.detach().float(), grads


def fused(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("kind", ["none", "padding", "packed", "local band"])
def test_written_attention_is_the_fused_kernels_function_in_fp32(kind):
    q, k, v = inputs()
    mask = masks()[kind]
    ours, our_grads = outputs_and_grads(written_attention, q, k, v, mask)
    ref, ref_grads = outputs_and_grads(fused, q, k, v, mask)
    # fp32 on both sides: dot products over D = 16 (scores) and up to T = 24 keys (the sum over
    # values), inputs of size about 1, outputs and gradients of a few units; the backward chains
    # three such sums: a bound of fp32_sum(D + T, 10) per element covers it.
    tol = fp32_sum(D + T, 10.0)
    torch.testing.assert_close(ours, ref, atol=tol, rtol=0)
    for a, b in zip(our_grads, ref_grads):
        torch.testing.assert_close(a, b, atol=tol, rtol=0)


@pytest.mark.parametrize("kind", ["none", "padding", "packed"])
def test_an_additive_bias_is_the_same_function_written_out_and_fused_in_fp32(kind):
    """DeBERTa's relative terms: softmax(q k^T * scale + bias where allowed) v both ways, the
    bias's gradient too."""
    q, k, v = inputs()
    g = torch.Generator().manual_seed(5)
    bias = torch.randn(B, HEADS, T, T, generator=g).requires_grad_()
    mask = masks()[kind]

    def grads_of(fn):
        out = fn(q, k, v, mask, 0.0, bias, 0.125)
        out.pow(2).sum().backward()
        grads = [t.grad.clone() for t in (q, k, v, bias)]
        for t in (q, k, v, bias):
            t.grad = None
        return out.detach(), grads

    ours, our_grads = grads_of(written_attention)
    ref, ref_grads = grads_of(attention.fused_attention)
    tol = fp32_sum(D + T, 10.0)   # the reason above: the same sums, the bias one term more
    torch.testing.assert_close(ours, ref, atol=tol, rtol=0)
    for a, b in zip(our_grads, ref_grads):
        torch.testing.assert_close(a, b, atol=tol, rtol=0)


@pytest.mark.parametrize("kind", ["padding", "packed"])
def test_written_attention_in_bf16_is_as_close_to_fp64_as_bf16_allows(kind):
    q, k, v = inputs(torch.bfloat16)
    mask = masks()[kind]
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref, ref_grads = outputs_and_grads(fused, *exact, mask)
    ours, our_grads = outputs_and_grads(written_attention, q, k, v, mask)
    # bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.002): the scores (about 1 to
    # 4 in size here) are rounded once, the probabilities and the output once more, so the output
    # (a mean of values of size about 1) is within a few 0.01; gradients chain two more
    # roundings on values up to about 10: 0.1.
    torch.testing.assert_close(ours.double(), ref.double(), atol=0.05, rtol=0)
    for a, b in zip(our_grads, ref_grads):
        torch.testing.assert_close(a.double(), b.double(), atol=0.1, rtol=0.02)


def test_a_row_with_nothing_to_attend_gives_zeros_in_both_forms_and_finite_gradients():
    q, k, v = inputs()
    mask = torch.ones(B, 1, T, T, dtype=torch.bool)
    mask[1, :, 3, :] = False
    ours, our_grads = outputs_and_grads(written_attention, q, k, v, mask)
    ref, ref_grads = outputs_and_grads(fused, q, k, v, mask)
    assert (ours[1, :, 3] == 0).all() and (ref[1, :, 3] == 0).all()
    assert all(g.isfinite().all() for g in our_grads)
    tol = fp32_sum(D + T, 10.0)   # as in the fp32 test above
    for a, b in zip(our_grads, ref_grads):
        torch.testing.assert_close(a, b, atol=tol, rtol=0)


@pytest.mark.parametrize("autocast", [False, True])
def test_a_padding_mask_with_an_empty_sequence_gives_zeros_and_finite_gradients(autocast):
    """The padding mask's path (added inside the product): a sequence with no tokens, fp32
    inputs laid out as the encoder's (a transposed view), and under bf16 autocast, where the
    masked value must be bf16's lowest (fp32's would overflow to -inf, and the row to NaN)."""
    g = torch.Generator().manual_seed(1)
    q, k, v = [torch.randn(B, T, HEADS, D, generator=g).transpose(1, 2).requires_grad_()
               for _ in range(3)]
    padding = (torch.arange(T)[None] < torch.tensor([T, 9, 0])[:, None]).long()
    mask = attention_bias(padding)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        ours, our_grads = outputs_and_grads(written_attention, q, k, v, mask)
    assert (ours[2] == 0).all() and ours.isfinite().all()
    assert all(t.isfinite().all() for t in our_grads)
    if not autocast:   # the fused kernel's function, as in the fp32 test above
        ref, ref_grads = outputs_and_grads(fused, q, k, v, mask)
        tol = fp32_sum(D + T, 10.0)
        torch.testing.assert_close(ours, ref, atol=tol, rtol=0)
        for a, b in zip(our_grads, ref_grads):
            torch.testing.assert_close(a, b, atol=tol, rtol=0)


@pytest.fixture
def timings(monkeypatch):
    """A fresh policy's `attend` and a fake clock: set `clock[:] = [fused_s, written_s]`;
    `calls` counts timings and written-form calls."""
    clock = [1.0, 1.0]
    calls = {"timed": 0, "written": 0}

    def fake_time_both(q, k, v, mask):
        calls["timed"] += 1
        return tuple(clock)

    def counted(*args):
        calls["written"] += 1
        return written_attention(*args)

    monkeypatch.setattr(attention, "time_both", fake_time_both)
    monkeypatch.setattr(attention, "written_attention", counted)
    return clock, calls, AttentionPolicy().attend


def test_attend_takes_the_written_form_only_where_its_timing_clearly_wins(timings):
    clock, calls, attend = timings
    clock[:] = [1.0, 0.5]
    for _ in range(3):
        attend(*inputs(torch.bfloat16), masks()["padding"])
    assert calls == {"timed": 1, "written": 3}         # timed once for the shape, then kept
    q, k, v = inputs(torch.bfloat16, length=T + 64)    # another length bucket: timed again
    clock[:] = [1.0, 0.9]                              # faster, but not clearly
    attend(q, k, v, None)
    assert calls == {"timed": 2, "written": 3}
    attend(*inputs(torch.bfloat16, length=T + 3), masks(T + 3)["padding"])
    attend(*inputs(torch.bfloat16, batch=2), masks()["padding"][:2])
    assert calls["timed"] == 2      # within 64 positions, or half the batch: the same choice
    attend(*inputs(torch.bfloat16, batch=4 * B), masks()["padding"].repeat(4, 1, 1, 1))
    assert calls["timed"] == 3


def test_attend_does_not_time_where_the_fused_kernel_always_won(timings):
    clock, calls, attend = timings
    clock[:] = [1.0, 0.1]
    attend(*inputs(torch.float32), None)               # fp32
    with torch.no_grad():                              # evaluation
        attend(*inputs(torch.bfloat16), None)
    long = attention.WRITTEN_MAX_LENGTH + 1
    attend(*inputs(torch.bfloat16, length=long), None)
    assert calls == {"timed": 0, "written": 0}


def test_attention_dropout_on_a_cpu_takes_the_written_form(timings):
    _, calls, attend = timings
    q, k, v = inputs()
    torch.manual_seed(0)
    out = attend(q, k, v, None, dropout_p=0.5)
    assert calls == {"timed": 0, "written": 1}
    assert not torch.allclose(out, fused(q, k, v, None))


def test_time_both_times_copies_and_leaves_the_inputs_alone():
    q, k, v = inputs(torch.bfloat16)
    fused_s, written_s = time_both(q, k, v, masks()["packed"], repeats=1)
    assert fused_s > 0 and written_s > 0
    assert all(t.grad is None for t in (q, k, v))


def test_a_timing_inside_a_recomputed_layer_leaves_its_gradients_alone(monkeypatch):
    """The first bf16 training step of a shape times both forms inside the layer's forward,
    which gradient checkpointing records and recomputes: the timing's own backward must not
    be taken for the layer's (the real timing runs; its verdict is made the written form's)."""
    from bertctl.model import build
    from bertctl.model.modernbert import ModernBertConfig

    real = attention.time_both
    monkeypatch.setattr(attention, "time_both", lambda *a: (real(*a, repeats=1), (1.0, 0.1))[1])
    config = ModernBertConfig(vocab_size=211, hidden_size=64, intermediate_size=96,
                              num_hidden_layers=2, num_attention_heads=4, local_attention=32,
                              max_position_embeddings=512, pad_token_id=0, cls_token_id=2,
                              sep_token_id=3)
    torch.manual_seed(0)
    model = build("masked_lm", config).train()
    ids = torch.randint(4, 211, (2, 40))
    labels = torch.where(torch.rand(2, 40) < 0.3, ids, -100)
    grads = []
    for recompute in (True, False):
        model.model.attention_policy.configure()     # no choice made yet
        model.model.gradient_checkpointing = recompute
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)["loss"]
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    # One model, one batch, the same kernels in the same order: recomputation repeats the
    # forward exactly, so the gradients are equal (bf16 rounding is deterministic on a CPU).
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=0, rtol=0, msg=name)


@pytest.fixture
def policy():
    return AttentionPolicy()


def test_fused_and_written_are_one_form_for_every_call(policy, monkeypatch):
    """--attention fused|written: no timing, one form whatever the precision, gradients or
    dropout (fused: PyTorch's kernel with its own dropout)."""
    calls = []
    monkeypatch.setattr(attention, "time_both", lambda *a: calls.append("timed") or (1, 0.1))
    real = attention.written_attention
    monkeypatch.setattr(attention, "written_attention",
                        lambda *a: calls.append("written") or real(*a))
    policy.configure("fused")
    policy.attend(*inputs(torch.bfloat16), masks()["padding"])
    policy.attend(*inputs(), None, dropout_p=0.5)
    assert calls == []
    policy.configure("written")
    q, k, v = inputs()
    with torch.no_grad():
        out = policy.attend(q, k, v, masks()["padding"])
    assert calls == ["written"]
    # the same function (the first test's bound: three fp32 sums of D + T terms of up to 10)
    tol = fp32_sum(D + T, 10.0)
    torch.testing.assert_close(out, fused(q, k, v, masks()["padding"]), atol=tol, rtol=0)
    with pytest.raises(ValueError):
        policy.configure("flash")


def test_auto_records_its_choices_and_a_recorded_choice_is_taken(policy, monkeypatch):
    """What auto chose is `choices()`, keyed by shape bucket; a run continued from it
    (`configure(recorded=...)`, `adopt`) takes the recorded form without timing again, and a
    distributed run (timing=False) times nothing: the fused kernel, recorded."""
    clock = [1.0, 0.5]
    timed = []
    monkeypatch.setattr(attention, "time_both", lambda *a: timed.append(1) or tuple(clock))
    policy.configure("auto")
    q, k, v = inputs(torch.bfloat16)
    policy.attend(q, k, v, masks()["padding"])
    key = attention.bucket(q, k, masks()["padding"])
    assert policy.choices() == {key: "written"} and len(timed) == 1
    assert key == "rows<4 heads2 len<=64 dim16 self bfloat16 mask-keys"
    recorded = policy.choices()
    clock[:] = [1.0, 2.0]                # this process would now choose the fused kernel ...
    policy.configure("auto", recorded=recorded)
    policy.attend(*inputs(torch.bfloat16, seed=1), masks()["padding"])
    assert len(timed) == 1 and policy.choices() == recorded   # ... but takes the record
    policy.configure("auto")
    policy.attend(*inputs(torch.bfloat16), masks()["padding"])      # fused now, timed afresh
    assert policy.choices() == {key: "fused"} and len(timed) == 2
    policy.adopt(recorded)
    assert policy.choices() == recorded
    policy.configure("auto", timing=False)
    policy.attend(*inputs(torch.bfloat16), masks()["padding"])
    assert policy.choices() == {key: "fused"} and len(timed) == 2


def test_a_run_records_its_kernels_and_a_resumed_run_keeps_them(monkeypatch, tmp_path):
    """Through the training loop, in bf16 (timed): the checkpoint and the result hold the
    choices; the run resumed from its checkpoint in a process whose timing would now go the
    other way trains on with the recorded form (and times nothing it has recorded)."""
    from test_train_loop import RepeatedTokens, tiny_pretraining

    from bertctl.train import checkpoint as ckpt
    from bertctl.train.encoders import attention_policies
    from bertctl.train.loop import train
    from bertctl.train.settings import LoopSettings

    clock = [1.0, 0.1]
    monkeypatch.setattr(attention, "time_both", lambda *a: tuple(clock))
    settings = dict(steps=4, batch_size=4, lr=1e-3, precision="bf16", checkpoint_every=2,
                    group_by_length=True)
    data = RepeatedTokens(32)
    model = tiny_pretraining(attention_probs_dropout_prob=0.0)
    part = train(model, data, LoopSettings(**settings, stop_after=2), tmp_path)
    written = dict(part.attention["chosen"])
    assert part.attention["mode"] == "auto" and set(written.values()) == {"written"}
    found = ckpt.find_resume_checkpoint(tmp_path, "latest")
    assert found.trainer["attention"] == written
    # The run's mode ended with it: the model computes as one loaded afresh.
    assert all(p.mode == "auto" and p.choices() == {} for p in attention_policies(model))
    clock[:] = [1.0, 2.0]
    done = train(tiny_pretraining(attention_probs_dropout_prob=0.0), data,
                 LoopSettings(**settings), tmp_path)
    assert done.resumed_from == 2
    assert {k: v for k, v in done.attention["chosen"].items() if k in written} == written
    fused = train(tiny_pretraining(attention_probs_dropout_prob=0.0), data,
                  LoopSettings(**settings, attention="fused"), tmp_path / "fused")
    assert fused.attention == {"mode": "fused", "chosen": {}}


def test_each_model_keeps_its_own_policy(monkeypatch):
    """No process state (#85): two models' policies are their own (a teacher's and its
    student's), shared by every layer of one model, and a mode set on one leaves the other."""
    from bertctl.model import build
    from bertctl.model.bert import BertConfig

    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=48)
    a, b = build("encoder", config).eval(), build("encoder", config).eval()
    assert a.attention_policy is not b.attention_policy
    assert {id(m.policy) for m in a.modules() if hasattr(m, "policy")} == {id(a.attention_policy)}
    a.attention_policy.configure("written")
    assert b.attention_policy.mode == "auto"
    calls = []
    real = attention.written_attention
    monkeypatch.setattr(attention, "written_attention", lambda *x: calls.append(1) or real(*x))
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        b(ids)
        assert calls == []            # b: auto, no gradients: the fused kernel
        a(ids)
        assert len(calls) == 2        # a: written in both layers
