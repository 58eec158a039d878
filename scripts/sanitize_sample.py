"""A sample of kernels for compute-sanitizer: each op and dtype, odd and even
shapes, ragged K, broadcast batches, the tensor-core paths (float32 too),
complex products through their real view, the fused update, chunks of K taken
from a counter over many steps, and mtsm on the tensor cores. Checks results
too, so a run that passes the sanitizer but computes garbage still fails.
Dispatch follows the model (no tuning database), so every case runs a kernel."""

import dataclasses
import itertools
import os

import jax
import numpy as np

import jax_tsmm
from jax_tsmm import _cuda, _dispatch
from jax_tsmm.codegen import Config, KernelSpec, MtsmProblem, MtsmSpec, Problem, default_config, search
from jax_tsmm.codegen.spec import has_wgmma

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng()


def random(shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


CASES = list(zip(
    itertools.product(("atb", "ab"), ("float32", "float64", "complex64", "complex128")),
    itertools.cycle([(3, 5), (8, 8), (13, 2), (1, 1)]),
    itertools.cycle([1001, 33, 4099]),
)) + [
    (("atb", "float64"), (24, 20), 1003),  # FP64 tensor cores
    (("atb", "float64"), (40, 37), 1003),  # FP64 tensor cores, least-waste warp tiles
    (("ab", "float64"), (37, 29), 1003),  # FP64 tensor cores, C in registers
    (("ab", "float64"), (64, 64), 1003),  # ... and paired 16-byte stores
    (("ab", "float64"), (11, 54), 1003),  # ... out staged beside A, five times wider
    (("ab", "float64"), (1, 41), 4099),  # FMA, out staged, 41 times wider
    (("atb", "complex128"), (100, 90), 37),  # result split into panels
    (("ab_update", "float64"), (8, 16), 1001),  # fused update
    (("ab_update", "complex64"), (5, 7), 4099),
    (("ab_update", "float64"), (24, 30), 33),  # fused update on the tensor cores
    (("atb", "float32"), (40, 37), 1003),  # float32 on the FP64 tensor cores
    (("ab", "float32"), (37, 30), 1003),  # ... ab, C in registers, paired 8-byte stores
    (("atb", "complex128"), (13, 7), 1001),  # real view: float64 26x14 on the same buffers
    (("atb", "complex64"), (30, 9), 33),
    (("ab", "complex128"), (12, 13), 4099),  # real view of A and out, C expanded
    (("ab_update", "complex64"), (20, 11), 1001),  # real view of y too
]
# Bulk stage copies (a producer warp, transaction barriers), which the model never
# picks. atb: one span of rows taken 4 apart, 2 apart, and groups of 8 rows with
# padding between them, one copy per group; floats 8 apart. ab: bulk copies in and
# bulk stores out (two buffers of out in turn), A's rows read 4 apart, 2 apart and
# 8 apart (padded groups); out's batch items start off a 16-byte boundary. Then the
# flat mapping, which the model never picks either.
BULK_CASES = [
    ("atb", (57, 57), "float64", Config(tile_m=4, tile_n=4, mapping="blocked", row_groups=3, rows_per_stage=48,
                                        stages=3, unroll=2, mma=True, stage_copy="bulk", blocks_per_sm=1)),
    ("atb", (42, 42), "float64", Config(tile_m=3, tile_n=3, mapping="blocked", row_groups=2, rows_per_stage=32,
                                        stages=2, unroll=2, mma=True, stage_copy="bulk")),
    ("atb", (64, 8), "float64", Config(tile_m=4, tile_n=1, mapping="blocked", row_groups=1, rows_per_stage=32,
                                       stages=2, mma=True, stage_copy="bulk")),
    ("atb", (33, 33), "float32", Config(tile_m=2, tile_n=3, mapping="blocked", row_groups=2, rows_per_stage=64,
                                        stages=3, unroll=2, mma=True, stage_copy="bulk")),
    ("ab", (33, 33), "float64", Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=64,
                                       c_source="global", mma=True, stage_out=True, stage_copy="bulk",
                                       blocks_per_sm=1)),
    ("ab", (50, 7), "float64", Config(tile_m=2, tile_n=1, mapping="blocked", row_groups=1, rows_per_stage=32,
                                      c_source="global", mma=True, stage_out=True, stage_copy="bulk")),
    ("ab", (40, 9), "float64", Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=4, rows_per_stage=64,
                                      c_source="global", mma=True, stage_out=True, stage_copy="bulk")),
    # The fused update with y through out's buffers (Config.y_in_out): DMMA, and wgmma below.
    ("ab_update", (33, 33), "float64", Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=64,
                                              c_source="global", mma=True, stage_out=True, stage_copy="bulk",
                                              y_in_out=True, blocks_per_sm=1)),
    # Bulk copies issued inline by the first consumer warp (atb): float64 with a ragged span, Gauss's 2x4
    # tiles. Racecheck flags a slot's reuse across the mbarriers (the staging lanes' stores of a span's
    # ragged ends against the last round's reads) in both forms, which K = 1001 (a chunk or so a block)
    # avoids; memcheck ran both clean over K = 40009 (performance.md, fortieth round).
    ("atb", (57, 57), "float64", Config(tile_m=4, tile_n=4, mapping="blocked", row_groups=3, rows_per_stage=48,
                                        stages=3, unroll=2, mma=True, stage_copy="bulk_inline", blocks_per_sm=1)),
    ("atb", (57, 57), "complex128", Config(tile_m=2, tile_n=4, mapping="blocked", row_groups=1, rows_per_stage=48,
                                           stages=2, unroll=2, mma=True, gauss=True, stage_copy="bulk_inline",
                                           blocks_per_sm=1)),
    # fma_edges: the result's last M mod 8 rows and N mod 8 columns on the FMA units, 3xTF32 from bulk
    # copies, DMMA from vector copies, 3xTF32 from vector copies with a core of one 8-row block.
    ("atb", (50, 50), "float32", Config(tile_m=2, tile_n=3, mapping="blocked", row_groups=2, rows_per_stage=128,
                                        stages=2, unroll=2, mma=True, tf32x3=True, stage_copy="bulk",
                                        fma_edges=True, blocks_per_sm=1)),
    ("atb", (33, 41), "float64", Config(tile_m=2, tile_n=5, mapping="blocked", row_groups=2, rows_per_stage=32,
                                        stages=3, unroll=2, mma=True, fma_edges=True)),
    ("atb", (9, 34), "float32", Config(tile_m=1, tile_n=2, mapping="blocked", row_groups=3, rows_per_stage=48,
                                       stages=3, unroll=2, mma=True, tf32x3=True, fma_edges=True)),
    # The flat mapping (no staging): vectors of out straddling rows (3 x 7, floats 2 x 3), whole rows (13 x 48).
    ("ab", (3, 7), "float64", Config(mapping="flat", row_groups=32, rows_per_stage=128, unroll=2, c_source="global")),
    ("ab", (2, 3), "float32", Config(mapping="flat", row_groups=32, rows_per_stage=128, c_source="global")),
    ("ab", (13, 48), "float64", Config(mapping="flat", row_groups=12, rows_per_stage=48, c_source="global",
                                       blocks_per_sm=1)),
    # wgmma (3xTF32 float32 ab, sm_90a; run on sm_90 only): A's unpadded rows read 4 and 2 apart, the
    # last 4-wide step masked past M; padded rows (a multiple of 8); C split into shared memory; bulk
    # copies in and bulk stores out, rows of a multiple of 8 read in 16- and 8-byte vectors.
    *[("ab", (m, n), "float32", Config(tile_m=2, tile_n=-(-n // 8), mapping="blocked", row_groups=4,
                                       rows_per_stage=64, mma=True, tf32x3=True, wgmma=True, c_source="shared",
                                       stage_out=stage_out, stage_copy=copy, blocks_per_sm=1))
      for m, n, stage_out, copy in ((49, 49, True, "vector"), (50, 17, False, "vector"), (40, 3, True, "vector"),
                                    (41, 41, True, "bulk"), (50, 17, True, "bulk"), (48, 48, True, "bulk"),
                                    (24, 13, True, "bulk"))
      if has_wgmma(_cuda.arch())],
    *([("ab_update", (41, 41), "float32", Config(tile_m=2, tile_n=6, mapping="blocked", row_groups=4,
                                                 rows_per_stage=64, mma=True, tf32x3=True, wgmma=True,
                                                 c_source="shared", stage_out=True, stage_copy="bulk", y_in_out=True,
                                                 blocks_per_sm=1))] if has_wgmma(_cuda.arch()) else []),
]


