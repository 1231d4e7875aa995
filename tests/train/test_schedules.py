"""--schedule linear|cosine|wsd|constant against their definitions: after the linear warm-up,
linear decay to zero, half a cosine to zero (transformers' get_cosine_schedule_with_warmup,
num_cycles 0.5, at the same progress), the peak until the decay's share then linear to zero
(warm-up-stable-decay), the peak to the end; over steps and over a time budget; each recorded
in the id only when set; a decay that does not fit refused in one line."""

import math
import re

import pytest

from bertctl.errors import BertctlError
from bertctl.train.optim import decay_steps, lr_at, lr_at_share, set_lr


PEAK, WARM, TOTAL = 2e-4, 10, 100


def test_linear_is_the_schedule_it_was():
    assert [lr_at(s, PEAK, WARM, TOTAL) for s in range(TOTAL)] == \
        [PEAK * (s + 1) / WARM if s < WARM else PEAK * (TOTAL - s) / (TOTAL - WARM)
         for s in range(TOTAL)]


def test_cosine_is_half_a_cosine_after_the_warmup():
    for s in range(WARM, TOTAL):
        progress = (s - WARM) / (TOTAL - WARM)
        assert lr_at(s, PEAK, WARM, TOTAL, "cosine") == pytest.approx(
            PEAK * 0.5 * (1 + math.cos(math.pi * progress)), rel=1e-12)
    assert lr_at(WARM, PEAK, WARM, TOTAL, "cosine") == PEAK
    assert lr_at(TOTAL, PEAK, WARM, TOTAL, "cosine") == 0.0


def test_cosine_agrees_with_transformers_past_the_warmup():
    transformers = pytest.importorskip("transformers")
    import torch

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    sched = transformers.get_cosine_schedule_with_warmup(opt, WARM, TOTAL)
    theirs = []
    for _ in range(TOTAL):
        theirs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    # the same curve; transformers' warm-up starts at 0, ours at its first step's share
    assert [lr_at(s, PEAK, WARM, TOTAL, "cosine") for s in range(WARM, TOTAL)] == \
        pytest.approx(theirs[WARM:], rel=1e-9)


def test_wsd_holds_the_peak_then_decays_linearly():
    decay = decay_steps(0.2, TOTAL, WARM)
    assert decay == 20
    rates = [lr_at(s, PEAK, WARM, TOTAL, "wsd", decay) for s in range(TOTAL)]
    assert all(r == PEAK for r in rates[WARM:TOTAL - decay])
    assert rates[TOTAL - decay:] == pytest.approx(
        [PEAK * (TOTAL - s) / decay for s in range(TOTAL - decay, TOTAL)], rel=1e-12)
    assert decay_steps(None, TOTAL, WARM) == 10 and decay_steps(30, TOTAL, WARM) == 30


def test_constant_stays_at_the_peak():
    assert [lr_at(s, PEAK, WARM, TOTAL, "constant") for s in range(WARM, TOTAL + 1)] == \
        [PEAK] * (TOTAL - WARM + 1)


@pytest.mark.parametrize("schedule", ["linear", "cosine", "wsd", "constant"])
def test_a_time_budget_lays_each_schedule_over_its_share(schedule):
    """lr_at_share at share s equals lr_at at the same progress of a long run."""
    total = 10_000
    for share in (0.05, 0.1, 0.3, 0.5, 0.85, 0.95, 0.999):
        step = round(share * total)
        assert lr_at_share(share, PEAK, 0.1, schedule, 0.2) == pytest.approx(
            lr_at(step, PEAK, 1000, total, schedule, 2000), rel=2e-3, abs=PEAK * 2e-3)


def test_a_decay_that_does_not_fit_is_refused():
    with pytest.raises(BertctlError, match="decay 95: 95 decay steps after 10 of warm-up"):
        decay_steps(95, TOTAL, WARM)


@pytest.mark.parametrize("args, parts", [
    (["--decay", "0.2"], ["decay is the length of --schedule wsd's decay", "linear"]),
    (["--schedule", "wsd", "--decay", "0.95"], ["warmup 0.1 and decay 0.95"]),
    (["--schedule", "wsd", "--decay", "50", "--time-budget", "1m"],
     ["with time_budget, decay is a fraction"]),
    (["--schedule", "wsd", "--decay", "500"], ["decay 500 steps and the warm-up are longer"]),
    # #103: 1.0 was read as a one-step decay, 2.5 as a fractional step count
    (["--schedule", "wsd", "--decay", "1.0"], ["decay 1 is neither a fraction", "whole number"]),
    (["--schedule", "wsd", "--decay", "2.5"], ["decay 2.5 is neither a fraction"]),
])
def test_schedule_options_that_do_not_apply_are_one_line(args, parts, cli, tmp_path,
                                                         tiny_pretrained):
    from helpers import FIXTURES, one_line_error

    base = ["finetune", tiny_pretrained, FIXTURES / "glue" / "SST-2" / "train.tsv", "--task",
            "glue/sst2", "--batch-size", "8", "--max-seq-length", "32", "--device", "cpu"]
    steps = [] if "--time-budget" in args else ["--steps", "20"]
    r = cli(*base, *args, *steps, "--out", tmp_path / "m")
    one_line_error(r, *parts)
    assert not (tmp_path / "m").exists()


