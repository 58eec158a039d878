"""JAX transformations of atb and ab: derivatives, vmap, jit, checkpoint.

Derivatives are checked numerically (jax.test_util.check_grads, to order 2)
and against the same code written with jnp.matmul; vmap against the reference
applied slice by slice.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.test_util import check_grads

import jax_tsmm
from reference import (
    DERIVATIVE_RTOL,
    assert_derivatives_match,
    assert_tree_close,
    random_jax_operands,
    OPS,
    assert_close,
    assert_same,
    random_operand,
)

HIGHEST = lax.Precision.HIGHEST


# --- the same products written with jnp.matmul ----------------------------------------


def atb_jnp(a, b, conj=False):
    a = jnp.conj(a) if conj else a
    return jnp.matmul(jnp.swapaxes(a, -1, -2), b, precision=HIGHEST)


def ab_jnp(a, c):
    return jnp.matmul(a, c, precision=HIGHEST)


TSMM = {"atb": jax_tsmm.atb, "ab": jax_tsmm.ab}
JNP = {"atb": atb_jnp, "ab": ab_jnp}


def second_shape(op, k, m, n):
    return (k, n) if op == "atb" else (m, n)


# --- numerical derivative checks -------------------------------------------------------


@pytest.mark.parametrize("dtype", ("float64", "complex128"))
@pytest.mark.parametrize("conj", (False, True))
@pytest.mark.parametrize("batched", (False, True))
def test_check_grads_atb(dtype, conj, batched):
    rng = np.random.default_rng(0)
    a_shape, b_shape = ((2, 1, 7, 3), (3, 7, 2)) if batched else ((7, 3), (7, 2))
    a, b = random_jax_operands(rng, dtype, a_shape, b_shape)
    f = functools.partial(jax_tsmm.atb, conj=conj)
    check_grads(f, (a, b), order=2, modes=("fwd", "rev"))
    check_grads(jax.jit(f), (a, b), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("dtype", ("float64", "complex128"))
@pytest.mark.parametrize("conj", (False, True))
def test_check_grads_gram(dtype, conj):
    """atb(a, a) (``gram_p``), to order 2, both modes."""
    (a,) = random_jax_operands(np.random.default_rng(7), dtype, (2, 7, 3))
    f = lambda x: jax_tsmm.atb(x, x, conj=conj)  # noqa: E731
    check_grads(f, (a,), order=2, modes=("fwd", "rev"))
    check_grads(jax.jit(f), (a,), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("dtype", ("float64", "complex128"))
@pytest.mark.parametrize("batched", (False, True))
def test_check_grads_ab(dtype, batched):
    rng = np.random.default_rng(1)
    a_shape, c_shape = ((2, 1, 7, 3), (3, 3, 2)) if batched else ((7, 3), (3, 2))
    a, c = random_jax_operands(rng, dtype, a_shape, c_shape)
    check_grads(jax_tsmm.ab, (a, c), order=2, modes=("fwd", "rev"))
    check_grads(jax.jit(jax_tsmm.ab), (a, c), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("dtype", ("float64", "complex128"))
@pytest.mark.parametrize("conj", (False, True))
def test_check_grads_composition(dtype, conj):
    """A projection V - Q (op(Q)ᵀ V) then a nonlinearity: both primitives and
    their transposes meet in one derivative."""
    rng = np.random.default_rng(2)
    q, v = random_jax_operands(rng, dtype, (9, 3), (9, 2))
    q = q * 0.3  # keep the curvature moderate for the finite differences

    def f(q, v):
        p = v - jax_tsmm.ab(q, jax_tsmm.atb(q, v, conj=conj))
        return jnp.sin(p)

    check_grads(f, (q, v), order=2, modes=("fwd", "rev"))


# --- derivatives agree with the jnp.matmul version ---------------------------------------


def make_loss(atb, ab, conj):
    """L(a, b) = |b - a (op(a)ᵀ b)|² + Σ h(op(a)ᵀ b): real, uses both products."""

    def loss(a, b):
        g = atb(a, b, conj=conj)
        resid = b - ab(a, g)
        extra = jnp.real(g) * jnp.imag(g) if jnp.iscomplexobj(g) else jnp.tanh(g)
        return jnp.sum(jnp.abs(resid) ** 2) + jnp.sum(extra)

    return loss


LOSS_TSMM = {c: make_loss(jax_tsmm.atb, jax_tsmm.ab, c) for c in (False, True)}
LOSS_JNP = {c: make_loss(atb_jnp, ab_jnp, c) for c in (False, True)}


@pytest.mark.parametrize("dtype", ("float64", "complex128", "float32", "complex64"), ids=str)
@pytest.mark.parametrize("conj", (False, True))
def test_issue_check_jit_grad_of_hermitian_norm(dtype, conj):
    """The issue's check: jit(grad(sum |atb(a, b, conj)|²)) equals the jnp version."""
    rng = np.random.default_rng(3)
    a, b = random_jax_operands(rng, dtype, (1031, 5), (1031, 4))

    def f(atb):
        return lambda a, b: jnp.sum(jnp.abs(atb(a, b, conj=conj)) ** 2)

    got = jax.jit(jax.grad(f(jax_tsmm.atb), argnums=(0, 1)))(a, b)
    want = jax.jit(jax.grad(f(atb_jnp), argnums=(0, 1)))(a, b)
    assert_tree_close(got, want, DERIVATIVE_RTOL[np.dtype(dtype)], "jit(grad)")


