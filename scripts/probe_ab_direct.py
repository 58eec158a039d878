"""How close to the copy ceiling can ab get where out is much wider than A? (cupy, no JAX)

    python3 scripts/probe_ab_direct.py [--json out.json]

out = A C with out viewed as one flat array: each thread computes whole 16-byte
vectors of it (two doubles, any row and column), reading the row of A it needs
through L1 (the lanes of one row share each load) and C from shared memory.
Stores are then one contiguous span per warp whatever N is. Timed with CUDA
events (median of 9, fresh random inputs, A >= 1 GiB) against the copy ceiling
(a 16-byte copy kernel on the same GPU).
"""

from __future__ import annotations

import argparse
import json

import cupy as cp
import numpy as np
from probe_bandwidth import time_launch

SHAPES = [(1, 8), (2, 32), (3, 7), (4, 16), (8, 64), (13, 48), (1, 1), (2, 2), (4, 4), (6, 6), (8, 8)]

COPY_SOURCE = r"""
extern "C" __global__ void copy16(const double2* x, double2* y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
"""

SOURCE = r"""
extern "C" __global__ void ab_direct(const double* __restrict__ a, const double* __restrict__ c,
                                     double* __restrict__ out, long long k) {
  __shared__ double c_shared[M * N];
  for (int i = threadIdx.x; i < M * N; i += blockDim.x) c_shared[i] = c[i];
  __syncthreads();
  const long long vectors = k * N / 2;  // K*N even in every probed shape
  const long long first = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VECTORS;
#pragma unroll
  for (int v = 0; v < VECTORS; ++v) {
    const long long vector = first + v;
    if (vector >= vectors) break;
    double result[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const long long element = 2 * vector + e;
      const long long row = element / N;
      const int col = (int)(element - row * N);
      double sum = 0.0;
#pragma unroll
      for (int i = 0; i < M; ++i) sum = fma(__ldg(a + row * M + i), c_shared[i * N + col], sum);
      result[e] = sum;
    }
    reinterpret_cast<double2*>(out)[vector] = make_double2(result[0], result[1]);
  }
}
"""


def timed(kernel, grid, block, args) -> float:
    return time_launch(lambda: kernel(grid, block, args), repeats=9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    rng = np.random.default_rng()
    n = (1 << 30) // 16
    x, y = cp.asarray(rng.standard_normal(2 * n)), cp.full(2 * n, np.nan)
    copy = cp.RawModule(code=COPY_SOURCE, options=("-arch=sm_90",)).get_function("copy16")
    copy_bps = 2 * 16 * n / timed(copy, ((n + 255) // 256,), (256,), (x, y, np.int64(n)))
    del x, y
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), f"copy ceiling {copy_bps / 1e9:.0f} GB/s")
    results = []
    for m, n_cols in SHAPES:
        k = max((1 << 30) // (8 * m), 1 << 24)
        a = cp.asarray(rng.standard_normal((k, m)))
        c = cp.asarray(rng.standard_normal((m, n_cols)))
        for vectors in (1, 2, 4):
            for block in (256, 512):
                source = f"#define M {m}\n#define N {n_cols}\n#define VECTORS {vectors}\n" + SOURCE
                kernel = cp.RawModule(code=source, options=("-arch=sm_90",)).get_function("ab_direct")
                out = cp.full((k, n_cols), np.nan)
                total = k * n_cols // 2
                grid = ((total + block * vectors - 1) // (block * vectors),)
                seconds = timed(kernel, grid, (block,), (a, c, out, np.int64(k)))
                error = float(cp.abs(out[:4096] - a[:4096] @ c).max())
                pct = 100 * 8 * k * (m + n_cols) / seconds / copy_bps
                results.append(dict(m=m, n=n_cols, k=k, vectors=vectors, block=block, seconds=seconds, pct=pct,
                                    max_error=error))
                print(f"{m:2d}x{n_cols:<2d} K={k:10d} vectors {vectors} block {block}: {seconds * 1e3:7.3f} ms "
                      f"{pct:5.1f} % of copy  (max error {error:.1e})", flush=True)
        del a, c, out
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(copy_bytes_per_s=copy_bps, rows=results), f, indent=1)


if __name__ == "__main__":
    main()
