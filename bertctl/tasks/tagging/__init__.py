"""Token tagging (the paper's fourth fine-tuning family): a label for every word, CoNLL-2003 NER.

- `reader`: CoNLL column files and tables (JSON lines, parquet, save_to_disk) -> `TaggedExamples`.
- `schemes`: IOB1 / IOB2 / BIOES detection, validation, conversion, and conlleval's chunk rules.
- `metrics`: conlleval's figures (entity precision / recall / F1 overall and per type, accuracy).
- `windows`: words -> word pieces, first-piece labels, overlapping windows, optional document
  context -> `TaggingFeatures` and model batches.
- `predict`: per-token logits -> one tag per word; predictions.txt in conlleval's input format.

How a stage uses them (the model is trained in one scheme, IOB2; each file keeps its own):

    train = read_tagged(path)                                   # or tables, columns by name
    scheme = check_scheme(train, tag_scheme)                    # None: detected; log .describe()
    tags = convert(train.tags, train.offsets, "iob2")
    types = entity_types(tags)
    labels = label_list(types, "iob2")                          # the model's id2label
    features = encode_tagged(train, tokenizer, max_seq_length, doc_stride, document_context,
                             word_labels=label_ids(tags, labels))
    batch = make_batch(features, indices)                       # BertForTokenClassification(**batch)

    dev = read_tagged(dev_path); dev_scheme = check_scheme(dev, tag_scheme)
    check_known_types(dev, types)
    collector = WordPredictions(dev_features)                   # add(indices, logits) per batch
    predicted = predicted_tags(collector.result(), labels, dev.offsets, dev_scheme.scheme)
    write_predictions(out / "predictions.txt", dev, predicted)
    metrics = score(dev.tags, predicted, dev.offsets)           # = conlleval < predictions.txt
"""