@pytest.mark.parametrize("dtype", ("float64", "complex128", "float32"), ids=str)
@pytest.mark.parametrize("conj", (False, True))
@pytest.mark.parametrize("batched", (False, True))
def test_grad_value_and_grad_checkpoint(dtype, conj, batched):
    rng = np.random.default_rng(4)
    shapes = ((3, 40, 4), (1, 40, 2)) if batched else ((40, 4), (40, 2))
    a, b = random_jax_operands(rng, dtype, *shapes)
    rtol = DERIVATIVE_RTOL[np.dtype(dtype)]
    lt, lj = LOSS_TSMM[conj], LOSS_JNP[conj]
    for transform in (
        lambda f: jax.grad(f, argnums=(0, 1)),
        lambda f: jax.jit(jax.grad(f, argnums=(0, 1))),
        lambda f: jax.value_and_grad(f, argnums=(0, 1)),
        lambda f: jax.grad(jax.checkpoint(f), argnums=(0, 1)),
        lambda f: jax.jit(jax.grad(jax.remat(f, policy=jax.checkpoint_policies.nothing_saveable), argnums=1)),
    ):
        assert_tree_close(transform(lt)(a, b), transform(lj)(a, b), rtol, "grad")


@pytest.mark.parametrize("op, conj", [("atb", False), ("atb", True), ("ab", False)])
@pytest.mark.parametrize("dtype", ("float64", "complex128"))
def test_jvp_vjp_linearize(op, dtype, conj):
    rng = np.random.default_rng(5)
    x, y, dx, dy = random_jax_operands(rng, dtype, (2, 30, 4), (30, 3) if op == "atb" else (4, 3),
                            (2, 30, 4), (30, 3) if op == "atb" else (4, 3))
    ft = (lambda p, q: jax_tsmm.atb(p, q, conj=conj)) if op == "atb" else jax_tsmm.ab
    fj = (lambda p, q: atb_jnp(p, q, conj=conj)) if op == "atb" else ab_jnp
    assert_derivatives_match(ft, fj, (x, y), (dx, dy), rng, DERIVATIVE_RTOL[np.dtype(dtype)])


@pytest.mark.parametrize("op", OPS)
def test_jacfwd_jacrev_real(op):
    rng = np.random.default_rng(6)
    x, y = random_jax_operands(rng, "float64", (6, 3), (6, 2) if op == "atb" else (3, 2))
    ft, fj = TSMM[op], JNP[op]
    for jac in (jax.jacfwd, jax.jacrev):
        assert_tree_close(jac(ft, argnums=(0, 1))(x, y), jac(fj, argnums=(0, 1))(x, y), 1e-12, jac.__name__)


