"""Run one call of each named shape, for Nsight Compute to profile.

    ncu --clock-control none --kernel-name regex:tsmm_ --set full \
        python3 scripts/profile_kernels.py atb:float64:64:64 ab:float64:58:58
    ncu --clock-control none --set full python3 scripts/profile_kernels.py --xla ab:float64:58:58

Each shape (op:dtype:M:N, or op:dtype:M:N:K; mtsm and mtsm_t as op:dtype:SIZE:N
with M = K = SIZE) runs once (``--repeat`` times) on
fresh random operands of the bench's K (``bench.problem_rows``: the narrower tall
matrix holds 1 GiB, so dispatch picks from the K range the bench times; K rows
where given), through the kernels dispatch picks (``--model``: the generator's
model kernels, as if no database were shipped; ``--xla``: XLA's dot). Compilation launches none of our kernels, so with a kernel
filter each profiled launch is one call.
"""

from __future__ import annotations

import argparse

import jax

from jax_tsmm import _cuda, _mtsm, bench

jax.config.update("jax_enable_x64", True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="+", help="op:dtype:M:N[:K], op in atb, ab; mtsm[_t]:dtype:SIZE:N")
    parser.add_argument("--repeat", type=int, default=1, help="calls of each shape")
    parser.add_argument("--xla", action="store_true", help="profile XLA's dot instead of jax_tsmm")
    parser.add_argument("--model", action="store_true", help="the model's kernels, ignoring the tuning database")
    args = parser.parse_args()
    for shape in args.shapes:
        op, dtype, *dims = shape.split(":")
        m, n = int(dims[0]), int(dims[1])
        if op in bench.MTSM_OPS:
            k = m
            (a, b), *_ = bench.mtsm_operand_sets(dtype, m, m, n, seed=m)
            ours, xla = bench.mtsm_operations(op == "mtsm_t")
            select = lambda: _mtsm.select(dtype, op == "mtsm_t", n, False, k, _cuda.arch(), _cuda.device_kind())
        else:
            k = int(dims[2]) if len(dims) > 2 else bench.problem_rows(m, n, dtype)
            (a, b), *_ = bench.operand_sets(op, dtype, m, n, k, seed=m * 1000 + n)
            ours, xla = bench.operations(op)
            select = lambda: bench.timed_kernel(op, dtype, m, n, k)
        with bench.dispatch_context(args.model):
            call = jax.jit(xla if args.xla else ours).lower(a, b).compile()
            kernel = None if args.xla else select()
        print(shape, "K =", k, "kernel:", kernel, flush=True)
        for _ in range(args.repeat):
            jax.block_until_ready(call(a, b))


if __name__ == "__main__":
    main()
