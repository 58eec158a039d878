"""The model-based default configuration for a problem (the tuner's database overrides it).

The products are memory-bound, so the model aims for (1) enough bytes in flight
per SM to cover DRAM latency, (2) few shared-memory loads per FMA (a square-ish
register tile), and (3) register use that keeps two blocks resident.
"""

from __future__ import annotations

import dataclasses
import math

from .spec import Config, InvalidSpec, KernelSpec, Problem, validate

TARGET_THREADS = 256
STAGE_BYTES = 16 * 1024  # ~3 stages x 2 blocks in flight per SM covers Hopper's latency
STAGES = 3
BLOCKS_PER_SM = 2
SHARED_BUDGET = 112 * 1024  # two blocks per SM
C_SHARED_LIMIT = 48 * 1024


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


def default_config(problem: Problem) -> Config:
    """A valid configuration for ``problem`` from the model above."""
    widest = _widest_tile(problem)
    if problem.op == "atb":
        tile_m, tile_n = _split(problem.m, widest), _split(problem.n, widest)
        tiles = math.ceil(problem.m / tile_m) * math.ceil(problem.n / tile_n)
        row_groups = max(1, round(TARGET_THREADS / tiles))
        row_bytes = (problem.m + problem.n) * problem.element_bytes
        rows = _rows_per_stage(problem, row_bytes, row_groups)
        config = Config(tile_m=tile_m, tile_n=tile_n, row_groups=row_groups, rows_per_stage=rows,
                        stages=STAGES, unroll=4, blocks_per_sm=BLOCKS_PER_SM)
    else:
        tile_n = _split(problem.n, widest)
        lanes = math.ceil(problem.n / tile_n)
        row_groups = max(1, round(TARGET_THREADS / lanes))
        # A stage must hold one pass of the block's row tiles: fewer rows per
        # thread (then fewer row groups) when rows of A are long.
        stage_rows = max(1, STAGE_BYTES // (problem.m * problem.element_bytes))
        row_groups = min(row_groups, stage_rows)
        tile_m = max(1, min(widest, stage_rows // row_groups))
        rows = _rows_per_stage(problem, problem.m * problem.element_bytes, row_groups * tile_m)
        # A large C would crowd out the stages: read it through L1 instead.
        c_bytes = problem.m * problem.n * problem.element_bytes
        c_source = "shared" if c_bytes <= C_SHARED_LIMIT else "global"
        config = Config(tile_m=tile_m, tile_n=tile_n, row_groups=row_groups, rows_per_stage=rows,
                        stages=STAGES, unroll=min(problem.m, 4), c_source=c_source,
                        blocks_per_sm=BLOCKS_PER_SM)
    return _shrink_to_fit(problem, config)


def _shrink_to_fit(problem: Problem, config: Config) -> Config:
    """Halve the stage, then the row groups, until the spec passes the hardware
    limits with room for two blocks per SM; raise InvalidSpec if nothing fits."""
    while True:
        spec = KernelSpec(problem, config)
        try:
            validate(spec)
            if spec.shared_bytes <= SHARED_BUDGET:
                return config
        except InvalidSpec:
            pass
        per_pass = config.row_groups * (config.tile_m if problem.op == "ab" else 1)
        granule = math.lcm(per_pass, problem.vector_elements)
        if config.rows_per_stage > granule:
            rows = max(granule, config.rows_per_stage // 2 // granule * granule)
            config = dataclasses.replace(config, rows_per_stage=rows)
        elif config.row_groups > 1:
            row_groups = config.row_groups // 2
            per_pass = row_groups * (config.tile_m if problem.op == "ab" else 1)
            config = dataclasses.replace(
                config, row_groups=row_groups,
                rows_per_stage=math.lcm(per_pass, problem.vector_elements))
        else:
            validate(spec)  # raises with the reason
            raise InvalidSpec(f"{spec.name}: needs {spec.shared_bytes} bytes of shared memory")
