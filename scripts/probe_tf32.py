"""How fast are the TF32 tensor cores through mma.sync and through wgmma? (cupy, no JAX)

    python3 scripts/probe_tf32.py [--json out.json]

mma.sync.m16n8k8 (what 3xTF32 uses today, one warp per instruction) issued
back to back in independent accumulator chains, against
wgmma.mma_async.m64nNk8 (sm_90a: a warpgroup of 4 warps per instruction, A
from registers, B from shared memory) at N = 8..64, issued in runs of 8 per
accumulator between waits, from a grid of full SMs. Reports TFLOP/s, the median
of 7 runs timed with CUDA events. Decides whether a wgmma path for float32 ab
(C as wgmma's B operand in shared memory, read by all four warps) can leave the
tensor cores idle most of the time.
"""

from __future__ import annotations

import argparse
import json

import cupy as cp
import numpy as np
from probe_bandwidth import time_launch

ARCH_OPTIONS = (("-arch=sm_90a",), ("-arch=compute_90a",))


def mma_sync_source(chains: int) -> str:
    d_bind = ", ".join(f'"+f"(d[c][{i}])' for i in range(4))
    return f"""
extern "C" __global__ void probe(float* out, int iterations) {{
  unsigned a[4], b[2];
  float d[{chains}][4];
  for (int i = 0; i < 4; ++i) a[i] = __float_as_uint(1.0f + 1e-3f * (threadIdx.x + i));
  for (int i = 0; i < 2; ++i) b[i] = __float_as_uint(1.0f - 1e-3f * (threadIdx.x + i));
  for (int c = 0; c < {chains}; ++c) for (int i = 0; i < 4; ++i) d[c][i] = 0.0f;
  for (int it = 0; it < iterations; ++it) {{
#pragma unroll
    for (int c = 0; c < {chains}; ++c)
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, "
                   "{{%8, %9}}, {{%0, %1, %2, %3}};\\n"
                   : {d_bind} : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }}
  float sum = 0.0f;
  for (int c = 0; c < {chains}; ++c) for (int i = 0; i < 4; ++i) sum += d[c][i];
  if (sum == 12345.678f) out[0] = sum;  // keeps the chains live
}}
"""


def wgmma_source(n: int, chains: int, run: int = 8) -> str:
    regs = n // 2
    d_list = ", ".join(f"%{i}" for i in range(regs))
    d_bind = ", ".join(f'"+f"(d[c][{i}])' for i in range(regs))
    return f"""
extern "C" __global__ void probe(float* out, int iterations) {{
  // B: 8 x {n} tf32, K-major without swizzle: core matrices of 8 columns x 4 k (128 bytes),
  // the two along k 128 bytes apart (leading offset), those along N 256 bytes apart (stride).
  __shared__ __align__(128) float sb[8 * {n}];
  for (int i = threadIdx.x; i < 8 * {n}; i += blockDim.x) sb[i] = 1.0f - 1e-3f * i;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const unsigned long long address = static_cast<unsigned long long>(__cvta_generic_to_shared(sb));
  const unsigned long long desc = ((address & 0x3FFFF) >> 4) | (static_cast<unsigned long long>(128 >> 4) << 16)
                                  | (static_cast<unsigned long long>(256 >> 4) << 32);
  unsigned a[4];
  for (int i = 0; i < 4; ++i) a[i] = __float_as_uint(1.0f + 1e-3f * (threadIdx.x + i));
  float d[{chains}][{regs}];
  for (int c = 0; c < {chains}; ++c) for (int i = 0; i < {regs}; ++i) d[c][i] = 0.0f;
  for (int it = 0; it < iterations; it += {run}) {{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int r = 0; r < {run}; ++r) {{
#pragma unroll
      for (int c = 0; c < {chains}; ++c)
        asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"
                     "wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32 {{{d_list}}}, "
                     "{{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}, %{regs + 4}, p, 1, 1;\\n}}\\n"
                     : {d_bind} : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
    }}
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }}
  float sum = 0.0f;
  for (int c = 0; c < {chains}; ++c) for (int i = 0; i < {regs}; ++i) sum += d[c][i];
  if (sum == 12345.678f) out[0] = sum;
}}
"""


def _module(source: str):
    error = None
    for options in ARCH_OPTIONS:
        try:
            return cp.RawModule(code=source, options=options).get_function("probe")
        except Exception as e:  # NVRTC spells the arch-specific target one way or the other
            error = e
    raise error


def measure(source: str, flops_per_instruction: int, instructions_per_warp: int, warps: int, sms: int,
            blocks_per_sm: int, iterations: int = 4096) -> float:
    kernel = _module(source)
    out = cp.zeros(1, dtype=cp.float32)
    grid, block = (sms * blocks_per_sm,), (32 * warps,)
    seconds = time_launch(lambda: kernel(grid, block, (out, np.int32(iterations))), repeats=7)
    return flops_per_instruction * instructions_per_warp * iterations * grid[0] * warps / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), f"{sms} SMs", flush=True)
    results = []

    def record(kind: str, n: int, chains: int, warps: int, run) -> None:
        try:
            tflops = run() / 1e12
        except Exception as error:
            print(f"{kind} n{n} chains {chains} warps {warps}: {str(error).splitlines()[0][:200]}", flush=True)
            return
        results.append(dict(kind=kind, n=n, chains=chains, warps=warps, tflops=tflops))
        print(f"{kind:6s} n{n:<3d} chains {chains} warps/block {warps:2d}: {tflops:6.1f} TFLOP/s", flush=True)

    for chains in (2, 4, 8):
        for warps in (4, 8):
            record("mma", 8, chains, warps,
                   lambda: measure(mma_sync_source(chains), 2 * 16 * 8 * 8, chains, warps, sms, 16 // warps))
    for n in (8, 16, 32, 56, 64):
        for chains in (1, 2):
            for warps in (4, 8):
                # flops of one wgmma per warp of its warpgroup
                record("wgmma", n, chains, warps,
                       lambda: measure(wgmma_source(n, chains), 2 * 16 * n * 8, chains, warps, sms, 8 // warps))
    for kind in ("mma", "wgmma"):
        best = max((r for r in results if r["kind"] == kind), key=lambda r: r["tflops"], default=None)
        if best:
            print(f"best {kind}: {best['tflops']:.1f} TFLOP/s (n{best['n']}, chains {best['chains']}, "
                  f"warps {best['warps']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
