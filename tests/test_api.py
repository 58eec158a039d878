"""atb and ab against the float64 NumPy reference, on the default backend.

Property tests draw K (0 to 1e5, primes included), M and N (1 to 64), batch
axes that broadcast (size-1 axes and missing leading axes included), every
dtype and conj; fixed tests pin the large, prime and exact cases.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jax_tsmm
from reference import (
    ALL_DTYPES,
    COMPLEX_DTYPES,
    FULL_DTYPES,
    HALF_DTYPES,
    OPS,
    assert_close,
    assert_same,
    dtype_id,
    is_complex,
    random_operand,
    reference as reference_product,
    result_shape,
)

PRIMES = (2, 3, 5, 7, 13, 31, 127, 257, 1021, 4099, 8191, 65537, 99991)
LARGE_K = (16384, 65536, 99991, 100000)
# The operands of one property-test example hold at most this many elements in
# all, so that the whole suite stays within a few minutes on two CPU cores.
ELEMENT_BUDGET = 3_000_000


def call(op, x, y, conj=False):
    if op == "atb":
        return jax_tsmm.atb(x, y, conj=conj)
    return jax_tsmm.ab(x, y)


def operand_shapes(op, batch_x, batch_y, k, m, n):
    x = tuple(batch_x) + (k, m)
    y = tuple(batch_y) + ((k, n) if op == "atb" else (m, n))
    return x, y


# --- strategies ------------------------------------------------------------------


long_dims = st.one_of(
    st.integers(0, 40),
    st.sampled_from(PRIMES),
    st.integers(41, 5000),
    st.sampled_from(LARGE_K),
)
widths = st.one_of(st.integers(1, 8), st.integers(1, 64))


@st.composite
def batch_shapes(draw):
    """Two batch shapes that broadcast like jnp.matmul: a common shape whose
    axes each operand may drop (leading ones only) or hold as size 1."""
    full = draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))
    shapes = []
    for _ in range(2):
        rank = draw(st.integers(0, len(full)))
        own = list(full[len(full) - rank :])
        for i in range(rank):
            if draw(st.booleans()) and draw(st.booleans()):
                own[i] = 1
        shapes.append(tuple(own))
    return shapes[0], shapes[1]


@st.composite
def problems(draw, op):
    k = draw(long_dims)
    m = draw(widths)
    n = draw(widths)
    batch_x, batch_y = draw(batch_shapes())
    batch = np.broadcast_shapes(batch_x, batch_y)
    if (k + 1) * (m + n) * math.prod(batch) > ELEMENT_BUDGET:
        batch_x = batch_y = ()
    while (k + 1) * (m + n) > ELEMENT_BUDGET:
        m, n = max(1, m // 2), max(1, n // 2)
    seed = draw(st.integers(0, 2**32 - 1))
    return operand_shapes(op, batch_x, batch_y, k, m, n), seed


# --- property tests ----------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@given(data=st.data())
def test_matches_reference(op, dtype, data):
    (x_shape, y_shape), seed = data.draw(problems(op), label="shapes, seed")
    conj = op == "atb" and data.draw(st.booleans(), label="conj")
    rng = np.random.default_rng(seed)
    x = random_operand(rng, x_shape, dtype)
    y = random_operand(rng, y_shape, dtype)
    assert_close(call(op, x, y, conj), x, y, op=op, conj=conj)


@pytest.mark.parametrize("op", OPS)
@given(data=st.data())
def test_jax_array_inputs_match_numpy_inputs(op, data):
    dtype = data.draw(st.sampled_from(FULL_DTYPES), label="dtype")
    k = data.draw(st.integers(0, 300), label="K")
    m, n = data.draw(widths, label="M"), data.draw(widths, label="N")
    batch_x, batch_y = data.draw(batch_shapes(), label="batch")
    x_shape, y_shape = operand_shapes(op, batch_x, batch_y, k, m, n)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    x, y = random_operand(rng, x_shape, dtype), random_operand(rng, y_shape, dtype)
    from_numpy = call(op, x, y)
    from_jax = call(op, jnp.asarray(x), jnp.asarray(y))
    assert isinstance(from_jax, jax.Array) and isinstance(from_numpy, jax.Array)
    assert_same(from_jax, from_numpy, x, y, op=op, err_msg="jax vs numpy inputs")


# --- fixed cases ---------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("k", (1, 2, 31, 32, 33, 127, 128, 129, 1021, 4099, 65537))
@pytest.mark.parametrize("dtype", FULL_DTYPES, ids=dtype_id)
def test_primes_and_tile_edges(op, k, dtype):
    rng = np.random.default_rng(k)
    m, n = (17, 5) if op == "atb" else (7, 13)
    x_shape, y_shape = operand_shapes(op, (), (), k, m, n)
    x, y = random_operand(rng, x_shape, dtype), random_operand(rng, y_shape, dtype)
    conj = is_complex(dtype) and op == "atb"
    assert_close(call(op, x, y, conj), x, y, op=op, conj=conj)


@pytest.mark.parametrize("k", (99991, 100000))
@pytest.mark.parametrize("dtype", ("float32", "complex128"))
@pytest.mark.parametrize("op", OPS)
def test_long_dimension_1e5_at_full_width(op, dtype, k):
    rng = np.random.default_rng(k)
    x_shape, y_shape = operand_shapes(op, (), (), k, 64, 64)
    x, y = random_operand(rng, x_shape, dtype), random_operand(rng, y_shape, dtype)
    assert_close(call(op, x, y, conj=True), x, y, op=op, conj=op == "atb")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("m", range(1, 65, 9))
def test_every_width_class(op, m):
    rng = np.random.default_rng(m)
    for n in (1, 2, 3, 8, 16, 31, 64):
        x_shape, y_shape = operand_shapes(op, (), (), 257, m, n)
        x = random_operand(rng, x_shape, "float64")
        y = random_operand(rng, y_shape, "float64")
        assert_close(call(op, x, y), x, y, op=op)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    "batch_x, batch_y",
    [
        ((3,), (3,)),
        ((3,), ()),
        ((), (3,)),
        ((1,), (4,)),
        ((4,), (1,)),
        ((2, 1), (1, 3)),
        ((2, 3), (3,)),
        ((5, 1, 2), (2,)),
        ((1, 1), ()),
        ((0,), (1,)),
        ((2, 0), (2, 1)),
    ],
)
def test_batch_broadcasting(op, batch_x, batch_y):
    rng = np.random.default_rng(0)
    x_shape, y_shape = operand_shapes(op, batch_x, batch_y, 37, 4, 3)
    x = random_operand(rng, x_shape, "complex128")
    y = random_operand(rng, y_shape, "complex128")
    for conj in (False, True) if op == "atb" else (False,):
        out = call(op, x, y, conj)
        assert out.shape == result_shape(op, x_shape, y_shape)
        assert_close(out, x, y, op=op, conj=conj)
        # Same as jnp.matmul's broadcasting.
        xm = jnp.conj(x) if conj else x
        want = jnp.matmul(jnp.swapaxes(xm, -1, -2) if op == "atb" else xm, y,
                          precision=jax.lax.Precision.HIGHEST)
        assert out.shape == want.shape


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES, ids=dtype_id)
def test_conj_selects_the_conjugate_transpose(dtype):
    rng = np.random.default_rng(1)
    a, b = random_operand(rng, (50, 3), dtype), random_operand(rng, (50, 2), dtype)
    plain, hermitian = jax_tsmm.atb(a, b), jax_tsmm.atb(a, b, conj=True)
    assert_close(plain, a, b, conj=False)
    assert_close(hermitian, a, b, conj=True)
    assert not np.allclose(plain, hermitian)
    # Aᴴ A is Hermitian with a real, positive diagonal.
    gram = np.asarray(jax_tsmm.atb(a, a, conj=True))
    np.testing.assert_allclose(gram, gram.conj().T, rtol=0, atol=1e-4 * np.abs(gram).max())
    assert np.all(np.real(np.diag(gram)) > 0)


@pytest.mark.parametrize("dtype", ("float32", "float64", "bfloat16"))
@pytest.mark.parametrize("conj", (True, np.bool_(True), np.bool_(False)))
def test_conj_on_real_data_is_plain_transpose(dtype, conj):
    rng = np.random.default_rng(2)
    a, b = random_operand(rng, (40, 3), dtype), random_operand(rng, (40, 5), dtype)
    np.testing.assert_array_equal(
        np.asarray(jax_tsmm.atb(a, b, conj=conj)), np.asarray(jax_tsmm.atb(a, b))
    )


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_jit_equals_eager(op, dtype):
    rng = np.random.default_rng(3)
    x_shape, y_shape = operand_shapes(op, (2, 1), (3,), 1001, 6, 5)
    x, y = random_operand(rng, x_shape, dtype), random_operand(rng, y_shape, dtype)
    conj = is_complex(dtype) and op == "atb"
    eager = call(op, x, y, conj)
    jitted = jax.jit(lambda p, q: call(op, p, q, conj))(x, y)
    assert eager.dtype == jitted.dtype == np.dtype(dtype)
    assert_same(jitted, eager, x, y, op=op, err_msg="jit vs eager")
    assert_close(jitted, x, y, op=op, conj=conj)


@pytest.mark.parametrize("op", OPS)
def test_under_disable_jit(op):
    """With jax.disable_jit() the primitives still evaluate (no recursion), grads too."""
    rng = np.random.default_rng(4)
    x_shape, y_shape = operand_shapes(op, (), (), 33, 4, 3)
    x, y = random_operand(rng, x_shape, "float64"), random_operand(rng, y_shape, "float64")
    with jax.disable_jit():
        out = call(op, x, y)
        grads = jax.grad(lambda p, q: jnp.sum(call(op, p, q) ** 2), argnums=(0, 1))(x, y)
    assert_close(out, x, y, op=op)
    assert grads[0].shape == x.shape and grads[1].shape == y.shape


# --- half precision -------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("k", (0, 1, 100, 4099, 65537))
def test_half_precision_accumulates_in_float32(op, dtype, k):
    """The result is the float32 sum rounded once to the half dtype: summing in
    the half dtype instead would be off by ~u_half |A|ᵀ|B|, far beyond the bound."""
    rng = np.random.default_rng(k)
    x_shape, y_shape = operand_shapes(op, (), (), k, 8, 6)
    x, y = random_operand(rng, x_shape, dtype), random_operand(rng, y_shape, dtype)
    out = call(op, x, y)
    assert out.dtype == np.dtype(dtype)
    assert_close(out, x, y, op=op)


# --- no TF32 ------------------------------------------------------------------------------


def _round_to_tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 (or the parts of complex64) to TF32's 10 mantissa bits."""
    if np.iscomplexobj(x):
        return _round_to_tf32(x.real) + 1j * _round_to_tf32(x.imag)
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return bits.view(np.float32)


