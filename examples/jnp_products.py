"""jax_tsmm's products written with jnp.matmul, so that an example runs the same code without them.

``with matmul_products():`` traces jax_tsmm.atb, ab and mtsm (and jax_tsmm.linalg's
atb and ab) as jnp.matmul at HIGHEST precision.
"""

from __future__ import annotations

import contextlib

import jax.numpy as jnp
from jax import lax

import jax_tsmm
from jax_tsmm import linalg

HIGHEST = lax.Precision.HIGHEST


def _atb_jnp(a, b, *, conj=False):
    a = jnp.conj(a) if conj else a
    return jnp.matmul(jnp.swapaxes(a, -1, -2), b, precision=HIGHEST)


def _ab_jnp(a, c, *, out=None, alpha=1, beta=0):
    prod = alpha * jnp.matmul(a, c, precision=HIGHEST)
    return prod if out is None or beta == 0 else prod + beta * out


def _mtsm_jnp(a, x, *, transpose_a=False, conj=False):
    a = jnp.conj(a) if conj else a
    return jnp.matmul(jnp.swapaxes(a, -1, -2) if transpose_a else a, x, precision=HIGHEST)


@contextlib.contextmanager
def matmul_products():
    saved = jax_tsmm.atb, jax_tsmm.ab, jax_tsmm.mtsm, linalg.atb, linalg.ab
    jax_tsmm.atb = linalg.atb = _atb_jnp
    jax_tsmm.ab = linalg.ab = _ab_jnp
    jax_tsmm.mtsm = _mtsm_jnp
    try:
        yield
    finally:
        jax_tsmm.atb, jax_tsmm.ab, jax_tsmm.mtsm, linalg.atb, linalg.ab = saved
