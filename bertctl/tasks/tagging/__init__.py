"""Token tagging (the paper's fourth fine-tuning family): a label for every word, CoNLL-2003 NER.

- `reader`: CoNLL column files and tables (JSON lines, parquet, save_to_disk) -> `TaggedExamples`.
- `schemes`: IOB1 / IOB2 / BIOES detection, validation, conversion, and conlleval's chunk rules.
- `metrics`: conlleval's figures (entity precision / recall / F1 overall and per type, accuracy).
- `windows`: words -> word pieces, first-piece labels, overlapping windows, optional document
  context -> `TaggingFeatures` and model batches.
- `predict`: per-token logits -> one tag per word; predictions.txt in conlleval's input format.
"""
