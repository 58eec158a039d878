"""Block Gram–Schmidt and Cholesky-QR for tall & skinny blocks, on jax_tsmm's primitives.

Every product with the long axis goes through :func:`jax_tsmm.atb` (Gram
matrices and projection coefficients, Vᴴ W) or :func:`jax_tsmm.ab` (V C, and
the fused update W − Q C as ``ab(q, c, out=w, alpha=-1, beta=1)``); everything
else is dense work on the small (n, n) matrices (Cholesky, triangular inverse).
So the functions here are jit-able, vmap-able and differentiable (forward and
reverse, to any order) wherever the primitives are, real and complex, float32
and float64, with any leading batch axes.

Shapes: V is (..., K, n), Q is (..., K, m) with orthonormal columns; K is the
long axis. All functions use the conjugate transpose (ᴴ) for complex data.

* :func:`project_out`: V − Q (Qᴴ V), block classical Gram–Schmidt, by default
  with one reorthogonalization pass (CGS2).
* :func:`cholqr`: one Cholesky-QR pass, V = Q R with R upper triangular.
* :func:`cholqr2`: CholQR2 (two passes); with ``shift`` the shifted CholQR3 of
  Fukaya et al. for ill-conditioned V.
* :func:`orthonormalize`: (Q_new, R) with V = Q S + Q_new R, Q_new orthonormal
  and orthogonal to Q.

Numerics (u the unit roundoff: 1.1e-16 in float64, 6.0e-8 in float32; see
docs/linalg.md for measurements):

* Plain CholQR2 gives ‖QᴴQ − I‖ = O(u) for κ(V) up to about u^(-1/2)/c: in
  practice ~1e7 in float64 and ~1e3 in float32. Beyond that the Gram matrix is
  numerically indefinite and the Cholesky factor is NaN.
* The shift (``shift=True``) extends this to κ(V) up to about
  1 / (u · sqrt(11 (K n + n (n+1)))): e.g. ~1e12 in float64 for K = 1e5, n = 16,
  and ~1e3–1e4 in float32 (where the shift for large K n approaches ‖V‖² and
  buys little; there pass an explicit relative shift, ``shift=1e-6``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.linalg import solve_triangular

from jax_tsmm._api import ab, atb

__all__ = ["cholqr", "cholqr2", "orthonormalize", "project_out", "fukaya_shift"]

_HIGHEST = lax.Precision.HIGHEST


# --- small dense helpers (n x n) -------------------------------------------------------


def _h(x):
    """Conjugate transpose of the last two axes."""
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _eye_like(g):
    return jnp.broadcast_to(jnp.eye(g.shape[-1], dtype=g.dtype), g.shape)


def _small_matmul(x, y):
    return jnp.matmul(x, y, precision=_HIGHEST)


def _unit_roundoff(dtype) -> float:
    return float(jnp.finfo(dtype).eps) / 2.0


def _check_block(name: str, arg: str, x):
    if not isinstance(x, (jax.Array, np.ndarray)):
        raise TypeError(f"jax_tsmm.linalg.{name}: {arg} must be an array, got {type(x).__name__}")
    x = jnp.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"jax_tsmm.linalg.{name}: {arg} must have rank >= 2, got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.inexact) or x.dtype in (jnp.bfloat16, jnp.float16):
        raise TypeError(
            f"jax_tsmm.linalg.{name}: {arg} has dtype {x.dtype}; expected float32, float64, "
            "complex64 or complex128"
        )
    return x


def _gram(v):
    """Vᴴ V, made exactly Hermitian (its rounding is not)."""
    g = atb(v, v, conj=True)
    return 0.5 * (g + _h(g))


# --- the shift ---------------------------------------------------------------------------


def fukaya_shift(v, gram=None):
    """The shift s = 11 (K n + n (n+1)) u ‖V‖² of Fukaya et al. (2020), with ‖V‖_F
    (an upper bound of ‖V‖₂, so a safe choice) computed from the Gram matrix.

    Returns s with V's batch shape and real dtype, outside differentiation
    (the QR factors do not depend on s in exact arithmetic).
    """
    k, n = v.shape[-2:]
    g = _gram(v) if gram is None else gram
    norm2 = jnp.real(jnp.trace(g, axis1=-2, axis2=-1))
    factor = 11.0 * (k * n + n * (n + 1)) * _unit_roundoff(v.dtype)
    return lax.stop_gradient(factor * norm2)


def _shift_value(v, gram, shift):
    """Absolute shift s for ``shift``: True → Fukaya's; a float c → c ‖V‖_F²."""
    if shift is True or shift == "fukaya":
        return fukaya_shift(v, gram)
    if isinstance(shift, (bool, np.bool_)) or not isinstance(shift, (int, float, np.floating)):
        raise TypeError(
            f"jax_tsmm.linalg: shift must be None, True, 'fukaya' or a float, got {shift!r}"
        )
    if not shift > 0:
        raise ValueError(f"jax_tsmm.linalg: a relative shift must be > 0, got {shift!r}")
    norm2 = jnp.real(jnp.trace(gram, axis1=-2, axis2=-1))
    return lax.stop_gradient(float(shift) * norm2)


# --- Cholesky-QR -----------------------------------------------------------------------


def _cholqr_pass(v, shift=None):
    g = _gram(v)
    if shift is not None and shift is not False:
        s = _shift_value(v, g, shift)
        g = g + s[..., None, None].astype(g.dtype) * _eye_like(g)
    r = _h(jnp.linalg.cholesky(g))  # upper triangular, real positive diagonal
    r_inv = solve_triangular(r, _eye_like(r), lower=False)
    return ab(v, r_inv), r


