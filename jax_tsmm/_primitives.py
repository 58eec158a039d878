"""The primitives and their rules.

``atb_p``: a (*batch, K, M), b (*batch, K, N) -> (*batch, M, N) = op(a)ᵀ b
``ab_p``:  a (*batch, K, M), c (*batch, M, N) -> (*batch, K, N) = op(a) c
``gram_p``: a (*batch, K, M) -> (*batch, M, M) = op(a)ᵀ a, atb of one value

where op is the complex conjugate when ``conj=True`` and the identity otherwise.
The operands of one call have batch shapes of equal rank whose dimensions are
equal or 1 (a 1 broadcasts without being materialized); the public functions
in ``jax_tsmm._api`` bring user input into that form.

The two are each other's transposes, so ``grad`` of one runs the other. Each
lowers, on every platform, through SPMD partitioning (``jax_tsmm._sharding``) to
a per-shard twin (``atb_local_p``, ``ab_local_p``) on each device's shards. The
twins lower to XLA's dot here; ``jax_tsmm._cuda`` adds their CUDA lowering that
calls the generated kernels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jax_tsmm import _sharding

atb_p = Primitive("tsmm_atb")
ab_p = Primitive("tsmm_ab")

FLOAT_DTYPES = tuple(
    np.dtype(d) for d in (jnp.float32, jnp.float64, jnp.complex64, jnp.complex128)
)
# Half-precision inputs are accepted and accumulated in float32.
HALF_DTYPES = tuple(np.dtype(d) for d in (jnp.bfloat16, jnp.float16))


# --- validation (shared by the public API and abstract evaluation) ----------


def check_dtypes(name: str, x_name: str, x_dtype, y_name: str, y_dtype) -> None:
    for arg, dtype in ((x_name, x_dtype), (y_name, y_dtype)):
        if np.dtype(dtype) not in FLOAT_DTYPES + HALF_DTYPES:
            raise TypeError(
                f"jax_tsmm.{name}: {arg} has dtype {np.dtype(dtype).name}; expected one of "
                "float32, float64, complex64, complex128, bfloat16, float16"
            )
    if np.dtype(x_dtype) != np.dtype(y_dtype):
        raise TypeError(
            f"jax_tsmm.{name}: {x_name} and {y_name} must have the same dtype, got "
            f"{np.dtype(x_dtype).name} and {np.dtype(y_dtype).name}"
        )


def broadcast_batch(name: str, x_name: str, x_batch, y_name: str, y_batch) -> tuple:
    """Broadcast two batch shapes like ``jnp.matmul`` does, or raise ValueError."""
    rank = max(len(x_batch), len(y_batch))
    x_full = (1,) * (rank - len(x_batch)) + tuple(x_batch)
    y_full = (1,) * (rank - len(y_batch)) + tuple(y_batch)
    out = []
    for x_dim, y_dim in zip(x_full, y_full):
        if x_dim != y_dim and 1 not in (x_dim, y_dim):
            raise ValueError(
                f"jax_tsmm.{name}: batch dimensions of {x_name} {tuple(x_batch)} and "
                f"{y_name} {tuple(y_batch)} do not broadcast"
            )
        out.append(y_dim if x_dim == 1 else x_dim)
    return tuple(out)


def check_shapes(name: str, x_name: str, x_shape, y_name: str, y_shape, *, contracted: str) -> None:
    """Rank >= 2 for both; the contracted axes agree; the batch shapes broadcast.

    ``contracted`` is "K" for atb (axis -2 of both) and "M" for ab (axis -1 of a
    against axis -2 of c)."""
    for arg, shape in ((x_name, x_shape), (y_name, y_shape)):
        if len(shape) < 2:
            raise ValueError(
                f"jax_tsmm.{name}: {arg} must have rank >= 2, got shape {tuple(shape)}"
            )
    x_dim = x_shape[-2] if contracted == "K" else x_shape[-1]
    if x_dim != y_shape[-2]:
        what = "long dimension K" if contracted == "K" else "inner dimension M"
        raise ValueError(
            f"jax_tsmm.{name}: {what} differs: {x_name} has shape {tuple(x_shape)}, "
            f"{y_name} has shape {tuple(y_shape)}"
        )
    broadcast_batch(name, x_name, x_shape[:-2], y_name, y_shape[:-2])


# --- helpers for the rules ---------------------------------------------------


def _swap_last(x):
    return jnp.swapaxes(x, -1, -2)


def _maybe_conj(x, conj: bool):
    return jnp.conj(x) if conj else x


def _sum_to_batch(x, batch_shape):
    """Sum a cotangent over the batch axes its primal broadcast along."""
    axes = tuple(
        i for i, (have, want) in enumerate(zip(x.shape, batch_shape)) if want == 1 and have != 1
    )
    return jnp.sum(x, axis=axes, keepdims=True) if axes else x


def _batch_to_front(x, bdim):
    """Move a vmapped axis to the front; an unmapped operand gets a broadcast 1."""
    return jnp.expand_dims(x, 0) if bdim is None else jnp.moveaxis(x, bdim, 0)


def _accumulation_dtype(dtype):
    return np.dtype(jnp.float32) if np.dtype(dtype) in HALF_DTYPES else None


def _broadcast_batches(x, y):
    batch = broadcast_batch("dot", "x", x.shape[:-2], "y", y.shape[:-2])
    return (
        jnp.broadcast_to(x, batch + x.shape[-2:]),
        jnp.broadcast_to(y, batch + y.shape[-2:]),
    )


def _batched_dot(x, y, contract_x: int, contract_y: int):
    """XLA's dot at full precision (no TF32), batched over the leading axes."""
    batch_axes = tuple(range(x.ndim - 2))
    out = lax.dot_general(
        x,
        y,
        (((contract_x,), (contract_y,)), (batch_axes, batch_axes)),
        precision=lax.Precision.HIGHEST,
        preferred_element_type=_accumulation_dtype(x.dtype),
    )
    return out.astype(x.dtype)


