"""An optimizer added from outside bertctl (#54): a function over the loop's parameter groups
and one `register` call. It becomes a choice of `--optimizer` in pretrain and finetune (help,
`--config`, the recorded settings) and trains, with no stage, CLI or loop change."""

import json

import pytest
import torch

from bertctl.train import optimizers

from helpers import EXAMPLES, with_plugin

BUILT = []


def momentum_sgd(groups, lr, betas, eps):
    """SGD with momentum betas[0]; each group keeps its weight decay."""
    BUILT.append([len(g["params"]) for g in groups])
    return torch.optim.SGD(groups, lr=lr, momentum=betas[0])


@pytest.fixture
def sgd_cli():
    BUILT.clear()
    yield from with_plugin(optimizers.OPTIMIZERS,
                           optimizers.Optimizer("sgd", "SGD with momentum (a test's)",
                                                momentum_sgd))


def test_a_registered_optimizer_is_a_choice_and_trains(sgd_cli, tiny_pretrained, tmp_path):
    for command in ("pretrain", "finetune"):
        code, out, _ = sgd_cli(command, "--help")
        assert code == 0 and "sgd, SGD with momentum (a test's)" in " ".join(out.split()), command
    out = tmp_path / "tuned"
    code, _, err = sgd_cli("finetune", tiny_pretrained, EXAMPLES / "glue" / "SST-2", "--task",
                           "glue/sst2", "--steps", "2", "--batch-size", "8", "--optimizer",
                           "sgd", "--out", out)
    assert code == 0, err
    # built once, over the decayed weights and the biases and norms
    assert len(BUILT) == 1 and len(BUILT[0]) == 2 and all(BUILT[0])
    assert json.loads((out / "artifact.json").read_text())["config"]["optimizer"] == "sgd"
    code, _, err = sgd_cli("finetune", tiny_pretrained, EXAMPLES / "glue" / "SST-2", "--task",
                           "glue/sst2", "--steps", "2", "--optimizer", "adagrad", "--out",
                           tmp_path / "no")
    assert code == 2 and "adagrad" in err and "sgd" in err
