"""jax_tsmm.linalg (block Gram–Schmidt, Cholesky-QR) and ab(..., out=, alpha=, beta=).

Orthogonality targets (u the unit roundoff of the dtype, eps = 2u):
‖Q_newᴴ Q_new − I‖₂ ≤ 100 eps and ‖Qᴴ Q_new‖₂ ≤ 100 eps, for random and
ill-conditioned (κ = 1e8 in float64, 1e3 in float32) tall blocks. Derivatives
are checked numerically (check_grads) and against the same code run with
jnp.matmul in place of the primitives.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.test_util import check_grads

import jax_tsmm
from jax_tsmm import _kernels, linalg
from jax_tsmm._primitives import ab_update_p
from jnp_products import matmul_products  # examples/: linalg's products as jnp.matmul
from reference import is_complex, random_operand

DTYPES = ("float32", "float64", "complex64", "complex128")
HIGHEST = lax.Precision.HIGHEST
# Condition numbers the default (shifted) algorithms must handle.
ILL = {"float32": 1e3, "complex64": 1e3, "float64": 1e8, "complex128": 1e8}


def eps(dtype) -> float:
    return float(jnp.finfo(np.dtype(dtype)).eps)


def wide(x) -> np.ndarray:
    return np.asarray(x).astype(np.complex128)


def orthonormal(rng, k, m, dtype):
    q, _ = np.linalg.qr(wide(random_operand(rng, (k, m), np.dtype(dtype))))
    return jnp.asarray(q.astype(dtype) if is_complex(dtype) else q.real.astype(dtype))


def conditioned(rng, k, n, cond, dtype):
    """A (k, n) block with singular values logspaced from 1 to 1/cond."""
    u, _ = np.linalg.qr(wide(random_operand(rng, (k, n), np.dtype("complex128" if is_complex(dtype) else "float64"))))
    w, _ = np.linalg.qr(wide(random_operand(rng, (n, n), np.dtype("complex128" if is_complex(dtype) else "float64"))))
    v = (u * np.logspace(0, -np.log10(cond), n)) @ w
    return jnp.asarray(v if is_complex(dtype) else v.real).astype(dtype)


def orth_loss(q) -> float:
    q = wide(q)
    return float(np.linalg.norm(q.conj().T @ q - np.eye(q.shape[-1]), 2))


def cross(q, q_new) -> float:
    return float(np.linalg.norm(wide(q).conj().T @ wide(q_new), 2))


def check_r(r):
    r = wide(r)
    assert np.all(np.tril(r, -1) == 0), "R is not upper triangular"
    d = np.diagonal(r, axis1=-2, axis2=-1)
    assert np.all(d.real > 0) and np.all(d.imag == 0), "R's diagonal is not positive real"


# --- Cholesky-QR -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ("random", "ill"))
def test_cholqr2_orthogonality(dtype, kind):
    rng = np.random.default_rng(1)
    k, n = 3000, 8
    if kind == "random":
        v = jnp.asarray(random_operand(rng, (k, n), np.dtype(dtype)))
        shifts = (None, True)
    else:
        v = conditioned(rng, k, n, ILL[dtype], dtype)
        shifts = (True,)
    for shift in shifts:
        q, r = jax.jit(lambda v: linalg.cholqr2(v, shift=shift))(v)
        assert q.dtype == v.dtype and r.dtype == v.dtype and r.shape == (n, n)
        assert orth_loss(q) <= 100 * eps(dtype), (shift, orth_loss(q) / eps(dtype))
        resid = np.linalg.norm(wide(v) - wide(q) @ wide(r), 2) / np.linalg.norm(wide(v), 2)
        assert resid <= 100 * eps(dtype), (shift, resid / eps(dtype))
        check_r(r)


def test_cholqr2_extreme_condition_needs_shift():
    """Documented limits: plain CholQR2 breaks down (NaN) at κ = 1e12 in float64;
    the shifted CholQR3 does not."""
    v = conditioned(np.random.default_rng(2), 2000, 8, 1e12, "float64")
    q, _ = linalg.cholqr2(v)
    assert np.isnan(np.asarray(q)).any()
    q, r = linalg.cholqr2(v, shift=True)
    assert orth_loss(q) <= 100 * eps("float64")
    q, _ = linalg.cholqr2(v, shift=1e-10)  # an explicit relative shift
    assert orth_loss(q) <= 100 * eps("float64")


def test_cholqr_single_pass_and_fukaya_shift():
    rng = np.random.default_rng(3)
    v = jnp.asarray(random_operand(rng, (500, 4), np.dtype("float64")))
    q, r = linalg.cholqr(v)
    np.testing.assert_allclose(q @ r, v, atol=1e-12)
    s = linalg.fukaya_shift(v)
    want = 11 * (500 * 4 + 4 * 5) * eps("float64") / 2 * float(jnp.sum(v * v))
    np.testing.assert_allclose(s, want, rtol=1e-12)


# --- projection and orthonormalization ---------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_project_out(dtype):
    rng = np.random.default_rng(4)
    k, m, n = 2000, 6, 5
    q = orthonormal(rng, k, m, dtype)
    v = jnp.asarray(random_operand(rng, (k, n), np.dtype(dtype)))
    want = wide(v) - wide(q) @ (wide(q).conj().T @ wide(v))
    norm_v = np.linalg.norm(wide(v), 2)
    for reorth in (True, False):
        w, s = jax.jit(lambda q, v: linalg.project_out(q, v, reorth=reorth, return_coefficients=True))(q, v)
        assert w.shape == v.shape and w.dtype == v.dtype
        assert np.linalg.norm(wide(w) - want, 2) <= 100 * eps(dtype) * norm_v
        assert cross(q, w) <= 100 * eps(dtype) * norm_v
        np.testing.assert_allclose(wide(q) @ wide(s) + wide(w), wide(v), atol=100 * eps(dtype) * norm_v)
    np.testing.assert_array_equal(linalg.project_out(q, v), linalg.project_out(q, v, reorth=True))


def test_project_out_reorth_matters():
    """V almost in span(Q): one pass leaves much more of Q than CGS2."""
    rng = np.random.default_rng(5)
    q = orthonormal(rng, 2000, 8, "float64")
    v = q @ jnp.asarray(rng.standard_normal((8, 4))) + 1e-10 * jnp.asarray(rng.standard_normal((2000, 4)))
    one = cross(q, linalg.project_out(q, v, reorth=False))
    two = cross(q, linalg.project_out(q, v))
    assert two <= 10 * eps("float64") and two < one


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ("random", "ill", "near_span"))
def test_orthonormalize_against_q(dtype, kind):
    rng = np.random.default_rng(6)
    k, m, n = 3000, 12, 8
    q = orthonormal(rng, k, m, dtype)
    if kind == "random":
        v = jnp.asarray(random_operand(rng, (k, n), np.dtype(dtype)))
    elif kind == "ill":
        v = conditioned(rng, k, n, ILL[dtype], dtype)
    else:  # mostly in span(Q)
        v = q @ jnp.asarray(random_operand(rng, (m, n), np.dtype(dtype))) + 1e-3 * conditioned(
            rng, k, n, ILL[dtype], dtype
        )
    q_new, r, s = jax.jit(lambda v, q: linalg.orthonormalize(v, q, return_coefficients=True))(v, q)
    assert q_new.shape == v.shape and r.shape == (n, n) and s.shape == (m, n)
    assert orth_loss(q_new) <= 100 * eps(dtype), orth_loss(q_new) / eps(dtype)
    assert cross(q, q_new) <= 100 * eps(dtype), cross(q, q_new) / eps(dtype)
    recon = wide(q) @ wide(s) + wide(q_new) @ wide(r)
    assert np.linalg.norm(recon - wide(v), 2) <= 100 * eps(dtype) * np.linalg.norm(wide(v), 2)
    check_r(r)


def test_orthonormalize_without_q_is_cholqr2():
    v = jnp.asarray(random_operand(np.random.default_rng(7), (400, 5), np.dtype("float64")))
    q1, r1 = linalg.orthonormalize(v)
    q2, r2 = linalg.cholqr2(v, shift=True)
    np.testing.assert_array_equal(q1, q2)
    np.testing.assert_array_equal(r1, r2)
    q3, r3 = linalg.orthonormalize(v, shift=None)
    np.testing.assert_allclose(q3, q1, atol=1e-13)


def test_batched_and_vmap():
    rng = np.random.default_rng(8)
    q = jnp.stack([orthonormal(rng, 500, 4, "complex128") for _ in range(3)])
    v = jnp.asarray(random_operand(rng, (3, 500, 5), np.dtype("complex128")))
    ortho = jax.jit(linalg.orthonormalize)
    batched = ortho(v, q)
    mapped = jax.jit(jax.vmap(linalg.orthonormalize))(v, q)
    for i in range(3):
        single = ortho(v[i], q[i])
        for b, mp, s in zip(batched, mapped, single):
            np.testing.assert_allclose(b[i], s, atol=1e-13)
            np.testing.assert_allclose(mp[i], s, atol=1e-13)
    # One Q for a batch of V (in_axes None), and project_out under vmap.
    mapped_q = jax.jit(jax.vmap(linalg.orthonormalize, in_axes=(0, None)))(v, q[0])
    np.testing.assert_allclose(mapped_q[0][1], ortho(v[1], q[0])[0], atol=1e-13)
    w = jax.vmap(linalg.project_out, in_axes=(None, 0))(q[0], v)
    np.testing.assert_allclose(w[2], linalg.project_out(q[0], v[2]), atol=1e-13)


# --- derivatives -----------------------------------------------------------------------


def _loss(fn, weights):
    def loss(*args):
        outs = fn(*args)
        return sum(jnp.sum(jnp.real(o * w)) for o, w in zip(outs, weights))

    return loss


CASES = {
    "orthonormalize": lambda v, q: linalg.orthonormalize(v, q),
    "orthonormalize_noshift": lambda v, q: linalg.orthonormalize(v, q, shift=None),
    "cholqr2": lambda v, q: linalg.cholqr2(v),
    "project_out": lambda v, q: (linalg.project_out(q, v),),
}


@pytest.mark.parametrize("dtype", ("float64", "complex128"))
@pytest.mark.parametrize("case", sorted(CASES))
def test_check_grads(dtype, case):
    rng = np.random.default_rng(9)
    k, m, n = 12, 3, 2
    v = jnp.asarray(random_operand(rng, (k, n), np.dtype(dtype)))
    q = orthonormal(rng, k, m, dtype)
    fn = CASES[case]
    outs = fn(v, q)
    weights = [jnp.asarray(random_operand(rng, o.shape, np.dtype(dtype))) for o in outs]
    check_grads(_loss(fn, weights), (v, q), order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", ("float64", "complex64"))
def test_grads_match_matmul_version(dtype):
    rng = np.random.default_rng(10)
    k, m, n = 200, 4, 3
    v = jnp.asarray(random_operand(rng, (2, k, n), np.dtype(dtype)))
    q = orthonormal(rng, k, m, dtype)
    fn = CASES["orthonormalize"]
    weights = [jnp.asarray(random_operand(rng, o.shape, np.dtype(dtype))) for o in fn(v, q)]
    loss = _loss(fn, weights)
    grad_and_jvp = lambda v, q: (jax.grad(loss, argnums=(0, 1))(v, q), jax.jvp(loss, (v, q), (v, q))[1])  # noqa: E731
    got, tangent = jax.jit(grad_and_jvp)(v, q)
    with matmul_products():
        want, want_tangent = jax.jit(grad_and_jvp)(v, q)
    tol = 1e-9 if dtype in ("float64", "complex128") else 2e-3
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * float(jnp.max(jnp.abs(w))))
    np.testing.assert_allclose(tangent, want_tangent, rtol=tol)


# --- ab(..., out=, alpha=, beta=) ------------------------------------------------------


def _ab_update_ref(a, c, y, alpha, beta):
    prod = alpha * (wide(a) @ wide(c))
    return prod if beta == 0 else prod + beta * wide(y)


@pytest.mark.parametrize("dtype", DTYPES + ("bfloat16",))
def test_ab_out_values(dtype):
    rng = np.random.default_rng(11)
    a = jnp.asarray(random_operand(rng, (2, 300, 5), np.dtype(dtype)))
    c = jnp.asarray(random_operand(rng, (5, 4), np.dtype(dtype)))
    y = jnp.asarray(random_operand(rng, (2, 300, 4), np.dtype(dtype)))
    tol = 1e-2 if dtype == "bfloat16" else 50 * eps(dtype)
    scales = [(-1, 1), (1, 0), (2.5, -0.5), (0, 3)]
    if is_complex(dtype):
        scales.append((1 - 2j, 0.5j))
    for alpha, beta in scales:
        for f in (jax_tsmm.ab, jax.jit(jax_tsmm.ab, static_argnames=("alpha", "beta"))):
            got = f(a, c, out=y, alpha=alpha, beta=beta)
            assert got.dtype == a.dtype and got.shape == y.shape
            want = _ab_update_ref(a, c, y, alpha, beta)
            scale = np.abs(alpha) * (np.abs(wide(a)) @ np.abs(wide(c))) + np.abs(beta) * np.abs(wide(y))
            assert np.all(np.abs(wide(got) - want) <= tol * scale + 1e-30), (alpha, beta)
    # Without out: alpha scales the product.
    np.testing.assert_allclose(wide(jax_tsmm.ab(a, c, alpha=2)), wide(2 * jax_tsmm.ab(a, c)), rtol=tol)


def test_ab_out_beta_zero_does_not_read_out():
    a, c = jnp.ones((10, 2)), jnp.ones((2, 3))
    y = jnp.full((10, 3), jnp.nan)
    assert np.all(np.asarray(jax_tsmm.ab(a, c, out=y)) == 2)
    assert np.all(np.asarray(jax.grad(lambda y: jnp.sum(jax_tsmm.ab(a, c, out=y)))(y)) == 0)


def test_ab_out_is_one_primitive():
    a, c, y = jnp.ones((10, 2)), jnp.ones((2, 3)), jnp.ones((10, 3))
    jaxpr = jax.make_jaxpr(lambda a, c, y: jax_tsmm.ab(a, c, out=y, alpha=-1, beta=1))(a, c, y)
    prims = [e.primitive for e in jaxpr.eqns]
    assert prims == [ab_update_p]
    assert jaxpr.eqns[0].params == dict(conj=False, alpha=-1.0, beta=1.0)
    f = jax.jit(lambda a, c, y: jax_tsmm.ab(a, c, out=y, alpha=-1, beta=1))
    hlo = f.trace(a, c, y).lower(lowering_platforms=("cpu",)).as_text()
    assert hlo.count("dot_general") == 1


@pytest.mark.parametrize(
    "dtype, alpha, beta",
    (("float64", -1, 1), ("float64", 1, 0), ("complex128", 2.0, 0.5), ("complex128", 0.5j, 1 - 1j)),
)
def test_ab_out_check_grads(dtype, alpha, beta):
    rng = np.random.default_rng(12)
    a = jnp.asarray(random_operand(rng, (2, 1, 7, 3), np.dtype(dtype)))
    c = jnp.asarray(random_operand(rng, (3, 3, 2), np.dtype(dtype)))
    y = jnp.asarray(random_operand(rng, (2, 3, 7, 2), np.dtype(dtype)))
    f = lambda a, c, y: jax_tsmm.ab(a, c, out=y, alpha=alpha, beta=beta)  # noqa: E731
    check_grads(f, (a, c, y), order=2, modes=("fwd", "rev"))
    g = lambda a, c, y: alpha * jnp.matmul(a, c, precision=HIGHEST) + beta * y  # noqa: E731
    ct = jnp.asarray(random_operand(rng, y.shape, np.dtype(dtype)))
    got = jax.vjp(f, a, c, y)[1](ct)
    want = jax.vjp(g, a, c, y)[1](ct)
    for x, w in zip(got, want):
        np.testing.assert_allclose(x, w, rtol=1e-12, atol=1e-12)


def test_ab_out_linear_transpose():
    rng = np.random.default_rng(13)
    a = jnp.asarray(rng.standard_normal((9, 3)))
    c = jnp.asarray(rng.standard_normal((3, 2)))
    y = jnp.asarray(rng.standard_normal((9, 2)))
    ct = jnp.asarray(rng.standard_normal((9, 2)))
    t = jax.linear_transpose(lambda a, y: jax_tsmm.ab(a, c, out=y, alpha=-2, beta=3), a, y)(ct)
    np.testing.assert_allclose(t[0], -2 * ct @ c.T, rtol=1e-12)
    np.testing.assert_allclose(t[1], 3 * ct, rtol=1e-12)
    t = jax.linear_transpose(lambda c, y: jax_tsmm.ab(a, c, out=y, alpha=-2, beta=3), c, y)(ct)
    np.testing.assert_allclose(t[0], -2 * a.T @ ct, rtol=1e-12)


def test_ab_out_vmap():
    rng = np.random.default_rng(14)
    full = {"a": (4, 20, 3), "c": (4, 3, 2), "y": (4, 20, 2)}
    arrays = {k: jnp.asarray(rng.standard_normal(s)) for k, s in full.items()}
    f = lambda a, c, y: jax_tsmm.ab(a, c, out=y, alpha=-1, beta=0.5)  # noqa: E731
    g = lambda a, c, y: -jnp.matmul(a, c, precision=HIGHEST) + 0.5 * y  # noqa: E731
    for axes in ((0, None, None), (None, 0, None), (None, None, 0), (0, 0, 0), (None, 0, 0), (1, None, 2)):
        args = []
        for name, ax in zip("acy", axes):
            x = arrays[name] if ax is not None else arrays[name][0]
            args.append(jnp.moveaxis(x, 0, ax) if ax else x)
        got = jax.vmap(f, in_axes=axes)(*args)
        want = jax.vmap(g, in_axes=axes)(*args)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=str(axes))
    # vmap of the gradient
    grads = jax.vmap(jax.grad(lambda a, c, y: jnp.sum(f(a, c, y) ** 2), argnums=(0, 1, 2)))(
        arrays["a"], arrays["c"], arrays["y"]
    )
    want = jax.vmap(jax.grad(lambda a, c, y: jnp.sum(g(a, c, y) ** 2), argnums=(0, 1, 2)))(
        arrays["a"], arrays["c"], arrays["y"]
    )
    for x, w in zip(grads, want):
        np.testing.assert_allclose(x, w, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(out=np.ones((10, 2))), ValueError, r"out must have the shape of the result, \(10, 3\), got \(10, 2\)"),
        (dict(out=np.ones((2, 10, 3))), ValueError, r"out must have the shape of the result"),
        (dict(out=np.ones((10, 3), np.float32)), TypeError, r"out must have the dtype of the result, float64, got float32"),
        (dict(out=[[1.0] * 3] * 10), TypeError, r"out must be a JAX or NumPy array"),
        (dict(beta=1), ValueError, r"beta=1.0 needs out"),
        (dict(out=np.ones((10, 3)), alpha=1j), TypeError, r"alpha=1j is complex but the operands are float64"),
        (dict(out=np.ones((10, 3)), beta=jnp.float64(1)), TypeError, r"beta must be a Python scalar"),
        (dict(out=np.ones((10, 3)), alpha="2"), TypeError, r"alpha must be a Python scalar"),
        (dict(out=np.ones((10, 3)), alpha=True), TypeError, r"alpha must be a Python scalar"),
    ],
)
def test_ab_out_errors(kwargs, exc, match):
    a, c = np.ones((10, 2)), np.ones((2, 3))
    with pytest.raises(exc, match=match):
        jax_tsmm.ab(a, c, **kwargs)
    arrays = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray)}
    static = {k: v for k, v in kwargs.items() if k not in arrays}
    with pytest.raises(exc, match=match):
        jax.jit(lambda a, c, **arr: jax_tsmm.ab(a, c, **arr, **static))(a, c, **arrays)


def test_linalg_errors():
    v = np.ones((10, 2))
    with pytest.raises(ValueError, match="rank >= 2"):
        linalg.cholqr2(np.ones(10))
    with pytest.raises(TypeError, match="dtype int64"):
        linalg.cholqr2(np.ones((10, 2), np.int64))
    with pytest.raises(TypeError, match="same dtype"):
        linalg.project_out(np.ones((10, 2), np.float32), v)
    with pytest.raises(ValueError, match=re.escape("long dimension K differs")):
        linalg.orthonormalize(v, np.ones((11, 2)))
    with pytest.raises(TypeError, match="shift must be"):
        linalg.cholqr2(v, shift="big")
    with pytest.raises(ValueError, match="shift must be > 0"):
        linalg.cholqr2(v, shift=-1.0)


# --- CUDA ------------------------------------------------------------------------------


@pytest.mark.skipif(_kernels.extension() is None, reason="package built without CUDA")
def test_ab_out_cuda_lowering_uses_the_ab_kernel():
    a, c, y = jnp.ones((1000, 8)), jnp.ones((8, 8)), jnp.ones((1000, 8))
    f = jax.jit(lambda a, c, y: jax_tsmm.ab(a, c, out=y, alpha=-1, beta=1))
    hlo = f.trace(a, c, y).lower(lowering_platforms=("cuda",)).as_text()
    assert "tsmm_ab" in hlo and "custom_call" in hlo


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_linalg_on_gpu(dtype):
    """The GPU path: generated kernels inside orthonormalize and ab(out=)."""
    rng = np.random.default_rng(15)
    k, m, n = 200_003, 16, 8
    q = orthonormal(rng, k, m, dtype)
    v = conditioned(rng, k, n, ILL[dtype], dtype)
    q_new, r, s = jax.jit(lambda v, q: linalg.orthonormalize(v, q, return_coefficients=True))(v, q)
    assert orth_loss(q_new) <= 100 * eps(dtype)
    assert cross(q, q_new) <= 100 * eps(dtype)
    recon = wide(q) @ wide(s) + wide(q_new) @ wide(r)
    assert np.linalg.norm(recon - wide(v), 2) <= 100 * eps(dtype) * np.linalg.norm(wide(v), 2)
    c = jnp.asarray(random_operand(rng, (m, n), np.dtype(dtype)))
    got = jax.jit(lambda q, c, v: jax_tsmm.ab(q, c, out=v, alpha=-1, beta=1))(q, c, v)
    want = wide(v) - wide(q) @ wide(c)
    scale = np.abs(wide(q)) @ np.abs(wide(c)) + np.abs(wide(v))
    assert np.all(np.abs(wide(got) - want) <= 50 * eps(dtype) * scale)
    # Gradients through the kernels agree with the same code on XLA's dot.
    fn = CASES["orthonormalize"]
    small_v, small_q = v[:5000], orthonormal(rng, 5000, m, dtype)
    weights = [jnp.ones(o.shape, o.dtype) for o in fn(small_v, small_q)]
    loss = _loss(fn, weights)
    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(small_v, small_q)
    with matmul_products():
        want = jax.jit(jax.grad(loss, argnums=(0, 1)))(small_v, small_q)
    tol = 1e-8 if dtype in ("float64", "complex128") else 1e-2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * float(jnp.max(jnp.abs(w))))
