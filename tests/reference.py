"""NumPy references and accuracy checks for jax_tsmm, shared by the test modules.

Import it from any module under tests/ as ``from reference import ...`` (the
conftest puts this folder on ``sys.path``).

The reference is computed in float64 / complex128 from the operands as given
(half-precision operands are widened exactly). ``assert_close`` bounds the error
of each output element by the magnitude of the terms it sums, not by the size
of the result, so the check stays meaningful under cancellation and scales
with the long dimension K:

    |C - C_ref|_ij <= c * u * g(K) * (|op(A)|ᵀ |B|)_ij  [+ u_out * |C_ref|_ij for half outputs]

with u the unit roundoff of the accumulation dtype (float32 for the half
dtypes). For independent zero-mean data such as ``random_operand`` draws
(``random_data=True``, the default) the rounding errors of any summation order
(sequential, blocked, tree, split-K with atomics) stay within a few u of
|op(A)|ᵀ|B| whatever K is, so g(K) = 1: TF32 (rounding inputs to 10 mantissa
bits) is off by ~70-350 u there and fails. For arbitrary data (all positive,
constant, ...) pass ``random_data=False``: g(K) = 1 + sqrt(K), the probabilistic
bound of Higham & Mary (2019).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
COMPLEX64 = np.dtype(np.complex64)
COMPLEX128 = np.dtype(np.complex128)
BFLOAT16 = np.dtype(jnp.bfloat16)
FLOAT16 = np.dtype(np.float16)

REAL_DTYPES = (FLOAT32, FLOAT64)
COMPLEX_DTYPES = (COMPLEX64, COMPLEX128)
FULL_DTYPES = REAL_DTYPES + COMPLEX_DTYPES
HALF_DTYPES = (BFLOAT16, FLOAT16)
ALL_DTYPES = FULL_DTYPES + HALF_DTYPES

OPS = ("atb", "ab")

# c in the bound above, in units of the accumulation dtype's unit roundoff.
# Measured worst cases on zero-mean data are ~3 u (sequential summation, K up
# to 1e5, real or complex); 16 leaves room for the float64 reference's own error.
_RANDOM_DATA_FACTOR = 16.0
_ANY_DATA_FACTOR = 4.0


def is_complex(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.complexfloating)


def is_half(dtype) -> bool:
    return np.dtype(dtype) in HALF_DTYPES


def accumulation_dtype(dtype) -> np.dtype:
    """The dtype the library accumulates in: float32 for the half dtypes."""
    return FLOAT32 if is_half(dtype) else np.dtype(dtype)


def unit_roundoff(dtype) -> float:
    """u = eps / 2 (round to nearest); for complex dtypes that of the real part."""
    return float(jnp.finfo(np.dtype(dtype)).eps) / 2.0


def dtype_id(dtype) -> str:
    return np.dtype(dtype).name


# --- data --------------------------------------------------------------------


# Operands of this many elements and more are drawn by JAX's generator on the default
# device. numpy's draws took most of a large GPU test's time on the host (two
# operands of 3 x 10^6 x 64 float64 values: 9.6 s on two cores, their float64
# reference and its check 1.5 s); a GPU draws them in one kernel and copies them
# over, a CPU as fast as numpy (192 million float64 values: 3.6 s, numpy 3.5).
# Smaller ones stay numpy's, which compiles nothing per shape.
LARGE_DRAW = 1 << 22


def random_operand(rng: np.random.Generator, shape, dtype, *, scale: float = 1.0) -> np.ndarray:
    """Fresh standard-normal data of ``dtype`` (a NumPy array).

    Complex data has independent nonzero real and imaginary parts (each of
    variance 1/2). Half-precision data is drawn in float32 and rounded, so the
    returned values are exactly what the library sees. A large operand's draw is
    seeded from ``rng``, so ``rng`` decides every operand.
    """
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    # Drawn in float32 where that is all the dtype holds: a quarter of the time of
    # float64 draws and their rounding, for the 10^6-row operands of the GPU tests.
    draw = FLOAT64 if dtype in (FLOAT64, COMPLEX128) else FLOAT32
    if math.prod(shape) >= LARGE_DRAW:
        key = jax.random.key(int(rng.integers(2**63)))
        x = np.array(jax.random.normal(key, shape, dtype if is_complex(dtype) else draw))  # a writable copy
        x *= x.real.dtype.type(scale)
        return x.astype(dtype, copy=False)
    if is_complex(dtype):
        x = np.empty(shape, dtype)
        x.real = rng.standard_normal(shape, dtype=draw)
        x.imag = rng.standard_normal(shape, dtype=draw)
        x *= draw.type(scale / math.sqrt(2.0))
        return x
    x = rng.standard_normal(shape, dtype=draw)
    x *= draw.type(scale)
    return x.astype(dtype, copy=False)


def to_wide(x) -> np.ndarray:
    """``x`` as a NumPy float64 / complex128 array (exact for every supported dtype)."""
    x = np.asarray(x)
    return x.astype(COMPLEX128 if is_complex(x.dtype) else FLOAT64, copy=False)


def _op(x: np.ndarray, conj: bool) -> np.ndarray:
    return np.conj(x) if conj else x


def _t(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


# --- references ----------------------------------------------------------------


def atb_ref(a, b, *, conj: bool = False) -> np.ndarray:
    """op(A)ᵀ B in float64 / complex128, batch axes broadcast like np.matmul."""
    a, b = to_wide(a), to_wide(b)
    return np.matmul(_t(_op(a, conj)), b)


def ab_ref(a, c, *, conj: bool = False) -> np.ndarray:
    """op(A) C in float64 / complex128, batch axes broadcast like np.matmul."""
    a, c = to_wide(a), to_wide(c)
    return np.matmul(_op(a, conj), c)


def reference(op: str, x, y, *, conj: bool = False) -> np.ndarray:
    if op == "atb":
        return atb_ref(x, y, conj=conj)
    if op == "ab":
        return ab_ref(x, y, conj=conj)
    raise ValueError(f"unknown op {op!r}")


def magnitude(op: str, x, y) -> np.ndarray:
    """|op(A)|ᵀ |B| (atb) or |A| |C| (ab): the sum of the moduli of the summed terms."""
    ax, ay = np.abs(to_wide(x)), np.abs(to_wide(y))
    return np.matmul(_t(ax), ay) if op == "atb" else np.matmul(ax, ay)


def reduction_length(op: str, x) -> int:
    """K for atb, M for ab: the number of terms each output element sums."""
    return int(np.shape(x)[-2] if op == "atb" else np.shape(x)[-1])


def result_shape(op: str, x_shape, y_shape) -> tuple:
    batch = np.broadcast_shapes(tuple(x_shape[:-2]), tuple(y_shape[:-2]))
    if op == "atb":
        return tuple(batch) + (x_shape[-1], y_shape[-1])
    return tuple(batch) + (x_shape[-2], y_shape[-1])


def error_bound(
    op: str, x, y, *, dtype=None, random_data: bool = True, factor: float = 1.0
) -> np.ndarray:
    """The elementwise bound on |result - reference| (see the module docstring)."""
    dtype = np.dtype(dtype if dtype is not None else np.asarray(x).dtype)
    acc = accumulation_dtype(dtype)
    u = unit_roundoff(acc)
    k = reduction_length(op, x)
    g = _RANDOM_DATA_FACTOR if random_data else _ANY_DATA_FACTOR * (1.0 + math.sqrt(k))
    mag = magnitude(op, x, y)
    bound = factor * g * u * mag
    tiny = float(jnp.finfo(dtype).smallest_subnormal) + k * float(jnp.finfo(acc).tiny)
    if is_half(dtype):
        # The float32 sum is rounded once to the half dtype at the end.
        ref = reference(op, x, y)
        bound = bound * (1.0 + unit_roundoff(dtype)) + 1.01 * unit_roundoff(dtype) * np.abs(ref)
    return bound + tiny


def assert_close(
    result,
    a,
    b,
    *,
    op: str = "atb",
    conj: bool = False,
    random_data: bool = True,
    factor: float = 1.0,
    err_msg: str = "",
) -> None:
    """Check ``result`` = atb(a, b, conj=conj) (op="atb") or ab(a, b) (op="ab").

    Checks the shape (batch axes broadcast), the dtype (that of the inputs),
    finiteness, and every element against ``error_bound``.
    """
    a_np, b_np = np.asarray(a), np.asarray(b)
    dtype = a_np.dtype
    res = np.asarray(result)
    want_shape = result_shape(op, a_np.shape, b_np.shape)
    ctx = f"{op}(a{a_np.shape}, b{b_np.shape}, {dtype.name}, conj={conj}) {err_msg}".rstrip()
    assert res.shape == want_shape, f"{ctx}: shape {res.shape}, expected {want_shape}"
    assert res.dtype == dtype, f"{ctx}: dtype {res.dtype}, expected {dtype}"
    res_w = to_wide(res)
    assert np.all(np.isfinite(res_w)), f"{ctx}: non-finite entries in the result"
    if res.size == 0:
        return
    a_w, b_w = to_wide(a_np), to_wide(b_np)  # once, for the reference and the bound
    ref = reference(op, a_w, b_w, conj=conj and is_complex(dtype))
    bound = error_bound(op, a_w, b_w, dtype=dtype, random_data=random_data, factor=factor)
    err = np.abs(res_w - ref)
    bad = err > bound
    if np.any(bad):
        ratio = err / bound
        idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        raise AssertionError(
            f"{ctx}: {int(bad.sum())} of {err.size} entries exceed the error bound; "
            f"worst at {idx}: got {res_w[idx]}, expected {ref[idx]}, |err| {err[idx]:.3e} "
            f"> bound {bound[idx]:.3e} (x{ratio[idx]:.1f}); "
            f"K={reduction_length(op, a_np)}, u={unit_roundoff(accumulation_dtype(dtype)):.2e}"
        )


def assert_same(x, y, a, b, *, op: str = "atb", factor: float = 0.25, err_msg: str = "") -> None:
    """Two computations of one product agree to a few rounding errors of the terms.

    For comparing e.g. jit with eager, or a vmapped call with a plain one: the
    allowed difference is ``factor`` times the ``error_bound`` for random data
    (4 u |A|ᵀ|B| by default, tight but independent of summation order).
    """
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape, f"{err_msg}: shapes {x.shape} and {y.shape}"
    assert x.dtype == y.dtype, f"{err_msg}: dtypes {x.dtype} and {y.dtype}"
    if x.size == 0:
        return
    bound = np.broadcast_to(error_bound(op, a, b, dtype=x.dtype, factor=factor), x.shape)
    err = np.abs(to_wide(x) - to_wide(y))
    assert np.all(err <= bound), (
        f"{err_msg}: max |x - y| {err.max():.3e}, bound there "
        f"{bound.flat[int(np.argmax(err))]:.3e}"
    )


# --- helpers for the transformation tests (jax values) ---------------------------------

# Relative tolerance for comparing derivatives with the same code on jnp.matmul.
DERIVATIVE_RTOL = {
    FLOAT64: 1e-10,
    COMPLEX128: 1e-10,
    FLOAT32: 2e-4,
    COMPLEX64: 2e-4,
}


def random_jax_operands(rng: np.random.Generator, dtype, *shapes) -> tuple:
    """``random_operand`` for each shape, as JAX arrays."""
    return tuple(jnp.asarray(random_operand(rng, s, dtype)) for s in shapes)


def assert_tree_close(got, want, rtol, msg=""):
    """Pytrees of equal structure, shapes and dtypes, close leaf by leaf (the absolute
    tolerance scales with each leaf's largest magnitude)."""
    got_leaves, got_tree = jax.tree.flatten(got)
    want_leaves, want_tree = jax.tree.flatten(want)
    assert got_tree == want_tree, f"{msg}: tree structures differ"
    for g, w in zip(got_leaves, want_leaves):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{msg}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"{msg}: dtype {g.dtype} != {w.dtype}"
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=msg)


