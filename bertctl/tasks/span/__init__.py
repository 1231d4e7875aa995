"""Span question answering (SQuAD v1.1 and v2.0): reading, windows, post-processing, metrics.

    examples = read_span_examples(path, version_2=True)                     # reader
    windows = encode_windows(examples, tokenizer, max_seq_length=384, doc_stride=128,
                             max_query_length=64, training=True)             # windows
    batch = windows.batch(indices)                           # model inputs (+ positions)
    result = postprocess(examples, windows, start_logits, end_logits,
                         n_best=20, max_answer_length=30, null_threshold=t)  # postprocess
    gold = examples.gold_answers()
    metrics = squad_v2_metrics(gold, result.predictions, result.null_odds)  # metrics
    threshold, f1 = best_null_threshold(gold, result.best_spans, result.null_odds)
    write_span_outputs(directory, result)                                   # outputs
"""