# --- atb ---------------------------------------------------------------------


def _atb_abstract_eval(a, b, *, conj):
    check_dtypes("atb", "a", a.dtype, "b", b.dtype)
    check_shapes("atb", "a", a.shape, "b", b.shape, contracted="K")
    if len(a.shape) != len(b.shape):
        raise ValueError("tsmm_atb: operands must have equal rank")
    batch = broadcast_batch("atb", "a", a.shape[:-2], "b", b.shape[:-2])
    return jax.core.ShapedArray(batch + (a.shape[-1], b.shape[-1]), a.dtype)


def atb_xla(a, b, *, conj):
    """op(a)ᵀ b through XLA's dot: the CPU lowering and the GPU fallback."""
    a, b = _broadcast_batches(a, b)
    return _batched_dot(_maybe_conj(a, conj), b, a.ndim - 2, b.ndim - 2)


def _atb_batch(args, dims, *, conj):
    a, b = (_batch_to_front(x, d) for x, d in zip(args, dims))
    return atb_p.bind(a, b, conj=conj), 0


def _atb_transpose_a(ct, a, b, *, conj):
    # d/da of sum(ct * op(a)ᵀ b) is b ctᵀ, conjugated when op is conj.
    ct_a = ab_p.bind(b, _swap_last(_maybe_conj(ct, conj)), conj=conj)
    return _sum_to_batch(ct_a, a.aval.shape[:-2])


def _atb_transpose_b(ct, a, b, *, conj):
    ct_b = ab_p.bind(a, ct, conj=conj)
    return _sum_to_batch(ct_b, b.aval.shape[:-2])


# --- ab ----------------------------------------------------------------------


def _ab_abstract_eval(a, c, *, conj):
    check_dtypes("ab", "a", a.dtype, "c", c.dtype)
    check_shapes("ab", "a", a.shape, "c", c.shape, contracted="M")
    if len(a.shape) != len(c.shape):
        raise ValueError("tsmm_ab: operands must have equal rank")
    batch = broadcast_batch("ab", "a", a.shape[:-2], "c", c.shape[:-2])
    return jax.core.ShapedArray(batch + (a.shape[-2], c.shape[-1]), a.dtype)


def ab_xla(a, c, *, conj):
    """op(a) c through XLA's dot: the CPU lowering and the GPU fallback."""
    a, c = _broadcast_batches(a, c)
    return _batched_dot(_maybe_conj(a, conj), c, a.ndim - 1, c.ndim - 2)


def _ab_batch(args, dims, *, conj):
    a, c = (_batch_to_front(x, d) for x, d in zip(args, dims))
    return ab_p.bind(a, c, conj=conj), 0


def _ab_transpose_a(ct, a, c, *, conj):
    ct_a = ab_p.bind(ct, _swap_last(_maybe_conj(c, conj)), conj=conj)
    return _sum_to_batch(ct_a, a.aval.shape[:-2])


def _ab_transpose_c(ct, a, c, *, conj):
    ct_c = atb_p.bind(a, ct, conj=conj)
    return _sum_to_batch(ct_c, c.aval.shape[:-2])


# --- ab_update ---------------------------------------------------------------
#
# ab_update_p: a (*batch, K, M), c (*batch, M, N), y (*out_batch, K, N)
#              -> (*out_batch, K, N) = beta * y + alpha * op(a) c
#
# ``alpha`` and ``beta`` are static parameters: Python scalars (float, or
# complex for complex operands), part of the compiled program like ``conj``, so
# each distinct value compiles once. (A traced scale belongs outside: multiply
# the operands or the result.) ``y`` has exactly the output's shape, batch axes
# included (a and c broadcast as in ab_p). With ``beta == 0`` y is not read
# (BLAS semantics: NaN or Inf in y do not propagate) and gets a zero cotangent.
# The primitive is bilinear in (a, c) and linear in y; its JVP is itself two
# ab_update calls, its transposes are ab_p, atb_p and a scale.


