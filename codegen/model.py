"""The model-based default configuration for a problem (the tuner's database overrides it).

The products are memory-bound, so the model aims for (1) enough bytes in flight
per SM to cover DRAM latency, (2) few shared-memory loads per FMA (a square-ish
register tile) without bank conflicts (padded rows), (3) several rows per
thread per stage so the pipeline's fixed cost is amortized, (4) whole-sector
stores for ab (out staged in shared memory, leaving in 16-byte vectors), and
(5) register use that keeps two blocks resident.
"""

from __future__ import annotations

import dataclasses
import math

from .spec import (MMA_DTYPES, Config, InvalidSpec, KernelSpec, Problem, _round_up, bulk_copies_serve, has_bulk_copies,
                   has_wgmma, validate, wgmma_fragment_vector)

TARGET_THREADS = 256
MIN_THREADS = 128
STAGE_BYTES = 32 * 1024  # 3 stages x 2 blocks per SM: ~128 KiB in flight covers Hopper's latency
STAGES = 3
BLOCKS_PER_SM = 2
ROWS_PER_THREAD = 4  # per stage, at least, for atb
SECTOR_BYTES = 32  # ab: neighbouring threads store at least one full sector of a row
SHARED_BUDGET = 112 * 1024  # two blocks per SM
SM_REGISTERS = 65536
SM_SHARED_BYTES = 228 * 1024  # per SM on Hopper, of which 1 KiB per block is reserved
SM_THREADS = 2048
C_SHARED_LIMIT = 48 * 1024
# float64 wider than 16 x 16 turns compute-bound on the FMA units: use DMMA. atb
# from 9 x 9 too: measured on an H100 (2026-11-22, tune) at 92-95 % of roofline
# against 81-88 % for the FMA tiles. float32 (widened to double) takes the same
# thresholds: at the same width it needs twice float64's flops per byte.
MMA_MIN_OUTPUTS = 16 * 16
ATB_MMA_MIN_OUTPUTS = 8 * 8
# ab with A's rows this wide whatever N: each row of out costs M FMAs from staged
# rows, and a stage holds few such rows (few threads), where DMMA takes 8 rows a
# step. On an H200 (2026-11-27, tuner) DMMA ran float64 16x3, 24x3, 32x3, 34x1..64x1,
# 48x2, 64x2, 48x3 and 64x3 at 100-105 % of the roofline, the model's FMA kernels at
# 70-97 % (performance.md, forty-eighth round).
AB_MMA_MIN_M = 16
ATB_MMA_MIN_WIDTH = 5  # narrower, most of each 8-wide block would be waste
MMA_TILE_BLOCKS = 8  # 8x8 blocks per warp beyond 32x32: 32 accumulator registers
MMA_MAX_WARPS = 8
MMA_MIN_WARPS = 8  # per block beyond 32x32; the widths up to 32x32, which ran well, had 8 to 12
# sm_90 only (wgmma, built for sm_90a): float32 ab with M in this range and N up to 64.
# Measured on an H200 (2026-11-24, tuner): wgmma ahead of the DMMA kernel below at
# every square width from 33 to 64, by 10-43 points of the copy roofline; the
# configuration is the most frequent winner there (12 of 32 widths). And from M = 16
# (2026-11-27, tuner): wgmma ran float32 16x5, 20x9, 26x5, 27x6, 40x1, 48x1, 48x2 and
# 64x2 at 97-103 % of the roofline where the FMA kernels ran 62-77 % (the tuned
# squares from 9 to 31 are wgmma's there too).
WGMMA_M = range(16, 65)
# float64 ab's cp.async ring on sm_90 takes its chunks from the counters
# (Config.ring_takes_chunks): on an H100 (2026-11-27, scripts/compare_configs.py) the
# dispatched ring kernels ran 13 of 14 float64 widths 1.02-1.10x faster so (43: 90.3
# -> 99.1 % of the copy roofline), 49 at 0.98x; float32's 25 ran 0.71-1.09x (wgmma
# 0.71-0.91x), so it stays the tuner's choice there (performance.md, fiftieth round).
RING_TAKES_CHUNKS_DTYPES = ("float64",)
WGMMA_NARROW_N = 16  # wgmma_config: more warpgroups per SM for out this narrow
# Its A staged by bulk copies (a producer warp) and out leaving by bulk stores, where M
# is not a multiple of 32: on an H200 (2026-11-24, tuner) the winner at all 22 widths of
# 33..61 re-tuned that are not multiples of 8, 89-113 % of the roofline against 75-92 %
# with vector copies, and at 40, 48 and 56 (vector fragment loads: 91.8, 92.4, 103.6
# against 87.4, 81.4, 102.0 %). (At M = N beyond 56 the register estimate keeps the
# model's two blocks on vector copies.)
# DMMA atb with a result beyond 64 x 64 entries (wider than the database's widths; a
# complex problem's real view) stages by bulk copies on sm_90, its stage rounded to whole
# passes of rows taken row_spacing apart, where that fits the shared-memory budget
# (float64 widths that are multiples of 8, whose passes are 32 rows, mostly keep vector
# copies). The model's configuration with vector and with bulk copies, on an H100
# (2026-11-25, tuner, complex atb as real views): 74 x 74 53.1 -> 76.9 %, 102 x 102
# 52.5 -> 65.2 %, float32 88 x 88 50.8 -> 59.7 % and 120 x 120 75.2 -> 90.5 % of the
# roofline. DMMA ab beyond it stages by bulk copies too, one block per SM: on an H100
# (2026-11-25/26, tuner) complex128 ab's entries at 33..64 ran as real views at 22
# widths, 19 of them with bulk copies and all 22 one block per SM (88.7-96.9 % of the
# roofline); the model's vector copies in two blocks ran the fused update at 36, 44,
# 52, 57, 60 and 63 at 53-85 %, its bulk copies in one block at 63-95 %
# (performance.md, thirty-ninth round). float64 DMMA ab with out up to 8 wide (one
# block of 8 columns a warp) stages by bulk copies at any M, in the model's blocks
# per SM: on an H200 (2026-11-27, tuner) the model's geometry ran float64 24x3, 32x3,
# 34x1, 48x1, 48x2, 48x3 and 64x3 at 98.0-101.5 % of the roofline with bulk copies,
# 92.1-103.4 % with vector copies. (Wider, two blocks' warps with a producer warp
# each spill under their share of registers: float64 16x9, 24x13, 57x16.)
BULK_MIN_OUTPUTS = 64 * 64
# complex128 atb with both widths in this range (8 blocks of 8 each) on sm_90: Gauss's
# three products (Config.gauss) in 4x2 warp tiles of 8 warps, bulk copies inline, one
# block of two 32-row stages (gauss_atb_config), the shape of cuBLAS's Gauss kernel. On
# an H100 (2026-11-26) such tiles won the tuner at 57..63 (88-91 % of the read roofline
# in the bench, where the real views had run 80-87 %), and ran 57 x 64, 60 x 58, 64 x 59
# and 62 x 57 at 90.2-92.0 %, where the model's real views ran 58.7-66.5 %
# (performance.md, fortieth round).
GAUSS_ATB_WIDTHS = range(57, 65)
# float32 ab beyond it (complex64's real views, wider than wgmma's widths) takes
# 3xTF32 on mma.sync (wide_tf32x3_ab_config): complex64 ab's entries at 33..64 are
# 3xTF32 at all 32 widths (H100, 2026-11-25/26), where the widened DMMA kernel ran the
# fused update at 44..63 at 38-48 %, below XLA's dot from 52 (thirty-ninth round).
TF32X3_AB_MIN_OUTPUTS = 64 * 64