@pytest.mark.parametrize("dtype", ("float32", "complex64"))
@pytest.mark.parametrize("op", OPS)
def test_float32_is_not_tf32_random(op, dtype):
    """Random data (atb: K = 4096; ab: M = 64): float32 products are within a
    few u of |A|ᵀ|B|; TF32 inputs are off by hundreds of u there (checked on
    an emulation of TF32 against the same bound)."""
    rng = np.random.default_rng(5)
    x_shape, y_shape = operand_shapes(op, (), (), 4096, 64 if op == "ab" else 32, 16)
    x, y = random_operand(rng, x_shape, dtype), random_operand(rng, y_shape, dtype)
    assert_close(call(op, x, y), x, y, op=op)
    wide = np.float64 if dtype == "float32" else np.complex128
    emulated = np.asarray(
        call(op, _round_to_tf32(x).astype(wide), _round_to_tf32(y).astype(wide))
    ).astype(dtype)
    with pytest.raises(AssertionError, match="exceed the error bound"):
        assert_close(emulated, x, y, op=op)


@pytest.mark.parametrize("op", OPS)
def test_float32_is_not_tf32_exact(op):
    """Entries ±(1 + 2⁻¹²) need 13 significant bits: float32 holds them, TF32
    rounds them to ±1. Every partial sum is j(1 + 2⁻¹²) with |j| <= 2048, exact
    in float32 in any summation order, so the float32 result is exact."""
    rng = np.random.default_rng(6)
    value = 1 + 2.0**-12
    k, m, n = (2048, 8, 4) if op == "atb" else (4096, 64, 4)
    x_shape, y_shape = operand_shapes(op, (), (), k, m, n)
    x = (rng.choice([-1.0, 1.0], x_shape) * value).astype(np.float32)
    y = rng.choice([-1.0, 1.0], y_shape).astype(np.float32)
    got = np.asarray(call(op, x, y)).astype(np.float64)
    np.testing.assert_array_equal(got, np.asarray(reference_product(op, x, y)))
    # All positive: every entry is L (1 + 2⁻¹²) (L terms), where TF32 gives L.
    ones_x = np.full(x_shape, value, np.float32)
    ones_y = np.ones(y_shape, np.float32)
    length = k if op == "atb" else m
    got = np.asarray(call(op, ones_x, ones_y))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.float32(length * value))


# --- empty dimensions -----------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_zero_length_reduction_gives_zeros(op, dtype):
    # atb with K = 0 and ab with M = 0 sum nothing: zeros of the right shape.
    x_shape, y_shape = operand_shapes(op, (2,), (), 0 if op == "atb" else 5, 0 if op == "ab" else 4, 3)
    x, y = np.ones(x_shape, dtype), np.ones(y_shape, dtype)
    out = call(op, x, y)
    assert out.shape == result_shape(op, x_shape, y_shape) and out.dtype == np.dtype(dtype)
    assert out.size > 0
    np.testing.assert_array_equal(np.asarray(out).astype(np.complex128), 0)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    "k, m, n, batch",
    [(5, 0, 3, ()), (5, 3, 0, ()), (0, 0, 0, ()), (0, 3, 0, ()), (5, 3, 2, (0,)), (0, 2, 2, (2, 0))],
)
def test_empty_results(op, k, m, n, batch):
    x_shape, y_shape = operand_shapes(op, batch, (), k, m, n)
    x, y = np.ones(x_shape, np.float32), np.ones(y_shape, np.float32)
    out = call(op, x, y)
    assert out.shape == result_shape(op, x_shape, y_shape)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(out), np.zeros(out.shape, np.float32))
