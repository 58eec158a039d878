"""Size -> kernel selection: which kernel, or XLA's dot, serves a problem.

Precedence (Tensile's library logic): the tuning database of this GPU's
architecture, whose entries for (op, dtype, M, N) are split into K ranges by
thresholds; then the generator's model; XLA's dot where no kernel applies or
where the tuner measured XLA faster.
"""

from __future__ import annotations

import contextlib
import functools
import json
import pathlib

import numpy as np

from jax_tsmm.codegen import Config, InvalidSpec, KernelSpec, Problem, default_config
from jax_tsmm.codegen.abi import MAX_BATCH_DIMS

KERNEL_DTYPES = ("float32", "float64", "complex64", "complex128")
MAX_WIDTH = 128
TUNING_DIR = pathlib.Path(__file__).parent / "tuning"

_forced: list[KernelSpec] = []


@contextlib.contextmanager
def forced(spec: KernelSpec):
    """Lower every matching call traced inside the block with ``spec`` (the tuner's lever)."""
    _forced.append(spec)
    try:
        yield
    finally:
        _forced.pop()


def problem_key(problem: Problem) -> str:
    """Database key; conj is left out (it flips signs and costs the same). ab's
    fused update has entries of its own: against XLA's dot and a separate
    elementwise pass it wins where plain ab may not."""
    op = "ab_update" if problem.update else problem.op
    return f"{op}:{problem.dtype}:{problem.m}x{problem.n}"


_model_only: list[bool] = []


@contextlib.contextmanager
def model_only():
    """Inside the block, calls lowered dispatch by the generator's model alone, as
    if the tuning database were empty (the bench's ``--model``; the tests)."""
    _model_only.append(True)
    try:
        yield
    finally:
        _model_only.pop()


def database(arch: str) -> dict:
    """The tuned entries for ``arch``: key -> list of {k_min, config | None, ...},
    sorted by k_min; config None means XLA's dot measured faster."""
    return {} if _model_only else _database_file(arch)


@functools.cache
def _database_file(arch: str) -> dict:
    path = TUNING_DIR / f"{arch}.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())["entries"]


def mtsm_key(transpose_a: bool, dtype: str, n: int) -> str:
    """Database key of an mtsm problem (its kernels serve any M and K); conj is left out."""
    return f"{'mtsm_t' if transpose_a else 'mtsm'}:{dtype}:n{n}"


def tuned(key: str, k: int, arch: str) -> tuple[bool, dict | None]:
    """(found, configuration fields) from the database; None with found means use
    XLA. The entry of the range holding K serves; below every range, the lowest
    range's (a measured choice beats the untimed model).

    XLA's Aᵀ B is fast only at some K: on an H100 (2026-11-22) at K = 2^16, 2^20
    and 2^22 it reached 60-95 % of roofline, at K = 65537, 99991, 1048573, 1500007
    and 2739138 only 8-31 % (docs/performance.md). So an atb entry that chose XLA
    holds only for K with at least the power-of-two factor of the K it was timed
    at; at other K the model's kernel serves."""
    entries = database(arch).get(key, [])
    if not entries:
        return False, None
    chosen = entries[0]
    for entry in entries:
        if entry["k_min"] <= k:
            chosen = entry
    timed_k = chosen.get("k_tuned", 1)
    if chosen["config"] is None and key.startswith("atb:") and k % (timed_k & -timed_k):
        return False, None
    return True, chosen["config"]


def select(op: str, dtype, m: int, n: int, k: int, batch_dims: int, conj: bool,
           arch: str = "sm_90", *, update: bool = False) -> KernelSpec | None:
    """The kernel for this problem (``update``: ab's fused update), or None to use
    XLA's dot."""
    dtype = np.dtype(dtype).name
    if dtype not in KERNEL_DTYPES or batch_dims > MAX_BATCH_DIMS:
        return None
    if not (1 <= m <= MAX_WIDTH and 1 <= n <= MAX_WIDTH) or k == 0:
        return None
    problem = Problem(op, dtype, m, n, conj=conj, update=update)
    for spec in reversed(_forced):
        if spec.problem == problem:
            return spec
    found, config = tuned(problem_key(problem), k, arch)
    if found:
        return None if config is None else KernelSpec(problem, Config(**config))
    try:
        return KernelSpec(problem, default_config(problem))
    except InvalidSpec:
        return None