def registers_fit(spec: KernelSpec) -> bool:
    """Whether blocks_per_sm blocks of ``spec`` fit one SM's registers, by the estimate
    of what the kernel needs under a launch bound (spec.bounded_registers)."""
    return spec.threads * max(spec.bounded_registers(), 32) * spec.config.blocks_per_sm <= SM_REGISTERS


def is_valid(spec: KernelSpec) -> bool:
    """Whether ``spec`` passes ``validate``."""
    try:
        validate(spec)
        return True
    except InvalidSpec:
        return False


def fits_an_sm(spec: KernelSpec) -> bool:
    """Whether ``spec`` is valid and blocks_per_sm blocks of it fit one SM (occupancy_ok)."""
    return is_valid(spec) and occupancy_ok(spec)


def occupancy_ok(spec: KernelSpec) -> bool:
    """Whether blocks_per_sm blocks of ``spec`` fit one SM's threads, registers and shared memory."""
    blocks = spec.config.blocks_per_sm
    return (blocks * spec.threads <= SM_THREADS and registers_fit(spec)
            and blocks * spec.shared_bytes <= SM_SHARED_BYTES)


def _split(extent: int, widest: int) -> int:
    """Tile width: the extent itself if it fits, else the widest even split (13 -> 7+6)."""
    return extent if extent <= widest else math.ceil(extent / math.ceil(extent / widest))


