"""The tuner's search space: candidate configurations for a problem (atb/ab, and
mtsm's), pruned by hard limits and ranked by a simple model before anything is
benchmarked (ASTRA's pruning by hardware limits, occupancy and register reuse)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

from . import mtsm
from .model import SM_REGISTERS, SM_THREADS, _split, default_config, is_valid, occupancy_ok, wgmma_config
from .mtsm import MtsmConfig, MtsmProblem, MtsmSpec
from .spec import (FLAT_MAX_M, MAX_REGISTERS, MAX_THREADS, MMA_DTYPES, VECTOR_BYTES, Config, InvalidSpec,
                   KernelSpec, Problem, dmma_step_blocks, has_bulk_copies, has_wgmma)

SM_PARTITIONS = 4
STAGE_BYTES = (8 * 1024, 16 * 1024, 32 * 1024)
# atb with bulk copies: one block per SM with two stages this large (about 256 rows
# of 2 x 44 floats). On an H200 (2026-11-24) such kernels ran float32 atb at 34..56
# 5-22 points above the search's best-scored ones (performance.md, fourteenth
# round), so ONE_BLOCK_BONUS ranks them ahead. Gauss's ab too: 13 of its 19
# winners on an H200 and an H100 (2026-11-26) are one block of 48-row stages of
# 66-100 KiB (A's rows and out's), which the smaller stages never proposed
# (thirty-sixth round); two of 104 KiB hold 48 rows up to 64 wide.
ONE_BLOCK_STAGE_BYTES = {"atb": 96 * 1024, "ab": 104 * 1024}
ONE_BLOCK_BONUS = 1.3
WGMMA_BULK_BONUS = 2  # the wgmma ab kernels' bulk copies against their vector ones (_wgmma_candidates)
WAVES = 8
# fma_edges: an edge entry's FMA per row against one entry of a tensor-core block, in
# pipe time (FP64 FMA at half DMMA's rate; FP32 FMA at about 0.6 of 3xTF32's on
# mma.sync). Its shared loads' issue slots come on top: on an H200 (2026-11-24) edges
# of 1 and 2 won, wider ones lost (performance.md, sixteenth round).
EDGE_COST = 2
TILE_SIDES = range(1, 9)  # 8x8 blocks along each side of a tensor-core warp tile
TILE_BLOCKS = 16  # the most 8x8 blocks of a tensor-core warp tile, but for LARGE_TILE_BLOCKS
# 3xTF32 atb with one block of bulk copies also takes warp tiles of up to 36 blocks,
# scored with 8 warps per SM as enough. On an H200, whose 700 W power cap lowers the
# SM clock under these kernels (to about 1500-1750 MHz, 2026-11-24), a warp that
# loads and splits each staged element once for more products ran ahead with fewer
# warps in loops of 0.4 s: 48x48 as one 6x6 tile per warp (5 warps per SM) at 81 %
# of the read roofline against 73 % for 6x2 (13 warps), 50x50 with 4x7 at 73 %
# against 66 % for 2x7 (performance.md, twenty-first round).
LARGE_TILE_BLOCKS = 36
LARGE_TILE_WARPS = 8
# Gauss's atb (Config.gauss) issues 12 independent DMMA per k-step from a 2x4 tile, and
# 8 warps per SM keep the tensor pipe as busy as 16 do: on an H100 (2026-11-26,
# complex128 57..61, bulk copies inline) 2x4 and 4x2 tiles ran 89-92 % of the read
# roofline against 84-91 % for 2x2 tiles of 16 warps, as cuBLAS's own Gauss kernel
# (64x64 per block of 8 warps) runs 92-94 % where XLA does not pad K first.
GAUSS_ATB_WARPS = 8
FLAT_THREADS = (256, 128, 512)  # the first is the flat mapping's own starting point
FLAT_PASSES = (4, 1, 16)
FLAT_WAVES = (8, 1, 64)


def _tile_widths(extent: int, widest: int = 8) -> list[int]:
    """Even splits of ``extent`` into tiles of 1..``widest``."""
    return sorted({_split(extent, w) for w in range(1, widest + 1)})


def launch_bound_registers(threads: int, blocks_per_sm: int) -> int:
    """Registers per thread that nvcc allows under __launch_bounds__(threads, blocks_per_sm):
    each of an SM's SM_PARTITIONS schedulers holds its share of the registers for its
    share of the warps, rounded up (nvcc 13.0: 96 at one block of 544 threads, 17 warps;
    168 at 288 threads; 128 at 512)."""
    warps = math.ceil(blocks_per_sm * math.ceil(threads / 32) / SM_PARTITIONS)
    return min(MAX_REGISTERS, SM_REGISTERS // SM_PARTITIONS // (32 * warps) // 8 * 8)


def _spills(spec: KernelSpec) -> bool:
    """Whether the registers the kernel needs under a bound (spec.bounded_registers)
    exceed what the launch bounds allow."""
    return spec.bounded_registers() > launch_bound_registers(spec.threads, spec.config.blocks_per_sm)


def score(spec: KernelSpec) -> float:
    """Higher is better: register reuse (FMAs per shared load), bytes in flight
    per SM, and little work wasted on tile overhang."""
    p, c = spec.problem, spec.config
    reuse = c.tile_m * c.tile_n / (c.tile_m + c.tile_n)
    in_flight = c.blocks_per_sm * (c.stages - 1) * spec.stage_bytes
    latency = min(1.0, in_flight / (48 * 1024))
    # The tensor cores compute 8-row blocks of M (ab: slabs) in pairs: ab's lone one
    # costs a pair (3xTF32 pads it, DMMA issues m8n8k4 half-empty); 3xTF32 atb's runs
    # transposed, pairing N's blocks, and pads half a step at an odd tile_n.
    if p.op == "atb":
        tile_blocks = c.tile_m * c.tile_n + ((c.tile_m % 2) * (c.tile_n % 2) if c.tf32x3 else 0)
        tiles = spec.tile_count * tile_blocks
        if spec.skips_idle_blocks:  # the share of its tiles' tensor steps that it runs
            tiles *= spec.tensor_steps / (spec.tile_count * _dmma_steps(c.tile_m, c.tile_n, c.lone_transposed))
        if c.fma_edges:  # an edge entry on the FMA units costs about two of a block's on the tensor cores;
            # the triangle computes the N edge alone and mirrors it onto the M edge
            edges = p.m * spec.edge(p.n) + (0 if c.triangle else spec.edge(p.m) * 8 * spec.mma_blocks(p.n))
            tiles += EDGE_COST * edges / 64
        useful = p.m * p.n / tiles
    else:
        paired_m = c.tile_m + c.tile_m % 2 if c.mma else c.tile_m
        useful = p.n / (spec.tiles_m * c.tile_n) * c.tile_m / paired_m
    warps = c.blocks_per_sm * spec.threads / 32
    enough = (LARGE_TILE_WARPS if c.tf32x3 and p.op == "atb" and c.tile_m * c.tile_n > TILE_BLOCKS
              else GAUSS_ATB_WARPS if c.gauss and p.op == "atb" else 16)
    return reuse * latency * useful * min(1.0, warps / enough)


def _stage_outs(problem: Problem) -> tuple[bool, ...]:
    return (True, False) if problem.op == "ab" else (False,)


def _staged_out_bytes(problem: Problem, stage_out: bool, y_in_out: bool = False) -> int:
    """Bytes per row of A that a stage holds beside A's row for ab: out's row where it
    is staged, and the fused update's row of y with it (KernelSpec.stages_y) unless y
    comes through out's buffers (Config.y_in_out)."""
    return stage_out * (1 + (problem.update and not y_in_out)) * problem.n * problem.element_bytes


