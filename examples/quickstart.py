"""jax_tsmm in a few lines: a Gram matrix, a projection, a gradient.

Runs on JAX's default backend (the GPU where there is one) and prints each
result's error against the same computation written with jnp.matmul.

    python examples/quickstart.py
"""

import jax
import jax.numpy as jnp
import numpy as np

import jax_tsmm

jax.config.update("jax_enable_x64", True)
HIGHEST = jax.lax.Precision.HIGHEST


def rel_err(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return float(np.linalg.norm(x - y) / max(np.linalg.norm(y), np.finfo(y.dtype).tiny))


def main():
    print(f"jax {jax.__version__}, default device: {jax.devices()[0]}")
    key_a, key_v = jax.random.split(jax.random.key(0))
    k, m, n = 100_000, 16, 8  # tall and skinny: K >> M, N
    a = jax.random.normal(key_a, (k, m), jnp.float64)
    v = jax.random.normal(key_v, (k, n), jnp.float64)

    # 1. Gram matrix Aᵀ A (m x m), reduced over the long axis.
    gram = jax_tsmm.atb(a, a)
    print(f"Gram matrix Aᵀ A: shape {gram.shape}, "
          f"rel. error vs jnp {rel_err(gram, jnp.matmul(a.T, a, precision=HIGHEST)):.2e}")

    # 2. Cholesky-QR gives an orthonormal Q; then project V onto Q's complement:
    #    V - Q (Qᵀ V), with atb for the small coefficient block and ab to apply it.
    r = jnp.linalg.cholesky(gram, upper=True)
    q = jax.scipy.linalg.solve_triangular(r.T, a.T, lower=True).T  # Q = A R⁻¹
    ortho = jax_tsmm.atb(q, q)
    print(f"Cholesky-QR: ‖QᵀQ - I‖ = {float(jnp.linalg.norm(ortho - jnp.eye(m))):.2e}")

    @jax.jit
    def project(q, v):
        return v - jax_tsmm.ab(q, jax_tsmm.atb(q, v))

    w = project(q, v)
    w_ref = v - jnp.matmul(q, jnp.matmul(q.T, v, precision=HIGHEST), precision=HIGHEST)
    print(f"projection V - Q(QᵀV): rel. error vs jnp {rel_err(w, w_ref):.2e}, "
          f"‖Qᵀ W‖ = {float(jnp.linalg.norm(jax_tsmm.atb(q, w))):.2e}")

    # 3. Gradients: atb and ab are JAX primitives with JVP and transpose rules,
    #    so grad, vmap and jit compose with them. Complex data, Aᴴ B:
    ac = (a[:, :4] + 1j * a[:, 4:8]).astype(jnp.complex128)
    bc = (v[:, :4] - 1j * v[:, 4:]).astype(jnp.complex128)

    def loss(atb):
        return lambda a, b: jnp.sum(jnp.abs(atb(a, b, conj=True)) ** 2)

    def atb_jnp(a, b, conj):
        return jnp.matmul((jnp.conj(a) if conj else a).T, b, precision=HIGHEST)

    ga, gb = jax.jit(jax.grad(loss(jax_tsmm.atb), argnums=(0, 1)))(ac, bc)
    ga_ref, gb_ref = jax.jit(jax.grad(loss(atb_jnp), argnums=(0, 1)))(ac, bc)
    print(f"grad of ‖Aᴴ B‖²: rel. error vs jnp  dA {rel_err(ga, ga_ref):.2e}, dB {rel_err(gb, gb_ref):.2e}")

    # Batch axes broadcast like jnp.matmul; float32 keeps float32's accuracy (no plain TF32).
    a32 = a.reshape(4, k // 4, m).astype(jnp.float32)
    blocks = jax_tsmm.atb(a32, v[: k // 4].astype(jnp.float32))  # (4, m, n)
    ref = np.einsum("bkm,kn->bmn", np.asarray(a32, np.float64), np.asarray(v[: k // 4]))
    print(f"batched float32 Aᵀ B: shape {blocks.shape}, rel. error vs float64 {rel_err(blocks, ref):.2e}")


if __name__ == "__main__":
    main()
