"""Size -> kernel selection: which kernel (or XLA's dot) serves a problem.

Order of precedence: the tuning database for this GPU (by op, dtype, M, N and
K range), then the generator's model; XLA's dot where no kernel applies.
"""

from __future__ import annotations

import numpy as np

from jax_tsmm.codegen import InvalidSpec, KernelSpec, Problem, default_config
from jax_tsmm.codegen.abi import MAX_BATCH_DIMS

KERNEL_DTYPES = ("float32", "float64", "complex64", "complex128")
MAX_WIDTH = 128


def select(op: str, dtype, m: int, n: int, k: int, batch_dims: int, conj: bool) -> KernelSpec | None:
    """The kernel for this problem, or None to use XLA's dot."""
    dtype = np.dtype(dtype).name
    if dtype not in KERNEL_DTYPES or batch_dims > MAX_BATCH_DIMS:
        return None
    if not (1 <= m <= MAX_WIDTH and 1 <= n <= MAX_WIDTH) or k == 0:
        return None
    problem = Problem(op, dtype, m, n, conj=conj)
    try:
        return KernelSpec(problem, default_config(problem))
    except InvalidSpec:
        return None
