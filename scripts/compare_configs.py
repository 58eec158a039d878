"""Time variants of the model's configuration side by side, with XLA's dot, on one GPU.

    python3 scripts/compare_configs.py atb:float64:58:58 ab:float64:7:7 \
        --vary stage_copy=vector,element [--vary blocks_per_sm=1,2] [--k 65536] [--flat | --tuned] \
        [--loop-seconds 0.3] [--json out.json]
    python3 scripts/compare_configs.py ab:complex128:60:60 --tuned --vary tile_n=1,2 \
        --compile-only --device "NVIDIA H200"     # here, for the kernel cache to carry
    python3 scripts/compare_configs.py mtsm:float32:16384:16 --tuned --vary stages=2,3,4 [--splits model,4,8,16]

For each shape (op:dtype:M:N; op atb, ab, ab_update or gram; or mtsm:dtype:SIZE:N and
mtsm_t:dtype:SIZE:N, M = K = SIZE, or mtsm[_t]:dtype:MxK:N) the model's configuration
(with --flat, the flat mapping's starting point; with --tuned, the kernel dispatch
serves at that K, or mtsm's call size: the database's, a fitted or the model's,
the model's where dispatch takes XLA's dot) is timed with every
combination of the varied Config (MtsmConfig) fields, on the bench's inputs (tall matrices
of 1 GiB unless --k is given; mtsm's tuner inputs) and with the bench's loops,
and XLA's dot on the same inputs, all in turns (bench.seconds_per_call_in_turns).
Variants that fail validation or do not compile are reported and skipped. With
--compile-only the variants are compiled into the kernel cache and nothing is
timed (no GPU needed; --device names the GPU whose dispatched kernels --tuned
varies). mtsm's variants are timed at each of
``--splits`` (blocks along K; "model" is the lowering's own choice, the
default) in place of the lowering's choice. The predict-change-measure step of
tuning by hand; the tuner (jax_tsmm.tune) searches the space.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
from unittest import mock

import jax
import numpy as np

from jax_tsmm import _cuda, _dispatch, _kernels, _mtsm, bench
from jax_tsmm.codegen import Config, InvalidSpec, KernelSpec, MtsmSpec, default_config, validate
from jax_tsmm.codegen.mtsm import MtsmConfig, MtsmProblem
from jax_tsmm.codegen.mtsm import default_config as mtsm_default_config
from jax_tsmm.codegen.mtsm import validate as validate_mtsm
from jax_tsmm.codegen.search import flat_candidates


BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def parse_vary(text: str) -> tuple[str, list]:
    """FIELD=V1,V2,... of Config or MtsmConfig: the field and its values, each parsed as
    the field's type (scripts/profile_kernels.py reads its FIELD=V fields so too)."""
    field, _, values = text.partition("=")
    kind = {f.name: f.type for cls in (MtsmConfig, Config) for f in dataclasses.fields(cls)}[field]

    def boolean(value: str) -> bool:
        if value.lower() not in BOOLEANS:
            raise ValueError(f"{field}={value}: not a bool ({', '.join(BOOLEANS)})")
        return BOOLEANS[value.lower()]

    parse = {"bool": boolean, "int": int, "str": str}[kind]
    return field, [parse(v) for v in values.split(",")]


def _tsmm_shape(shape: str, args, ceilings: dict):
    """atb, ab, ab_update at op:dtype:M:N: K, base config, the validated spec of a
    config, operands, roofline, calls."""
    op, dtype, m, n = shape.split(":")
    m, n = int(m), int(n)
    problem = _dispatch.named_problem(op, dtype, m, n)
    k = args.k or bench.problem_rows(m, n, np.dtype(dtype))
    base = flat_candidates(problem)[0] if args.flat else default_config(problem, _cuda.arch())
    served = _dispatch.select_problem(problem, k, _cuda.arch(), args.device or _cuda.device_kind()) \
        if args.tuned else None
    if served is not None:  # a complex problem's kernel may be its real view's: vary that kernel
        problem, base = served.problem, served.config
    sets = None if args.compile_only else bench.operand_sets(op, np.dtype(dtype), m, n, k, seed=m * 1000 + n)
    roof = None if args.compile_only else bench.roofline_seconds(op, np.dtype(dtype), m, n, k, ceilings)

    def spec_of(config: Config) -> KernelSpec:
        spec = KernelSpec(problem, config)
        validate(spec)
        return spec

    return k, base, spec_of, sets, roof, bench.operations(op)