@pytest.mark.parametrize("op", OPS)
def test_jacfwd_jacrev_holomorphic(op):
    """Without conj both products are holomorphic in each operand."""
    rng = np.random.default_rng(7)
    x, y = random_jax_operands(rng, "complex128", (6, 3), (6, 2) if op == "atb" else (3, 2))
    ft, fj = TSMM[op], JNP[op]
    for jac in (jax.jacfwd, jax.jacrev):
        got = jac(ft, argnums=(0, 1), holomorphic=True)(x, y)
        want = jac(fj, argnums=(0, 1), holomorphic=True)(x, y)
        assert_tree_close(got, want, 1e-12, jac.__name__)


@pytest.mark.parametrize("conj", (False, True))
def test_hessian(conj):
    rng = np.random.default_rng(8)
    a, b = random_jax_operands(rng, "float64", (5, 3), (5, 2))
    for argnums in (0, 1, (0, 1)):
        got = jax.jit(jax.hessian(LOSS_TSMM[conj], argnums=argnums))(a, b)
        want = jax.jit(jax.hessian(LOSS_JNP[conj], argnums=argnums))(a, b)
        assert_tree_close(got, want, 1e-10, f"hessian argnums={argnums}")


def test_hessian_vector_product_complex():
    rng = np.random.default_rng(9)
    a, b, v = random_jax_operands(rng, "complex128", (8, 3), (8, 2), (8, 3))

    def hvp(loss):
        return jax.jvp(jax.grad(loss), (a, b), (v, jnp.zeros_like(b)))[1]

    assert_tree_close(hvp(LOSS_TSMM[True]), hvp(LOSS_JNP[True]), 1e-10, "hvp")


def test_gradients_use_the_other_primitive():
    """Each primitive's transpose is the other one: no dot_general in grad's jaxpr."""
    a = jnp.ones((10, 3))
    b = jnp.ones((10, 2))
    c = jnp.ones((3, 2))
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda a, b: jnp.sum(jax_tsmm.atb(a, b)), (0, 1)))(a, b))
    assert "tsmm_atb" in jaxpr and "tsmm_ab" in jaxpr and "dot_general" not in jaxpr
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda a, c: jnp.sum(jax_tsmm.ab(a, c)), (0, 1)))(a, c))
    assert "tsmm_atb" in jaxpr and "tsmm_ab" in jaxpr and "dot_general" not in jaxpr


@pytest.mark.parametrize("dtype, conj", [("float64", False), ("complex128", True), ("complex128", False)])
def test_a_gram_matrix_differentiates_by_one_product(dtype, conj):
    """atb(v, v), one value passed as both operands (``gram_p``): its tangent is
    X + op(X)ᵀ with X = op(v)ᵀ dv, exactly Hermitian (symmetric), one product of the
    tall operands where the bilinear rule takes two, and grad's transpose one ab;
    both agree with jnp.matmul, under jit and under vmap along another axis."""
    rng = np.random.default_rng(6)
    v, dv = random_jax_operands(rng, dtype, (300, 5), (300, 5))
    rtol = DERIVATIVE_RTOL[np.dtype(dtype)]

    def gram(x):
        return jax_tsmm.atb(x, x, conj=conj)

    def loss(gram):
        return lambda x: jnp.sum(jnp.abs(gram(x)) ** 2)

    _, tangent = jax.jit(lambda x, t: jax.jvp(gram, (x,), (t,)))(v, dv)
    _, want = jax.jvp(lambda x: atb_jnp(x, x, conj), (v,), (dv,))
    assert_tree_close(tangent, want, rtol, "jvp")
    assert np.array_equal(np.asarray(tangent), np.swapaxes(np.conj(tangent) if conj else tangent, 0, 1))
    jvp_jaxpr = str(jax.make_jaxpr(lambda x, t: jax.jvp(gram, (x,), (t,)))(v, dv))
    assert (jvp_jaxpr.count("tsmm_gram["), jvp_jaxpr.count("tsmm_atb[")) == (1, 1)
    grad_jaxpr = str(jax.make_jaxpr(jax.grad(loss(gram)))(v))
    assert (grad_jaxpr.count("tsmm_gram["), grad_jaxpr.count("tsmm_atb["), grad_jaxpr.count("tsmm_ab[")) == (1, 0, 1)
    assert_tree_close(jax.jit(jax.grad(loss(gram)))(v), jax.grad(loss(lambda x: atb_jnp(x, x, conj)))(v), rtol, "grad")
    stacked = jnp.stack([v, 2 * v, dv], axis=1)
    got = jax.jit(jax.vmap(jax.grad(loss(gram)), in_axes=1, out_axes=1))(stacked)
    for i in range(3):
        assert_tree_close(got[:, i], jax.grad(loss(lambda x: atb_jnp(x, x, conj)))(stacked[:, i]), rtol, "vmap")