def assert_derivatives_match(ours, theirs, primals, tangents, rng, rtol):
    """``ours`` and ``theirs`` (functions of the same operands) agree under jax.jvp,
    jax.vjp (on a random cotangent), jax.linearize and the linearization's
    transpose, which must give the VJP again."""
    assert_tree_close(jax.jvp(ours, primals, tangents), jax.jvp(theirs, primals, tangents), rtol, "jvp")
    out, vjp_ours = jax.vjp(ours, *primals)
    _, vjp_theirs = jax.vjp(theirs, *primals)
    ct = jnp.asarray(random_operand(rng, out.shape, out.dtype))
    assert_tree_close(vjp_ours(ct), vjp_theirs(ct), rtol, "vjp")
    out_ours, lin_ours = jax.linearize(ours, *primals)
    out_theirs, lin_theirs = jax.linearize(theirs, *primals)
    assert_tree_close((out_ours, lin_ours(*tangents)), (out_theirs, lin_theirs(*tangents)), rtol, "linearize")
    assert_tree_close(jax.linear_transpose(lin_ours, *primals)(ct), vjp_theirs(ct), rtol, "linear_transpose")


def poison(nbytes: int) -> None:
    """Fill free device memory with NaN: the next outputs are likely carved from it."""
    filler = jnp.full((max(nbytes, 8) // 8 + 1024,), jnp.nan, jnp.float64)
    filler.block_until_ready()
    del filler
