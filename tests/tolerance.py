"""The numeric tolerances of the tests, each with its reason, so that the suite holds on every
CPU kind (AVX2, AVX512, AMX) and with every kernel PyTorch, oneDNN and MKL may pick.

Two float32 computations of one value differ by rounding, and how much depends on the order the
kernels sum in, which differs between CPU kinds: one rounding is at most EPS32 / 2 relative, and
a sum of n terms of size m computed in any order is within n * EPS32 * m of the exact one
(the worst case; a random walk gives about sqrt(n) * EPS32 * m). A tolerance is that bound for
the reduction the test compares, with the dtype and n named; a value computed in float64 on
both sides (the metrics against sklearn and scipy) is held to float64's.

docs/development.md says how to run the numeric tests under other kernels
(ATEN_CPU_CAPABILITY=default / avx2, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS).
"""

import math

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)   # 1.19e-7
EPS64 = float(np.finfo(np.float64).eps)   # 2.2e-16


def fp32_sum(n: int, magnitude: float = 1.0) -> float:
    """Absolute bound on the difference of two float32 sums of `n` terms of about `magnitude`
    taken in different orders (a matrix product's dot products, a mean, a loss over rows)."""
    return n * EPS32 * magnitude


def fp32_kl(classes: int, temperature: float = 1.0, rows: int = 1) -> float:
    """Absolute bound for a float32 KL divergence (the distillation soft loss) against one
    computed in float64: it is the difference of two sums of p log p terms of about
    log(classes) each, so a small KL loses its relative precision to cancellation (0.004 of
    1.1 on one CPU, 1.5e-5 relative) and only an absolute bound holds; the loss is scaled by
    T^2. Each softmax and log rounds a few times: 8 roundings per class and row."""
    return 8 * EPS32 * classes * max(math.log(classes), 1.0) * temperature ** 2 * rows


# Whole-model outputs computed two ways (bertctl against transformers on the same weights,
# PyTorch against onnxruntime, packed against unpacked): L layers, each a chain of float32 dot
# products over up to 4 * hidden terms (1,536 for the MiniLM checkpoint's FFN) and a softmax
# over the sequence. The random-walk error per layer is about sqrt(1536) * EPS32 = 5e-6 of the
# activations' size (LayerNorm keeps it near 1), over 6 layers 3e-5; 1e-4 leaves a factor 3
# for the kernels' different blockings. (The worst case, 1536 * 6 * EPS32 = 1e-3, is never
# approached: the rounding errors are not all of one sign.)
MODEL_FP32 = {"atol": 1e-4, "rtol": 1e-4}

# The same for the tests' tiny models (hidden 16-64, FFN up to 256, up to 4 layers): a layer's
# random-walk error is sqrt(256) * EPS32 = 1.9e-6 of activations of size 1; four layers' add
# up to 7.6e-6 in the worst alignment, 3.8e-6 as a random walk: 1e-5.
TINY_FP32 = {"atol": 1e-5, "rtol": 1e-5}

# A float64 statistic against its reference (sklearn, scipy) on up to 10^4 values: both sum in
# float64 in possibly different orders, n * EPS64 = 2e-12 of values of size 1.
FLOAT64 = 1e-10
