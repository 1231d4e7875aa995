"""Span question answering (SQuAD v1.1 and v2.0): reading, windows, post-processing, metrics.

    examples = read_span_examples(path, version_2=True)          # reader
    windows = encode_windows(examples, tokenizer, max_seq_length=384, doc_stride=128,
                             max_query_length=64, training=True)  # windows
    batch = windows.batch(indices)                                # model inputs (+ positions)
    result = postprocess(windows, start_logits, end_logits, ...)  # n-best, predictions, null odds
    metrics = squad_v2_metrics(examples, result.predictions, result.null_odds)   # metrics
"""
