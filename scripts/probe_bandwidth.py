"""Which access pattern reaches this GPU's highest DRAM bandwidth? (cupy, no JAX)

    python3 scripts/probe_bandwidth.py [--gib 2] [--json out.json]

Times read-only, copy and write-only streaming kernels that differ in one thing
each: a full grid (one or a few elements per thread, as many blocks as the data
needs) against grid-stride loops over a fixed grid, and 4-, 8- and 16-byte
accesses. Reports GB/s (bytes read plus written) per variant, the median of 20
runs timed with CUDA events on fresh random data. The bench's ceilings
(jax_tsmm.bench.measure_ceilings) should match the best of these.
"""

from __future__ import annotations

import argparse
import json

import cupy as cp
import numpy as np

# What the read kernels load is folded into a sink written only when it equals MAGIC,
# so that the compiler keeps every load (the probes' kernels share it).
FOLD = r"""
#define MAGIC 0x7ff4a5a5c3c3e1e1ull
__device__ __forceinline__ unsigned long long fold(uint4 v) {
  return (((unsigned long long)v.y << 32) | v.x) ^ (((unsigned long long)v.w << 32) | v.z);
}
"""

SOURCE = FOLD + r"""
extern "C" __global__ void read_stride4(const uint4* x, long long n, unsigned long long* sink) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long b = 0;
  for (; i + 3 * stride < n; i += 4 * stride)
    b ^= fold(x[i]) ^ fold(x[i + stride]) ^ fold(x[i + 2 * stride]) ^ fold(x[i + 3 * stride]);
  for (; i < n; i += stride) b ^= fold(x[i]);
  if (b == MAGIC) sink[0] = b;
}
extern "C" __global__ void read_vec(const uint4* x, long long n, unsigned long long* sink) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && fold(x[i]) == MAGIC) sink[0] = 1;
}
extern "C" __global__ void read_vec4(const uint4* x, long long n, unsigned long long* sink) {
  const long long i = (long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;
  unsigned long long b = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) if (i + j * blockDim.x < n) b ^= fold(x[i + j * blockDim.x]);
  if (b == MAGIC) sink[0] = b;
}
extern "C" __global__ void read_double(const unsigned long long* x, long long n, unsigned long long* sink) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] == MAGIC) sink[0] = 1;
}
extern "C" __global__ void copy_vec(const uint4* x, uint4* y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
extern "C" __global__ void copy_vec2(const uint4* x, uint4* y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x * 2 + threadIdx.x;
  uint4 v0, v1;
  if (i < n) v0 = x[i];
  if (i + blockDim.x < n) v1 = x[i + blockDim.x];
  if (i < n) y[i] = v0;
  if (i + blockDim.x < n) y[i + blockDim.x] = v1;
}
extern "C" __global__ void copy_double(const double* x, double* y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
extern "C" __global__ void copy_float(const float* x, float* y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
extern "C" __global__ void copy_stride2(const uint4* x, uint4* y, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + stride < n; i += 2 * stride) {
    const uint4 v0 = x[i], v1 = x[i + stride];
    y[i] = v0;
    y[i + stride] = v1;
  }
  for (; i < n; i += stride) y[i] = x[i];
}
extern "C" __global__ void write_vec(uint4* y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = make_uint4((unsigned)i, (unsigned)(i >> 32), 0x9e3779b9u, 0x7f4a7c15u);
}
// Chunks of PER x blockDim contiguous vectors, as the package's persistent kernels
// stage rows: all loads of a thread's part of the chunk, then all stores.
template <int PER>
__device__ __forceinline__ void copy_chunk(const uint4* x, uint4* y, long long first) {
  uint4 v[PER];
#pragma unroll
  for (int j = 0; j < PER; ++j) v[j] = x[first + j * blockDim.x + threadIdx.x];
#pragma unroll
  for (int j = 0; j < PER; ++j) y[first + j * blockDim.x + threadIdx.x] = v[j];
}
// A fixed grid that strides over the chunks (each block's order fixed in advance).
template <int PER>
__device__ void copy_chunks_stride(const uint4* x, uint4* y, long long chunks) {
  for (long long c = blockIdx.x; c < chunks; c += gridDim.x) copy_chunk<PER>(x, y, c * PER * blockDim.x);
}
// A fixed grid whose blocks take the next chunk from a counter: the chunks in
// flight stay a narrow window of addresses, as a full grid's do.
template <int PER>
__device__ void copy_chunks_dynamic(const uint4* x, uint4* y, long long chunks, unsigned long long* next) {
  __shared__ long long taken;
  for (;;) {
    if (threadIdx.x == 0) taken = (long long)atomicAdd(next, 1ull);
    __syncthreads();
    const long long c = taken;
    __syncthreads();
    if (c >= chunks) return;
    copy_chunk<PER>(x, y, c * PER * blockDim.x);
  }
}
extern "C" __global__ void copy_chunks4_grid(const uint4* x, uint4* y) { copy_chunk<4>(x, y, blockIdx.x * 4ll * blockDim.x); }
extern "C" __global__ void copy_chunks4_stride(const uint4* x, uint4* y, long long chunks) { copy_chunks_stride<4>(x, y, chunks); }
extern "C" __global__ void copy_chunks16_stride(const uint4* x, uint4* y, long long chunks) { copy_chunks_stride<16>(x, y, chunks); }
extern "C" __global__ void copy_chunks4_dynamic(const uint4* x, uint4* y, long long chunks, unsigned long long* next) {
  copy_chunks_dynamic<4>(x, y, chunks, next);
}
extern "C" __global__ void copy_chunks16_dynamic(const uint4* x, uint4* y, long long chunks, unsigned long long* next) {
  copy_chunks_dynamic<16>(x, y, chunks, next);
}
"""