def _ab_update_abstract_eval(a, c, y, *, conj, alpha, beta):
    out = _ab_abstract_eval(a, c, conj=conj)
    check_update_operand("ab", "out", y.shape, y.dtype, out.shape, out.dtype)
    return out


def check_update_operand(name, y_name, y_shape, y_dtype, want_shape, want_dtype) -> None:
    """The accumulated operand has exactly the result's shape and dtype."""
    if np.dtype(y_dtype) != np.dtype(want_dtype):
        raise TypeError(
            f"jax_tsmm.{name}: {y_name} must have the dtype of the result, "
            f"{np.dtype(want_dtype).name}, got {np.dtype(y_dtype).name}"
        )
    if tuple(y_shape) != tuple(want_shape):
        raise ValueError(
            f"jax_tsmm.{name}: {y_name} must have the shape of the result, "
            f"{tuple(want_shape)}, got {tuple(y_shape)}"
        )


def ab_update_xla(a, c, y, *, conj, alpha, beta):
    """beta * y + alpha * op(a) c as one XLA expression (dot, scale, add: XLA
    fuses the elementwise part into the dot's output); accumulated in float32
    for the half dtypes."""
    a, c = _broadcast_batches(a, c)
    batch_axes = tuple(range(a.ndim - 2))
    acc = lax.dot_general(
        _maybe_conj(a, conj),
        c,
        (((a.ndim - 1,), (c.ndim - 2,)), (batch_axes, batch_axes)),
        precision=lax.Precision.HIGHEST,
        preferred_element_type=_accumulation_dtype(a.dtype),
    )
    if alpha != 1:
        acc = alpha * acc
    if beta != 0:
        acc = acc + (y.astype(acc.dtype) if beta == 1 else beta * y.astype(acc.dtype))
    return acc.astype(a.dtype)


def _ab_update_batch(args, dims, *, conj, alpha, beta):
    a, c, y = (_batch_to_front(x, d) for x, d in zip(args, dims))
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    # y carries the output's full shape: an unmapped y is broadcast along the new
    # axis, and so is the small c where only y is mapped.
    y = jnp.broadcast_to(y, (size,) + y.shape[1:])
    if a.shape[0] == 1 and c.shape[0] == 1:
        c = jnp.broadcast_to(c, (size,) + c.shape[1:])
    return ab_update_p.bind(a, c, y, conj=conj, alpha=alpha, beta=beta), 0


def _ab_update_jvp(primals, tangents, *, conj, alpha, beta):
    """d(out) = beta dy + alpha (op(da) c + op(a) dc), accumulated by ab_update itself."""
    a, c, y = primals
    da, dc, dy = tangents
    params = dict(conj=conj, alpha=alpha)
    out = ab_update_p.bind(a, c, y, beta=beta, **params)
    acc, acc_beta = (dy, beta) if type(dy) is not ad.Zero and beta != 0 else (None, 0)
    for x, z in ((da, c), (a, dc)):
        if type(x) is ad.Zero or type(z) is ad.Zero:
            continue
        if acc is None:
            acc = jnp.zeros(out.shape, out.dtype)  # not read: beta=0
        acc = ab_update_p.bind(x, z, acc, beta=acc_beta, **params)
        acc_beta = 1
    if acc is None:
        return out, ad.Zero(jax.typeof(out).to_tangent_aval())
    return out, (acc if acc_beta == 1 else beta * acc)


def _ab_update_transpose(ct, a, c, y, *, conj, alpha, beta):
    """Linear in y, and in whichever one of a and c is undefined."""
    if ad.is_undefined_primal(a) and ad.is_undefined_primal(c):
        raise ValueError("tsmm_ab_update: not linear in both a and c")
    undefined = [ad.is_undefined_primal(x) for x in (a, c, y)]
    if type(ct) is ad.Zero:
        return tuple(
            ad.Zero(x.aval.to_ct_aval()) if u else None for x, u in zip((a, c, y), undefined)
        )
    scaled = ct if alpha == 1 else alpha * ct
    ct_a = _ab_transpose_a(scaled, a, c, conj=conj) if undefined[0] else None
    ct_c = _ab_transpose_c(scaled, a, c, conj=conj) if undefined[1] else None
    ct_y = None
    if undefined[2]:
        ct_y = ad.Zero(y.aval.to_ct_aval()) if beta == 0 else (ct if beta == 1 else beta * ct)
    return ct_a, ct_c, ct_y


