"""Run one call of each named shape, for Nsight Compute to profile.

    ncu --clock-control none --kernel-name regex:tsmm_ --set full \
        python3 scripts/profile_kernels.py atb:float64:64:64 ab:float64:58:58
    ncu --clock-control none --set full python3 scripts/profile_kernels.py --xla ab:float64:58:58

Each shape (op:dtype:M:N, or op:dtype:M:N:K; mtsm and mtsm_t as op:dtype:SIZE:N
with M = K = SIZE) runs once (``--repeat`` times) on
fresh random operands of the bench's K (``bench.problem_rows``: the narrower tall
matrix holds 1 GiB, so dispatch picks from the K range the bench times; K rows
where given), through the kernels dispatch picks (``--model``: the generator's
model kernels, as if no database were shipped; ``--xla``: XLA's dot). Compilation
launches none of our kernels, so with a kernel filter each profiled launch is one
call. An mtsm shape may name fields of its kernel's configuration after an ``@``
(``mtsm:float64:16384:32@k_steps=8,stages=4``): the model's configuration with those
replaced, run whatever dispatch would choose (how a kernel the database passed over
for XLA's dot is profiled).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses

import jax

from jax_tsmm import _cuda, _dispatch, _mtsm, bench
from jax_tsmm.codegen.mtsm import MtsmProblem, MtsmSpec, default_config, validate
from compare_configs import parse_vary  # scripts/ is the path's first entry when run as a script

jax.config.update("jax_enable_x64", True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="+", help="op:dtype:M:N[:K], op in atb, ab; mtsm[_t]:dtype:SIZE:N")
    parser.add_argument("--repeat", type=int, default=1, help="calls of each shape")
    parser.add_argument("--xla", action="store_true", help="profile XLA's dot instead of jax_tsmm")
    parser.add_argument("--model", action="store_true", help="the model's kernels, ignoring the tuning database")
    args = parser.parse_args()
    for shape in args.shapes:
        shape, _, overrides = shape.partition("@")
        op, dtype, *dims = shape.split(":")
        m, n = int(dims[0]), int(dims[1])
        if op in bench.MTSM_OPS:
            k = m
            (a, b), *_ = bench.mtsm_operand_sets(dtype, m, m, n, seed=m)
            ours, xla = bench.mtsm_operations(op == "mtsm_t")
            select = lambda: _mtsm.select(dtype, op == "mtsm_t", n, False, k, _cuda.arch(), _cuda.device_kind())
            forced = mtsm_override(MtsmProblem(op == "mtsm_t", dtype, n), overrides) if overrides else None
        else:
            k = int(dims[2]) if len(dims) > 2 else bench.problem_rows(m, n, dtype)
            (a, b), *_ = bench.operand_sets(op, dtype, m, n, k, seed=m * 1000 + n)
            ours, xla = bench.operations(op)
            select = lambda: bench.timed_kernel(op, dtype, m, n, k)
            if overrides:
                raise SystemExit(f"{shape}: configuration fields are for mtsm shapes")
            forced = None
        with bench.dispatch_context(args.model), _dispatch.forced(forced) if forced else contextlib.nullcontext():
            call = jax.jit(xla if args.xla else ours).lower(a, b).compile()
            kernel = None if args.xla else forced or select()
        print(shape, "K =", k, "kernel:", kernel, flush=True)
        for _ in range(args.repeat):
            jax.block_until_ready(call(a, b))


def mtsm_override(problem: MtsmProblem, overrides: str) -> MtsmSpec:
    """The model's configuration of ``problem`` with FIELD=VALUE,... replaced (each value
    parsed as its field's type, as compare_configs.py's --vary), validated
    (scripts/clocks_under_load.py takes shapes alike)."""
    fields = {field: value for field, [value] in map(parse_vary, overrides.split(","))}
    spec = MtsmSpec(problem, dataclasses.replace(default_config(problem), **fields))
    validate(spec)
    return spec


if __name__ == "__main__":
    main()
