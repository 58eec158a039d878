"""Leading singular triplets of a dense matrix by randomized subspace iteration.

A dense M × K matrix A is touched only through products with a block of
``--rank + --oversample`` vectors (Halko, Martinsson & Tropp, 2011, Algorithm 4.4):

1. Y = A Ω for a Gaussian Ω (``mtsm``), then ``--power`` rounds of
   Q = orth(Y), Z = Aᵀ Q (``mtsm(a, q, transpose_a=True)``: Aᵀ is never formed),
   Y = A orth(Z), with ``jax_tsmm.linalg.orthonormalize`` (shifted CholQR3) as orth;
2. Q = orth(Y) and Z = Aᵀ Q = Bᵀ, whose thin SVD comes from Z = Q_z R and the
   SVD of the small R = W Σ Pᵀ: A ≈ Q B = (Q P) Σ (Q_z W)ᵀ (``ab`` for both).

Every product with A or with the long axis is a jax_tsmm primitive. The test
matrix has known singular values (σ_i = 0.7^i, i = 0..255, with random singular
vectors); the run is repeated with ``jnp.matmul`` in place of jax_tsmm (the
same code, the products swapped while tracing) and both are timed.

    python examples/randomized_svd.py                    # CPU, seconds: 2048 x 2048
    python examples/randomized_svd.py --size 30720       # GPU: A of 7.5 GB in float64
"""

from __future__ import annotations

import argparse
import contextlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_tsmm
from jax_tsmm import linalg

from jnp_products import matmul_products  # the same code with jnp.matmul

HIGHEST = lax.Precision.HIGHEST
DECAY, SPECTRUM = 0.7, 256  # σ_i = DECAY^i for i < SPECTRUM, 0 beyond


def test_matrix(size: int, dtype, seed: int = 0):
    """A = U diag(σ) Vᵀ (size × size) with orthonormal U, V of SPECTRUM columns, and σ."""
    key_u, key_v = jax.random.split(jax.random.key(seed))
    u, _ = jnp.linalg.qr(jax.random.normal(key_u, (size, SPECTRUM), dtype))
    v, _ = jnp.linalg.qr(jax.random.normal(key_v, (size, SPECTRUM), dtype))
    sigma = DECAY ** jnp.arange(SPECTRUM, dtype=dtype)
    return jnp.matmul(u * sigma, v.T, precision=HIGHEST), np.asarray(sigma)


def randomized_svd(a, omega, power: int):
    """A ≈ U diag(s) Vᵀ from the range of A Ω after ``power`` rounds of subspace iteration."""
    y = jax_tsmm.mtsm(a, omega)                                   # A Ω
    for _ in range(power):
        q, _ = linalg.orthonormalize(y)
        z, _ = linalg.orthonormalize(jax_tsmm.mtsm(a, q, transpose_a=True))   # orth(Aᵀ Q)
        y = jax_tsmm.mtsm(a, z)                                   # A Z
    q, _ = linalg.orthonormalize(y)
    q_z, r = linalg.orthonormalize(jax_tsmm.mtsm(a, q, transpose_a=True))     # Bᵀ = Aᵀ Q = Q_z R
    w, s, p_t = jnp.linalg.svd(r)                                 # R = W Σ Pᵀ: B = P Σ Wᵀ Q_zᵀ
    orth = jnp.linalg.norm(jax_tsmm.atb(q, q) - jnp.eye(q.shape[-1], dtype=q.dtype), 2)
    return jax_tsmm.ab(q, p_t.T), s, jax_tsmm.ab(q_z, w), orth


def timed(a, omega, power: int, repeats: int = 5):
    """The factors, and the median seconds of one call (compiled outside the timing)."""
    solve = jax.jit(randomized_svd, static_argnums=2)
    result = jax.block_until_ready(solve(a, omega, power))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(solve(a, omega, power))
        seconds.append(time.perf_counter() - start)
    return result, float(np.median(seconds))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=2048, help="M = K of the square test matrix")
    parser.add_argument("--rank", type=int, default=16, help="singular triplets wanted")
    parser.add_argument("--oversample", type=int, default=8, help="extra vectors in the block")
    parser.add_argument("--power", type=int, default=2, help="rounds of subspace iteration")
    parser.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    args = parser.parse_args()
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    dtype = jnp.dtype(args.dtype)
    block = args.rank + args.oversample
    a, sigma = test_matrix(args.size, dtype)
    omega = jax.random.normal(jax.random.key(1), (args.size, block), dtype)
    print(f"A {args.size} x {args.size}, rank {args.rank} + {args.oversample}, {args.power} power rounds, "
          f"{args.dtype}, {jax.devices()[0].device_kind}")
    runs = {}
    for name, ctx in (("jax_tsmm", contextlib.nullcontext()), ("jnp.matmul", matmul_products())):
        with ctx:
            runs[name] = timed(a, omega, args.power)
    (u, s, v, orth), seconds = runs["jax_tsmm"]
    s, r = np.asarray(s), args.rank
    approx = jax_tsmm.ab(u[:, :r] * s[:r], v[:, :r].T)           # U_r Σ_r V_rᵀ
    error = float(jnp.linalg.norm(a - approx)) / float(np.linalg.norm(sigma))
    optimal = float(np.linalg.norm(sigma[r:]) / np.linalg.norm(sigma))
    print(f"\n{'i':>3} {'singular value':>22} {'exact':>22} {'rel. error':>10}")
    for i in range(r):
        print(f"{i:>3} {s[i]:22.17f} {sigma[i]:22.17f} {abs(s[i] - sigma[i]) / sigma[i]:10.2e}")
    print(f"\n‖A − U_r Σ_r V_rᵀ‖_F / ‖A‖_F = {error:.12f}, optimal {optimal:.12f}: "
          f"excess {abs(error - optimal) / optimal:.2e}")
    print(f"‖QᵀQ − I‖ = {float(orth):.2e}, ‖UᵀU − I‖ = "
          f"{float(jnp.linalg.norm(jax_tsmm.atb(u, u) - jnp.eye(block, dtype=dtype), 2)):.2e}")
    for name, (_, time_s) in runs.items():
        print(f"{name:>11}: {1e3 * time_s:8.2f} ms a factorization")
    diff = np.max(np.abs(s[:r] - np.asarray(runs["jnp.matmul"][0][1][:r])) / sigma[:r])
    print(f"max |σ(jax_tsmm) − σ(jnp.matmul)| / σ = {diff:.2e}")


if __name__ == "__main__":
    main()
