"""How fast does DRAM stream A X's access pattern? (cupy, no JAX)

    python3 scripts/probe_tile_read.py [--size 8192] [--json out.json]

mtsm's A X kernels read a row-major (M, K) float32 A in tiles: a block owns R
rows and walks its share of K (one split of gridDim.y) in steps of S bytes of
each row, R x S bytes a step. This times that read alone, without shared memory
or arithmetic, for tile shapes of equal bytes (R x S = 8 and 32 KiB) and grids
of about one and about four waves, against a plain linear read of the same
bytes. Reports GB/s, the median of 20 launches timed with CUDA events, each on
one of two matrices in turn (together larger than L2).
"""

from __future__ import annotations

import argparse
import itertools
import json

import cupy as cp

from probe_bandwidth import FOLD, time_launch  # scripts/ is the path's first entry when run as a script

SOURCE = FOLD + r"""
// Linear: each thread reads PER vectors blockDim apart, all in flight.
template <int PER>
__global__ void read_linear(const uint4* x, long long n, unsigned long long* sink) {
  const long long i = (long long)blockIdx.x * blockDim.x * PER + threadIdx.x;
  unsigned long long b = 0;
#pragma unroll
  for (int j = 0; j < PER; ++j) if (i + j * blockDim.x < n) b ^= fold(x[i + j * blockDim.x]);
  if (b == MAGIC) sink[0] = b;
}
// Tiles: block (row block, split) reads rows [R*bx, R*bx+R) over its share of K,
// a step of SV vectors (16 bytes) of each row at a time, all of a step's loads in
// flight (PER = R*SV/blockDim per thread; neighbouring threads read neighbouring
// vectors of one row).
template <int R, int SV>
__global__ void read_tiles(const uint4* a, long long row_vectors, long long steps_per_split,
                           unsigned long long* sink) {
  constexpr int PER = R * SV / 256;
  const uint4* rows = a + (long long)blockIdx.x * R * row_vectors;
  unsigned long long b = 0;
  const long long first = blockIdx.y * steps_per_split;
  for (long long s = first; s < first + steps_per_split; ++s) {
    uint4 v[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int e = j * 256 + threadIdx.x;
      v[j] = rows[(e / SV) * row_vectors + s * SV + e % SV];
    }
#pragma unroll
    for (int j = 0; j < PER; ++j) b ^= fold(v[j]);
  }
  if (b == MAGIC) sink[0] = b;
}
"""

TILES = [(r, 32768 // r) for r in (256, 128, 64, 32, 16, 8)] + [(r, 8192 // r) for r in (64, 32, 16, 8, 4)]


def time_launches(launches) -> float:
    """probe_bandwidth's median of timed launches, each on the next of `launches` in turn."""
    turn = itertools.cycle(launches)
    return time_launch(lambda: next(turn)())


def save_report(path: str, size: int, rows: list[dict]) -> None:
    """The rows of a run at M = K = ``size`` as JSON, naming the GPU."""
    with open(path, "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "size": size, "rows": rows},
                  f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=8192, help="M = K of the float32 matrix")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    names = ["read_linear<4>"] + [f"read_tiles<{r}, {s // 16}>" for r, s in TILES]
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names)
    m = k = args.size
    mats = [cp.random.random((m, k), dtype=cp.float32) for _ in range(2)]
    nbytes = m * k * 4
    vectors, row_vectors = nbytes // 16, k * 4 // 16
    sink = cp.zeros(1, dtype=cp.uint64)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    rows = []

    def record(label: str, seconds: float) -> None:
        rows.append({"variant": label, "seconds": seconds, "gbps": nbytes / seconds / 1e9})
        print(f"{label:<58} {seconds * 1e6:8.1f} us {nbytes / seconds / 1e9:7.0f} GB/s", flush=True)

    linear = module.get_function(names[0])
    record("linear, 4 x 16 B per thread", time_launches(
        [lambda a=a: linear((-(-vectors // 1024),), (256,), (a, vectors, sink)) for a in mats]))
    for (r, s), name in zip(TILES, names[1:]):
        kernel = module.get_function(name)
        row_blocks, steps = m // r, k * 4 // s
        grids = []
        for waves in (1, 4):  # about 8 blocks of 256 threads per SM
            splits = max(1, min(steps, round(waves * 8 * sms / row_blocks)))
            while steps % splits:
                splits -= 1
            grids.append(splits)
        for splits in dict.fromkeys(grids):  # few-row tiles may fill both grids unsplit: time it once
            launches = [lambda a=a, g=(row_blocks, splits): kernel(g, (256,), (a, row_vectors, steps // splits, sink))
                        for a in mats]
            record(f"tiles {r} rows x {s} B, {row_blocks} x {splits} blocks", time_launches(launches))
    if args.json:
        save_report(args.json, m, rows)


if __name__ == "__main__":
    main()
