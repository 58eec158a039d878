"""The public functions: validate user input, bring it to the primitives' form, bind."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsmm._primitives import (
    ab_p,
    ab_update_p,
    atb_p,
    broadcast_batch,
    check_dtypes,
    check_shapes,
    check_update_operand,
    gram_p,
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
    broadcast like ``jnp.matmul``. One value passed as both operands is its Gram
    matrix (``gram_p``): read once, and differentiated by one product where two
    operands take two.
    """
    conj = _check_conj("atb", conj)
    gram = a is b
    a, b = _prepare("atb", "a", a, "b", b, "K")
    conj = conj and jnp.iscomplexobj(a)
    return gram_p.bind(a, conj=conj) if gram else atb_p.bind(a, b, conj=conj)


def _check_scale(name: str, arg_name: str, x, dtype):
    """alpha / beta: a static Python (or NumPy) scalar, complex only for complex data."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, complex, np.number)):
        raise TypeError(
            f"jax_tsmm.{name}: {arg_name} must be a Python scalar (a static parameter), "
            f"got {type(x).__name__}; scale a traced value outside the call instead"
        )
    x = complex(x)
    if x.imag == 0:
        return float(x.real)
    if not jnp.issubdtype(dtype, jnp.complexfloating):
        raise TypeError(
            f"jax_tsmm.{name}: {arg_name}={x!r} is complex but the operands are "
            f"{np.dtype(dtype).name}"
        )
    return x


def ab(a, c, *, out=None, alpha=1, beta=0):
    """A C for tall & skinny A (..., K, M) and small C (..., M, N); returns (..., K, N).

    With ``out`` (an array of exactly the result's shape and dtype) returns
    ``beta * out + alpha * A C`` as one primitive (``ab_update``); e.g. the
    projection V − Q C is ``ab(q, c, out=v, alpha=-1, beta=1)``. Like BLAS,
    ``beta=0`` (the default) does not read ``out``. ``alpha`` and ``beta`` are
    static Python scalars (each value compiles its own program; complex only
    for complex operands). JAX arrays are immutable: ``out`` is an input, not
    written in place. Leading batch axes broadcast like ``jnp.matmul``.
    """
    a, c = _prepare("ab", "a", a, "c", c, "M")
    alpha = _check_scale("ab", "alpha", alpha, a.dtype)
    beta = _check_scale("ab", "beta", beta, a.dtype)
    if out is None:
        if beta != 0:
            raise ValueError(f"jax_tsmm.ab: beta={beta!r} needs out")
        result = ab_p.bind(a, c, conj=False)
        return result if alpha == 1 else (alpha * result).astype(result.dtype)
    out = _as_array("ab", "out", out)
    batch = broadcast_batch("ab", "a", a.shape[:-2], "c", c.shape[:-2])
    check_update_operand(
        "ab", "out", out.shape, out.dtype, batch + (a.shape[-2], c.shape[-1]), a.dtype
    )
    return ab_update_p.bind(a, c, out, conj=False, alpha=alpha, beta=beta)