def check_forced(op, m, n, dtype, config, k):
    """Run `config` on two batch items of K rows (B and C broadcast) and check the result."""
    update = op == "ab_update"  # V - Q C
    a = random((2, k, m), dtype)
    b = random((1, k, n) if op == "atb" else (1, m, n), dtype)
    y = random((2, k, n), dtype) if update else None
    with _dispatch.forced(KernelSpec(Problem("ab" if update else op, dtype, m, n, update=update), config)):
        got = (jax_tsmm.atb(a, b) if op == "atb" else jax_tsmm.ab(a, b, out=y, alpha=-1, beta=1) if update
               else jax_tsmm.ab(a, b))
    want = a.swapaxes(-1, -2) @ b if op == "atb" else y - a @ b if update else a @ b
    err = np.abs(np.asarray(got) - want).max() / np.abs(want).max()
    print(f"{op} {dtype} {m}x{n} K={k} ({config.mapping}, {config.stage_copy}"
          f"{', chunks taken' if config.ring_takes_chunks else ''}): relative error {err:.1e}", flush=True)
    assert err < (1e-12 if dtype in ("float64", "complex128") else 1e-4), err


for op, (m, n), dtype, config in BULK_CASES:
    check_forced(op, m, n, dtype, config, 1001)

# Chunks taken from the batch item's counter over many steps, a dozen or more a block: ab's bulk kernels
# (the producer warp takes the next chunk after issuing a step's copies), y through out's buffers, wgmma,
# and the cp.async ring with Config.ring_takes_chunks (the model's choice for float64 on sm_90). Under
# memcheck alone: racecheck does not see the mbarriers that order a slot's reuse (and chunk_ring's) from
# one round to the next, and flags every reuse (the bulk copy into a slot, the ragged ends' stores and
# the taken chunk's store, each against the last round's reads; performance.md, fifty-first round).
LONG_K_CASES = [case for case in BULK_CASES
                if case[:3] in {("ab", (33, 33), "float64"), ("ab_update", (33, 33), "float64"),
                                ("ab", (41, 41), "float32")}] + [
    ("ab", (37, 29), "float64",
     dataclasses.replace(default_config(Problem("ab", "float64", 37, 29), _cuda.arch()), ring_takes_chunks=True)),
]
if os.environ.get("TSMM_SANITIZE_TOOL") != "racecheck":
    for op, (m, n), dtype, config in LONG_K_CASES:
        check_forced(op, m, n, dtype, config, 100_003)