def _widest_tile(problem: Problem) -> int:
    # Accumulator registers grow with the element size: keep tile_m*tile_n*words <= ~128.
    words = problem.element_bytes // 4
    return {1: 8, 2: 8, 4: 4}[words]


def _rows_per_stage(problem: Problem, row_bytes: int, granule: int) -> int:
    granule = math.lcm(granule, problem.vector_elements)
    rows = max(1, STAGE_BYTES // row_bytes)
    return max(granule, rows // granule * granule)


def _ab_staged_row_bytes(problem: Problem, a_row_bytes: int) -> int:
    """Bytes per row of a stage that holds out's rows beside A's (stage_out),
    however much wider than A out is. Until 2026-11-27 out stayed in the registers
    where a stage would then hold under 8 KiB of A; on an H200 that ran float64 ab
    11x54, 8x36, 8x48 at 29-71 % of the copy roofline and float64 and complex64
    1x41 at 31-34 %, against 85-89 % and 80-84 % with out staged (performance.md,
    forty-sixth round)."""
    return a_row_bytes + problem.n * problem.element_bytes


def _atb_config(problem: Problem, m_panels: int, widest: int) -> Config:
    panel_m = math.ceil(problem.m / m_panels)
    tile_m, tile_n = _split(panel_m, widest), _split(problem.n, widest)
    row_bytes = (problem.m + problem.n) * problem.element_bytes
    stage_rows = max(1, STAGE_BYTES // row_bytes)
    while True:  # narrower tiles where a block would have too few threads
        tiles = math.ceil(panel_m / tile_m) * math.ceil(problem.n / tile_n)
        row_groups = max(1, min(round(TARGET_THREADS / tiles), stage_rows // ROWS_PER_THREAD))
        if tiles * row_groups >= MIN_THREADS or tile_m == 1:
            break
        tile_m = _split(panel_m, math.ceil(tile_m / 2))
    rows = _rows_per_stage(problem, row_bytes, row_groups)
    return Config(tile_m=tile_m, tile_n=tile_n, row_groups=row_groups, rows_per_stage=rows,
                  stages=STAGES, unroll=4, padded=True, m_panels=m_panels, blocks_per_sm=BLOCKS_PER_SM)


def _atb_mma_warp_tile(blocks_m: int, blocks_n: int) -> tuple[int, int]:
    """tile_m x tile_n blocks of 8x8 per warp. Up to 4x4 blocks (32x32): 2x4 (the
    shapes measured at 86-95 % of roofline). 7x7 blocks (49..56 wide): 4x4, with
    fewer fragment loads per DMMA than 7x1 (H100, 2026-11-23: float64 49..56 at
    86.6-94.0 % against 80.5-92.7 %, float32 56 at 70 % against 64 %; at 8x8
    blocks 4x4 measured worse than 2x4 where rows are odd, 61 and 63 at 79-80 %
    against 91-92 %). Otherwise wider than 4x4 blocks: the tile of at most
    MMA_TILE_BLOCKS blocks, in at most MMA_MAX_WARPS warps, that issues the fewest
    DMMA instructions (a pair of blocks stacked along M is one m16n8k4; blocks past
    M and N are wasted work), then needs the fewest fragment loads per instruction;
    4x4 where none fits."""
    if (blocks_m, blocks_n) == (7, 7):
        return 4, 4
    if blocks_m * blocks_n > 16:
        tiles = [(tm, tn) for tm in range(1, blocks_m + 1) for tn in range(1, blocks_n + 1)
                 if tm * tn <= MMA_TILE_BLOCKS and math.ceil(blocks_m / tm) * math.ceil(blocks_n / tn) <= MMA_MAX_WARPS]

        def cost(tile):
            tm, tn = tile
            per_warp = math.ceil(tm / 2) * tn
            return math.ceil(blocks_m / tm) * math.ceil(blocks_n / tn) * per_warp, (tm + tn) / per_warp

        if tiles:
            return min(tiles, key=cost)
    return min(blocks_m, 2 if blocks_m * blocks_n <= 64 else 4), min(blocks_n, 4)


def _atb_mma_config(problem: Problem) -> Config:
    """DMMA: the warp tile above; row groups of warps for ~TARGET_THREADS threads,
    and beyond 32x32 at least MMA_MIN_WARPS warps a block."""
    blocks_m, blocks_n = math.ceil(problem.m / 8), math.ceil(problem.n / 8)
    tile_m, tile_n = _atb_mma_warp_tile(blocks_m, blocks_n)
    warps = math.ceil(blocks_m / tile_m) * math.ceil(blocks_n / tile_n)
    probe = KernelSpec(problem, Config(tile_m=tile_m, tile_n=tile_n, mma=True, rows_per_stage=4, row_groups=1))
    row_bytes = (probe.smem_stride(problem.m) + probe.smem_stride(problem.n)) * problem.element_bytes
    stage_rows = max(4, STAGE_BYTES // row_bytes)
    row_groups = max(1, min(TARGET_THREADS // (32 * warps), stage_rows // (4 * ROWS_PER_THREAD)))
    if blocks_m * blocks_n > 16:
        row_groups = max(row_groups, math.ceil(MMA_MIN_WARPS / warps))
    rows = max(4 * row_groups, stage_rows // (4 * row_groups) * (4 * row_groups))
    return Config(tile_m=tile_m, tile_n=tile_n, mapping="blocked", row_groups=row_groups, rows_per_stage=rows,
                  stages=STAGES, unroll=2, mma=True, blocks_per_sm=BLOCKS_PER_SM)


def _ab_mma_config(problem: Problem) -> Config:
    """DMMA: each warp 2 blocks of 8 columns of N with C's fragments in registers
    (1 beyond M = 48, where C's fragments of two blocks and the A fragments the
    compiler keeps in flight would spill under two blocks' share of registers),
    slabs of 8 rows (2, one m16n8k4, unless the registers would keep two blocks
    off an SM), enough row groups of warps for ~TARGET_THREADS threads."""
    tile_n = min(math.ceil(problem.n / 8), 2 if problem.m <= 48 else 1)
    warps_n = math.ceil(math.ceil(problem.n / 8) / tile_n)
    row_groups = max(1, TARGET_THREADS // (32 * warps_n))
    for tile_m in (2, 1):
        config = Config(tile_m=tile_m, tile_n=tile_n, mapping="blocked", row_groups=row_groups,
                        rows_per_stage=8 * tile_m * row_groups, stages=STAGES, c_source="global",
                        mma=True, blocks_per_sm=BLOCKS_PER_SM)
        probe = KernelSpec(problem, config)
        if registers_fit(probe):
            break
    # At least two passes per stage: half the barriers per row of a one-pass stage.
    row_bytes = _ab_staged_row_bytes(problem, probe.smem_stride(problem.m) * problem.element_bytes)
    rows = max(2 * probe.rows_per_pass, _rows_per_stage(problem, row_bytes, probe.rows_per_pass))
    return dataclasses.replace(config, rows_per_stage=rows, stage_out=True)


def wide_tf32x3_ab_config(problem: Problem) -> Config:
    """3xTF32 ab on mma.sync beyond TF32X3_AB_MIN_OUTPUTS: the tuner's winner for
    complex64's fused update at 64 (a real view 128 wide; 93-99 % of the roofline on
    an H100, 2026-11-26): warps of 4 slabs by 2 blocks of 8 columns side by side in
    one row group, one block per SM of four stages of 64 rows, out leaving from the
    registers. As the model's kernel at 36, 44, 52, 57, 60 and 63 it ran complex64's
    fused update at 66-85 % (1.5-1.8x XLA's dot) and plain ab at 54-97 %."""
    return Config(tile_m=4, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=64, stages=4,
                  c_source="global", mma=True, tf32x3=True, blocks_per_sm=1)


def wgmma_config(problem: Problem) -> Config:
    """3xTF32 ab through wgmma: warpgroups of 64 rows a pass, stages of whole passes
    up to STAGE_BYTES, out staged. Out up to WGMMA_NARROW_N wide (little work per
    warp for each fragment of A): two warpgroups in each of two blocks per SM, or
    where their registers (estimated) or stages do not fit, three in one block,
    stages of one pass. Else one warpgroup in each of two blocks. Bulk copies where
    M allows them and the registers of the blocks with a producer warp each fit an
    SM. The tuner's wgmma candidates vary its stage geometry, copies and occupancy.
    On an H200 (2026-11-27, tuner) one warpgroup in each of two blocks ran float32
    48x1, 48x2 and 27x6 at 59-77 % of the roofline with stages of one pass, 76-91 %
    with two; two in each of two blocks ran 16x5, 20x9, 26x5 and 27x6 at 93-100 %,
    three in one block 40x1..64x2 at 96-103 % (performance.md, forty-eighth round)."""
    stage_rows = STAGE_BYTES // _ab_staged_row_bytes(problem, problem.m * problem.element_bytes)

    def config(row_groups: int, blocks: int, passes: int = 0) -> Config:
        rows_per_pass = 16 * row_groups  # 4 warps a warpgroup
        rows = rows_per_pass * (passes or max(1, stage_rows // rows_per_pass))
        return Config(tile_m=2, tile_n=math.ceil(problem.n / 8), mapping="blocked", row_groups=row_groups,
                      rows_per_stage=rows, stages=STAGES, mma=True, tf32x3=True, wgmma=True, c_source="shared",
                      stage_out=True, blocks_per_sm=blocks)

    narrow = [config(8, BLOCKS_PER_SM), config(12, 1, passes=1)] if problem.n <= WGMMA_NARROW_N else []
    chosen = next((candidate for candidate in narrow if fits_an_sm(KernelSpec(problem, candidate))),
                  config(4, BLOCKS_PER_SM))
    bulk = KernelSpec(problem, dataclasses.replace(chosen, stage_copy="bulk"))
    if wgmma_fragment_vector(problem.m) and registers_fit(bulk):
        return bulk.config
    return chosen


def takes_wgmma(problem: Problem, arch: str) -> bool:
    """Whether the model runs ``problem`` through wgmma (wgmma_config): float32 ab on
    GPUs with wgmma, M in WGMMA_M and N up to 64."""
    return (has_wgmma(arch) and problem.op == "ab" and problem.dtype == "float32"
            and problem.m in WGMMA_M and problem.n <= 64)


def runs_gauss(problem: Problem, arch: str) -> bool:
    """Whether the model runs ``problem`` by Gauss's products (gauss_atb_config):
    complex128 atb with both widths in GAUSS_ATB_WIDTHS, on GPUs with bulk copies."""
    return (problem.op == "atb" and problem.dtype == "complex128" and bool(arch) and has_bulk_copies(arch)
            and problem.m in GAUSS_ATB_WIDTHS and problem.n in GAUSS_ATB_WIDTHS)


def gauss_atb_config() -> Config:
    """complex128 atb by Gauss's products where both widths lie in GAUSS_ATB_WIDTHS."""
    return Config(tile_m=4, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2, unroll=2,
                  mma=True, gauss=True, c_source="shared", stage_copy="bulk_inline", blocks_per_sm=1)


def default_config(problem: Problem, arch: str = "") -> Config:
    """A valid configuration for ``problem`` from the model above, for GPUs of ``arch``
    (empty: any from sm_80, as the prebuilt set is built; "sm_90" may get wgmma)."""
    config = _model_config(problem, arch)
    if (problem.dtype in RING_TAKES_CHUNKS_DTYPES and arch and has_bulk_copies(arch)
            and KernelSpec(problem, config).ab_ring):
        return dataclasses.replace(config, ring_takes_chunks=True)
    return config


def _model_config(problem: Problem, arch: str) -> Config:
    if problem.gram:
        return carried_to_gram(problem, default_config(dataclasses.replace(problem, gram=False), arch), arch)
    if problem.update:
        return carried_to_update(problem, default_config(dataclasses.replace(problem, update=False), arch))
    if takes_wgmma(problem, arch):
        return wgmma_config(problem)
    if problem.op == "ab" and problem.dtype == "float32" and problem.m * problem.n > TF32X3_AB_MIN_OUTPUTS:
        config = wide_tf32x3_ab_config(problem)
        validate(KernelSpec(problem, config))  # one block per SM: its shared memory is a block's
        return config
    if runs_gauss(problem, arch):
        return gauss_atb_config()
    widest = _widest_tile(problem)
    atb_mma = problem.m * problem.n > ATB_MMA_MIN_OUTPUTS and min(problem.m, problem.n) >= ATB_MMA_MIN_WIDTH
    ab_mma = problem.m >= AB_MMA_MIN_M
    if problem.dtype in MMA_DTYPES and (problem.m * problem.n > MMA_MIN_OUTPUTS
                                        or (atb_mma if problem.op == "atb" else ab_mma)):
        mma_config = _atb_mma_config if problem.op == "atb" else _ab_mma_config
        config = _shrink_to_fit(problem, mma_config(problem))
        wide = problem.m * problem.n > BULK_MIN_OUTPUTS
        narrow_float64_ab = problem.op == "ab" and problem.dtype == "float64" and problem.n <= 8
        if (wide or narrow_float64_ab) and arch and has_bulk_copies(arch):
            one_block = dict(blocks_per_sm=1) if problem.op == "ab" and wide else {}
            bulk = dataclasses.replace(config, stage_copy="bulk", **one_block)
            probe = KernelSpec(problem, bulk)
            granule = probe.rows_per_pass  # rows taken row_spacing apart
            if bulk_copies_serve(probe):
                try:
                    return _shrink_to_fit(problem, dataclasses.replace(
                        bulk, rows_per_stage=max(granule, bulk.rows_per_stage // granule * granule)))
                except InvalidSpec:
                    pass  # no stage of whole passes fits the budget
        return config
    if problem.op == "atb":
        # More panels (blocks along M) only when one block cannot hold the result.
        for m_panels in range(1, problem.m + 1):
            try:
                return _shrink_to_fit(problem, _atb_config(problem, m_panels, widest))
            except InvalidSpec:
                if m_panels == problem.m:
                    raise
    return _fma_ab_config(problem, widest)


def _fma_ab_config(problem: Problem, widest: int) -> Config:
    """ab on the FMA units: register tiles of out, threads side by side along N so that
    a row's stores fill sectors, row groups for ~TARGET_THREADS threads where a stage
    holds that many rows."""
    # Columns: enough threads side by side that a row's stores fill sectors.
    lanes = min(problem.n, max(1, SECTOR_BYTES // problem.element_bytes))
    tile_n = _split(math.ceil(problem.n / lanes), widest)
    lanes = math.ceil(problem.n / tile_n)
    # Rows: a tile of about widest²/4 accumulators.
    tile_m = max(1, min(widest, widest * widest // 4 // tile_n))
    row_groups = max(1, round(TARGET_THREADS / lanes))
    # A stage (A's rows, and out's if staged) must hold one pass of the block's row tiles.
    # Rows of out that are whole 16-byte vectors already leave in full sectors from
    # the register tiles (float32 7x32 and 10x20 lost 9-12 points staged on an
    # H200, forty-sixth round); others are staged.
    stage_out = problem.n * problem.element_bytes % 16 != 0
    a_row_bytes = problem.m * problem.element_bytes
    row_bytes = _ab_staged_row_bytes(problem, a_row_bytes) if stage_out else a_row_bytes
    stage_rows = max(1, STAGE_BYTES // row_bytes)
    tile_m = max(1, min(tile_m, stage_rows // row_groups))
    row_groups = max(1, min(row_groups, stage_rows // tile_m))
    # A pass of whole 16-byte vectors of rows: otherwise a stage must round up to a
    # multiple of both, which the budget then halves the row groups to meet (float32
    # 64x1 had 31 threads a block, 16x5 and 20x9 60).
    step = problem.vector_elements // math.gcd(tile_m, problem.vector_elements)
    row_groups = max(step, row_groups // step * step)
    rows = _rows_per_stage(problem, row_bytes, row_groups * tile_m)
    # A large C would crowd out the stages: read it through L1 instead.
    c_bytes = problem.m * problem.n * problem.element_bytes
    c_source = "shared" if c_bytes <= C_SHARED_LIMIT else "global"
    return _shrink_to_fit(problem, Config(
        tile_m=tile_m, tile_n=tile_n, row_groups=row_groups, rows_per_stage=rows, stages=STAGES,
        unroll=min(problem.m, 4), c_source=c_source, padded=True, stage_out=stage_out, blocks_per_sm=BLOCKS_PER_SM))


def carried_to_gram(problem: Problem, config: Config, arch: str = "") -> Config:
    """atb's ``config`` of two operands for the Gram matrix ``problem`` of its shape
    (one operand, staged once), for GPUs of ``arch`` (empty: any from sm_80), so that
    the ring holds as many bytes in flight in as much shared memory: its stages, each
    of twice the rows (whatever fits two operands' stages fits them), a DMMA kernel's
    by bulk copies where ``arch`` has them (the rows rounded up to their passes) and
    they serve; 3xTF32's twice the stages of the pair's rows where they fit. On an
    H200 (2026-11-30, scripts/gram_timing.py, atb's kernels of 53 widths carried)
    twice the rows ran 4-19 points above twice the stages at float64 5..31 (FMA
    kernels, and DMMA's vector copies turned bulk: 17 at 88.4 against 70.7 % of the
    read-once roofline), from 2.1 below to 8.8 above where DMMA copied in bulk
    already (float64 34..63, complex128 24..48); 3xTF32's lost 4.4-14.4 points
    (float32 48, the real views of complex64 16 and 24) (performance.md,
    seventy-third round). Where DMMA's tensor work binds
    (TRIANGLE_MIN_FLOPS_PER_BYTE, float32's DMMA from half the columns of float64's)
    and the warp tiles are square, only the triangle of them runs (Config.triangle)."""
    if config.tf32x3:
        doubled = dataclasses.replace(config, stages=2 * config.stages)
        carried = doubled if is_valid(KernelSpec(problem, doubled)) else config
    else:
        carried = dataclasses.replace(config, rows_per_stage=2 * config.rows_per_stage)
    if config.mma and not config.tf32x3 and not KernelSpec(problem, config).bulk and arch and has_bulk_copies(arch):
        bulk = dataclasses.replace(carried, stage_copy="bulk", ring_takes_chunks=False)
        passes = KernelSpec(problem, bulk).rows_per_pass
        bulk = dataclasses.replace(bulk, rows_per_stage=_round_up(bulk.rows_per_stage, passes))
        if is_valid(KernelSpec(problem, bulk)):
            carried = bulk
    triangle = dataclasses.replace(carried, triangle=True)
    if (carried.mma and not carried.tf32x3
            and gram_flops_per_byte(problem) >= TRIANGLE_MIN_FLOPS_PER_BYTE
            and is_valid(KernelSpec(problem, triangle))):
        return triangle
    return carried


# A Gram matrix's DMMA kernel computes the triangle alone (Config.triangle) from this
# many flop per byte of its operand: float64 from 32 columns, complex128 from 16. On
# an H200 (2026-11-30, the tuner's loops of op "gram") the triangle of the same tiles
# ran float64 48 (3x3 tiles, 4 row groups) at 79.4 % of the read-once roofline against
# 66.5 % for the whole grid, 64 (4x4) at 91.9 against 79.8 %; at float64 8 (1x1 tiles,
# 2 flop per byte) within 1.3 points either way; 3xTF32's float32 16 lost (77.9
# against 86.2 %) (performance.md, seventy-second round). DMMA works float32 in
# double precision, as many tensor steps per element in half the bytes: the tuner's
# float32 Gram 19..22 and complex64 10 and 13 (real views of 20 and 26) took DMMA
# triangles, 1.16-1.35x faster than atb's whole grids carried (H200, 2026-11-30,
# performance.md, seventy-sixth round); carried so, float32 23, 24, 27..32 and 64 ran
# 1.02-1.25x and complex64 12 and 61..64 1.15-1.43x the whole grids (seventy-seventh).
TRIANGLE_MIN_FLOPS_PER_BYTE = 8


def gram_flops_per_byte(problem: Problem) -> float:
    """The Gram matrix's flop per byte of its one operand, read once: 2 M per element
    (8 M for complex, in real flop)."""
    return 2 * (4 if problem.components == 2 else 1) * problem.m / problem.element_bytes


def carried_to_update(problem: Problem, config: Config) -> Config:
    """Plain ab's ``config`` for the fused update ``problem`` of its shape: the same
    kernel, y's rows staged beside A's where out is staged (KernelSpec.stages_y), its
    ring made to fit blocks_per_sm blocks on an SM by fewer rows per stage (whole
    passes), then fewer stages, then fewer blocks; where none fits, the same with out
    (and so y) staged; where none of those fits and out leaves by bulk stores, y
    through out's buffers (Config.y_in_out), which takes no more shared memory than
    plain ab. Raise InvalidSpec where nothing fits. On an H100 (2026-11-26) y in
    out's buffers ran complex64's update at 49..57 (wgmma kernels that y beside A
    does not fit) at 89-98 % of the roofline, where the tuner's best had run 65-83 %;
    but 10 of 51 update kernels whose shrunk rings y beside A fits lost 2-11 points
    with it against their earlier runs (float64 42: 85.0 against 96.3 %), so it comes
    last. The update moves A and
    out as plain ab does, plus y: on an H100 (2026-11-26), at 12 widths of 3..63
    without update entries, plain ab's kernels carried over (tuned, else the
    model's) ran float64's update at 89-97 % of the roofline, float32's at 85-95 %
    and complex128's at 64-98 %, where the model's earlier kernels for the update
    (output not staged) had run 61-95, 40-88 and 47-97 % (performance.md,
    thirty-ninth round)."""
    in_out = [dataclasses.replace(config, y_in_out=True)] if config.stage_out and config.stage_copy == "bulk" else []
    shrunk = [dataclasses.replace(staged, rows_per_stage=rows, stages=stages, blocks_per_sm=blocks)
              for staged in dict.fromkeys([config, dataclasses.replace(config, stage_out=True)])
              for blocks in range(staged.blocks_per_sm, 0, -1)
              for stages in range(staged.stages, 1, -1)
              for rows in _halvings(staged.rows_per_stage, math.lcm(KernelSpec(problem, staged).rows_per_pass,
                                                                    problem.vector_elements))]
    for carried in [*shrunk, *in_out]:
        if fits_an_sm(KernelSpec(problem, carried)):
            return carried
    validate(KernelSpec(problem, shrunk[-1]))  # the smallest ring beside A: raises with the reason
    raise InvalidSpec("no ring of this kernel fits an SM with the update's y staged", KernelSpec(problem, config))


def _halvings(rows: int, granule: int) -> list[int]:
    """``rows``, then halved to whole multiples of ``granule`` down to one granule."""
    found = [rows]
    while found[-1] > granule:
        found.append(max(granule, found[-1] // 2 // granule * granule))
    return found


def _shrink_to_fit(problem: Problem, config: Config) -> Config:
    """Shrink what binds (atb's reduction buffer or the registers: the row groups;
    the ring: the stage) until the spec passes the hardware limits with room for
    blocks_per_sm blocks per SM, fewer blocks where one row group's registers
    alone exceed that share; raise InvalidSpec if nothing fits. The kernels'
    launch bounds cap the registers at that share: a tile that needs more
    spills (complex64 atb 48x48, 8x8 tiles in 252 threads: 17.5 % of roofline
    on an H100, 2026-11-23, against 68 % before the launch bounds)."""
    while True:
        spec = KernelSpec(problem, config)
        registers_ok = registers_fit(spec)
        try:
            validate(spec)
            if spec.shared_bytes <= SHARED_BUDGET and registers_ok:
                return config
        except InvalidSpec:
            pass
        granule = math.lcm(spec.rows_per_pass, problem.vector_elements)
        ring_binds = registers_ok and spec.reduction_bytes <= spec.config.stages * spec.stage_bytes
        if not registers_ok and config.row_groups == 1 and config.blocks_per_sm > 1:
            config = dataclasses.replace(config, blocks_per_sm=config.blocks_per_sm - 1)
        elif ring_binds and config.rows_per_stage > granule:
            rows = max(granule, config.rows_per_stage // 2 // granule * granule)
            config = dataclasses.replace(config, rows_per_stage=rows)
        elif config.row_groups > 1:
            row_groups = config.row_groups // 2
            smaller = KernelSpec(problem, dataclasses.replace(config, row_groups=row_groups))
            granule = math.lcm(smaller.rows_per_pass, problem.vector_elements)
            config = dataclasses.replace(
                config, row_groups=row_groups,
                rows_per_stage=max(granule, config.rows_per_stage // granule * granule))
        else:
            validate(spec)  # raises with the reason
            raise InvalidSpec(f"needs {spec.shared_bytes} bytes of shared memory", spec)
