"""How fast are the FP64 tensor cores through each mma.sync shape? (cupy, no JAX)

    python3 scripts/probe_dmma.py [--json out.json]

Every float64 shape of mma.sync that sm_90 has (m8n8k4, m16n8k4, m16n8k8,
m16n8k16), issued back to back in independent accumulator chains from a grid
of full SMs, so the tensor pipe rather than latency binds. Reports TFLOP/s per
shape, chains and warps per block, the median of 7 runs timed with CUDA events.
The kernels' DMMA steps use the shape that wins here at the same work per
fragment load.
"""

from __future__ import annotations

import argparse
import json

import cupy as cp
import numpy as np
from probe_bandwidth import time_launch

# shape -> (A, B registers per lane, flops per instruction)
SHAPES = {"m8n8k4": (1, 1, 2 * 8 * 8 * 4), "m16n8k4": (2, 1, 2 * 16 * 8 * 4),
          "m16n8k8": (4, 2, 2 * 16 * 8 * 8), "m16n8k16": (8, 4, 2 * 16 * 8 * 16)}


def kernel_source(shape: str, chains: int) -> str:
    a_regs, b_regs, _ = SHAPES[shape]
    d_regs = 2 if shape == "m8n8k4" else 4
    operands = ", ".join(f"%{i}" for i in range(d_regs))
    a_list = ", ".join(f"%{d_regs + i}" for i in range(a_regs))
    b_list = ", ".join(f"%{d_regs + a_regs + i}" for i in range(b_regs))
    d_bind = ", ".join(f'"+d"(d[c][{i}])' for i in range(d_regs))
    ab_bind = ", ".join([f'"d"(a[{i}])' for i in range(a_regs)] + [f'"d"(b[{i}])' for i in range(b_regs)])
    return f"""
extern "C" __global__ void probe(double* out, int iterations) {{
  double a[{a_regs}], b[{b_regs}], d[{chains}][{d_regs}];
  for (int i = 0; i < {a_regs}; ++i) a[i] = 1.0 + 1e-3 * (threadIdx.x + i);
  for (int i = 0; i < {b_regs}; ++i) b[i] = 1.0 - 1e-3 * (threadIdx.x + i);
  for (int c = 0; c < {chains}; ++c) for (int i = 0; i < {d_regs}; ++i) d[c][i] = 0.0;
  for (int it = 0; it < iterations; ++it) {{
#pragma unroll
    for (int c = 0; c < {chains}; ++c)
      asm volatile("mma.sync.aligned.{shape}.row.col.f64.f64.f64.f64 {{{operands}}}, {{{a_list}}}, {{{b_list}}}, {{{operands}}};\\n"
                   : {d_bind} : {ab_bind});
  }}
  double sum = 0.0;
  for (int c = 0; c < {chains}; ++c) for (int i = 0; i < {d_regs}; ++i) sum += d[c][i];
  if (sum == 12345.678) out[0] = sum;  // keeps the chains live
}}
"""


def measure(shape: str, chains: int, warps: int, sms: int, iterations: int = 4096) -> float:
    kernel = cp.RawModule(code=kernel_source(shape, chains), options=("-arch=sm_90",)).get_function("probe")
    out = cp.zeros(1, dtype=cp.float64)
    grid, block = (sms * 16 // warps,), (32 * warps,)
    seconds = time_launch(lambda: kernel(grid, block, (out, np.int32(iterations))), repeats=7)
    return SHAPES[shape][2] * chains * iterations * grid[0] * warps / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), f"{sms} SMs")
    results = []
    for shape in SHAPES:
        for chains in (2, 4, 8):
            for warps in (4, 8):
                try:
                    tflops = measure(shape, chains, warps, sms) / 1e12
                except Exception as error:  # too many registers for the block
                    print(f"{shape:9s} chains {chains} warps/block {warps:2d}: {error}")
                    continue
                results.append(dict(shape=shape, chains=chains, warps=warps, tflops=tflops))
                print(f"{shape:9s} chains {chains} warps/block {warps:2d}: {tflops:6.1f} TFLOP/s", flush=True)
    for shape in SHAPES:
        best = max(r["tflops"] for r in results if r["shape"] == shape)
        print(f"best {shape:9s} {best:6.1f} TFLOP/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
