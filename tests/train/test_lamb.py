"""LAMB (bertctl.train.optim.Lamb) against a plainly written reference of its definition
(You et al. 2019, Algorithm 2, with Adam's bias correction, as apex's FusedLAMB runs it for
NVIDIA's BERT recipe), on random problems; and through the training loop with resume."""

import numpy as np
import pytest
import torch
from torch import nn

from bertctl.errors import BertctlError
from bertctl.train.optim import Lamb, make_optimizer, param_groups


def reference_lamb(weights, grads_per_step, lr, betas, eps, decayed):
    """Float64 numpy: for each tensor, Adam moments with bias correction, update
    u = m^/(sqrt(v^)+eps) + wd*w, trust ratio ||w||/||u|| where weight decay applies."""
    b1, b2 = betas
    w = [x.astype(np.float64).copy() for x in weights]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    for t, grads in enumerate(grads_per_step, 1):
        for i, g in enumerate(grads):
            g = g.astype(np.float64)
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            u = (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps)
            wd = decayed[i]
            ratio = 1.0
            if wd:
                u = u + wd * w[i]
                wn, un = np.linalg.norm(w[i]), np.linalg.norm(u)
                ratio = wn / un if wn > 0 and un > 0 else 1.0
            w[i] = w[i] - lr * ratio * u
    return w


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lamb_matches_the_reference_on_random_problems(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(7, 5), nn.LayerNorm(5), nn.Linear(5, 3))
    with torch.no_grad():
        model[2].bias.zero_()      # a zero tensor: its trust ratio is 1 by definition
    wd, lr, betas, eps = 0.01, 0.02, (0.9, 0.999), 1e-6
    groups = param_groups(model, wd)
    decay_ids = {id(p) for p in groups[0]["params"]}
    params = list(model.parameters())
    start = [p.detach().numpy().copy() for p in params]
    rng = np.random.default_rng(seed)
    steps = [[rng.normal(scale=10 ** rng.uniform(-3, 1), size=p.shape).astype(np.float32)
              for p in params] for _ in range(6)]
    opt = Lamb(groups, lr=lr, betas=betas, eps=eps)
    for grads in steps:
        for p, g in zip(params, grads):
            p.grad = torch.from_numpy(g.copy())
        opt.step()
    want = reference_lamb(start, steps, lr, betas, eps,
                          [wd if id(p) in decay_ids else 0.0 for p in params])
    for p, w in zip(params, want):
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-5, atol=1e-6)


def test_make_optimizer_names_it_and_its_state_round_trips():
    model = nn.Linear(4, 2)
    opt = make_optimizer(model, 1e-3, name="lamb")
    assert isinstance(opt, Lamb)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    again = make_optimizer(model, 1e-3, name="lamb")
    again.load_state_dict(opt.state_dict())
    assert float(again.state[model.weight]["step"]) == 1.0
    with pytest.raises(BertctlError, match="unknown optimizer .sgd. .known: adamw, lamb"):
        make_optimizer(model, 1e-3, name="sgd")
