"""--ema (#106): the weight average against its definition, a_{t+1} = a_t + r_t (w_{t+1} - a_t)
with r_t = 1 - min(decay, (1 + t) / (10 + t)), computed by hand from the weights a plain run
passes through; what is evaluated, selected and returned is the average; a resumed run
continues the same average."""

import pytest
import torch
from safetensors.torch import load_file

from bertctl.train import checkpoint as ckpt
from bertctl.train.averaging import WeightAverage
from bertctl.train.loop import train
from bertctl.train.settings import LoopSettings
from test_train_loop import one_thread, RepeatedTokens, tiny_pretraining  # noqa: F401 (a fixture)

DECAY = 0.8

RUN = dict(steps=6, batch_size=8, lr=1e-2, warmup=0, seed=3)


def by_hand(trajectory: list[dict], decay: float) -> list[dict]:
    """The average after each update, in float64, from the weights after each update."""
    average = {k: v.double() for k, v in trajectory[0].items()}
    out = []
    for t, weights in enumerate(trajectory[1:]):
        rate = 1 - min(decay, (1 + t) / (10 + t))
        average = {k: a + rate * (weights[k].double() - a) for k, a in average.items()}
        out.append(average)
    return out


def test_the_average_is_its_definition():
    layer = torch.nn.Linear(3, 2)
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    layer.register_parameter("frozen", frozen)
    average = WeightAverage(layer, DECAY)
    trajectory = [{k: v.detach().clone() for k, v in layer.named_parameters()}]
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        with torch.no_grad():
            for p in (layer.weight, layer.bias):
                p.add_(torch.randn(p.shape, generator=gen))
        average.update()
        trajectory.append({k: v.detach().clone() for k, v in layer.named_parameters()})
    want = by_hand(trajectory, DECAY)[-1]
    trained = layer.weight.detach().clone()
    with average.applied():
        for name in ("weight", "bias"):   # fp32 lerp against float64: a few ulps
            torch.testing.assert_close(getattr(layer, name).double(), want[name],
                                       rtol=1e-6, atol=1e-6)
    assert torch.equal(layer.weight, trained)   # the trained weights are back
    assert len(average.average) == 2            # a frozen weight is not averaged


@pytest.fixture(scope="module")
def trajectory(tmp_path_factory):
    """The weights after every step of a plain run (a checkpoint each step)."""
    work = tmp_path_factory.mktemp("plain")
    model = tiny_pretraining(seed=1)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    train(model, RepeatedTokens(), LoopSettings(**RUN, checkpoint_every=1, keep_last=None), work)
    return [start] + [load_file(str(ckpt.step_dir(work, s) / ckpt.WEIGHTS))
                      for s in range(1, RUN["steps"] + 1)]


def test_the_run_evaluates_and_returns_the_average(trajectory, tmp_path):
    name = "bert.encoder.layer.0.attention.self.query.weight"
    seen = []

    def evaluate(model):
        seen.append(model.state_dict()[name].detach().double().clone())
        return {"score": float(len(seen))}

    data = RepeatedTokens()
    result = train(tiny_pretraining(seed=1), data, LoopSettings(**RUN, ema=DECAY, eval_every=2),
                   tmp_path, evaluate=evaluate)
    want = by_hand(trajectory, DECAY)
    # Tolerance: float32 updates against the float64 recurrence over six steps.
    for step, got in zip((2, 4, 6), seen, strict=True):
        torch.testing.assert_close(got, want[step - 1][name], rtol=1e-5, atol=1e-6)
    final = result.model.state_dict()
    torch.testing.assert_close(final[name].double(), want[-1][name], rtol=1e-5, atol=1e-6)
    # the weights trained on are not the average (the model's own after step 6)
    assert not torch.allclose(trajectory[-1][name].double(), want[-1][name])


def test_a_resumed_run_continues_the_same_average(tmp_path):
    data = RepeatedTokens()
    full = train(tiny_pretraining(seed=1), data, LoopSettings(**RUN, ema=DECAY), tmp_path / "a")
    work = tmp_path / "b"
    part = train(tiny_pretraining(seed=1), data,
                 LoopSettings(**RUN, ema=DECAY, checkpoint_every=2, stop_after=3), work)
    assert part.stopped_early
    state = torch.load(ckpt.step_dir(work, 3) / "state.pt", weights_only=True)
    assert state["average"]["updates"] == 3
    resumed = train(tiny_pretraining(seed=9), data,
                    LoopSettings(**RUN, ema=DECAY, checkpoint_every=2), work)
    assert resumed.resumed_from == 3
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a run with --ema cannot resume a checkpoint without its average
    from bertctl.errors import BertctlError

    plain = tmp_path / "c"
    train(tiny_pretraining(seed=1), data, LoopSettings(**RUN, checkpoint_every=2,
                                                       stop_after=2), plain)
    with pytest.raises(BertctlError, match="no weight average"):
        train(tiny_pretraining(seed=1), data, LoopSettings(**RUN, ema=DECAY), plain)