def cholqr(v, *, shift=None):
    """One Cholesky-QR pass: G = Vᴴ V = Rᴴ R, Q = V R⁻¹. Returns (Q, R).

    Q is orthonormal only to O(u κ(V)²); use :func:`cholqr2`. ``shift`` adds
    s I to G before the factorization (see :func:`cholqr2`); then V = Q R still
    holds but Q is not orthonormal, only better conditioned than V.
    """
    v = _check_block("cholqr", "v", v)
    return _cholqr_pass(v, shift)


def cholqr2(v, *, shift=None):
    """CholQR2, or the shifted CholQR3 with ``shift``. Returns (Q, R), V = Q R,
    R upper triangular with a positive real diagonal.

    shift:
      * ``None``/``False`` (default): CholQR2, two Cholesky-QR passes:
        ‖QᴴQ − I‖ = O(u) for κ(V) ≲ u^(-1/2) (~1e7 in float64, ~1e3 in float32);
        beyond that R and Q come out NaN.
      * ``True`` (or ``"fukaya"``): shifted CholQR3: a first pass on
        Vᴴ V + s I with s = 11 (K n + n(n+1)) u ‖V‖_F² (:func:`fukaya_shift`),
        then CholQR2; works up to κ(V) ≈ 1 / (u sqrt(11 (K n + n(n+1)))).
      * a float c > 0: the same with the relative shift s = c ‖V‖_F².

    Costs two (three with a shift) Gram matrices and block products.
    """
    v = _check_block("cholqr2", "v", v)
    r0 = None
    if shift is not None and shift is not False:
        v, r0 = _cholqr_pass(v, shift)
    q1, r1 = _cholqr_pass(v)
    q, r2 = _cholqr_pass(q1)
    r = _small_matmul(r2, r1)
    return q, (r if r0 is None else _small_matmul(r, r0))


# --- block Gram–Schmidt ----------------------------------------------------------------


def _project(q, v, reorth):
    s = atb(q, v, conj=True)
    w = ab(q, s, out=v, alpha=-1, beta=1)
    if reorth:
        s2 = atb(q, w, conj=True)
        w = ab(q, s2, out=w, alpha=-1, beta=1)
        s = s + s2
    return w, s


def _check_pair(name, q, v):
    q = _check_block(name, "q", q)
    v = _check_block(name, "v", v)
    if q.dtype != v.dtype:
        raise TypeError(f"jax_tsmm.linalg.{name}: q and v must have the same dtype, got {q.dtype} and {v.dtype}")
    if q.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"jax_tsmm.linalg.{name}: long dimension K differs: q has shape {q.shape}, v has shape {v.shape}"
        )
    return q, v


def project_out(q, v, *, reorth: bool = True, return_coefficients: bool = False):
    """V − Q (Qᴴ V) for Q (..., K, m) with orthonormal columns and V (..., K, n).

    Block classical Gram–Schmidt: one pass (``reorth=False``) leaves
    ‖Qᴴ W‖ ≈ u ‖V‖ κ-dependent; the default second pass (CGS2) brings it to
    O(u) ‖V‖ for any V. Each pass is one ``atb`` and one fused ``ab`` update.
    With ``return_coefficients``, returns (W, S) with V = Q S + W.
    """
    q, v = _check_pair("project_out", q, v)
    w, s = _project(q, v, reorth)
    return (w, s) if return_coefficients else w


def orthonormalize(v, q=None, *, shift=True, return_coefficients: bool = False):
    """Orthonormalize V (..., K, n) against Q (..., K, m) (orthonormal, optional)
    and within itself. Returns (Q_new, R), or (Q_new, R, S) with
    ``return_coefficients``, such that V = Q S + Q_new R, Q_new orthonormal and
    Qᴴ Q_new ≈ 0, R upper triangular (n, n).

    Without Q this is :func:`cholqr2` (shifted CholQR3 unless ``shift=None``).
    With Q it is block Gram–Schmidt with reorthogonalization (BCGS2): project V
    out of Q, orthonormalize the remainder by (shifted) CholQR3, then project
    once more and finish with one CholQR pass (the block is orthonormal to
    O(u) by then, so one pass suffices; this second pass removes what the
    first left of Q, amplified by the remainder's conditioning). Cost: 6 (5
    without shift) atb and 6 (5) ab over the long axis.

    ``shift`` (see :func:`cholqr2`): ``True`` (default) handles κ(V) up to
    ~1e12 in float64; ``None`` saves one Gram matrix per pass and is enough for
    κ(V) ≲ 1e7 (float64) / 1e3 (float32).
    """
    v = _check_block("orthonormalize", "v", v)
    if q is None:
        q_new, r = cholqr2(v, shift=shift)
        if return_coefficients:
            return q_new, r, jnp.zeros(v.shape[:-2] + (0, v.shape[-1]), v.dtype)
        return q_new, r
    q, v = _check_pair("orthonormalize", q, v)
    w, s1 = _project(q, v, reorth=False)
    w1, r1 = cholqr2(w, shift=shift)
    w2, s2 = _project(q, w1, reorth=False)
    q_new, r2 = _cholqr_pass(w2)
    r = _small_matmul(r2, r1)
    if return_coefficients:
        return q_new, r, s1 + _small_matmul(s2, r1)
    return q_new, r
