"""sentence-transformers' own recipe on the search study's data and settings (its
mine_hard_negatives with the same guards as bertctl mine, its trainer with
MultipleNegativesRankingLoss or MarginMSELoss, a CrossEncoder trained on mined rows and its
scores), the peer studies/search/bench_search.py runs in a fresh process, one step a run:

    python benchmarks/reference/st_search_recipe.py WHAT MODEL PAIRS OUT SEED PRECISION
        THREADS CORPUS LR RERANK_LR NEGATIVES RERANK_EPOCHS

WHAT: train (the default), mine, ce-train or ce-score. Prints one JSON line of figures."""

import json
import sys
import time

USAGE = __doc__.split("\n\n")[1]


def main(argv: list[str]) -> None:
    import torch
    from datasets import Dataset
    from sentence_transformers import (SentenceTransformer, SentenceTransformerTrainer,
                                       SentenceTransformerTrainingArguments, losses)
    from sentence_transformers.util import mine_hard_negatives

    what, model_dir, pairs, out, seed, precision, threads, corpus = argv[:8]
    LR, RERANK_LR = float(argv[8]), float(argv[9])
    NEGATIVES, RERANK_EPOCHS = int(argv[10]), int(argv[11])
    torch.set_num_threads(int(threads))
    # Seeded before any model is built: the trainer seeds only when it starts, after a
    # CrossEncoder's new scoring head was drawn (unseeded, that head differed from run to run).
    from transformers import set_seed
    set_seed(int(seed))
    model = SentenceTransformer(model_dir, device="cpu")
    model.max_seq_length = 64
    if pairs.endswith(".jsonl"):
        rows = [json.loads(l) for l in open(pairs, encoding="utf-8")]
        data = {k: [r[k] for r in rows] for k in rows[0]}
    else:
        rows = [l.rstrip("\n").split("\t") for l in open(pairs, encoding="utf-8")][1:]
        data = {"query": [r[0] for r in rows], "positive": [r[1] for r in rows]}
    dataset = Dataset.from_dict(data)
    if what == "ce-train":   # a CrossEncoder on the mined n-tuples as labelled pairs (BCE)
        from sentence_transformers.cross_encoder import (CrossEncoder, CrossEncoderTrainer,
                                                         CrossEncoderTrainingArguments)
        from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
        ce = CrossEncoder(model_dir, num_labels=1, max_length=64, device="cpu")
        cols = [k for k in data if k != "query"]
        flat = {"query": [q for q in data["query"] for _ in cols],
                "passage": [row[c] for row in rows for c in cols],
                "label": [float(c == "positive") for _ in rows for c in cols]}
        args = CrossEncoderTrainingArguments(
            output_dir=out + ".tmp", num_train_epochs=RERANK_EPOCHS,
            per_device_train_batch_size=32 * len(cols),
            learning_rate=RERANK_LR, warmup_ratio=0.1, weight_decay=0.01,
            lr_scheduler_type="linear", seed=int(seed), save_strategy="no", report_to="none",
            logging_steps=10_000, use_cpu=True, disable_tqdm=True, dataloader_num_workers=0,
            bf16=precision == "bf16")
        trainer = CrossEncoderTrainer(model=ce, args=args, train_dataset=Dataset.from_dict(flat),
                                      loss=BinaryCrossEntropyLoss(ce))
        start = time.perf_counter()
        trainer.train()
        ce.save(out)
        print(json.dumps({"seconds": time.perf_counter() - start}))
        return
    if what == "ce-score":   # the CrossEncoder's scores of each row's candidates, as labels
        from sentence_transformers.cross_encoder import CrossEncoder
        ce = CrossEncoder(corpus, device="cpu")
        cols = [k for k in data if k != "query"]
        start = time.perf_counter()
        scores = ce.predict([(row["query"], row[c]) for row in rows for c in cols], batch_size=64)
        with open(out, "w", encoding="utf-8") as f:
            for i, row in enumerate(rows):
                f.write(json.dumps({**row, "label": scores[i * len(cols):(i + 1) * len(cols)]
                                    .tolist()}) + "\n")
        print(json.dumps({"seconds": time.perf_counter() - start}))
        return
    if what == "mine":
        texts = [l.rstrip("\n") for l in open(corpus, encoding="utf-8")]
        start = time.perf_counter()
        mined = mine_hard_negatives(dataset, model, corpus=texts, num_negatives=NEGATIVES,
                                    range_max=50, relative_margin=0.05, sampling_strategy="top",
                                    output_format="n-tuple", batch_size=64,
                                    use_faiss=False, verbose=False)
        with open(out, "w", encoding="utf-8") as f:
            for row in mined:
                f.write(json.dumps(row) + "\n")
        print(json.dumps({"seconds": time.perf_counter() - start, "rows": len(mined)}))
        return
    args = SentenceTransformerTrainingArguments(
        output_dir=out + ".tmp", num_train_epochs=1, per_device_train_batch_size=32,
        learning_rate=LR, warmup_ratio=0.1, weight_decay=0.01, lr_scheduler_type="linear",
        seed=int(seed), save_strategy="no", report_to="none", logging_steps=10_000, use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, bf16=precision == "bf16")
    loss = (losses.MarginMSELoss(model) if "label" in data
            else losses.MultipleNegativesRankingLoss(model))
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    start = time.perf_counter()
    trainer.train()
    model.save(out)
    print(json.dumps({"seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    if len(sys.argv) != 13:
        print("usage:\n" + USAGE)
        sys.exit(0 if sys.argv[1:] == ["--help"] else 2)
    main(sys.argv[1:])