# --- registration ------------------------------------------------------------


def _eager_impl(prim, static_argnames=("conj",)):
    """Eager calls run the primitive through jit (as lax's do). Under
    ``jax.disable_jit`` that jit would call bind, and bind this impl, forever:
    jit is re-enabled for the one call."""
    jitted = jax.jit(prim.bind, static_argnames=static_argnames)

    def impl(*args, **params):
        with jax.disable_jit(False):
            return jitted(*args, **params)

    return impl


def _lower_per_shard(prim, abstract_eval, xla_impl, rule: _sharding.Rule):
    """Lower ``prim`` on every platform through SPMD partitioning (``_sharding``):
    each device runs the returned per-shard twin, which carries the platform
    lowerings (XLA's dot here; ``_cuda`` adds the kernels for "cuda")."""
    local = Primitive(prim.name + "_local")
    local.def_abstract_eval(abstract_eval)
    mlir.register_lowering(local, mlir.lower_fun(xla_impl, multiple_results=False), **_sharding.UNCACHED)
    _sharding.register(prim, local, rule)
    return local


def _register(prim, abstract_eval, xla_impl, rule, batch_rule, transpose_lhs, transpose_rhs):
    prim.def_impl(_eager_impl(prim))
    prim.def_abstract_eval(abstract_eval)
    batching.primitive_batchers[prim] = batch_rule
    # Bilinear: the JVP binds the primitive on (tangent, other operand).
    ad.defbilinear(prim, transpose_lhs, transpose_rhs)
    return _lower_per_shard(prim, abstract_eval, xla_impl, rule)


# atb: K sharded -> local products, then one psum of the small (M, N) result.
# ab: K sharded like a, c replicated -> local products, no communication.
atb_local_p = _register(
    atb_p, _atb_abstract_eval, atb_xla, _sharding.Rule(("k m", "k n"), "m n", sharded=("k",)),
    _atb_batch, _atb_transpose_a, _atb_transpose_b,
)
ab_local_p = _register(
    ab_p, _ab_abstract_eval, ab_xla, _sharding.Rule(("k m", "m n"), "k n", sharded=("k",)),
    _ab_batch, _ab_transpose_a, _ab_transpose_c,
)


# --- gram ----------------------------------------------------------------------
#
# gram_p is what atb(a, a) binds, one value passed as both operands. Its per-shard
# twin lowers as atb_local_p of its shard twice, which each device's kernel reads
# once (``_cuda``), under SPMD partitioning too (K sharded -> one psum). Its
# JVP is X + op(X)ᵀ with X = op(a)ᵀ da: atb's bilinear rule would take op(da)ᵀ a and
# op(a)ᵀ da, each other's transposes, two products of the tall operands where this
# takes one (and grad one ab where the bilinear rule's transposes take two); the
# tangent is exactly Hermitian (symmetric), as the Gram matrix is.

gram_p = Primitive("tsmm_gram")


def _gram_abstract_eval(a, *, conj):
    return _atb_abstract_eval(a, a, conj=conj)


def _gram_as_local_atb(a, *, conj):
    return atb_local_p.bind(a, a, conj=conj)


def _gram_batch(args, dims, *, conj):
    (a,), (dim,) = args, dims
    return gram_p.bind(_batch_to_front(a, dim), conj=conj), 0


def _gram_jvp(primals, tangents, *, conj):
    (a,), (da,) = primals, tangents
    product = atb_p.bind(a, da, conj=conj)
    return gram_p.bind(a, conj=conj), product + _swap_last(_maybe_conj(product, conj))


gram_p.def_impl(_eager_impl(gram_p))
gram_p.def_abstract_eval(_gram_abstract_eval)
batching.primitive_batchers[gram_p] = _gram_batch
ad.primitive_jvps[gram_p] = _gram_jvp
gram_local_p = _lower_per_shard(gram_p, _gram_abstract_eval, _gram_as_local_atb,
                                _sharding.Rule(("k m",), "m n", sharded=("k",)))


# ab_update: sharded like ab (y and the result like a along K).
ab_update_p = Primitive("tsmm_ab_update")
ab_update_p.def_impl(_eager_impl(ab_update_p, ("conj", "alpha", "beta")))
ab_update_p.def_abstract_eval(_ab_update_abstract_eval)
batching.primitive_batchers[ab_update_p] = _ab_update_batch
ad.primitive_jvps[ab_update_p] = _ab_update_jvp
ad.primitive_transposes[ab_update_p] = _ab_update_transpose
ab_update_local_p = _lower_per_shard(
    ab_update_p, _ab_update_abstract_eval, ab_update_xla,
    _sharding.Rule(("k m", "m n", "k n"), "k n", sharded=("k",)),
)
