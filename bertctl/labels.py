"""What the data, the model core and the losses agree on about targets, in one place that each
may import (the model takes tensors, never the data package)."""

# The label of a position that carries no target: the losses skip it (torch's cross-entropy
# default, and transformers' convention).
IGNORE_INDEX = -100
