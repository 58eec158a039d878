"""Does a grid of 128 blocks on 132 SMs leave bandwidth unused? (cupy, no JAX)

    python3 scripts/probe_grid_fill.py [--size 8192] [--json out.json]

mtsm's A X kernels at M = K = 8192 and 16384 launch 0.97 waves: their row
blocks times their splits of K come to 128 (or 256, 384, 512) blocks where 132
(264, ...) fit, so 4 SMs per wave idle. A stream-K division (each block an
equal share of the row blocks x steps of K, one block's share running into the
next row block) would fill them. This times the read of a row-major float32
A in A X 16's tiles (256 rows x 256 B a step, 8 warps a block, one block per
SM) both ways: 32 row blocks x 4 splits (128 blocks, dispatch's grid) and the
same steps dealt out stream-K over 128 (the same shares as the splits), 130
and 132 blocks, and the 128 blocks with each
row block's walk rotated by a few steps (starting columns staggered); and linear reads of equal
contiguous shares by 128 and 132 blocks. Each as single launches (CUDA events,
median of 20) and back to back (20 launches between two events, per launch),
on two matrices in turn (together larger than L2).

On an H100 (2026-11-28, docs/performance.md's fifty-third round) the split
grid's read ran 16-19 % slower than the same shares as a one-dimensional grid
(stream-K over 128 blocks), and filling 132 SMs gained nothing; the mtsm
kernels, whose cp.async rings keep more of the read in flight, ran no faster
with their splits side by side in one dimension.
"""

from __future__ import annotations

import argparse
import itertools

import cupy as cp

from probe_bandwidth import FOLD, time_launch  # scripts/ is the path's first entry when run as a script
from probe_tile_read import save_report, time_launches

SOURCE = FOLD + r"""
// One step: the R rows x SV vectors of row block `rb` at step `s`, all loads in flight.
template <int R, int SV>
__device__ __forceinline__ unsigned long long read_step(const uint4* a, long long row_vectors, long long rb,
                                                        long long s) {
  constexpr int PER = R * SV / 256;
  const uint4* rows = a + rb * R * row_vectors;
  uint4 v[PER];
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int e = j * 256 + threadIdx.x;
    v[j] = rows[(e / SV) * row_vectors + s * SV + e % SV];
  }
  unsigned long long b = 0;
#pragma unroll
  for (int j = 0; j < PER; ++j) b ^= fold(v[j]);
  return b;
}
// Splits: block (row block x, split y) reads steps [y * per_split, + per_split) of its row block.
template <int R, int SV>
__global__ void tiles_split(const uint4* a, long long row_vectors, long long per_split, unsigned long long* sink) {
  unsigned long long b = 0;
  for (long long s = blockIdx.y * per_split; s < (blockIdx.y + 1) * per_split; ++s)
    b ^= read_step<R, SV>(a, row_vectors, blockIdx.x, s);
  if (b == MAGIC) sink[0] = b;
}
// Splits, each row block's walk rotated: block (x, y) starts `rotation` x steps
// into its split and wraps around, so that row blocks do not read the same
// columns at the same time.
template <int R, int SV>
__global__ void tiles_split_rotated(const uint4* a, long long row_vectors, long long per_split, long long rotation,
                                   unsigned long long* sink) {
  unsigned long long b = 0;
  for (long long i = 0; i < per_split; ++i)
    b ^= read_step<R, SV>(a, row_vectors, blockIdx.x, blockIdx.y * per_split + (i + blockIdx.x * rotation) % per_split);
  if (b == MAGIC) sink[0] = b;
}
// Stream-K: the row blocks' steps in one sequence (row block major), block x
// reading units [x * units / G, (x + 1) * units / G).
template <int R, int SV>
__global__ void tiles_stream_k(const uint4* a, long long row_vectors, long long steps, long long units,
                               unsigned long long* sink) {
  unsigned long long b = 0;
  const long long first = blockIdx.x * units / gridDim.x, last = (blockIdx.x + 1) * units / gridDim.x;
  for (long long u = first; u < last; ++u) b ^= read_step<R, SV>(a, row_vectors, u / steps, u % steps);
  if (b == MAGIC) sink[0] = b;
}
// Linear shares: block x reads vectors [x * n / G, (x + 1) * n / G), 8 loads in flight a thread.
__global__ void linear_shares(const uint4* x, long long n, unsigned long long* sink) {
  const long long first = blockIdx.x * n / gridDim.x, last = (blockIdx.x + 1) * n / gridDim.x;
  unsigned long long b = 0;
  for (long long i = first + threadIdx.x; i < last; i += 8 * 256) {
    uint4 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = i + j * 256 < last ? x[i + j * 256] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < 8; ++j) b ^= fold(v[j]);
  }
  if (b == MAGIC) sink[0] = b;
}
"""

ROWS, STEP_BYTES = 256, 256  # A X 16's tile at 8192 (dispatch's tf32x3 kernel)


def time_back_to_back(launches, count: int = 20, repeats: int = 7) -> float:
    """Median over `repeats` of the seconds per launch of `count` launches (on
    `launches` in turn) between two CUDA events."""
    turn = itertools.cycle(launches)
    return time_launch(lambda: [next(turn)() for _ in range(count)], repeats) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=8192, help="M = K of the float32 matrix")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sv = STEP_BYTES // 16
    names = [f"tiles_split<{ROWS}, {sv}>", f"tiles_split_rotated<{ROWS}, {sv}>", f"tiles_stream_k<{ROWS}, {sv}>",
             "linear_shares"]
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names)
    split, rotated, stream_k, linear = (module.get_function(name) for name in names)
    m = k = args.size
    mats = [cp.random.random((m, k), dtype=cp.float32) for _ in range(2)]
    nbytes = m * k * 4
    vectors, row_vectors = nbytes // 16, k * 4 // 16
    row_blocks, steps = m // ROWS, k * 4 // STEP_BYTES
    sink = cp.zeros(1, dtype=cp.uint64)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    # The whole splits that fit one wave, as dispatch's model picks at 8192.
    splits = max(1, min(steps, sms // row_blocks))
    variants = {
        f"tiles, {row_blocks} row blocks x {splits} splits ({row_blocks * splits} blocks)":
            lambda a: split((row_blocks, splits), (256,), (a, row_vectors, steps // splits, sink)),
        **{f"tiles, {row_blocks} x {splits}, each row block {rotation} steps later":
            lambda a, r=rotation: rotated((row_blocks, splits), (256,), (a, row_vectors, steps // splits, r, sink))
           for rotation in (1, 3, 8)},
        **{f"tiles, stream-K over {blocks} blocks":
            lambda a, g=blocks: stream_k((g,), (256,), (a, row_vectors, steps, row_blocks * steps, sink))
           for blocks in (row_blocks * splits, sms - 2, sms)},
        f"linear shares, {row_blocks * splits} blocks":
            lambda a: linear((row_blocks * splits,), (256,), (a, vectors, sink)),
        f"linear shares, {sms} blocks": lambda a: linear((sms,), (256,), (a, vectors, sink)),
    }
    rows = []
    for label, launch in variants.items():
        launches = [lambda a=a: launch(a) for a in mats]
        single, looped = time_launches(launches), time_back_to_back(launches)
        rows.append({"variant": label, "single_s": single, "back_to_back_s": looped})
        print(f"{label:<48} single {single * 1e6:7.1f} us {nbytes / single / 1e9:6.0f} GB/s   "
              f"back to back {looped * 1e6:7.1f} us {nbytes / looped / 1e9:6.0f} GB/s", flush=True)
    if args.json:
        save_report(args.json, m, rows)


if __name__ == "__main__":
    main()