def _y_forms(problem: Problem) -> tuple[bool, ...]:
    """Config.y_in_out's values to try: the fused update's y beside A, and in out's buffers."""
    return (False, True) if problem.update else (False,)


def _mma_candidates(problem: Problem, arch: str) -> dict[Config, float]:
    """Tensor-core configurations, scored like the rest with the tensor cores' rate
    counted as twice the reuse: DMMA (float64, float32; complex128 by Gauss's
    three products, Config.gauss) and, for float32, 3xTF32
    ahead of DMMA (which spends as much pipe time widening floats as on its
    products); DMMA atb tiles with a lone block of M also with it transposed
    (Config.lone_transposed), ranked up by the tensor steps it saves; also with bulk
    stage copies where the GPU has them (atb's from a producer warp and inline)
    (validate keeps the layouts that allow them), atb's and Gauss's ab's bulk ones
    also as one block per SM with two stages of ONE_BLOCK_STAGE_BYTES, and ab's bulk
    ones also in WAVES waves of blocks (a launch parameter the measurement decides)."""
    found, valid = {}, {}
    atb = problem.op == "atb"
    bulk = has_bulk_copies(arch)
    tf32_options = (False, True) if problem.dtype == "float32" else (False,)
    gauss = problem.dtype == "complex128"
    probe = KernelSpec(problem, Config(tile_m=1, tile_n=1, mma=True, gauss=gauss, rows_per_stage=8, row_groups=1,
                                       c_source="global"))
    row_bytes = (probe.smem_stride(problem.m) + (probe.smem_stride(problem.n) if atb else 0)) * problem.element_bytes

    @functools.cache
    def ab_bulk_row_bytes(slabs: int) -> float:
        """Shared bytes an ab row takes when bulk-staged: its pass's slabs lie in groups
        of the spacing, padded between groups alone (KernelSpec.layout), not padded
        row by row as row_bytes counts; row_bytes where no spacing fits."""
        spec = KernelSpec(problem, Config(tile_m=slabs, row_groups=1, mma=True, gauss=gauss, stage_copy="bulk"))
        if spec.layout is None:
            return row_bytes
        return spec.group_stride(problem.m) / spec.row_spacing * problem.element_bytes

    one_block_bytes = ONE_BLOCK_STAGE_BYTES[problem.op]
    stage_sizes = STAGE_BYTES + ((one_block_bytes,) if bulk and (atb or gauss) else ())
    edge_options = (False, True) if atb and min(problem.m, problem.n) >= 8 \
        and (problem.m % 8 or problem.n % 8) else (False,)
    # atb's bulk copies also inline (Config.stage_copy "bulk_inline") where a producer warp would cap the
    # registers below the tile's
    stage_copies = ("vector", "bulk", "bulk_inline") if bulk and atb else ("vector", "bulk") if bulk else ("vector",)
    for tile_m, tile_n, row_groups, stage_bytes, stages, blocks, stage_out, stage_copy, y_in_out, tf32x3, fma_edges in \
        itertools.product(TILE_SIDES, TILE_SIDES, (1, 2, 3, 4, 8), stage_sizes, (2, 3, 4, 6), (1, 2, 3),
                          _stage_outs(problem), stage_copies, _y_forms(problem), tf32_options, edge_options):
        bulk_copies = stage_copy != "vector"
        if y_in_out and not (bulk_copies and stage_out):
            continue
        if stages == 6 and not (bulk_copies and blocks == 1):
            continue  # a deep ring serves one block of bulk copies only (nothing else keeps it full)
        if gauss and not atb and tile_m != 2:
            continue  # Gauss's ab: each of the 15 winners on an H200 and an H100 was a pair of slabs
            # (one m16n8k4 per block and sum, registers for 12+ warps); 1, 3 and 4 slabs ran 3-16
            # points slower (performance.md, thirty-fifth round)
        one_block = stage_bytes == one_block_bytes
        if one_block and not (bulk_copies and blocks == 1 and stages == 2):
            continue
        if tile_m * tile_n > (LARGE_TILE_BLOCKS if tf32x3 and one_block else TILE_BLOCKS):
            continue
        per_pass = KernelSpec(problem, Config(row_groups=row_groups, mma=True, tf32x3=tf32x3, gauss=gauss,
                                              stage_copy=stage_copy)).rows_per_pass if atb else 8 * tile_m * row_groups
        staged = ab_bulk_row_bytes(tile_m * row_groups) if stage_copy == "bulk" and not atb else row_bytes
        staged_bytes = staged + _staged_out_bytes(problem, stage_out, y_in_out)
        rows = max(per_pass, int(stage_bytes // staged_bytes) // per_pass * per_pass)
        config = Config(tile_m=tile_m, tile_n=tile_n, mapping="blocked", row_groups=row_groups,
                        rows_per_stage=rows, stages=stages, unroll=2 if atb else 1, mma=True, tf32x3=tf32x3,
                        gauss=gauss, c_source="shared" if atb else "global", stage_out=stage_out, stage_copy=stage_copy,
                        y_in_out=y_in_out, fma_edges=fma_edges, blocks_per_sm=blocks)
        spec = KernelSpec(problem, config)
        if gauss and _spills(spec):
            continue  # Gauss's estimate follows nvcc's count (spec.bounded_registers): over the bound, it spills
        if stage_copy == "bulk_inline":
            with_producer = KernelSpec(problem, dataclasses.replace(config, stage_copy="bulk"))
            if _usable(with_producer) and not _spills(with_producer):
                continue  # a producer warp serves where it fits: on an H100 (2026-11-26) complex128 atb 57's and
                # 59's real views ran their 5x3 tiles at 80 and 85 % of the read roofline with it, 76 and 78 % inline
        if _usable(spec, valid, (tile_m, tile_n, row_groups, rows, stages, stage_out, stage_copy, y_in_out, tf32x3,
                                 fma_edges)):
            # Bulk copies first: on an H200 they beat vector copies of the same tile at
            # float64 atb 33..64 (2026-11-23: 83-92 % against 66-76 % of the read roofline)
            # and at most widths of ab from 18 (85-92 % against 74-89 % of the copy roofline).
            found[config] = (2 * score(spec) * (1.25 if bulk_copies else 1) * (1.5 if tf32x3 else 1)
                             * (ONE_BLOCK_BONUS if one_block else 1) * (_tensor_use(spec) if gauss and atb else 1))
            if stage_copy == "bulk" and not atb:
                found[dataclasses.replace(config, waves=WAVES)] = found[config]
            if atb and not tf32x3 and tile_m % 2:  # its lone block transposed: fewer tensor steps
                lone = dataclasses.replace(config, lone_transposed=True)
                if _usable(KernelSpec(problem, lone)):
                    found[lone] = found[config] * _dmma_steps(tile_m, tile_n) / _dmma_steps(tile_m, tile_n, True)
    if problem.dtype == "float32" and not atb and has_wgmma(arch):
        found.update(_wgmma_candidates(problem))
    return found


def _tensor_use(spec: KernelSpec) -> float:
    """The share of an atb DMMA kernel's tensor time that computes result blocks:
    pairs of blocks per m16n8k4 over what its warps issue (padded warp tiles, lone
    blocks). Gauss (Config.gauss) exists to save tensor time, so its candidates
    rank by it: at complex128 atb 57 (8x8 blocks) 2x4 tiles issue 96 steps, 3x4
    tiles 144 (108 with the lone block transposed)."""
    useful = spec.mma_blocks(spec.problem.m) * spec.mma_blocks(spec.problem.n) / 2
    return useful / spec.tensor_steps


def _dmma_steps(tile_m: int, tile_n: int, lone_transposed: bool = False) -> int:
    """DMMA instructions per k-step of an atb warp tile (dmma_step_blocks), each an
    m16n8k4's tensor time (Hopper issues m8n8k4 half-empty)."""
    return len(dmma_step_blocks(tile_m, tile_n, lone_transposed))


def _wgmma_candidates(problem: Problem) -> dict[Config, float]:
    """3xTF32 ab through wgmma (Config.wgmma, sm_90a): one warp tile (2 slabs, all of
    N), whole warpgroups; ranked ahead of mma.sync's tiles, whose tensor cores run
    at two thirds of wgmma's rate and whose warps each hold C in registers. With
    staged output and M not a multiple of 32, also with bulk copies (a producer warp
    stages A, and out leaves by bulk stores that overlap the next chunk), ranked
    ahead of the vector ones: on an H200 (2026-11-24) bulk copies won the tuner at
    39 of the 46 widths of 9..61 tried that allow them, and at 8x64 and 16x64 they ran 85
    and 87 % of the copy roofline against at most 59 and 60 % with vector copies,
    which the score had ranked first."""
    found = {}
    base = wgmma_config(problem)
    row_bytes = KernelSpec(problem, base).smem_stride(problem.m) * problem.element_bytes
    # Odd N stores a lane's columns one by one: staged output only (on an H200, 33-46 % of
    # the copy roofline without it at 41, 49 and 63, against 74-97 % with it).
    # The fused update takes staged output alone (validate).
    stage_outs = (True,) if problem.n % 2 or problem.update else (True, False)
    for row_groups, stage_bytes, stages, blocks, stage_out, stage_copy, y_in_out in itertools.product(
        (4, 8, 12), STAGE_BYTES, (2, 3, 4), (1, 2), stage_outs, ("vector", "bulk"), _y_forms(problem),
    ):
        if y_in_out and stage_copy != "bulk":
            continue
        per_pass = 16 * row_groups
        staged_bytes = row_bytes + _staged_out_bytes(problem, stage_out, y_in_out)
        rows = max(per_pass, stage_bytes // staged_bytes // per_pass * per_pass)
        config = dataclasses.replace(base, row_groups=row_groups, rows_per_stage=rows, stages=stages,
                                     stage_out=stage_out, stage_copy=stage_copy, y_in_out=y_in_out,
                                     blocks_per_sm=blocks)
        spec = KernelSpec(problem, config)
        if _usable(spec):
            found[config] = 6 * score(spec) * (WGMMA_BULK_BONUS if stage_copy == "bulk" else 1)
    return found


def flat_candidates(problem: Problem) -> list[Config]:
    """The flat mapping (ab with M up to FLAT_MAX_M), which no score ranks against
    the tiles: a start of about 256 threads, 4 passes a chunk, 8 waves of blocks and
    as many blocks per SM as the registers allow, then that start with one of
    threads, passes or waves moved (the tuner's neighbours refine the rest)."""
    if problem.op != "ab" or problem.m > FLAT_MAX_M:
        return []
    unit = KernelSpec(problem, Config(mapping="flat", row_groups=1, c_source="global")).threads
    warp_multiple = 32 // math.gcd(32, unit)  # row groups that make whole warps

    def config(threads: int, passes: int, waves: int) -> Config | None:
        row_groups = max(1, round(threads / unit / warp_multiple)) * warp_multiple
        if row_groups * unit > 1024:
            row_groups = max(1, threads // unit)
        probe = KernelSpec(problem, Config(mapping="flat", row_groups=row_groups, c_source="global"))
        rows = math.lcm(probe.rows_per_pass, problem.vector_elements) * passes
        registers = max(probe.estimated_registers(), 32)
        blocks = max(1, min(SM_THREADS // probe.threads, SM_REGISTERS // (probe.threads * registers)))
        found = Config(mapping="flat", row_groups=row_groups, rows_per_stage=rows, unroll=2, c_source="global",
                       blocks_per_sm=blocks, waves=waves)
        return found if _usable(KernelSpec(problem, found)) else None

    start = (FLAT_THREADS[0], FLAT_PASSES[0], FLAT_WAVES[0])
    moves = [start] + [(t, start[1], start[2]) for t in FLAT_THREADS[1:]] \
        + [(start[0], p, start[2]) for p in FLAT_PASSES[1:]] + [(start[0], start[1], w) for w in FLAT_WAVES[1:]]
    found = []
    for move in moves:
        c = config(*move)
        if c is not None and c not in found:
            found.append(c)
    return found


def candidates(problem: Problem, limit: int = 16, arch: str = "sm_90") -> list[Config]:
    """Up to ``limit`` valid configurations for GPUs of ``arch``, best-scored first, the
    model's default among them."""
    if limit <= 0:  # the tuner's opening kernels alone (dispatch's), with no search
        return []
    found = {}
    inner = _tile_widths(problem.m) if problem.op == "atb" else [1, 2, 4, 8]
    paddings = (True, False) if problem.m % 2 == 0 or (problem.op == "atb" and problem.n % 2 == 0) else (False,)
    c_source = "shared" if problem.m * problem.n * problem.element_bytes <= 48 * 1024 else "global"
    for tile_m, tile_n, row_groups in itertools.product(inner, _tile_widths(problem.n),
                                                        (1, 2, 4, 8, 16, 32, 64, 128, 256)):
        # The thread count follows from these three alone, and most of them exceed a
        # block's: the other parameters are not combined with them.
        if KernelSpec(problem, Config(tile_m=tile_m, tile_n=tile_n, row_groups=row_groups)).threads > MAX_THREADS:
            continue
        per_pass = row_groups * (tile_m if problem.op == "ab" else 1)
        granule = math.lcm(per_pass, problem.vector_elements)
        valid = {}
        for stage_bytes, stages, mapping, unroll, blocks, padded, stage_out in itertools.product(
            STAGE_BYTES, (2, 3, 4), ("interleaved", "blocked"), (1, 2, 4), (1, 2, 3, 4), paddings, _stage_outs(problem),
        ):
            row_bytes = ((problem.m + (problem.n if problem.op == "atb" else 0)) * problem.element_bytes
                         + _staged_out_bytes(problem, stage_out))
            rows = max(granule, stage_bytes // row_bytes // granule * granule)
            config = Config(tile_m=tile_m, tile_n=tile_n, mapping=mapping, row_groups=row_groups,
                            rows_per_stage=rows, stages=stages, unroll=unroll, c_source=c_source,
                            padded=padded, stage_out=stage_out, blocks_per_sm=blocks)
            spec = KernelSpec(problem, config)
            if _usable(spec, valid, (rows, stages, mapping, unroll, padded, stage_out)):
                found[config] = score(spec)
    if problem.dtype in MMA_DTYPES or problem.dtype == "complex128":  # (Config.gauss)
        found.update(_mma_candidates(problem, arch))
    if problem.gram:
        found.update(_triangles(problem, found))
    # Best first, but one per tile/thread/stage shape before any second variant of
    # a shape (unroll, mapping and blocks per SM matter less than those).
    firsts, seconds, seen = [], [], set()
    for config in sorted(found, key=found.get, reverse=True):
        shape = (config.tile_m, config.tile_n, config.row_groups, config.rows_per_stage, config.stages,
                 config.padded, config.mma, config.tf32x3, config.wgmma, config.stage_out, config.stage_copy,
                 config.y_in_out, config.fma_edges, config.waves, config.triangle)
        (seconds if shape in seen else firsts).append(config)
        seen.add(shape)
    ranked = firsts + seconds
    try:
        default = default_config(problem, arch)
    except InvalidSpec:
        return ranked[:limit]
    # The model's own tile with bulk copies next, where the GPU and the layout allow them,
    # then the flat mapping's start and two of its variants.
    firsts = [default]
    with_bulk = dataclasses.replace(default, stage_copy="bulk", ring_takes_chunks=False)
    if not KernelSpec(problem, default).bulk and has_bulk_copies(arch) and is_valid(KernelSpec(problem, with_bulk)):
        firsts.append(with_bulk)
    firsts += [c for c in flat_candidates(problem)[:3] if c not in firsts]
    return (firsts + [c for c in ranked if c not in firsts])[:limit]


def _triangles(problem: Problem, found: dict[Config, float]) -> dict[Config, float]:
    """A Gram matrix's candidates of square tiles that compute the triangle alone
    (Config.triangle), each scored as its candidate of the whole grid is, by the
    work of the tiles it runs (``score``), where usable."""
    triangles = {}
    for config, value in found.items():
        spec = KernelSpec(problem, dataclasses.replace(config, triangle=True))
        if _usable(spec):
            triangles[spec.config] = value * score(spec) / score(KernelSpec(problem, config))
    return triangles


def _usable(spec: KernelSpec, valid: dict | None = None, source: tuple = ()) -> bool:
    """Valid, at least two warps, and within an SM's share at its blocks per SM. A
    sweep over blocks per SM, on which validity does not depend, passes ``valid`` to
    keep each configuration's validity under ``source``, what else it varies."""
    if valid is None:
        valid = {}
    if source not in valid:
        valid[source] = is_valid(spec)
    return valid[source] and 64 <= spec.threads and occupancy_ok(spec)


def neighbours(problem: Problem, config: Config, arch: str = "sm_90") -> list[Config]:
    """Valid configurations for GPUs of ``arch`` one step from ``config`` in what the
    model ranks least reliably, the stage geometry and occupancy (rows per stage, row
    groups, stages with the same rows or the same ring, blocks per SM), the padding
    of staged rows, for atb the warp tile's orientation and (mma) the FMA edges, the
    tile trimmed to the core's blocks where it overhangs, DMMA's lone block of M
    transposed or not, for ab on the tensor cores the slabs per warp (not wgmma's)
    and the stage copies, on DMMA also the blocks of columns per warp, and for ab's
    cp.async ring the order of its chunks
    (Config.ring_takes_chunks): the tuner's local search around its fastest
    candidate (benchmarking every candidate, as Tensile does, on a neighbourhood
    instead of the whole space). Rows per stage follow a change of row groups pass
    for pass, and blocks per SM fall with a step whose blocks no longer fit as many
    times (``_fitted_steps``)."""
    c = config
    start = KernelSpec(problem, c)
    passes = c.rows_per_stage // start.rows_per_pass
    steps = [dict(rows_per_stage=c.rows_per_stage * 2)]
    if passes % 2 == 0:
        steps.append(dict(rows_per_stage=c.rows_per_stage // 2))
    for row_groups in {c.row_groups - 1, c.row_groups + 1, c.row_groups * 2, c.row_groups // 2} - {0, c.row_groups}:
        moved = dataclasses.replace(c, row_groups=row_groups)
        steps.append(dict(row_groups=row_groups, rows_per_stage=passes * KernelSpec(problem, moved).rows_per_pass))
    if c.mapping == "flat":  # nothing is staged; the grid's depth matters instead
        steps += [dict(waves=w) for w in (c.waves // 4, c.waves * 4) if 1 <= w <= 256 and w != c.waves]
    else:
        steps += [dict(stages=s) for s in (c.stages - 1, c.stages + 1) if 2 <= s <= 6]
        # The ring's passes dealt into one more stage or one fewer: more (or fewer) copies in
        # flight in the same shared memory, where a stage more of the same rows would not fit
        # (one block of two large stages: the start of Gauss's and the bulk kernels' searches).
        ring_passes = passes * c.stages
        steps += [dict(stages=s, rows_per_stage=ring_passes // s * start.rows_per_pass)
                  for s in (c.stages - 1, c.stages + 1) if 2 <= s <= 6 and ring_passes // s != passes]
    most_blocks = SM_THREADS // start.threads if c.mapping == "flat" else 4
    steps += [dict(blocks_per_sm=b) for b in (c.blocks_per_sm - 1, c.blocks_per_sm + 1) if 1 <= b <= most_blocks]
    if problem.op == "atb" and c.tile_m != c.tile_n:
        steps.append(dict(tile_m=c.tile_n, tile_n=c.tile_m))
    flipped = KernelSpec(problem, dataclasses.replace(c, padded=not c.padded))
    if any(flipped.smem_stride(w) != start.smem_stride(w) for w in (problem.m, problem.n)):
        # The model does not rank padding: it spares bank conflicts but copies the rows
        # element by element, and on an H200 (2026-11-25) float32 atb 2x2 ran at 95 %
        # of the read roofline unpadded (2-way conflicts, 16-byte copies) against 80 %.
        steps.append(dict(padded=not c.padded))
    if c.mma and problem.op == "ab" and not c.wgmma:
        # Slabs per warp, each served by the C fragments the warp holds: on an H100
        # (2026-11-25, complex ab's real views 66..128 wide) tiles of 2 to 8 slabs beat
        # the model's single slab by 25-39 points wherever the search offered them.
        for tile_m in {c.tile_m * 2, c.tile_m // 2} - {0, c.tile_m}:
            moved = dataclasses.replace(c, tile_m=tile_m)
            steps.append(dict(tile_m=tile_m, rows_per_stage=passes * KernelSpec(problem, moved).rows_per_pass))
    if c.mma and problem.op == "ab" and not c.wgmma and not c.tf32x3:
        # Blocks of columns per warp, each served by C's fragments of every step in the
        # warp's registers: more reuse of each staged row against fewer warps. On an H200
        # (2026-12-01) Gauss's A C 60 ran 2 blocks a warp at 75.0 % of the roofline against
        # 74.0 % for dispatch's 1 in the tuner, 71.8 against 67.8 % with 3 stages each in a
        # comparison; no neighbour had offered it (performance.md, eighty-first round).
        steps += [dict(tile_n=t) for t in (c.tile_n - 1, c.tile_n + 1) if t >= 1]
    if c.mma and problem.op == "ab" and has_bulk_copies(arch):  # (wgmma's too)
        # whether bulk copies pay at this geometry is not modelled
        steps.append(dict(stage_copy="vector" if c.stage_copy == "bulk" else "bulk", y_in_out=False,
                          ring_takes_chunks=False))
        if problem.update and c.stage_copy == "bulk":  # nor whether y's one chunk ahead keeps up
            steps.append(dict(y_in_out=not c.y_in_out))
    if start.ab_ring:
        steps.append(dict(ring_takes_chunks=not c.ring_takes_chunks))  # which pays has no model (Config)
    if problem.gram and c.tile_m == c.tile_n:
        # The triangle's fewer tiles per row group, or the whole grid's: which keeps the tensor
        # pipe busier is not modelled.
        steps.append(dict(triangle=not c.triangle))
    if c.mma and problem.op == "atb":  # the edges the other way, the warp tile trimmed to the core
        edged = dataclasses.replace(c, fma_edges=not c.fma_edges)
        blocks_m, blocks_n = (KernelSpec(problem, edged).mma_blocks(w) for w in (problem.m, problem.n))
        steps.append(dict(fma_edges=not c.fma_edges, tile_m=min(c.tile_m, blocks_m), tile_n=min(c.tile_n, blocks_n)))
        # Warp tiles that cover the blocks with no padded warp: the tensor cores work the
        # whole grid of warp tiles. On an H100 (2026-11-25) complex128 atb 53..56 (real
        # views of 14x14 blocks) ran 5x3 tiles over 15x15 blocks at 73-84 % of roofline;
        # the search's scores never offered 7x2.
        steps.append(dict(tile_m=_nearest_divisor(start.mma_blocks(problem.m), c.tile_m),
                          tile_n=_nearest_divisor(start.mma_blocks(problem.n), c.tile_n)))
        if c.stage_copy != "vector":  # whether a producer warp pays for the registers it takes is not modelled
            steps.append(dict(stage_copy="bulk_inline" if c.stage_copy == "bulk" else "bulk"))
        if not c.tf32x3:  # DMMA's lone block of M: transposed as before where the tile keeps one, or flipped
            steps = [dict(step, lone_transposed=c.lone_transposed and step.get("tile_m", c.tile_m) % 2 == 1)
                     for step in steps]
            if c.tile_m % 2:
                steps.append(dict(lone_transposed=not c.lone_transposed))
    found = _fitted_steps(c, steps, lambda f: _usable(KernelSpec(problem, f)))
    if c.mma and problem.op == "atb":
        found += [b for b in _balanced_tiles(problem, c) if b != c and b not in found]
    return found


def _balanced_tiles(problem: Problem, c: Config) -> list[Config]:
    """atb tensor-core ``c`` moved to the warp tiles that cover the blocks exactly,
    each in the fewest row groups that make its warps a multiple of SM_PARTITIONS, with
    the fewest tensor steps per k-step (_dmma_steps, lone blocks transposed), at about
    the stage's rows and one block per SM (with bulk copies also inline). Warp w issues
    to the SM's sub-partition w % SM_PARTITIONS, each with its own tensor core, so the
    busiest one sets the pace: on an H100 (2026-11-28) complex64 atb 34..36 (real views
    of 9x9 blocks) ran 9x3 tiles in 4 row groups (12 warps, 42 steps) at 91-97 % of
    roofline, against 75-87 % for 5x5 tiles in 2 (8 warps, 52 steps over 10x10
    blocks) and at most 80-83 % for 9x3 in 2 or 3 (6 or 9 warps: a sub-partition
    takes 2 or 3 tiles where others take 1 or 2). Validity alone admits them (one
    block, at least 4 warps): their registers are not judged by the estimate, which
    those 9x3 tiles exceed (196 against the 168 of 12 warps; ptxas fitted them with
    no spills, 4x7 tiles at 196 with 164 bytes), but by ptxas (the tuner skips what
    it refuses to compile) and the timing."""
    start = KernelSpec(problem, c)
    blocks_m, blocks_n = start.mma_blocks(problem.m), start.mma_blocks(problem.n)
    most = LARGE_TILE_BLOCKS if c.tf32x3 else TILE_BLOCKS
    ranked = []
    for tile_m, tile_n in itertools.product(_divisors(blocks_m), _divisors(blocks_n)):
        if tile_m * tile_n > most:
            continue
        warps = blocks_m // tile_m * blocks_n // tile_n
        moved = dataclasses.replace(c, tile_m=tile_m, tile_n=tile_n, blocks_per_sm=1,
                                    row_groups=SM_PARTITIONS // math.gcd(warps, SM_PARTITIONS),
                                    lone_transposed=not c.tf32x3 and tile_m % 2 == 1)
        rows = KernelSpec(problem, moved).rows_per_pass
        moved = dataclasses.replace(moved, rows_per_stage=max(rows, round(c.rows_per_stage / rows) * rows))
        variants = [moved] + ([dataclasses.replace(moved, stage_copy="bulk_inline")] if c.stage_copy == "bulk" else [])
        steps = warps * _dmma_steps(tile_m, tile_n, True)
        ranked += [(steps, v) for v in variants if is_valid(KernelSpec(problem, v))]
    fewest = min((steps for steps, _ in ranked), default=None)
    return [v for steps, v in ranked if steps == fewest]


def _divisors(blocks: int) -> list[int]:
    return [d for d in range(1, blocks + 1) if blocks % d == 0]


def _nearest_divisor(blocks: int, side: int) -> int:
    """The warp tile side of TILE_SIDES nearest ``side`` (the larger on a tie) that
    divides ``blocks`` blocks evenly."""
    return min((d for d in TILE_SIDES if blocks % d == 0), key=lambda d: (abs(d - side), -d))


def _fitted_steps(start, steps: list[dict], usable) -> list:
    """``start`` moved by each of ``steps``, distinct and other than ``start``: at
    the blocks per SM a step sets, else at the most blocks per SM, up to
    ``start``'s, that ``usable`` admits (a step that makes the blocks larger is
    not ruled out by the occupancy it started from)."""
    found = []
    for step in steps:
        moved = dataclasses.replace(start, **step)
        tries = [moved.blocks_per_sm] if "blocks_per_sm" in step else range(start.blocks_per_sm, 0, -1)
        fitted = next((f for f in (dataclasses.replace(moved, blocks_per_sm=b) for b in tries) if usable(f)), None)
        if fitted is not None and fitted != start and fitted not in found:
            found.append(fitted)
    return found


# --- mtsm: a large dense A times a tall & skinny X ----------------------------------

MTSM_STAGE_BYTES = (16 * 1024, 32 * 1024, 64 * 1024)
MTSM_ROW_SEGMENT_BYTES = (128, 256, 512, 1024)  # A X: bytes of each row of A per chunk
MTSM_IN_FLIGHT_BYTES = 64 * 1024  # per SM, to cover DRAM latency at an H200's bandwidth
# 3xTF32 ahead of float32's DMMA, whose widening conversions cost as much pipe time
# as its products (atb's and ab's _mma_candidates rank it the same way).
MTSM_TF32_BONUS = 1.5
# wgmma (MtsmConfig.wgmma) ahead of mma.sync, whose TF32 products run at two thirds
# of its rate (H200, scripts/probe_tf32.py), so that the tuner times both: on an
# H100 it won float32 Aᵀ X 16 and lost A X 32 and 64 (performance.md, forty-second round).
MTSM_WGMMA_BONUS = 2.0


def mtsm_score(spec: MtsmSpec) -> float:
    """Higher is better: products per shared-memory load (register reuse; DMMA's
    rate counted twice), bytes in flight per SM, warps per SM, the FMA units'
    headroom at full bandwidth and the columns not wasted on tile overhang."""
    p, c = spec.problem, spec.config
    vec = p.vector_elements
    if c.mma:
        reuse = 2 * c.rows_per_thread * spec.n_blocks / (c.rows_per_thread + spec.n_blocks)
        useful = p.n / (8 * spec.n_blocks)
        compute = (min(1.0, 2 / mtsm.fma_utilization(p)) * (MTSM_TF32_BONUS if c.tf32x3 else 1)
                   * (MTSM_WGMMA_BONUS if c.wgmma else 1))
    else:
        if p.transpose_a:  # one A vector and the tile's X slice per row
            reuse = c.rows_per_thread * c.tile_n / (c.rows_per_thread + c.tile_n)
        else:  # per 16-byte vector of K: one vector a row, and the X slice of each entry
            x_loads = vec * (c.tile_n // vec if c.tile_n % vec == 0 else c.tile_n)
            reuse = c.rows_per_thread * vec * c.tile_n / (4 * c.rows_per_thread + x_loads)
        useful = p.n / (spec.n_groups * c.tile_n)
        compute = min(1.0, 1 / mtsm.fma_utilization(p))
    in_flight = c.blocks_per_sm * (c.stages - 1) * spec.stage_bytes
    latency = min(1.0, in_flight / MTSM_IN_FLIGHT_BYTES)
    warps = min(1.0, c.blocks_per_sm * spec.threads / 32 / 16)
    # The FMA tiles of A X read a segment of each row of A per chunk: on an H200
    # (2026-11-23, float64 N = 1..8) 128-byte segments ran at 65-79 % of the read
    # roofline where 256-byte ones ran at 83-90 % (DMMA's 128-byte ones at N = 16
    # ran at 83 %: they are not ranked by it).
    short = not (p.transpose_a or c.mma)
    contiguity = min(1.0, spec.chunk * p.element_bytes / MTSM_ROW_SEGMENT_BYTES[1]) if short else 1.0
    return reuse * latency * warps * compute * useful * contiguity


def _mtsm_grid(problem: MtsmProblem, arch: str):
    """Every configuration of the search space, before validation: register tiles,
    thread shapes, stage sizes (in bytes; each layout turns them into its chunk),
    ring depths and blocks per SM; DMMA's for float64 and float32, and 3xTF32's
    for float32 (pairs of 8-row blocks and of k-steps), on mma.sync or wgmma."""
    p = problem
    vec = p.vector_elements
    depths = list(itertools.product((2, 3, 4), (1, 2, 3, 4)))
    x_row_bytes = p.n * p.element_bytes
    if p.transpose_a:
        rows = [r for r in (1, 2, 4) if vec % r == 0]
        for tile_n, rows_per_thread, lanes, stage_bytes in itertools.product(
                _tile_widths(p.n, 16), rows, (32, 64, 128, 256), MTSM_STAGE_BYTES):
            strip_bytes = lanes * rows_per_thread * p.element_bytes
            chunk_rows = max(1, stage_bytes // (strip_bytes + x_row_bytes))
            for stages, blocks in depths:
                yield MtsmConfig(tile_n=tile_n, rows_per_thread=rows_per_thread, lanes=lanes, chunk_rows=chunk_rows,
                                 stages=stages, blocks_per_sm=blocks)
    else:
        for tile_n, rows_per_thread, row_warps, k_groups, segment in itertools.product(
                _tile_widths(p.n, 16), (1, 2, 4), (1, 2, 4), (1, 2, 4, 8), MTSM_ROW_SEGMENT_BYTES):
            k_steps = max(1, segment // VECTOR_BYTES // k_groups)
            for stages, blocks in depths:
                yield MtsmConfig(tile_n=tile_n, rows_per_thread=rows_per_thread, row_warps=row_warps,
                                 k_groups=k_groups, k_steps=k_steps, stages=stages, blocks_per_sm=blocks)
    if p.dtype not in MMA_DTYPES:
        return
    tf32_options = (False, True) if p.dtype == "float32" else (False,)
    for blocks_of_rows, row_warps, stage_bytes, tf32x3 in itertools.product(
            (1, 2, 4, 8), (2, 4, 8), MTSM_STAGE_BYTES, tf32_options):
        if tf32x3 and blocks_of_rows % 2:
            continue
        probe = MtsmSpec(p, MtsmConfig(tile_n=p.n, rows_per_thread=blocks_of_rows, row_warps=row_warps, mma=True,
                                       tf32x3=tf32x3))
        k_steps = max(1, stage_bytes // (4 * (probe.block_rows + probe.x_stride) * p.element_bytes))
        if not p.transpose_a:  # whole 128-byte lines of each row of A per chunk
            k_steps = max(p.line_k_steps, k_steps // p.line_k_steps * p.line_k_steps)
        elif tf32x3:  # two k-steps per m16n8k8
            k_steps = max(2, k_steps // 2 * 2)
        for stages, blocks in depths:
            yield dataclasses.replace(probe.config, k_steps=k_steps, stages=stages, blocks_per_sm=blocks)
    if p.dtype != "float32" or not has_wgmma(arch):
        return
    # wgmma: tiles of 64 rows per warpgroup, one or two warpgroups, chunks of 4 or 8
    # wgmma k-steps (each chunk costs the block a split pass of X and two barriers).
    for tiles, row_warps, k_steps in itertools.product((1, 2), (4, 8), (8, 16)):
        for stages, blocks in depths:
            yield MtsmConfig(tile_n=p.n, rows_per_thread=2 * tiles, row_warps=row_warps, k_steps=k_steps, mma=True,
                             tf32x3=True, wgmma=True, stages=stages, blocks_per_sm=blocks)


def _mtsm_usable(spec: MtsmSpec) -> bool:
    """Valid (hardware limits, its blocks per SM resident) and at least two warps."""
    try:
        mtsm.validate(spec)
    except InvalidSpec:
        return False
    return spec.threads >= 64


def mtsm_candidates(problem: MtsmProblem, limit: int = 12, arch: str = "sm_90") -> list[MtsmConfig]:
    """Up to ``limit`` valid configurations for GPUs of ``arch``, the model's default first, then the
    best-scored, one per tile, thread shape and (A X) row segment before any
    second variant of a shape (ring depth and blocks per SM matter less, and the
    tuner's neighbours refine them); the tensor cores' best (DMMA, 3xTF32) keep
    half of the list from N = 16."""
    scored = {}
    for config in _mtsm_grid(problem, arch):
        spec = MtsmSpec(problem, config)
        if config not in scored and _mtsm_usable(spec):
            scored[config] = mtsm_score(spec)

    def shape(config: MtsmConfig) -> tuple:
        segment = 0 if problem.transpose_a else MtsmSpec(problem, config).chunk  # A X: a row's share of a chunk
        return (config.mma, config.tf32x3, config.wgmma, config.tile_n, config.rows_per_thread, config.lanes,
                config.row_warps, config.k_groups, segment)

    default = mtsm.default_config(problem)
    firsts, seconds, seen = [default], [], {shape(default)}
    for config in sorted(scored, key=scored.get, reverse=True):
        if config != default:
            (seconds if shape(config) in seen else firsts).append(config)
            seen.add(shape(config))
    ranked = firsts + seconds
    # The score compares register reuse within a path, not the FMA units against
    # the tensor cores, so from two whole 8-column blocks the best tensor-core
    # configurations keep half of the list: there the FMA kernels need most of the
    # FMA units' rate (float32 A X 16 at 16384, H200, 2026-11-24: the FMA kernels
    # 52-61 % of the roofline, 3xTF32 66-69 %, with three of eight candidates).
    reserved = [c for c in ranked if c.mma][: -(-limit // 2)] if problem.n >= 16 else []
    kept = set(reserved) | set([c for c in ranked if c not in reserved][: limit - len(reserved)])
    return [c for c in ranked if c in kept]


def mtsm_neighbours(problem: MtsmProblem, config: MtsmConfig) -> list[MtsmConfig]:
    """Valid configurations one step from ``config`` in what the score ranks least
    reliably: the chunk (halved or doubled), the ring's depth, blocks per SM, and
    the threads' shape (lanes, warps side by side, warps splitting K). A step whose
    blocks no longer fit an SM as many times takes the most blocks per SM that fit,
    so that a larger chunk is not ruled out by the occupancy it started from."""
    c = config
    steps = [dict(stages=s) for s in (c.stages - 1, c.stages + 1) if 2 <= s <= 6]
    steps += [dict(blocks_per_sm=b) for b in (c.blocks_per_sm - 1, c.blocks_per_sm + 1) if 1 <= b <= 4]
    if problem.transpose_a and not c.mma:
        steps += [dict(chunk_rows=r) for r in (c.chunk_rows // 2, c.chunk_rows * 2) if r >= 1]
        steps += [dict(lanes=l) for l in (c.lanes // 2, c.lanes * 2) if l >= 32]
    else:
        # DMMA A X: whole 128-byte lines; 3xTF32: two k-steps per m16n8k8
        step = problem.line_k_steps if c.mma and not problem.transpose_a else 2 if c.tf32x3 else 1
        steps += [dict(k_steps=s) for s in (c.k_steps // 2, c.k_steps * 2) if s >= step and s % step == 0]
        steps += [dict(row_warps=w) for w in (c.row_warps // 2, c.row_warps * 2) if w >= 1]
        if not c.mma:
            steps += [dict(k_groups=g, k_steps=max(1, c.k_steps * c.k_groups // g))
                      for g in (c.k_groups // 2, c.k_groups * 2) if g >= 1]
    return _fitted_steps(c, steps, lambda f: _mtsm_usable(MtsmSpec(problem, f)))