def _mtsm_shape(shape: str, args, ceilings: dict):
    """mtsm, mtsm_t at op:dtype:SIZE:N (M = K = SIZE) or op:dtype:MxK:N, on the
    tuner's operands; dispatch's kernel is the one of the call's size."""
    op, dtype, size, n = shape.split(":")
    m, _, k = size.partition("x")
    m, k, n = int(m), int(k or m), int(n)
    problem = MtsmProblem(op == "mtsm_t", dtype, n)
    base = mtsm_default_config(problem)
    served = _mtsm.select(dtype, problem.transpose_a, n, False, _mtsm.problem_size(1, m, k), _cuda.arch(),
                          args.device or _cuda.device_kind()) if args.tuned else None
    if served is not None:
        base = served.config
    sets = None if args.compile_only else bench.mtsm_operand_sets(dtype, m, k, n, seed=m,
                                                                  transpose_a=problem.transpose_a)
    roof = None if args.compile_only else bench.mtsm_roofline_seconds(dtype, m, n, k, ceilings)

    def spec_of(config: MtsmConfig) -> MtsmSpec:
        spec = MtsmSpec(problem, config)
        validate_mtsm(spec)
        return spec

    return k, base, spec_of, sets, roof, bench.mtsm_operations(problem.transpose_a)


def _splits_fixed(splits: str):
    """mtsm's lowering at ``splits`` blocks along K in place of its model's choice."""
    if splits == "model":
        return contextlib.nullcontext()
    return mock.patch.object(_mtsm.mtsm_codegen, "splits", lambda *_: int(splits))


@contextlib.contextmanager
def _variant(spec, splits: str):
    """Lowering with ``spec``'s kernel, at ``splits`` blocks along K (mtsm)."""
    with _dispatch.forced(spec), _splits_fixed(splits):
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="+", help="op:dtype:M:N, or mtsm[_t]:dtype:SIZE:N or mtsm[_t]:dtype:MxK:N")
    parser.add_argument("--vary", action="append", default=[], help="FIELD=V1,V2,...")
    parser.add_argument("--k", type=int, default=None, help="rows of the tall matrices (default: 1 GiB)")
    parser.add_argument("--flat", action="store_true",
                        help="vary the flat mapping's starting point (ab) instead of the model's configuration")
    parser.add_argument("--tuned", action="store_true",
                        help="vary the kernel dispatch serves (the model's where it takes XLA's dot)")
    bench.add_loop_seconds_option(parser)
    parser.add_argument("--splits", default="model",
                        help="mtsm: S1,S2,... splits of K to time each variant at ('model': the lowering's)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--compile-only", action="store_true",
                        help="compile the variants into the kernel cache ($JAX_TSMM_CACHE_DIR) and stop, on any "
                             "machine with nvcc, for the cache to travel to the GPU machine")
    parser.add_argument("--device", default=None,
                        help="with --compile-only --tuned: the GPU model whose dispatched kernels to vary, e.g. "
                             "\"NVIDIA H200\" (default: this machine's GPU)")
    args = parser.parse_args()
    if args.device is not None and not args.compile_only:
        parser.error("--device goes with --compile-only: a run varies the kernels of the GPU it runs on")
    bench.set_loop_seconds(args.loop_seconds)
    jax.config.update("jax_enable_x64", True)
    if not args.compile_only and not _cuda.register_targets():
        raise SystemExit("needs a GPU and the CUDA extension")
    ceilings = None if args.compile_only else bench.measure_ceilings()
    varied = [parse_vary(v) for v in args.vary]
    rows = []
    for shape in args.shapes:
        op = shape.split(":")[0]
        k, base, spec_of, sets, roof, (ours, xla) = (_mtsm_shape if op in bench.MTSM_OPS else _tsmm_shape)(
            shape, args, ceilings)
        in_place = op == "ab_update"
        specs = []
        for values in itertools.product(*(vals for _, vals in varied)):
            config = dataclasses.replace(base, **{f: v for (f, _), v in zip(varied, values)})
            try:
                specs.append(spec_of(config))
            except InvalidSpec as error:
                print(f"{shape} {values}: invalid: {error}", flush=True)
        if args.compile_only:
            _kernels.precompile(specs, _cuda.arch())  # the default architecture where this machine has no GPU
            print(f"{shape}: {len(specs)} variants compiled in {_kernels.cache_dir()}", flush=True)
            continue
        specs = _kernels.compilable(specs, _cuda.arch())
        splits = args.splits.split(",") if op in bench.MTSM_OPS else ["model"]
        variants = list(itertools.product(specs, splits))
        xla_s, *variant_s = bench.seconds_per_call_in_turns(
            [xla] + [ours] * len(variants), sets, roof, updates_last=in_place,
            compiled_in=[None] + [_variant(spec, split) for spec, split in variants])
        for (spec, split), seconds in zip(variants, variant_s):
            variant = {f: getattr(spec.config, f) for f, _ in varied} | ({"splits": split} if split != "model" else {})
            rows.append({"shape": shape, "K": k, "variant": variant, "config": dataclasses.asdict(spec.config),
                         "tsmm_s": seconds, "tsmm_pct": 100 * roof / seconds,
                         "xla_s": xla_s, "xla_pct": 100 * roof / xla_s})
            print(f"{shape:>20} K={k:<10} {variant}  {seconds * 1e6:9.1f} us {100 * roof / seconds:5.1f}%   "
                  f"xla {xla_s * 1e6:9.1f} us {100 * roof / xla_s:5.1f}%", flush=True)
        del sets
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": jax.devices()[0].device_kind, "ceilings": ceilings, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