def time_launch(launch, repeats: int = 20) -> float:
    """Median seconds of `repeats` launches, timed with CUDA events after one warm-up."""
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    launch()
    times = []
    for _ in range(repeats):
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=2.0, help="bytes of each buffer, in GiB")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    kernel = {name: module.get_function(name) for name in (
        "read_stride4", "read_vec", "read_vec4", "read_double", "copy_vec", "copy_vec2", "copy_double",
        "copy_float", "copy_stride2", "write_vec", "copy_chunks4_grid", "copy_chunks4_stride", "copy_chunks16_stride",
        "copy_chunks4_dynamic", "copy_chunks16_dynamic")}
    nbytes = int(args.gib * 2**30) // 16 * 16
    x = cp.random.random(nbytes // 8, dtype=cp.float64)
    y = cp.full(nbytes // 8, np.nan)
    sink = cp.zeros(1, dtype=cp.uint64)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    vectors, doubles, floats = nbytes // 16, nbytes // 8, nbytes // 4
    threads = 256

    def blocks(count: int, per_thread: int = 1) -> int:
        return -(-count // (threads * per_thread))

    variants = []
    for per_sm in (4, 8, 16, 32):
        variants.append((f"read, grid-stride 16 B x4 in flight, {per_sm} blocks/SM", nbytes,
                         lambda g=sms * per_sm: kernel["read_stride4"]((g,), (threads,), (x, vectors, sink))))
    variants += [
        ("read, full grid, 16 B per thread", nbytes,
         lambda: kernel["read_vec"]((blocks(vectors),), (threads,), (x, vectors, sink))),
        ("read, full grid, 4 x 16 B per thread", nbytes,
         lambda: kernel["read_vec4"]((blocks(vectors, 4),), (threads,), (x, vectors, sink))),
        ("read, full grid, 8 B per thread", nbytes,
         lambda: kernel["read_double"]((blocks(doubles),), (threads,), (x, doubles, sink))),
        ("copy, full grid, 16 B per thread", 2 * nbytes,
         lambda: kernel["copy_vec"]((blocks(vectors),), (threads,), (x, y, vectors))),
        ("copy, full grid, 2 x 16 B per thread", 2 * nbytes,
         lambda: kernel["copy_vec2"]((blocks(vectors, 2),), (threads,), (x, y, vectors))),
        ("copy, full grid, 8 B per thread", 2 * nbytes,
         lambda: kernel["copy_double"]((blocks(doubles),), (threads,), (x, y, doubles))),
        ("copy, full grid, 4 B per thread", 2 * nbytes,
         lambda: kernel["copy_float"]((blocks(floats),), (threads,), (x, y, floats))),
    ]
    for per_sm in (4, 8, 16):
        variants.append((f"copy, grid-stride 16 B x2 in flight, {per_sm} blocks/SM", 2 * nbytes,
                         lambda g=sms * per_sm: kernel["copy_stride2"]((g,), (threads,), (x, y, vectors))))
    next_chunk = cp.zeros(1, dtype=cp.uint64)

    def chunked(name: str, per: int, grid: int | None):
        """(bytes moved, launch) of a copy of the whole chunks; the counter is reset
        inside every variant's timing alike."""
        chunks = vectors // (threads * per)
        args = (x, y) if grid is None else (x, y, chunks) if "stride" in name else (x, y, chunks, next_chunk)

        def launch():
            next_chunk.fill(0)
            kernel[name]((chunks if grid is None else grid,), (threads,), args)
        return 2 * chunks * threads * per * 16, launch

    variants.append(("copy, full grid, chunks of 4 x 16 B per thread", *chunked("copy_chunks4_grid", 4, None)))
    for per in (4, 16):
        for per_sm in (2, 4, 8):
            for way in ("stride", "dynamic"):
                variants.append((f"copy, {per_sm} blocks/SM, chunks of {per} x 16 B per thread, {way}",
                                 *chunked(f"copy_chunks{per}_{way}", per, sms * per_sm)))
    variants.append(("write, full grid, 16 B per thread", nbytes,
                     lambda: kernel["write_vec"]((blocks(vectors),), (threads,), (y, vectors))))
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"{device}, {sms} SMs, buffers of {nbytes / 2**30:.2f} GiB")
    rows = []
    for name, moved, launch in variants:
        seconds = time_launch(launch)
        rows.append({"variant": name, "bytes": moved, "seconds": seconds, "gbps": moved / seconds / 1e9})
        print(f"{moved / seconds / 1e9:8.0f} GB/s  {seconds * 1e3:7.3f} ms  {name}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "multiprocessors": sms, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