# --- vmap ------------------------------------------------------------------------------------

V = 3  # the vmapped axis' size


def _stacked(rng, shape, dtype, axis):
    """V slices of ``shape`` stacked along ``axis`` (None: one unstacked array)."""
    if axis is None:
        x = random_operand(rng, shape, dtype)
        return x, [x] * V
    slices = [random_operand(rng, shape, dtype) for _ in range(V)]
    return np.stack(slices, axis=axis), slices


IN_AXES = [(0, 0), (1, 1), (-1, -1), (0, None), (None, 0), (1, None), (None, -1), (-1, 1), (2, 0)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("in_axes", IN_AXES, ids=str)
@pytest.mark.parametrize("dtype", ("float32", "complex128"))
def test_vmap_in_axes(op, in_axes, dtype):
    rng = np.random.default_rng(10)
    k, m, n = 29, 4, 3
    x_shape, y_shape = (k, m), second_shape(op, k, m, n)
    x, xs = _stacked(rng, x_shape, dtype, in_axes[0])
    y, ys = _stacked(rng, y_shape, dtype, in_axes[1])
    conj = op == "atb" and dtype == "complex128"
    f = (lambda p, q: jax_tsmm.atb(p, q, conj=conj)) if op == "atb" else jax_tsmm.ab
    out = jax.vmap(f, in_axes=in_axes)(x, y)
    out_jit = jax.jit(jax.vmap(f, in_axes=in_axes))(x, y)
    for i in range(V):
        assert_close(out[i], xs[i], ys[i], op=op, conj=conj, err_msg=f"slice {i}")
        assert_same(out_jit[i], out[i], xs[i], ys[i], op=op, err_msg="jit(vmap) vs vmap")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("out_axes", (0, 1, -1))
def test_vmap_out_axes_and_batched_operands(op, out_axes):
    """vmap over operands that carry their own (broadcasting) batch axes."""
    rng = np.random.default_rng(11)
    k, m, n = 17, 3, 2
    x_shape = (2, 1, k, m)
    y_shape = (4,) + second_shape(op, k, m, n)
    x, xs = _stacked(rng, x_shape, "float64", 1)
    y, ys = _stacked(rng, y_shape, "float64", None)
    out = jax.vmap(TSMM[op], in_axes=(1, None), out_axes=out_axes)(x, y)
    out = np.moveaxis(np.asarray(out), out_axes, 0)
    assert out.shape[0] == V
    for i in range(V):
        assert_close(out[i], xs[i], ys[i], op=op)


@pytest.mark.parametrize("op", OPS)
def test_nested_vmap(op):
    """vmap over x inside vmap over y: every pair (i, j)."""
    rng = np.random.default_rng(12)
    k, m, n = 23, 3, 4
    W = 2
    x = random_operand(rng, (V, k, m), "complex64")
    y = random_operand(rng, (W,) + second_shape(op, k, m, n), "complex64")
    f = TSMM[op]
    inner = jax.vmap(f, in_axes=(0, None))  # over x
    out = jax.vmap(inner, in_axes=(None, 0))(x, y)  # over y: out[j, i] = f(x[i], y[j])
    assert out.shape[:2] == (W, V)
    for i in range(V):
        for j in range(W):
            assert_close(out[j, i], x[i], y[j], op=op)
    # Both mapped, at different axes of each operand: X[j, :, i, :] = x[i],
    # Y[i, :, :, j] = y[j].
    big_x = np.stack([np.stack(list(x), axis=1)] * W, axis=0)
    big_y = np.stack([np.stack([y[j]] * V, axis=0) for j in range(W)], axis=-1)
    both = jax.vmap(jax.vmap(f, in_axes=(1, 0)), in_axes=(0, -1))(big_x, big_y)
    assert both.shape[:2] == (W, V)
    for i in range(V):
        for j in range(W):
            assert_close(both[j, i], x[i], y[j], op=op)


@pytest.mark.parametrize("conj", (False, True))
def test_vmap_of_grad_is_per_example_grad(conj):
    rng = np.random.default_rng(13)
    a, b = random_jax_operands(rng, "complex128", (V, 12, 3), (V, 12, 2))
    g = jax.vmap(jax.grad(LOSS_TSMM[conj], argnums=(0, 1)))(a, b)
    for i in range(V):
        want = jax.grad(LOSS_JNP[conj], argnums=(0, 1))(a[i], b[i])
        assert_tree_close((g[0][i], g[1][i]), want, 1e-10, f"example {i}")
    # grad of vmap, jacrev of vmap
    total = lambda loss: lambda a, b: jnp.sum(jax.vmap(loss)(a, b))
    assert_tree_close(
        jax.jit(jax.grad(total(LOSS_TSMM[conj]), argnums=(0, 1)))(a, b),
        jax.grad(total(LOSS_JNP[conj]), argnums=(0, 1))(a, b),
        1e-10,
        "grad(vmap)",
    )


def test_vmap_of_jvp_and_of_vjp():
    rng = np.random.default_rng(14)
    a, b, da = random_jax_operands(rng, "float64", (V, 10, 3), (10, 2), (V, 10, 3))
    f_t = lambda a, da: jax.jvp(lambda x: jax_tsmm.atb(x, b), (a,), (da,))
    f_j = lambda a, da: jax.jvp(lambda x: atb_jnp(x, b), (a,), (da,))
    assert_tree_close(jax.vmap(f_t)(a, da), jax.vmap(f_j)(a, da), 1e-12, "vmap(jvp)")
    ct = jnp.asarray(random_operand(rng, (V, 10, 2), "float64"))
    g_t = jax.vmap(lambda a, ct: jax.vjp(lambda x: jax_tsmm.ab(x, jnp.ones((3, 2))), a)[1](ct))
    g_j = jax.vmap(lambda a, ct: jax.vjp(lambda x: ab_jnp(x, jnp.ones((3, 2))), a)[1](ct))
    assert_tree_close(g_t(a, ct), g_j(a, ct), 1e-12, "vmap(vjp)")


# --- empty dimensions under grad --------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("k, m, n", [(0, 3, 2), (5, 0, 2), (5, 3, 0), (0, 0, 0)])
@pytest.mark.parametrize("dtype", ("float64", "complex128"))
def test_empty_dims_under_grad(op, k, m, n, dtype):
    x = jnp.ones((k, m), dtype)
    y = jnp.ones(second_shape(op, k, m, n), dtype)

    def loss(f):
        return lambda x, y: jnp.sum(jnp.abs(f(x, y) + 1) ** 2)

    got = jax.grad(loss(TSMM[op]), argnums=(0, 1))(x, y)
    want = jax.grad(loss(JNP[op]), argnums=(0, 1))(x, y)
    assert_tree_close(got, want, 1e-12, "grad with an empty axis")
    out = jax.jit(TSMM[op])(x, y)
    assert out.shape == JNP[op](x, y).shape
    np.testing.assert_array_equal(np.asarray(out), 0)
    jvp_out = jax.jvp(TSMM[op], (x, y), (x, y))[1]
    np.testing.assert_array_equal(np.asarray(jvp_out), 0)
    vm = jax.vmap(TSMM[op], in_axes=(None, 0))(x, jnp.stack([y, y]))
    assert vm.shape == (2,) + out.shape