# mtsm on the tensor cores: 3xTF32 on mma.sync, and on wgmma (sm_90a) with a chunk's products in flight
# while the block splits the next chunk of X; both layouts, M off the row blocks, K off the chunks and
# split over blocks (the finalize).
for transpose_a, n in ((False, 32), (True, 13)):
    problem = MtsmProblem(transpose_a, "float32", n)
    configs = search.mtsm_candidates(problem, 64, _cuda.arch())
    for config in [next(c for c in configs if c.tf32x3 and not c.wgmma)] + [c for c in configs if c.wgmma][:1]:
        spec = MtsmSpec(problem, config)
        m, k = 2 * spec.block_rows + 5, 20 * spec.chunk + 3
        a = random((k, m) if transpose_a else (m, k), "float32")
        x = random((k, n), "float32")
        with _dispatch.forced(spec):
            got = jax_tsmm.mtsm(a, x, transpose_a=transpose_a)
        want = (a.T if transpose_a else a).astype(np.float64) @ x
        err = np.abs(np.asarray(got) - want).max() / np.abs(want).max()
        print(f"mtsm transpose_a={transpose_a} float32 {m}x{n} K={k} (wgmma={config.wgmma}): relative error {err:.1e}",
              flush=True)
        assert err < 1e-4, err

print("sample done")
