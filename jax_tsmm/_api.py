"""The public functions: validate user input, bring it to the primitives' form, bind."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsmm._primitives import (
    ab_p,
    atb_p,
    broadcast_batch,
    check_dtypes,
    check_shapes,
)


def _as_array(name: str, arg_name: str, x):
    if not isinstance(x, (jax.Array, np.ndarray)):
        raise TypeError(
            f"jax_tsmm.{name}: {arg_name} must be a JAX or NumPy array, got {type(x).__name__}"
        )
    return jnp.asarray(x)


def _check_conj(name: str, conj) -> bool:
    if not isinstance(conj, (bool, np.bool_)):
        raise TypeError(f"jax_tsmm.{name}: conj must be a bool, got {conj!r}")
    return bool(conj)


def _with_batch_rank(x, rank: int):
    """Prepend unit batch axes (a free reshape) so both operands have ``rank`` batch axes."""
    return x.reshape((1,) * (rank - (x.ndim - 2)) + x.shape)


def _prepare(name, x_name, x, y_name, y, contracted):
    x = _as_array(name, x_name, x)
    y = _as_array(name, y_name, y)
    check_dtypes(name, x_name, x.dtype, y_name, y.dtype)
    check_shapes(name, x_name, x.shape, y_name, y.shape, contracted=contracted)
    rank = len(broadcast_batch(name, x_name, x.shape[:-2], y_name, y.shape[:-2]))
    return _with_batch_rank(x, rank), _with_batch_rank(y, rank)


def atb(a, b, *, conj: bool = False):
    """Aᵀ B (Aᴴ B with ``conj=True``) for tall & skinny A (..., K, M) and B (..., K, N).

    Returns (..., M, N), reduced over the long axis K. Leading batch axes
    broadcast like ``jnp.matmul``.
    """
    conj = _check_conj("atb", conj)
    a, b = _prepare("atb", "a", a, "b", b, "K")
    return atb_p.bind(a, b, conj=conj and jnp.iscomplexobj(a))


def ab(a, c):
    """A C for tall & skinny A (..., K, M) and small C (..., M, N); returns (..., K, N).

    Leading batch axes broadcast like ``jnp.matmul``.
    """
    a, c = _prepare("ab", "a", a, "c", c, "M")
    return ab_p.bind(a, c, conj=False)
