"""The checks in reference.py are meaningful: they pass correct results computed
in other summation orders and fail the bugs they are there to catch."""

from __future__ import annotations

import numpy as np
import pytest

from reference import (
    ALL_DTYPES,
    LARGE_DRAW,
    assert_close,
    atb_ref,
    dtype_id,
    error_bound,
    is_complex,
    random_operand,
)


def _sequential_atb(a, b, conj=False):
    """op(A)ᵀ B by recursive summation over K in the operands' dtype: the least
    accurate order a kernel could use."""
    a = np.conj(a) if conj else a
    terms = (a[:, :, None] * b[:, None, :]).astype(a.dtype)
    return np.cumsum(terms, axis=0, dtype=a.dtype)[-1]


@pytest.mark.parametrize("dtype", ("float32", "complex64", "float64", "complex128"))
@pytest.mark.parametrize("k", (1, 7, 4099, 99991))
def test_sequential_summation_passes(dtype, k):
    rng = np.random.default_rng(k)
    a, b = random_operand(rng, (k, 5), dtype), random_operand(rng, (k, 3), dtype)
    assert_close(_sequential_atb(a, b, conj=True), a, b, conj=True)


@pytest.mark.parametrize("k", (7, 4099, 99991))
def test_positive_data_needs_the_general_bound(k):
    rng = np.random.default_rng(k)
    a = np.abs(random_operand(rng, (k, 5), "float32"))
    b = np.abs(random_operand(rng, (k, 3), "float32"))
    assert_close(_sequential_atb(a, b), a, b, random_data=False)


@pytest.mark.parametrize("dtype", ("float32", "complex64", "float64"))
def test_dropped_tail_row_fails(dtype):
    """A kernel that skips the last rows of K (a remainder-tile bug) is caught
    even at K = 99991 in float32."""
    rng = np.random.default_rng(0)
    k = 99991
    a, b = random_operand(rng, (k, 8), dtype), random_operand(rng, (k, 8), dtype)
    wrong = atb_ref(a[:-1], b[:-1]).astype(dtype)
    with pytest.raises(AssertionError, match="exceed the error bound"):
        assert_close(wrong, a, b)


def test_wrong_conj_transpose_and_shape_fail():
    rng = np.random.default_rng(1)
    a, b = random_operand(rng, (30, 4), "complex128"), random_operand(rng, (30, 4), "complex128")
    with pytest.raises(AssertionError, match="exceed the error bound"):
        assert_close(atb_ref(a, b), a, b, conj=True)
    with pytest.raises(AssertionError, match="exceed the error bound"):
        assert_close(atb_ref(a, b).T, a, b)
    with pytest.raises(AssertionError, match="shape"):
        assert_close(atb_ref(a, b)[:3], a, b)
    with pytest.raises(AssertionError, match="dtype"):
        assert_close(atb_ref(a, b).astype(np.complex64), a, b)
    nan = atb_ref(a, b)
    nan[1, 2] = np.nan
    with pytest.raises(AssertionError, match="non-finite"):
        assert_close(nan, a, b)


def test_ab_and_broadcasting():
    rng = np.random.default_rng(2)
    a = random_operand(rng, (2, 1, 50, 4), "float64")
    c = random_operand(rng, (3, 4, 6), "float64")
    want = np.stack([np.stack([a[i, 0] @ c[j] for j in range(3)]) for i in range(2)])
    assert_close(want, a, c, op="ab")
    with pytest.raises(AssertionError):
        assert_close(want[:, ::-1], a, c, op="ab")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_random_operand(dtype):
    rng = np.random.default_rng(3)
    x = random_operand(rng, (200, 3), dtype)
    assert x.dtype == np.dtype(dtype) and x.shape == (200, 3)
    assert np.all(x.real != 0)
    if is_complex(dtype):
        assert np.all(x.imag != 0)
    y = random_operand(rng, (200, 3), dtype)
    assert not np.array_equal(x, y)  # fresh data on every draw


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_large_operands_drawn_by_jax(dtype):
    """An operand of LARGE_DRAW elements and more, drawn by JAX's generator: its
    dtype, normal moments at the scale asked for (complex: real and imaginary parts
    of half the variance each), writable, fresh on every draw, and the same from the
    same seed of ``rng``."""
    shape = (LARGE_DRAW // 2 + 1, 2)
    rng = np.random.default_rng(7)
    x = random_operand(rng, shape, dtype, scale=3.0)
    assert x.dtype == np.dtype(dtype) and x.shape == shape and x.flags.writeable
    wide = x.astype(np.complex128)
    parts = (wide.real, wide.imag) if is_complex(dtype) else (wide.real,)
    for part in parts:
        assert abs(part.mean()) < 0.01 and part.var() == pytest.approx(9 / len(parts), rel=0.01)
    assert not np.array_equal(x, random_operand(rng, shape, dtype, scale=3.0))
    assert np.array_equal(x, random_operand(np.random.default_rng(7), shape, dtype, scale=3.0))


def test_bound_is_zero_free_and_scales():
    rng = np.random.default_rng(4)
    a, b = random_operand(rng, (100, 2), "float32"), random_operand(rng, (100, 2), "float32")
    tight = error_bound("atb", a, b)
    loose = error_bound("atb", a, b, random_data=False)
    assert np.all(tight > 0) and np.all(loose > tight)
    assert np.all(error_bound("atb", 2 * a, b) > 1.9 * tight)
    assert np.all(error_bound("atb", a.astype(np.float64), b.astype(np.float64)) < 1e-6 * tight)
