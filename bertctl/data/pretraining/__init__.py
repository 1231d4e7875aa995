"""Pretraining data: the builder of masked-LM and next-sentence instances (build.py, on
masking.py's masks and pairs.py's packing), the shards it writes (shards.py) and the dataset
that reads them back (dataset.py)."""
