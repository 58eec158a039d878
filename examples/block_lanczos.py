"""Lowest eigenvalues of the 3-D Laplacian by block (Chebyshev-filtered) subspace iteration.

A block of ``--block`` vectors (8–32) over N grid points is, each iteration,

1. filtered by a Chebyshev polynomial of the (matrix-free, 7-point) Laplacian
   that damps the unwanted upper spectrum,
2. orthonormalized with ``jax_tsmm.linalg.orthonormalize`` (shifted CholQR3:
   the filtered block is ill-conditioned by design),
3. rotated to Ritz vectors (Rayleigh–Ritz: ``atb`` for Xᵀ A X, a small eigh,
   ``ab`` for X S), with residuals A X − X Λ from the fused
   ``ab(x, diag(λ), out=ax, alpha=-1, beta=1)``.

Every product with the long axis is a jax_tsmm primitive. The run is repeated
with ``jnp.matmul`` in place of jax_tsmm (the same code: the linalg module's
products are swapped while tracing) and both are timed. The exact eigenvalues
of the Dirichlet Laplacian on the grid are printed for comparison.

    python examples/block_lanczos.py                    # CPU, seconds: N = 24^3
    python examples/block_lanczos.py --n 2000000 --block 16   # GPU, N >= 1e6
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_tsmm
from jax_tsmm import linalg

from jnp_products import matmul_products  # the same code with jnp.matmul


# --- the operator --------------------------------------------------------------------


def laplacian(side: int):
    """x (N, p) -> A x for the 7-point Dirichlet Laplacian on a side^3 grid (h = 1)."""

    def apply(x):
        p = x.shape[-1]
        g = x.reshape(side, side, side, p)
        gp = jnp.pad(g, ((1, 1), (1, 1), (1, 1), (0, 0)))
        y = 6 * g
        y = y - gp[2:, 1:-1, 1:-1] - gp[:-2, 1:-1, 1:-1]
        y = y - gp[1:-1, 2:, 1:-1] - gp[1:-1, :-2, 1:-1]
        y = y - gp[1:-1, 1:-1, 2:] - gp[1:-1, 1:-1, :-2]
        return y.reshape(x.shape)

    return apply


def exact_eigenvalues(side: int, count: int) -> np.ndarray:
    """The smallest eigenvalues sum_d (2 - 2 cos(pi j_d / (side + 1))), j_d >= 1."""
    j = np.arange(1, min(side, count + 2) + 1)
    lam1 = 2 - 2 * np.cos(np.pi * j / (side + 1))
    sums = [a + b + c for a, b, c in itertools.product(lam1, repeat=3)]
    return np.sort(sums)[:count]


# --- one iteration -------------------------------------------------------------------


def chebyshev_filter(apply_a, x, degree: int, low, high, lowest):
    """p(A) x with p a scaled Chebyshev polynomial damping [low, high] (Zhou & Saad)."""
    e = (high - low) / 2
    c = (high + low) / 2
    sigma = e / (lowest - c)
    tau = 2 / sigma
    y = (apply_a(x) - c * x) * (sigma / e)

    def body(_, state):
        x, y, sigma = state
        sigma_new = 1 / (tau - sigma)
        y_new = (apply_a(y) - c * y) * (2 * sigma_new / e) - (sigma * sigma_new) * x
        return y, y_new, sigma_new

    _, y, _ = lax.fori_loop(1, degree, body, (x, y, sigma))
    return y


def make_step(apply_a, degree: int, high: float):
    def step(x, low, lowest):
        y = chebyshev_filter(apply_a, x, degree, low, high, lowest)
        x, _ = linalg.orthonormalize(y)                          # shifted CholQR3
        ax = apply_a(x)
        h = jax_tsmm.atb(x, ax)                                  # Xᵀ A X
        lam, s = jnp.linalg.eigh(0.5 * (h + h.T))
        x, ax = jax_tsmm.ab(x, s), jax_tsmm.ab(ax, s)            # Ritz vectors
        res = jax_tsmm.ab(x, jnp.diag(lam), out=ax, alpha=-1, beta=1)  # A X − X Λ
        res_norms = jnp.sqrt(jnp.diagonal(jax_tsmm.atb(res, res)))
        gram = jax_tsmm.atb(x, x)
        orth = jnp.linalg.norm(gram - jnp.eye(gram.shape[0], dtype=gram.dtype), 2)
        return x, lam, res_norms, orth

    return jax.jit(step)


def solve(side, block, nev, degree, tol, max_iter, dtype, seed=0):
    n = side**3
    apply_a = laplacian(side)
    high = 12.0  # Gershgorin: the spectrum lies in (0, 12)
    step = make_step(apply_a, degree, high)
    x = jax.random.normal(jax.random.key(seed), (n, block), dtype)
    x, _ = jax.jit(linalg.orthonormalize)(x)
    lam = jnp.full((block,), 0.0, dtype)
    low, lowest = high / 2, 0.0
    # Compile outside the timing.
    jax.block_until_ready(step(x, low, lowest))
    start = time.perf_counter()
    for it in range(1, max_iter + 1):
        x, lam, res, orth = step(x, low, lowest)
        lam_h, res_h = np.asarray(lam), np.asarray(res)
        low, lowest = float(lam_h[-1]), float(lam_h[0])  # damp above the block's top Ritz value
        if np.all(res_h[:nev] <= tol * max(abs(lam_h[nev - 1]), 1e-30)):
            break
    else:
        print(f"(not converged to {tol:.0e} in {max_iter} iterations: raise --degree or --max-iter)")
    seconds = time.perf_counter() - start
    return lam_h, res_h, float(orth), it, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=24**3, help="grid points N (rounded to a cube)")
    parser.add_argument("--block", type=int, default=16, help="block size (8-32)")
    parser.add_argument("--nev", type=int, default=8, help="eigenvalues to converge")
    parser.add_argument("--degree", type=int, default=12, help="Chebyshev filter degree")
    parser.add_argument("--tol", type=float, default=1e-8, help="relative residual tolerance")
    parser.add_argument("--max-iter", type=int, default=200)
    parser.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    args = parser.parse_args()
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    if not 1 <= args.nev <= args.block:
        parser.error("need 1 <= nev <= block")
    side = max(2, round(args.n ** (1 / 3)))
    dtype = jnp.dtype(args.dtype)
    tol = max(args.tol, 100 * float(jnp.finfo(dtype).eps))
    print(
        f"3-D Laplacian, {side}^3 = {side**3:,} unknowns, block {args.block}, "
        f"filter degree {args.degree}, {args.dtype}, {jax.devices()[0].device_kind}"
    )
    exact = exact_eigenvalues(side, args.nev)
    runs = {}
    for name, ctx in (("jax_tsmm", contextlib.nullcontext()), ("jnp.matmul", matmul_products())):
        with ctx:
            runs[name] = solve(side, args.block, args.nev, args.degree, tol, args.max_iter, dtype)
    lam, res, orth, iters, seconds = runs["jax_tsmm"]
    print(f"\n{'i':>3} {'eigenvalue':>22} {'exact':>22} {'|error|':>10} {'residual':>10}")
    for i in range(args.nev):
        print(f"{i:>3} {lam[i]:22.15f} {exact[i]:22.15f} {abs(lam[i] - exact[i]):10.2e} {res[i]:10.2e}")
    print()
    for name, (lam_r, res_r, orth_r, it_r, sec_r) in runs.items():
        print(
            f"{name:>11}: {it_r:3d} iterations, {sec_r:8.3f} s ({1e3 * sec_r / it_r:.2f} ms/iteration), "
            f"max residual {res_r[: args.nev].max():.2e}, ‖XᵀX − I‖ {orth_r:.2e}"
        )
    diff = np.max(np.abs(runs["jax_tsmm"][0][: args.nev] - runs["jnp.matmul"][0][: args.nev]))
    print(f"max |λ(jax_tsmm) − λ(jnp.matmul)| = {diff:.2e}")


if __name__ == "__main__":
    main()