def test_a_wsd_run_is_its_own_artifact_and_ends_decayed(cli, tmp_path, tiny_pretrained):
    import json

    from helpers import FIXTURES

    base = ["finetune", tiny_pretrained, FIXTURES / "glue" / "SST-2" / "train.tsv", "--task",
            "glue/sst2", "--batch-size", "8", "--max-seq-length", "32", "--device", "cpu",
            "--steps", "10", "--log-every", "1", "--json"]
    linear = cli(*base, "--out", tmp_path / "linear")
    wsd = cli(*base, "--schedule", "wsd", "--decay", "0.3", "--out", tmp_path / "wsd")
    assert linear.exit_code == 0 and wsd.exit_code == 0, wsd.stderr
    assert linear.json()["id"] != wsd.json()["id"]
    assert wsd.json()["config"]["schedule"] == "wsd" and wsd.json()["config"]["decay"] == 0.3
    rates = [json.loads(line)["lr"] for line in
             (tmp_path / "wsd" / "metrics.jsonl").read_text().splitlines()
             if json.loads(line).get("split") == "train"]
    peak = max(rates)
    assert rates.count(peak) >= 5 and rates[-1] < peak / 2


def test_a_decay_branched_from_a_stable_phase_is_the_whole_run(cli, tmp_path, pretrain_data):
    """ModernBERT's way: the warm-up and stable phase is one artifact (it keeps its optimizer
    state, its schedule unfinished), a decay continues it as another. Without dropout (masks
    are static here) the branch's weights are the whole run's bit for bit: the schedule, the
    step count, the data order and the optimizer's moments all go on. Two decays of different
    lengths branch from one stable phase; a branch scheduled otherwise is one line."""
    import json

    from safetensors.torch import load_file

    from helpers import TINY_MODEL, one_line_error

    run = ["--batch-size", "8", "--log-every", "1", "--device", "cpu", "--dropout", "0",
           "--lr", "1e-3", "--schedule", "wsd", "--json"]

    def pretrain(out, *args):
        r = cli("pretrain", pretrain_data, "--out", tmp_path / out, *run, *args)
        assert r.exit_code == 0, r.stderr
        return r.json()

    whole = pretrain("whole", *TINY_MODEL, "--steps", "10", "--decay", "4")
    stable = pretrain("stable", *TINY_MODEL, "--steps", "6", "--total-steps", "10", "--decay", "4")
    assert "optimizer.pt" in stable["files"] and "optimizer.pt" not in whole["files"]
    decay = pretrain("decay", "--init-from", tmp_path / "stable", "--continue-schedule",
                     "--steps", "4", "--decay", "4")
    assert decay["stats"]["optimizer_from"] == "init" and decay["stats"]["step"] == 10
    ours, theirs = (load_file(tmp_path / d / "model.safetensors") for d in ("decay", "whole"))
    assert all(torch_equal(ours[k], theirs[k]) for k in theirs)
    rates = [json.loads(x)["lr"] for x in (tmp_path / "decay" / "metrics.jsonl").open()
             if '"train"' in x]
    assert rates == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4], rel=1e-12)

    short = pretrain("short", "--init-from", tmp_path / "stable", "--continue-schedule",
                     "--steps", "2", "--total-steps", "8", "--decay", "2")
    assert short["stats"]["step"] == 8 and short["id"] != decay["id"]
    r = cli("pretrain", pretrain_data, "--out", tmp_path / "lin", "--init-from",
            tmp_path / "stable", "--continue-schedule", "--steps", "4", "--device", "cpu")
    one_line_error(r, "--continue-schedule: the run was scheduled wsd, this one linear",
                   "give --schedule wsd")
    assert not (tmp_path / "lin").exists()


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)


LAYER_NAME = re.compile(r"\.layers?\.(\d+)\.")


@pytest.mark.parametrize("arch", ["bert", "roberta", "electra", "distilbert", "modernbert"])
def test_layer_wise_decay_gives_each_layer_its_rate(arch):
    """The definition: the head (and a pooler or final norm above the last layer) at the
    rate, layer i of L at rate * decay ** (L - i), the embeddings at rate * decay ** (L + 1);
    read here from the parameters' names, as transformers' checkpoints number the layers."""
    from bertctl.model import ARCHITECTURES, build
    from bertctl.train.optim import make_optimizer

    config = ARCHITECTURES[arch].config_class.from_preset("tiny", vocab_size=120)
    model = build("sequence_classification", config, num_labels=3)
    layers = 1 + max(int(LAYER_NAME.search(n)[1]) for n, _ in model.named_parameters()
                     if LAYER_NAME.search(n))
    optimizer = make_optimizer(model, 1.0, layer_decay=0.5)
    rate = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        found = LAYER_NAME.search(name)
        if found:
            want = 0.5 ** (layers - int(found[1]))
        elif "embeddings" in name:
            want = 0.5 ** (layers + 1)
        else:
            want = 1.0
        assert rate[id(p)] == pytest.approx(want), name
    # and the schedule's rate is scaled alike at every step
    set_lr(optimizer, 0.1)
    assert sorted({round(g["lr"] / 0.1, 9) for g in optimizer.param_groups}) == sorted(
        {round(0.5 ** k, 9) for k in range(layers + 2)})


def test_without_layer_decay_the_groups_are_as_before():
    """Two groups (decayed, not), one rate: checkpoints written before resume into them."""
    from bertctl.model import BertConfig, build
    from bertctl.train.optim import make_optimizer

    model = build("sequence_classification", BertConfig.from_preset("tiny", vocab_size=120),
                  num_labels=2)
    optimizer = make_optimizer(model, 0.3)
    assert len(optimizer.param_groups) == 2
    assert all(g["lr"] == 0.3 and "lr_scale" not in g for g in optimizer.param_groups)
