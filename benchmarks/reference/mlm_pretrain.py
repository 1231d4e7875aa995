"""transformers' masked-LM pretraining on a time budget, as a run_mlm.py user writes it: the
peer the budget study (studies/budget/bench_budget.py) holds bertctl's pretraining against.
AutoModelForMaskedLM from a config, DataCollatorForLanguageModeling's masks, AdamW without
decay on biases and LayerNorm, gradients clipped at 1.0, fp32, and a learning rate laid over
the budget's time: warm-up over its first `warmup` share, then linear decay to zero."""

from __future__ import annotations

import statistics
import time
from pathlib import Path


def pretrain(tokenizer_json: Path, corpus: Path, out: Path, budget: float, threads: int,
             seed: int, config_of, *, seq: int, warmup: float, batch_size: int, lr: float,
             mlm_probability: float, layout: str = "lines") -> dict:
    """Pretrain transformers' masked LM of `config_of(tokenizer)` on `corpus` (a folder of
    text files) for `budget` seconds; its figures. `layout`: "lines" as run_mlm.py (every line
    tokenized with [CLS] ... [SEP], concatenated, cut into `seq`-token blocks); "blocks": the
    lines' tokens without specials cut every `seq` - 2, each block in one [CLS] ... [SEP]
    (bertctl's --packing concatenated), to tell layout from tool."""
    import torch
    from transformers import (AutoModelForMaskedLM, DataCollatorForLanguageModeling,
                              PreTrainedTokenizerFast)

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    t_prep = time.perf_counter()
    tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_json), unk_token="[UNK]",
                                  pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                                  mask_token="[MASK]")
    lines_layout = layout == "lines"
    ids: list[int] = []
    for f in sorted(corpus.iterdir()):
        lines = [ln for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
        for enc in tok(lines, add_special_tokens=lines_layout)["input_ids"]:
            ids.extend(enc)
    width = seq if lines_layout else seq - 2
    n = len(ids) // width
    blocks = torch.tensor(ids[:n * width]).view(n, width)
    if not lines_layout:
        blocks = torch.cat([torch.full((n, 1), tok.cls_token_id), blocks,
                            torch.full((n, 1), tok.sep_token_id)], dim=1)
    prep_s = time.perf_counter() - t_prep
    config = config_of(tok)
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=mlm_probability)
    peak = lr
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))

    def batch_at(step):
        idx = order[(step * batch_size + torch.arange(batch_size)) % n]
        return collator([{"input_ids": b} for b in blocks[idx]])

    def one_step(model, opt, b):
        loss = model(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    # The schedule is laid over time, as bertctl's --time-budget lays it (warm-up over the first
    # 6% of the budget, then linear decay to zero at its end), so that both spend the whole
    # budget. A step count planned from the first steps' speed (what a Trainer user sets) left
    # 21-24% of a 40-minute budget unused here: those steps ran 20-30% faster than the probe.
    def lr_factor(share: float) -> float:
        if share < warmup:
            return max(share, 1e-3 * warmup) / warmup
        return max(0.0, (1 - share) / (1 - warmup))

    torch.manual_seed(seed)
    model = AutoModelForMaskedLM.from_config(config).train()
    # AdamW without decay on biases and LayerNorm, as run_mlm.py's Trainer sets it up.
    opt = torch.optim.AdamW(
        [{"params": [p for p in model.parameters() if p.ndim > 1], "weight_decay": 0.01},
         {"params": [p for p in model.parameters() if p.ndim <= 1], "weight_decay": 0.0}],
        lr=peak)
    start, step, losses = time.perf_counter(), 0, []
    while (elapsed := time.perf_counter() - start) < budget:
        for group in opt.param_groups:
            group["lr"] = peak * lr_factor(elapsed / budget)
        losses.append(one_step(model, opt, batch_at(step)))
        step += 1
    elapsed = time.perf_counter() - start
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"steps": step, "schedule": "time", "tokens": step * batch_size * seq,
            "elapsed_s": round(elapsed, 1), "prep_s": round(prep_s, 1),
            "final_train_loss": round(statistics.mean(losses[-50:]), 4), "precision": "fp32",
            "layout": layout, "batch_size": batch_size, "lr": peak,
            "mask_rate": mlm_probability, "architecture": config.model_type}
