"""The generator, without a GPU: every spec is valid or rejected, and a sample
covering each op, dtype and configuration option compiles warning-free with nvcc
for sm_90."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import re

import numpy as np
import pytest

from jax_tsmm import _dispatch, _kernels, _mtsm
from jax_tsmm.codegen import Config, InvalidSpec, KernelSpec, Problem, default_config, module_source, validate
from jax_tsmm.codegen.prebuilt import (by_target, prebuilt_mtsm_problems, prebuilt_mtsm_specs, prebuilt_problems,
                                       prebuilt_specs)
from jax_tsmm.codegen.model import (SHARED_BUDGET, carried_to_gram, carried_to_update, is_valid, occupancy_ok,
                                   registers_fit, wgmma_config, wide_tf32x3_ab_config)
from jax_tsmm.codegen.emit import _vector_element, _vector_order, dmma_products, kernel_source
from jax_tsmm.codegen.search import (LARGE_TILE_BLOCKS, ONE_BLOCK_STAGE_BYTES, _dmma_steps, _tensor_use, _usable,
                                     candidates, flat_candidates, launch_bound_registers, neighbours)
from jax_tsmm.codegen.mtsm import MtsmProblem, mtsm_key, mtsm_key_problem
from jax_tsmm.codegen.spec import (LATER_FIELDS, MAX_REGISTERS, MAX_SHARED_BYTES, WGMMA_FIXED_REGISTERS,
                                   WGMMA_STEP_REGISTERS, key_problem, problem_key, wgmma_fragment_vector)

DTYPES = ("float32", "float64", "complex64", "complex128")


def _problems():
    for op in ("atb", "ab"):
        for dtype in DTYPES:
            for m, n in ((1, 1), (3, 7), (8, 8), (13, 48), (64, 64)):
                yield Problem(op, dtype, m, n, conj=dtype.startswith("complex") and m % 2 == 1)


def _sample_specs() -> list[KernelSpec]:
    """Model defaults for odd and even shapes, plus variants that switch on every option."""
    specs = [KernelSpec(p, default_config(p)) for p in _problems()]
    variants = [
        (Problem("atb", "float64", 5, 3), Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=32, rows_per_stage=64, stages=2, unroll=1)),
        (Problem("atb", "complex64", 7, 9, conj=True), Config(tile_m=4, tile_n=3, row_groups=16, rows_per_stage=32, stages=4, unroll=2)),
        (Problem("atb", "float32", 33, 17), Config(tile_m=8, tile_n=5, mapping="blocked", row_groups=8, rows_per_stage=64, stages=3, unroll=8)),
        (Problem("ab", "float64", 5, 11), Config(tile_m=2, tile_n=4, mapping="blocked", row_groups=16, rows_per_stage=64, stages=2, c_source="global")),
        (Problem("ab", "complex128", 9, 6, conj=True), Config(tile_m=1, tile_n=2, row_groups=32, rows_per_stage=64, stages=4, unroll=3)),
        (Problem("ab", "float32", 64, 1), Config(tile_m=4, tile_n=1, row_groups=64, rows_per_stage=256, stages=3, c_source="global")),
        (Problem("atb", "float64", 9, 6), Config(tile_m=2, tile_n=3, row_groups=16, rows_per_stage=32, padded=True, m_panels=2)),
        (Problem("atb", "complex128", 100, 90), default_config(Problem("atb", "complex128", 100, 90))),
        (Problem("atb", "float64", 30, 9), Config(tile_m=1, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=24, stages=2, mma=True)),
        (Problem("ab", "complex64", 6, 5, update=True), Config(tile_m=2, tile_n=2, row_groups=16, rows_per_stage=64, stages=3, c_source="global")),
        (Problem("ab", "float32", 16, 16, update=True), default_config(Problem("ab", "float32", 16, 16, update=True))),
        (Problem("ab", "float64", 37, 29, update=True), Config(tile_m=1, tile_n=2, row_groups=4, rows_per_stage=64, c_source="global", mma=True)),
        (Problem("ab", "float64", 64, 40), Config(tile_m=4, tile_n=1, row_groups=2, rows_per_stage=128, stages=2, c_source="global", mma=True)),
        (Problem("atb", "float32", 30, 9), Config(tile_m=1, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=24, stages=2, mma=True)),
        (Problem("ab", "float32", 37, 29, update=True), Config(tile_m=1, tile_n=2, row_groups=4, rows_per_stage=64, c_source="global", mma=True)),
        (Problem("ab", "float32", 64, 40), Config(tile_m=2, tile_n=1, row_groups=2, rows_per_stage=128, stages=2, c_source="global", mma=True, stage_out=True)),
        # bulk stage copies: unpadded rows 4 apart (odd), 2 apart (42), groups of 8 rows with padding between (64 x 8)
        (Problem("atb", "float64", 57, 57), Config(tile_m=4, tile_n=4, mapping="blocked", row_groups=3, rows_per_stage=48, stages=4, mma=True, stage_copy="bulk", blocks_per_sm=1)),
        (Problem("atb", "float64", 42, 42), Config(tile_m=2, tile_n=3, mapping="blocked", row_groups=2, rows_per_stage=32, stages=3, mma=True, stage_copy="bulk")),
        (Problem("atb", "float64", 64, 8), Config(tile_m=4, tile_n=1, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2, mma=True, stage_copy="bulk")),
        # ... float32: rows 8 apart (odd), 4 apart (42), groups of 8 rows with padding between (64 x 8)
        (Problem("atb", "float32", 57, 57), Config(tile_m=4, tile_n=4, mapping="blocked", row_groups=2, rows_per_stage=64, stages=4, mma=True, stage_copy="bulk", blocks_per_sm=1)),
        (Problem("atb", "float32", 42, 42), Config(tile_m=2, tile_n=3, mapping="blocked", row_groups=2, rows_per_stage=64, stages=3, mma=True, stage_copy="bulk")),
        (Problem("atb", "float32", 64, 8), Config(tile_m=4, tile_n=1, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2, mma=True, stage_copy="bulk")),
        # 3xTF32: atb with vector and bulk copies (a lone last block of M: 57, 5), ab with an odd tile and the update
        (Problem("atb", "float32", 64, 64), Config(tile_m=2, tile_n=4, mapping="blocked", row_groups=2, rows_per_stage=64, stages=3, mma=True, tf32x3=True)),
        (Problem("atb", "float32", 57, 57), Config(tile_m=4, tile_n=4, mapping="blocked", row_groups=2, rows_per_stage=128, stages=3, mma=True, tf32x3=True, stage_copy="bulk", blocks_per_sm=1)),
        (Problem("atb", "float32", 5, 42), Config(tile_m=1, tile_n=3, mapping="blocked", row_groups=2, rows_per_stage=128, stages=3, mma=True, tf32x3=True, stage_copy="bulk")),
        (Problem("ab", "float32", 49, 49), Config(tile_m=3, tile_n=2, row_groups=2, rows_per_stage=96, c_source="global", mma=True, tf32x3=True)),
        (Problem("ab", "float32", 20, 33, update=True), Config(tile_m=2, tile_n=1, row_groups=4, rows_per_stage=64, c_source="global", mma=True, tf32x3=True, stage_out=True)),
        # edges on the FMA units: both (DMMA, bulk), the N edge alone (3xTF32, vector copies), float32 on DMMA
        (Problem("atb", "float64", 50, 50), Config(tile_m=2, tile_n=6, mapping="blocked", row_groups=2, rows_per_stage=64, stages=2, mma=True, stage_copy="bulk", fma_edges=True, blocks_per_sm=1)),
        (Problem("atb", "float32", 32, 45), Config(tile_m=2, tile_n=5, mapping="blocked", row_groups=2, rows_per_stage=64, stages=3, mma=True, tf32x3=True, fma_edges=True)),
        (Problem("atb", "float32", 19, 12), Config(tile_m=2, tile_n=1, mapping="blocked", row_groups=2, rows_per_stage=64, stages=3, mma=True, fma_edges=True)),
        # the model's wide atb on sm_90: bulk copies, rows 2 apart (74) and 1 apart (float32 120)
        (Problem("atb", "float64", 74, 74), default_config(Problem("atb", "float64", 74, 74), "sm_90")),
        (Problem("atb", "float32", 120, 120), default_config(Problem("atb", "float32", 120, 120), "sm_90")),
        # ab with bulk copies in and bulk stores out: A's rows 4, 2 and 1 apart, and 8 apart in padded groups
        (Problem("ab", "float64", 40, 40), Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=4, rows_per_stage=128, c_source="global", mma=True, stage_out=True, stage_copy="bulk")),
        # atb with an odd width beside a multiple of 8: rows 8 apart, each operand's groups padded to fit
        (Problem("atb", "float64", 3, 8), Config(tile_m=1, tile_n=1, mapping="blocked", row_groups=2, rows_per_stage=128, mma=True, stage_copy="bulk")),
        (Problem("ab", "float64", 33, 7), Config(tile_m=2, tile_n=1, mapping="blocked", row_groups=2, rows_per_stage=64, c_source="global", mma=True, stage_out=True, stage_copy="bulk")),
        (Problem("ab", "float64", 50, 50), Config(tile_m=2, tile_n=1, mapping="blocked", row_groups=1, rows_per_stage=32, c_source="global", mma=True, stage_out=True, stage_copy="bulk", blocks_per_sm=1)),
        (Problem("ab", "float64", 20, 64), Config(tile_m=1, tile_n=2, mapping="blocked", row_groups=3, rows_per_stage=48, stages=4, c_source="global", mma=True, stage_out=True, stage_copy="bulk")),
        # the fused update's y through out's buffers (odd N: ragged ends), Gauss's too
        (Problem("ab", "float64", 33, 7, update=True), Config(tile_m=2, tile_n=1, mapping="blocked", row_groups=2, rows_per_stage=64, c_source="global", mma=True, stage_out=True, stage_copy="bulk", y_in_out=True)),
        (Problem("ab", "complex128", 53, 53, update=True), Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=32, c_source="global", mma=True, gauss=True, stage_out=True, stage_copy="bulk", y_in_out=True, blocks_per_sm=1)),
        # the flat mapping: rows of whole vectors (13 x 48), vectors straddling 2 and 4 rows, complex, the update
        (Problem("ab", "float64", 13, 48), Config(mapping="flat", row_groups=12, rows_per_stage=48, c_source="global", blocks_per_sm=1)),
        (Problem("ab", "float64", 3, 7), Config(mapping="flat", row_groups=32, rows_per_stage=256, unroll=2, c_source="global", waves=8)),
        (Problem("ab", "float32", 1, 1, update=True), Config(mapping="flat", row_groups=64, rows_per_stage=1024, unroll=4, c_source="global")),
        (Problem("ab", "complex64", 5, 7, conj=True, update=True), Config(mapping="flat", row_groups=32, rows_per_stage=128, c_source="global")),
        (Problem("ab", "complex128", 4, 4), Config(mapping="flat", row_groups=64, rows_per_stage=64, c_source="global")),
        # DMMA atb's lone block of M transposed: with a zero partner (odd tile_n, bulk), beside FMA edges
        (Problem("atb", "float64", 57, 57), Config(tile_m=3, tile_n=3, mapping="blocked", row_groups=1, rows_per_stage=48, stages=3, mma=True, stage_copy="bulk", lone_transposed=True, blocks_per_sm=1)),
        (Problem("atb", "float64", 50, 50), Config(tile_m=3, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=32, stages=3, mma=True, fma_edges=True, lone_transposed=True)),
        # Gauss's three products for complex128 atb: vector copies, bulk copies of rows 2 apart with Aᴴ B,
        # and a 1x7 tile whose lone block runs transposed (three zero partners)
        (Problem("atb", "complex128", 53, 53), Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=16, mma=True, gauss=True, blocks_per_sm=1)),
        (Problem("atb", "complex128", 57, 57, conj=True), Config(tile_m=2, tile_n=4, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2, mma=True, gauss=True, stage_copy="bulk", blocks_per_sm=1)),
        (Problem("atb", "complex128", 49, 49), Config(tile_m=1, tile_n=7, mapping="blocked", row_groups=1, rows_per_stage=16, mma=True, gauss=True, lone_transposed=True, stage_copy="bulk", blocks_per_sm=1)),
        # ... with complex edges on the FMA units: both (Aᴴ B, inline bulk copies), the M edge alone beside the lone block
        (Problem("atb", "complex128", 50, 43, conj=True), Config(tile_m=3, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2, mma=True, gauss=True, fma_edges=True, stage_copy="bulk_inline", blocks_per_sm=1)),
        (Problem("atb", "complex128", 13, 48), Config(tile_m=1, tile_n=3, mapping="blocked", row_groups=2, rows_per_stage=64, stages=2, mma=True, gauss=True, fma_edges=True, lone_transposed=True, stage_copy="bulk", blocks_per_sm=1)),
        # ab's cp.async ring taking its chunks: FMA with C shared, DMMA with staged output, the update
        (Problem("ab", "float64", 5, 11), Config(tile_m=2, tile_n=4, mapping="blocked", row_groups=16, rows_per_stage=64, stages=2, ring_takes_chunks=True)),
        (Problem("ab", "float64", 43, 43), Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=64, c_source="global", mma=True, stage_out=True, ring_takes_chunks=True)),
        (Problem("ab", "float32", 20, 33, update=True), Config(tile_m=2, tile_n=1, row_groups=4, rows_per_stage=64, c_source="global", mma=True, tf32x3=True, stage_out=True, ring_takes_chunks=True)),
        # Gram matrices, one operand staged once: FMA with padded rows in panels, DMMA with bulk copies, 3xTF32
        # with FMA edges, Gauss's Aᴴ A with complex edges and inline bulk copies
        (Problem("atb", "float64", 6, 6, gram=True), Config(tile_m=2, tile_n=3, row_groups=16, rows_per_stage=32, padded=True, m_panels=2)),
        (Problem("atb", "float64", 57, 57, gram=True), Config(tile_m=4, tile_n=4, mapping="blocked", row_groups=3, rows_per_stage=48, stages=4, mma=True, stage_copy="bulk", blocks_per_sm=1)),
        (Problem("atb", "float32", 45, 45, gram=True), Config(tile_m=2, tile_n=5, mapping="blocked", row_groups=2, rows_per_stage=64, stages=3, mma=True, tf32x3=True, fma_edges=True)),
        (Problem("atb", "complex128", 50, 50, conj=True, gram=True), Config(tile_m=3, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2, mma=True, gauss=True, fma_edges=True, stage_copy="bulk_inline", blocks_per_sm=1)),
        # ... their triangles alone: FMA interleaved (Aᴴ A), DMMA with bulk copies, Gauss's Aᴴ A, 3xTF32's
        # transposed lone block in two row groups
        (Problem("atb", "complex64", 7, 7, conj=True, gram=True), Config(tile_m=2, tile_n=2, row_groups=16, rows_per_stage=32, stages=4, unroll=2, triangle=True)),
        (Problem("atb", "float64", 64, 64, gram=True), Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=64, stages=4, mma=True, stage_copy="bulk", blocks_per_sm=1, triangle=True)),
        (Problem("atb", "complex128", 24, 24, conj=True, gram=True), Config(tile_m=1, tile_n=1, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2, mma=True, gauss=True, stage_copy="bulk_inline", blocks_per_sm=1, triangle=True)),
        (Problem("atb", "float32", 40, 40, gram=True), Config(tile_m=3, tile_n=3, mapping="blocked", row_groups=2, rows_per_stage=64, stages=4, mma=True, tf32x3=True, stage_copy="bulk", triangle=True)),
    ]
    return specs + [KernelSpec(p, c) for p, c in variants]


def test_database_keys_name_their_problems():
    """A database key gives back the problem it was written for (conj, which keys leave
    out, False, but a complex Gram matrix's: Aᴴ A), for the shipped databases' keys of
    every kind."""
    for problem in (Problem("atb", "complex64", 13, 48), Problem("ab", "float64", 64, 1),
                    Problem("ab", "complex128", 7, 3, update=True), Problem("atb", "float64", 8, 8, gram=True),
                    Problem("atb", "complex64", 8, 8, conj=True, gram=True)):
        assert key_problem(problem_key(problem)) == problem
    for problem in (MtsmProblem(False, "float32", 16), MtsmProblem(True, "complex128", 1)):
        assert mtsm_key_problem(mtsm_key(problem.transpose_a, problem.dtype, problem.n)) == problem
    keys = set(_dispatch.database("sm_90", "NVIDIA H200"))  # the architecture's file and the H200's
    assert {key.split(":")[0] for key in keys} == {"atb", "ab", "ab_update", "gram", "mtsm", "mtsm_t"}
    for key in keys:
        if key.startswith("mtsm"):
            problem = mtsm_key_problem(key)
            assert mtsm_key(problem.transpose_a, problem.dtype, problem.n) == key
        else:
            assert problem_key(key_problem(key)) == key


def test_a_config_reads_as_its_tile_and_the_fields_it_sets():
    """A Config's repr (the tuner's log line) names its tile and the fields away from
    their defaults, and evaluates back to the same config: every shipped entry's."""
    configs = {Config(**entry["config"]) for entries in _dispatch.database("sm_90", "NVIDIA H200").values()
               for entry in entries if entry.get("config") and "tile_m" in entry["config"]}
    assert len(configs) > 100
    for config in configs:
        assert eval(repr(config), {"Config": Config}) == config
    assert repr(Config(tile_m=3, gauss=True, blocks_per_sm=2)) == "Config(tile_m=3, tile_n=1, gauss=True)"


def test_every_width_gets_a_valid_default():
    """All (M, N) up to 128, every op and dtype: the model's choice validates; wide
    complex128 atb splits the result into panels of rows."""
    for op in ("atb", "ab"):
        for dtype in DTYPES:
            for m in range(1, 129, 3):
                for n in range(1, 129, 5):
                    problem = Problem(op, dtype, m, n)
                    config = default_config(problem)
                    validate(KernelSpec(problem, config))
                    assert config.m_panels == 1 or (dtype == "complex128" and m * n > 4096)


def test_model_kernels_fit_their_launch_bounds():
    """The kernels' launch bounds cap registers at the share of blocks_per_sm blocks;
    the model's tiles must fit it (else they spill: complex64 atb 48x48 fell to
    17.5 % of roofline)."""
    for op in ("atb", "ab"):
        for dtype in DTYPES:
            for m in range(1, 65, 3):
                for n in (m, 1, 13, 64):
                    spec = KernelSpec(Problem(op, dtype, m, n), default_config(Problem(op, dtype, m, n)))
                    assert spec.threads * spec.estimated_registers() * spec.config.blocks_per_sm <= 65536, spec


@pytest.mark.parametrize("problem", [Problem("atb", "float64", 8, 7, gram=True), Problem("ab", "float64", 8, 8, gram=True)])
def test_gram_matrices_are_square_atb(problem):
    with pytest.raises(InvalidSpec, match="gram applies to atb with M = N"):
        validate(KernelSpec(problem, default_config(dataclasses.replace(problem, gram=False))))


def test_a_gram_matrix_stages_one_operand():
    """The Gram matrix's kernel is its problem's kernel of two operands with a stage
    of A alone, each of twice the rows (``carried_to_gram``: as many bytes in flight,
    in as much shared memory), a DMMA kernel's by bulk copies on GPUs that have them,
    3xTF32's twice the stages, and a name of its own."""
    for dtype, m in (("float64", 4), ("float64", 20), ("float32", 45), ("complex128", 50), ("float64", 64)):
        pair = Problem("atb", dtype, m, m)
        gram = dataclasses.replace(pair, gram=True)
        for arch in ("", "sm_90"):
            config = default_config(pair, arch)
            carried = carried_to_gram(gram, config, arch)
            assert default_config(gram, arch) == carried
            two, one = KernelSpec(pair, config), KernelSpec(gram, carried)
            assert one.stage_elements()[1] == 0 and two.stage_elements()[1] > 0
            assert one.config.stages == two.config.stages
            if one.bulk and not two.bulk:  # twice the rows, rounded up to the bulk copies' passes
                assert arch == "sm_90" and config.mma and one.config.rows_per_stage % one.rows_per_pass == 0
                assert 0 <= one.config.rows_per_stage - 2 * config.rows_per_stage < one.rows_per_pass
            else:
                assert one.config == dataclasses.replace(config, rows_per_stage=2 * config.rows_per_stage,
                                                         triangle=one.config.triangle)
                assert one.stage_bytes <= two.stage_bytes
            assert one.name.startswith("tsmm_atb_gram_") and one.name != two.name
            source = module_source([one])
            assert "slot_b" not in source and not re.search(r"args\.b\b", source) and "* sb = sa;" in source
    assert KernelSpec(Problem("atb", "float64", 20, 20, gram=True), default_config(
        Problem("atb", "float64", 20, 20, gram=True), "sm_90")).bulk  # the model's vector copies, carried in bulk
    tiles = Config(tile_m=2, tile_n=5, mapping="blocked", row_groups=2, rows_per_stage=64, stages=3, mma=True,
                   tf32x3=True, blocks_per_sm=1)
    assert carried_to_gram(Problem("atb", "float32", 45, 45, gram=True), tiles, "sm_90") == dataclasses.replace(
        tiles, stages=6)  # 3xTF32: twice the stages
    # DMMA's square tiles run the triangle alone where the tensor work binds: float64 from 32, complex128 from 16,
    # float32 (in double precision on DMMA) from 16
    square = Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=64, stages=2, mma=True,
                    stage_copy="bulk", blocks_per_sm=1)
    for dtype, m, triangle in (("float64", 64, True), ("float64", 32, True), ("float64", 24, False),
                               ("complex128", 16, True), ("complex128", 8, False),
                               ("float32", 16, True), ("float32", 12, False)):
        problem = Problem("atb", dtype, m, m, conj=dtype == "complex128", gram=True)
        config = dataclasses.replace(square, gauss=dtype == "complex128")
        carried = carried_to_gram(problem, config, "sm_90")
        assert dataclasses.replace(carried, rows_per_stage=64) == dataclasses.replace(config, triangle=triangle)
    tf32 = dataclasses.replace(square, tf32x3=True, stage_copy="vector")
    assert not carried_to_gram(Problem("atb", "float32", 64, 64, gram=True), tf32).triangle


def test_a_gram_matrix_computes_its_triangle_alone():
    """Config.triangle: the tiles on and above the diagonal of a square grid, T (T + 1)
    / 2 of T x T, for Gram matrices of square tiles alone; each entry above the
    diagonal is written to its mirror too, conjugated for Aᴴ A, whose diagonal is
    written real; the search offers it beside the whole grid's candidates, and its
    neighbours switch it."""
    dmma = Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=64, stages=4, mma=True,
                  stage_copy="bulk", blocks_per_sm=1)
    gram = Problem("atb", "float64", 64, 64, gram=True)
    whole, triangle = KernelSpec(gram, dmma), KernelSpec(gram, dataclasses.replace(dmma, triangle=True))
    assert (whole.tile_count, triangle.tile_count) == (16, 10) and triangle.consumer_threads == 10 * 32
    assert "triangle" not in whole.source_fields and whole.name != triangle.name
    for problem, config, reason in (
            (dataclasses.replace(gram, gram=False), dmma, "triangle serves Gram"),
            (gram, dataclasses.replace(dmma, tile_n=4), "square tiles"),
            (gram, dataclasses.replace(dmma, m_panels=2), "without panels")):
        with pytest.raises(InvalidSpec, match=reason):
            validate(KernelSpec(problem, dataclasses.replace(config, triangle=True)))
    hermitian = kernel_source(KernelSpec(Problem("atb", "complex64", 7, 7, conj=True, gram=True),
                                         Config(tile_m=2, tile_n=2, row_groups=16, triangle=True)))
    assert "diagonal_tile" in hermitian and "make_float2(acc_0_0.x, -acc_0_0.y)" in hermitian
    assert "row == col ? make_float2(acc_0_0.x, 0) : acc_0_0" in hermitian  # Aᴴ A's real diagonal
    assert "make_double(" not in kernel_source(triangle) and "= acc_0_0_0;" in kernel_source(triangle)
    offered = candidates(gram, 12, "sm_90")
    assert any(c.triangle for c in offered) and any(not c.triangle for c in offered)
    assert all(c.tile_m == c.tile_n for c in offered if c.triangle)
    assert dataclasses.replace(dmma, triangle=True) in neighbours(gram, dmma)
    assert not any(c.triangle for c in candidates(dataclasses.replace(gram, gram=False), 12, "sm_90"))


@pytest.mark.parametrize("m, dtype, tile, lone_transposed", [(49, "float64", 3, True), (50, "float64", 2, False),
                                                             (50, "complex128", 2, False), (19, "float32", 1, False)])
def test_the_triangle_takes_the_n_edge_from_its_diagonal_tiles(m, dtype, tile, lone_transposed):
    """Config.triangle with fma_edges: the triangle of the core's tiles on the tensor
    cores, the N edge on the FMA units from the diagonal tiles' A fragments, the corner
    from the tile at (0, 0). Evaluated for every tile of the triangle and every lane,
    the emitted stores' guards write each entry on and above the diagonal exactly once
    (the stores mirror it), the tiles' and the edges' together."""
    gauss = dtype == "complex128"
    problem = Problem("atb", dtype, m, m, conj=gauss, gram=True)
    config = Config(tile_m=tile, tile_n=tile, mapping="blocked", row_groups=2, rows_per_stage=64, stages=2,
                    mma=True, gauss=gauss, lone_transposed=lone_transposed, stage_copy="bulk", fma_edges=True,
                    blocks_per_sm=1, triangle=True)
    spec = KernelSpec(problem, config)
    validate(spec)
    assert spec.edge_units == (0, 0) and spec.triangle_edge_sums == (tile * (m % 8), (m % 8) * (m % 8 + 1) // 2)
    source = kernel_source(spec)
    assert "edge_slot" not in source
    stores = re.findall(r"const int row = (.*), col = (.*);\n\s*if \((.*)\) \{\n\s*partial\[row \* \d+ \+ col\] = (.*);",
                        source)

    def value(expression, **names):
        python = expression.replace("/", "//").replace("&&", " and ").replace("||", " or ").replace("!", " not ")
        return eval(python, names)
    written = []
    for warp_m, warp_n in spec.triangle_places():
        for lane in range(32):
            names = dict(warp_m=warp_m, warp_n=warp_n, diagonal_tile=warp_m == warp_n, lane=lane)
            written += [(value(row, **names), value(col, **names)) for row, col, guard, _ in stores
                        if value(guard, **names)]
    assert sorted(written) == [(row, col) for row in range(m) for col in range(m) if row <= col]
    assert any("corner_0_0" in stored for *_, stored in stores)
    with pytest.raises(InvalidSpec, match="FMA edges DMMA's"):
        validate(KernelSpec(Problem("atb", "float32", 43, 43, gram=True),
                            dataclasses.replace(config, gauss=False, tf32x3=True, rows_per_stage=128)))


@pytest.mark.parametrize("problem, tile, lone_transposed, steps, unskipped", [
    (Problem("atb", "float64", 51, 51, gram=True), 4, False, 16, 24),  # 7 blocks: tiles past the width
    (Problem("atb", "float64", 37, 37, gram=True), 3, True, 9, 15),  # a transposed lone block
    (Problem("atb", "float64", 64, 64, gram=True), 4, False, 20, 24),
    (Problem("atb", "float64", 64, 64, gram=True), 2, False, 20, 20),  # nothing to skip
    (Problem("atb", "complex128", 20, 20, conj=True, gram=True), 2, False, 4, 6),  # Gauss's three sums
])
def test_the_triangle_skips_the_tensor_steps_of_idle_blocks(problem, tile, lone_transposed, steps, unskipped):
    """DMMA's triangle: evaluated for each tile on and above the diagonal, the guards
    of the emitted tensor steps run every block of the Gram matrix's triangle in
    exactly one tile, and only steps that compute one; KernelSpec.tensor_steps
    counts the steps that run (of ``unskipped`` in the triangle's tiles), which the
    search's score weighs."""
    gauss = problem.dtype == "complex128"
    config = Config(tile_m=tile, tile_n=tile, mapping="blocked", row_groups=2, rows_per_stage=64, stages=2,
                    mma=True, gauss=gauss, lone_transposed=lone_transposed, stage_copy="bulk", blocks_per_sm=1,
                    triangle=True)
    spec = KernelSpec(problem, config)
    validate(spec)
    source = kernel_source(spec)
    flags = dict(re.findall(r"const bool (live_\d+_\d+) = (.*);", source))
    emitted = list(dict.fromkeys(line.strip() for line in source.splitlines()
                                 if re.search(r"tsmm_dmma(16)?\((rr|acc)_", line)))
    blocks = -(-problem.m // 8)
    tiles = -(-blocks // tile)
    covered, issued = [], 0
    for warp_m, warp_n in [(r, c) for c in range(tiles) for r in range(c + 1)]:
        def holds(condition):
            for name, value in flags.items():
                condition = condition.replace(name, f"({value})")
            condition = condition.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
            return eval(condition, dict(warp_m=warp_m, warp_n=warp_n, diagonal_tile=warp_m == warp_n))
        for step in emitted:
            guard = re.match(r"if \((.*)\) tsmm_dmma", step)
            if guard and not holds(guard[1]):
                continue
            issued += 1
            computed = [(warp_m * tile + int(i), warp_n * tile + int(j))
                        for i, j in dict.fromkeys(re.findall(r"(?:rr|acc)_(\d+)_(\d+)_\d", step))]
            wanted = [(row, col) for row, col in computed if row <= col < blocks]
            assert wanted, (warp_m, warp_n, step)
            covered += wanted
    assert sorted(covered) == [(row, col) for row in range(blocks) for col in range(row, blocks)]
    assert issued == spec.tensor_steps == steps
    assert spec.tile_count * _dmma_steps(tile, tile, lone_transposed) == unskipped


@pytest.mark.parametrize(
    "change, reason",
    [
        (dict(tile_m=9), "tile"),
        (dict(rows_per_stage=63), "multiple"),
        (dict(row_groups=2048), "threads"),
        (dict(stages=1), "stages"),
        (dict(mapping="diagonal"), "mapping"),
        (dict(c_source="texture"), "c_source"),
        (dict(m_panels=9), "m_panels"),
        (dict(mma=True, m_panels=2), "mma"),
        (dict(mma=True, tf32x3=True), "tf32x3"),  # float64
        (dict(tf32x3=True), "tf32x3"),  # without mma
        (dict(rows_per_stage=32768, row_groups=32), "shared memory"),
        (dict(fma_edges=True), "fma_edges"),  # without mma
        (dict(mma=True, tile_m=1, tile_n=1, fma_edges=True), "fma_edges"),  # 8 x 8 has no edges
        (dict(ring_takes_chunks=True), "ring_takes_chunks"),  # atb's partial sums keep their order
    ],
)
def test_invalid_specs_are_rejected_with_a_reason(change, reason):
    base = Config(tile_m=8, tile_n=8, row_groups=4, rows_per_stage=64, stages=3)
    spec = KernelSpec(Problem("atb", "float64", 8, 8), dataclasses.replace(base, **change))
    with pytest.raises(InvalidSpec, match=reason) as error:
        validate(spec)
    assert str(error.value).startswith(f"{spec.name}: ")  # the message names the kernel


@pytest.mark.nvcc
def test_tensor_core_kernels_keep_the_registers_ptxas_needs(tmp_path):
    """DMMA's m16n8k4 compiles in 64 registers a thread but not in 56 (nvcc 13.0):
    the register estimate of a tensor-core kernel never promises fewer, so the
    search no longer offers 544 threads at 2 blocks per SM (56 each), the
    neighbour of an H100 tune's float32 atb 13x13 winner that ptxas rejected
    (2026-11-27), while 480 (64 each) fit and compile."""
    problem = Problem("atb", "float32", 13, 13)
    winner = Config(tile_m=1, tile_n=2, mapping="blocked", row_groups=8, rows_per_stage=512, stages=2, unroll=2,
                    mma=True, stage_copy="bulk", lone_transposed=True, blocks_per_sm=1)
    rejected = dataclasses.replace(winner, blocks_per_sm=2)
    assert not occupancy_ok(KernelSpec(problem, rejected))
    assert rejected not in neighbours(problem, winner, "sm_90")
    fits = KernelSpec(problem, dataclasses.replace(rejected, row_groups=7, rows_per_stage=448))
    assert occupancy_ok(fits)
    validate(fits)
    _nvcc_compile([fits], tmp_path)


@pytest.mark.parametrize("problem, change", [
    (Problem("atb", "float64", 4, 4), {}),
    (Problem("ab", "float64", 17, 4), {}),
    (Problem("ab", "float64", 4, 4), dict(mma=True)),
    (Problem("ab", "float64", 4, 4), dict(tile_n=2)),
    (Problem("ab", "float64", 4, 4), dict(c_source="shared")),
    (Problem("ab", "float64", 4, 4), dict(stage_out=True)),
])
def test_flat_mapping_serves_narrow_fma_ab_only(problem, change):
    config = dataclasses.replace(Config(mapping="flat", row_groups=64, rows_per_stage=128, c_source="global"), **change)
    with pytest.raises(InvalidSpec, match="flat"):
        validate(KernelSpec(problem, config))


@pytest.mark.parametrize("dtype, n", [("float64", 7), ("float64", 8), ("float32", 3), ("float32", 1),
                                      ("complex64", 5), ("complex128", 3)])
def test_flat_passes_cover_whole_rows(dtype, n):
    """A pass of the flat mapping is a whole number of rows of out, so each thread's
    columns never change; a vector reaches as many rows as it can straddle."""
    problem = Problem("ab", dtype, 4, n)
    for row_groups in (1, 3, 32):
        spec = KernelSpec(problem, Config(mapping="flat", row_groups=row_groups, c_source="global"))
        assert spec.threads * problem.vector_elements == spec.rows_per_pass * n
        assert spec.shared_bytes == 0
    vec = problem.vector_elements
    reach = max(len({(place // n) for place in range(first, first + vec)})
                for first in range(0, n * vec, 1)) if n % vec else 1
    assert spec.flat_rows == reach


def test_flat_candidates_for_narrow_ab():
    """The tuner tries the flat mapping for ab up to FLAT_MAX_M wide, whole warps a
    block where the row's vectors allow, as many blocks per SM as the registers
    allow; not for atb or wider A."""
    for m, n in ((1, 8), (3, 7), (13, 48), (16, 16)):
        problem = Problem("ab", "float64", m, n)
        found = flat_candidates(problem)
        assert found and found[0] in candidates(problem, 8, "sm_90")
        for config in found:
            spec = KernelSpec(problem, config)
            validate(spec)
            assert spec.threads % 32 == 0
            assert config.blocks_per_sm * spec.threads * spec.estimated_registers() <= 65536
    assert not flat_candidates(Problem("ab", "float64", 17, 4)) and not flat_candidates(Problem("atb", "float64", 4, 4))


def test_candidates_keep_to_their_limit():
    """Fewer candidates asked than the model's own starts (ab's default, its bulk
    variant and three flat ones): the first of those, no more."""
    problem = Problem("ab", "float64", 5, 5)
    assert candidates(problem, 1, "sm_90") == [default_config(problem, "sm_90")]
    assert len(candidates(problem, 3, "sm_90")) == 3 and len(candidates(problem, 8, "sm_90")) == 8


def test_bad_problems_are_rejected():
    for problem in (Problem("atc", "float64", 4, 4), Problem("atb", "int32", 4, 4),
                    Problem("atb", "float64", 0, 4), Problem("atb", "float64", 4, 4, conj=True),
                    Problem("atb", "float64", 4, 4, update=True)):
        with pytest.raises(InvalidSpec):
            validate(KernelSpec(problem, Config()))


def test_tensor_cores_serve_float64_and_float32():
    for problem, config in (
        (Problem("ab", "complex64", 32, 32), Config(tile_m=1, tile_n=2, row_groups=4, c_source="global", mma=True)),
        (Problem("ab", "float64", 32, 32), Config(tile_m=1, tile_n=2, row_groups=4, c_source="shared", mma=True)),
    ):
        with pytest.raises(InvalidSpec, match="mma"):
            validate(KernelSpec(problem, config))
    for dtype in ("float64", "float32"):
        assert default_config(Problem("ab", dtype, 32, 32)).mma
        assert default_config(Problem("atb", dtype, 24, 24)).mma


@pytest.mark.parametrize("problem, change", [
    (Problem("atb", "complex64", 40, 40), {}),
    (Problem("ab", "complex128", 40, 40, update=True), dict(c_source="global")),
    (Problem("atb", "complex128", 40, 40), dict(mma=False)),
])
def test_gauss_serves_complex128_on_dmma_only(problem, change):
    """Gauss's products serve complex128 atb and ab on DMMA alone, ab's fused update
    with staged output (y staged beside A: KernelSpec.stages_y)."""
    config = Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=16, mma=True, gauss=True,
                    blocks_per_sm=1)
    validate(KernelSpec(Problem("atb", "complex128", 40, 40), config))
    validate(KernelSpec(Problem("ab", "complex128", 40, 40), dataclasses.replace(config, c_source="global")))
    validate(KernelSpec(Problem("ab", "complex128", 40, 40, update=True),
                        dataclasses.replace(config, c_source="global", stage_out=True)))
    validate(KernelSpec(Problem("atb", "complex128", 42, 42), dataclasses.replace(config, fma_edges=True)))
    with pytest.raises(InvalidSpec, match="gauss"):
        validate(KernelSpec(problem, dataclasses.replace(config, **change)))


@pytest.mark.parametrize("width", range(1, 65))
@pytest.mark.parametrize("stage_copy", ["vector", "bulk"])
@pytest.mark.parametrize("op", ["atb", "ab"])
def test_gauss_fragments_take_distinct_banks(op, stage_copy, width):
    """Gauss reads staged complex128 elements (16 bytes) into DMMA fragments, served by
    quarter warps (8 lanes): atb's 4 rows x 8 columns a warp (lane % 4 the row, a
    quarter's 4 rows x 2 columns), ab's A 8 rows x 4 columns (lane / 4 the row, a
    quarter's 2 rows x 4 columns, 64 bytes a row). Each quarter's elements take 8
    distinct groups of 4 banks, in rows padded to the narrowest such stride (vector
    copies) or in bulk groups whose stride does it, the rows unpadded within a group."""
    if op == "atb":
        blocks = -(-width // 8)
        spec = KernelSpec(Problem("atb", "complex128", width, width), Config(
            tile_m=min(4, blocks), tile_n=min(2, blocks), mapping="blocked", row_groups=1, rows_per_stage=32,
            mma=True, gauss=True, stage_copy=stage_copy, blocks_per_sm=1))
    else:
        spec = KernelSpec(Problem("ab", "complex128", width, 8), Config(  # A's rows are M wide
            tile_m=2, tile_n=1, mapping="blocked", row_groups=4, rows_per_stage=64, stages=2, mma=True, gauss=True,
            c_source="global", stage_out=True, stage_copy=stage_copy, blocks_per_sm=1))
    validate(spec)
    step = spec.group_stride(width) if stage_copy == "bulk" else spec.smem_stride(width)  # between fragment rows
    assert width <= spec.smem_stride(width) <= width + 8
    if stage_copy == "bulk":
        assert spec.smem_stride(width) == width and spec.row_spacing * width <= step < spec.row_spacing * width + 8
    row, column = (lambda lane: lane % 4, lambda lane: lane // 4) if op == "atb" else \
        (lambda lane: lane // 4, lambda lane: lane % 4)
    for quarter in range(4):
        lanes = range(8 * quarter, 8 * quarter + 8)
        assert len({(row(lane) * step + column(lane)) % 8 for lane in lanes}) == 8


def test_gauss_candidates_for_complex128_within_their_launch_bounds():
    """The search offers Gauss for complex128 atb and ab alone (ab's fused update
    included), ab's as pairs of slabs (the shape of every winner), and only where nvcc's
    register bound under the launch bounds holds what the kernel needs under one
    (its per-scheduler share: 96 registers at 17 warps, as nvcc 13.0 allotted)."""
    assert launch_bound_registers(544, 1) == 96 and launch_bound_registers(288, 1) == 168
    assert launch_bound_registers(512, 1) == 128 and launch_bound_registers(128, 1) == MAX_REGISTERS
    for op, width, update in itertools.product(("atb", "ab"), (13, 50, 57, 64), (False, True)):
        if op == "atb" and update:
            continue
        problem = Problem(op, "complex128", width, width, update=update)
        found = [c for c in candidates(problem, 12) if c.gauss]
        assert found, (op, width, update)
        assert op == "atb" or all(c.tile_m == 2 for c in found)
        assert not update or all(c.stage_out for c in found)
        for config in found:
            spec = KernelSpec(problem, config)
            assert spec.bounded_registers() <= launch_bound_registers(spec.threads, config.blocks_per_sm)
    for problem in (Problem("atb", "complex64", 57, 57), Problem("atb", "float64", 57, 57)):
        assert not any(c.gauss for c in candidates(problem, 64))


@pytest.mark.nvcc
def test_gauss_edges_fit_a_launch_bound_below_their_estimate(tmp_path):
    """Gauss's atb tiles with FMA edges are judged by the registers they need under a
    launch bound (KernelSpec.bounded_registers, the estimate less up to
    GAUSS_EDGE_SLACK): at complex128 atb 50 the search offers 2 x 3 tiles in 12 warps,
    whose estimate (210) exceeds the 168 registers of their launch bound, and ptxas
    fits them there without spilling; 51's (230) it does not offer."""
    problem = Problem("atb", "complex128", 50, 50)
    offered = [c for c in candidates(problem, 16) if c.gauss and c.fma_edges and c.row_groups == 2
               and (c.tile_m, c.tile_n) == (2, 3)]
    assert offered
    spec = KernelSpec(problem, offered[0])
    bound = launch_bound_registers(spec.threads, spec.config.blocks_per_sm)
    assert spec.threads == 384 and spec.bounded_registers() <= bound < spec.estimated_registers()
    assert not any(c.gauss and c.fma_edges and c.row_groups == 2 and (c.tile_m, c.tile_n) == (2, 3)
                   for c in candidates(Problem("atb", "complex128", 51, 51), 16))
    report = _nvcc_compile([spec], tmp_path)
    registers, spilled = _kernels.ptxas_usage(report)[spec.name]
    assert registers <= bound and spilled == 0, report


@pytest.mark.parametrize("dtype, gauss", [("float64", False), ("complex128", True)])
def test_ab_bulk_spacing_divides_the_slabs_of_a_pass(dtype, gauss):
    """ab's bulk-staged slabs take their rows s apart in groups of s slabs, so the
    spacing divides the slabs of a pass: the least padding among those spacings (a
    multiple of 8 doubles pads 4 elements per 8 rows with 8 slabs, per 2 rows with
    2), and no bulk copies where the rows' alignment needs a spacing the pass cannot
    hold (odd doubles, an odd number of slabs)."""
    for width in range(1, 65):
        for tile_m, row_groups in ((1, 1), (2, 1), (1, 2), (4, 2), (3, 1), (8, 1)):
            spec = KernelSpec(Problem("ab", dtype, width, 8), Config(
                tile_m=tile_m, tile_n=1, mapping="blocked", row_groups=row_groups, rows_per_stage=8 * tile_m * row_groups,
                stages=2, mma=True, gauss=gauss, c_source="global", stage_out=True, stage_copy="bulk", blocks_per_sm=1))
            if spec.layout is None:
                assert dtype == "float64" and width % 2 and tile_m * row_groups % 2
                assert not is_valid(spec)
                continue
            assert tile_m * row_groups % spec.row_spacing == 0
    spec = KernelSpec(Problem("ab", "float64", 64, 8), Config(tile_m=2, tile_n=1, mapping="blocked", row_groups=1,
                      rows_per_stage=64, stages=2, mma=True, c_source="global", stage_out=True, stage_copy="bulk",
                      blocks_per_sm=1))
    assert (spec.row_spacing, spec.group_stride(64)) == (2, 132)


def test_gauss_candidates_rank_by_their_tensor_use():
    """Gauss exists to save tensor time, so its candidates rank by the share of the
    m16n8k4 steps their warps issue that compute result blocks: at complex128 atb
    57 (8x8 blocks of 8) 2x4 tiles waste none, 3x4 tiles with the lone block
    transposed issue 36 steps for 32 (3x4 as is, 48), and 1x7 tiles over 7x7
    blocks 28 for 24.5 (the lone block's zero partner). The most used is among the
    tuner's first six; at 57 the first is a tile of 8 warps (2x4 or 4x2, the
    model's), its bulk copies inline (no producer warp to cap its registers:
    search.GAUSS_ATB_WARPS)."""
    def use(width, **tile):
        return _tensor_use(KernelSpec(Problem("atb", "complex128", width, width), Config(
            mapping="blocked", row_groups=1, rows_per_stage=16, mma=True, gauss=True, blocks_per_sm=1, **tile)))
    assert use(57, tile_m=2, tile_n=4) == 1
    assert use(57, tile_m=3, tile_n=4, lone_transposed=True) == 32 / 36
    assert use(57, tile_m=3, tile_n=4) == 32 / 48
    assert use(49, tile_m=1, tile_n=7, lone_transposed=True) == 24.5 / 28
    for width in (50, 57, 63):
        problem = Problem("atb", "complex128", width, width)
        found = [KernelSpec(problem, c) for c in candidates(problem, 16) if c.gauss]
        first = [KernelSpec(problem, c) for c in candidates(problem, 6) if c.gauss]
        assert max(map(_tensor_use, first)) == max(map(_tensor_use, found)), width
    first = next(c for c in candidates(Problem("atb", "complex128", 57, 57), 6) if c.gauss)
    assert (first.tile_m * first.tile_n, first.stage_copy) == (8, "bulk_inline") and first.tile_m in (2, 4)


def test_fma_edges_geometry_and_candidates():
    """fma_edges: the tensor cores' tiles cover whole 8x8 blocks only, the slots of a
    row group take every edge entry once, and the search offers edges for mma atb
    whose widths leave one (both from 8; complex128's by Gauss's products), never for ab or
    multiples of 8."""
    problem = Problem("atb", "float32", 50, 43)
    spec = KernelSpec(problem, Config(tile_m=2, tile_n=5, mapping="blocked", row_groups=2, rows_per_stage=128,
                                      stages=2, mma=True, tf32x3=True, stage_copy="bulk", fma_edges=True,
                                      blocks_per_sm=1))
    validate(spec)
    assert (spec.mma_blocks(50), spec.mma_blocks(43), spec.edge(50), spec.edge(43)) == (6, 5, 2, 3)
    assert (spec.tiles_m, spec.tiles_n, spec.edge_slots) == (3, 1, 24)
    m_units, n_units = spec.edge_units
    entries = [(slot + u * 24, 40 + q) for slot in range(24) for u in range(m_units) for q in range(3)
               if slot + u * 24 < 50]
    entries += [(48 + q, slot + u * 24) for slot in range(24) for u in range(n_units) for q in range(2)
                if slot + u * 24 < 40]
    assert len(entries) == len(set(entries)) == 50 * 43 - 48 * 40
    with pytest.raises(InvalidSpec, match="tile"):
        validate(KernelSpec(problem, dataclasses.replace(spec.config, tile_n=6)))
    for found, offered in ((Problem("atb", "float64", 50, 50), True), (Problem("atb", "float32", 12, 9), True),
                           (Problem("atb", "complex128", 50, 50), True),
                           (Problem("atb", "float64", 48, 48), False), (Problem("atb", "float64", 7, 50), False),
                           (Problem("ab", "float64", 50, 50), False)):
        assert any(c.fma_edges for c in candidates(found, limit=400, arch="sm_90")) == offered, found


def test_tf32x3_candidates_for_float32_only():
    """The search offers 3xTF32 for float32, never for float64, and every such
    candidate is valid with whole m16n8k8 row steps."""
    for op in ("atb", "ab"):
        offered = [c for c in candidates(Problem(op, "float32", 40, 40), limit=64, arch="sm_90") if c.tf32x3]
        assert offered and all(c.mma for c in offered)
        for config in offered:
            spec = KernelSpec(Problem(op, "float32", 40, 40), config)
            validate(spec)
            assert spec.rows_per_chunk % (8 * spec.row_spacing) == 0
        assert not any(c.tf32x3 for c in candidates(Problem(op, "float64", 40, 40), limit=64, arch="sm_90"))


def _wgmma_config(n: int, **change) -> Config:
    return dataclasses.replace(Config(tile_m=2, tile_n=-(-n // 8), mapping="blocked", row_groups=4, rows_per_stage=128,
                                      stages=3, mma=True, tf32x3=True, wgmma=True, c_source="shared",
                                      blocks_per_sm=1), **change)


@pytest.mark.parametrize("problem, change", [
    (Problem("atb", "float32", 40, 40), {}),
    (Problem("ab", "float32", 40, 40, update=True), {}),
    (Problem("ab", "float32", 40, 40), dict(tf32x3=False)),
    (Problem("ab", "float32", 40, 40), dict(tile_n=4)),
    (Problem("ab", "float32", 40, 40), dict(tile_m=1, rows_per_stage=64)),
    (Problem("ab", "float32", 40, 40), dict(row_groups=2, rows_per_stage=64)),
    (Problem("ab", "float32", 40, 40), dict(c_source="global")),
])
def test_wgmma_serves_whole_warpgroups_of_tf32x3_ab(problem, change):
    with pytest.raises(InvalidSpec, match="wgmma"):
        validate(KernelSpec(problem, _wgmma_config(problem.n, **change)))


def test_wgmma_geometry():
    """C's two TF32 parts fill whole k-steps of 8 and blocks of 8 columns, ahead of the
    ring; the kernels need sm_90a, so nvcc builds them for it alone."""
    spec = KernelSpec(Problem("ab", "float32", 49, 3), _wgmma_config(3))
    validate(spec)
    assert (spec.wgmma_n, spec.wgmma_k_steps, spec.c_shared_bytes) == (8, 7, 2 * 56 * 8 * 4)
    assert spec.rows_per_pass == 64 and spec.threads == 128 and spec.arch_specific
    assert spec.shared_bytes == spec.c_shared_bytes + spec.config.stages * spec.stage_bytes
    assert _kernels.target_flags([spec], "sm_90") == ["-gencode=arch=compute_90a,code=sm_90a"]
    plain = KernelSpec(Problem("ab", "float32", 49, 3), default_config(Problem("ab", "float32", 49, 3)))
    assert _kernels.target_flags([plain], "sm_90") == ["-arch=sm_90"]
    with pytest.raises(_kernels.KernelBuildError, match="sm_90"):
        _kernels.target_flags([plain, spec], "sm_100")


@pytest.mark.parametrize("m", range(1, 65))
def test_wgmma_fragments_take_one_bank_per_lane_and_stay_in_their_slot(m):
    """A wgmma A fragment (8 rows row_spacing apart x 4 columns) read from staged rows
    touches 32 distinct banks; the last 4-wide step, read whole and masked, stays
    inside the stage's area at any misalignment of the chunk; bulk-staged the same,
    the chunk one unpadded span, and where M is a multiple of 8 (not of 32) each
    phase of a request of vector loads (half or quarter warps) touches 32 distinct
    banks."""
    copies = ("vector", "bulk") if m % 32 else ("vector",)
    for spec in (KernelSpec(Problem("ab", "float32", m, 8), _wgmma_config(8, stage_out=True, stage_copy=copy))
                 for copy in copies):
        validate(spec)
        s, stride, vector = spec.row_spacing, spec.smem_stride(m), spec.fragment_vector
        lanes = 32 // vector  # one phase of the request
        assert all(len({(g * s * stride + vector * t + run * 4 * vector + e) % 32
                        for lane in range(phase * lanes, (phase + 1) * lanes)
                        for g, t in [divmod(lane, 4)] for e in range(vector)}) == 32
                   for phase in range(vector) for run in range(2 * spec.wgmma_k_steps // vector))
        largest_shift = spec.problem.vector_elements - 1
        last_read = largest_shift + (spec.config.rows_per_stage - 1) * stride + 4 * -(-m // 4) - 1
        assert last_read < spec.stage_elements()[0]
        assert not spec.groups_padded(m)
        assert vector == (1 if m % 8 or spec.config.stage_copy == "vector" else 2 if m % 16 else 4)
    with pytest.raises(InvalidSpec, match="bulk") if m % 32 == 0 else contextlib.nullcontext():
        validate(KernelSpec(Problem("ab", "float32", m, 8), _wgmma_config(8, stage_out=True, stage_copy="bulk")))


@pytest.mark.parametrize("vector", [1, 2, 4])
def test_wgmma_vector_fragments_meet_their_rows_of_c(vector):
    """With vector fragment loads, the element a lane takes for k-step q, half h (the
    operand's row 8 q + 4 h + t for quad position t) is the float of A's row that C's
    row _vector_order names, and every run of 4 * vector rows is a permutation; one
    float at a time, C's rows stay in order."""
    run = 4 * vector
    order = eval("lambda k: " + _vector_order(vector).replace("/", "//"))  # non-negative: C's division
    if vector == 1:
        assert [order(k) for k in range(64)] == list(range(64))
        return
    for q in range(2 * run // 8):
        for h in (0, 1):
            for t in range(4):
                name = _vector_element(vector, 0, q, h)  # a0_v<load>.<component>
                load, component = int(name.split(".")[0][4:]), "xyzw".index(name.split(".")[1])
                assert order(8 * q + 4 * h + t) == run * load + vector * t + component
    assert sorted(order(k) for k in range(3 * run)) == list(range(3 * run))


def test_atb_search_offers_one_block_of_large_stages_with_bulk_copies():
    """atb with bulk copies: one block per SM with two stages of up to
    ONE_BLOCK_STAGE_BYTES among the first candidates (even widths of float32 atb,
    where an H200 measured them 5-22 points ahead); never without bulk copies."""
    def large(problem: Problem, config: Config) -> bool:
        return KernelSpec(problem, config).stage_bytes > 48 * 1024

    for width in (34, 44, 56):
        problem = Problem("atb", "float32", width, width)
        offered = [c for c in candidates(problem, 5, "sm_90") if large(problem, c)]
        assert offered, width
        for config in offered:
            spec = KernelSpec(problem, config)
            validate(spec)
            assert config.stage_copy in ("bulk", "bulk_inline") and (config.blocks_per_sm, config.stages) == (1, 2)
            assert spec.stage_bytes <= ONE_BLOCK_STAGE_BYTES["atb"] and occupancy_ok(spec)
        assert not any(large(problem, c) for c in candidates(problem, 64, "sm_80"))


def test_gauss_ab_search_offers_one_block_of_large_stages():
    """Gauss's ab with bulk copies: one block per SM with two stages of 48 rows or
    more (A's, in the groups of the pair's spacing, and out's) among the first
    candidates, the shape of 13 of its 19 winners on an H200 and an H100; the rows
    count A's grouped layout, not padded rows (61: 48 rows, not 32)."""
    for width in (52, 59, 61, 64):
        problem = Problem("ab", "complex128", width, width)
        offered = [c for c in candidates(problem, 4, "sm_90") if c.gauss and c.blocks_per_sm == 1
                   and c.stages == 2 and c.stage_copy == "bulk"]
        assert any((c.tile_m, c.tile_n, c.row_groups) == (2, 1, 1) and c.rows_per_stage >= 48
                   for c in offered), width
        for config in offered:
            spec = KernelSpec(problem, config)
            validate(spec)
            assert occupancy_ok(spec)


def test_tf32_atb_search_offers_large_warp_tiles_with_one_block():
    """3xTF32 atb with one block of bulk copies may take warp tiles of more than 16
    blocks (up to LARGE_TILE_BLOCKS), which an H200 under its power cap ran ahead,
    and ranks them among the first candidates; every other tensor-core
    configuration keeps to 16 blocks a warp."""
    for width in (44, 53):
        problem = Problem("atb", "float32", width, width)
        offered = candidates(problem, 64, "sm_90")
        large = [c for c in offered if c.tile_m * c.tile_n > 16]
        assert any(c in large for c in offered[:5]), width
        for config in large:
            spec = KernelSpec(problem, config)
            validate(spec)
            assert config.tile_m * config.tile_n <= LARGE_TILE_BLOCKS
            assert config.tf32x3 and config.stage_copy in ("bulk", "bulk_inline")
            assert (config.blocks_per_sm, config.stages) == (1, 2)
            assert occupancy_ok(spec)
    for problem in (Problem("atb", "float64", 48, 48), Problem("ab", "float32", 48, 48)):
        assert all(c.tile_m * c.tile_n <= 16 for c in candidates(problem, 64, "sm_90") if c.mma and not c.wgmma)


@pytest.mark.parametrize("tile_m, tile_n, steps", [(5, 5, 2 * 5 + 3), (5, 4, 2 * 4 + 2), (3, 1, 1 + 1), (4, 3, 2 * 3)])
def test_tf32_atb_lone_block_runs_transposed(tile_m, tile_n, steps):
    """3xTF32 atb computes a lone 8-row block of M against pairs of N's blocks (the
    transposed product): a tile_m x tile_n warp tile takes (tile_m // 2) * tile_n +
    ceil(tile_n / 2) m16n8k8 steps per term where a zero partner would take
    ceil(tile_m / 2) * tile_n, and the lone row's sums are stored transposed."""
    problem = Problem("atb", "float32", 8 * tile_m, 8 * tile_n)
    spec = KernelSpec(problem, Config(tile_m=tile_m, tile_n=tile_n, mapping="blocked", row_groups=2,
                                      rows_per_stage=64, stages=3, mma=True, tf32x3=True))
    validate(spec)
    source = kernel_source(spec)
    assert source.count("tsmm_mma_tf32(") == 3 * steps
    assert ("spare_0" in source) == bool(tile_m % 2 and tile_n % 2)
    if tile_m % 2:
        lone_row = f"((warp_m * {tile_m} + {tile_m - 1}) * 8 + 2 * (lane % 4) + 1)"
        assert f"partial[{lone_row} * {problem.n} + ((warp_n * {tile_n} + 0) * 8 + lane / 4)] = " \
            f"acc_{tile_m - 1}_0_1;" in source


def _run_dmma_lines(lines: list[str], a_blocks: dict, b_blocks: dict) -> dict:
    """Execute dmma_products' lines as PTX defines mma.sync f64 for the 32 lanes: each
    register a dict lane -> value; a(i) holds A block i's [k = lane%4][col = lane/4],
    b(j) B block j's. m8n8k4: A [lane/4][lane%4], B [lane%4][lane/4], D [lane/4][2*(lane%4)
    + h]; m16n8k4 the same with A's and D's rows + 8 in the second register."""
    regs = {}
    for name, block in [*((f"a{i}", blk) for i, blk in a_blocks.items()), *((f"b{j}", blk) for j, blk in b_blocks.items())]:
        regs[name] = {lane: block[lane % 4][lane // 4] for lane in range(32)}
    regs["0.0"] = {lane: 0.0 for lane in range(32)}

    def reg(name):
        return regs.setdefault(name, {lane: 0.0 for lane in range(32)})

    for line in lines:
        args = [x.strip() for x in line[line.index("(") + 1:line.rindex(")")].split(",")]
        if line.startswith("tsmm_dmma16("):
            d, (a_top, a_bottom, b) = args[:4], args[4:]
            a_rows = [[reg(a_top)[4 * r + k] for k in range(4)] for r in range(8)] + \
                     [[reg(a_bottom)[4 * r + k] for k in range(4)] for r in range(8)]
        else:
            d, (a_top, b) = args[:2], args[2:]
            a_rows = [[reg(a_top)[4 * r + k] for k in range(4)] for r in range(8)]
        b_cols = [[reg(b)[4 * c + k] for k in range(4)] for c in range(8)]  # B[k][c] sits in lane 4c + k
        out = np.array(a_rows) @ np.array(b_cols).T
        for lane in range(32):
            for h in range(2):
                reg(d[h])[lane] += out[lane // 4][2 * (lane % 4) + h]
                if len(d) == 4:
                    reg(d[2 + h])[lane] += out[lane // 4 + 8][2 * (lane % 4) + h]
    return regs


@pytest.mark.parametrize("tile_m, tile_n", [(5, 3), (3, 4), (1, 7), (1, 1), (4, 3), (3, 1)])
@pytest.mark.parametrize("lone_transposed", [False, True])
def test_dmma_products_compute_the_tile(tile_m, tile_n, lone_transposed):
    """dmma_products' steps, run as PTX defines m8n8k4 and m16n8k4, give every 8x8 block
    of op(A)ᵀ B for one k-step, its sums where the atb emitter stores them (a
    transposed lone block's [2*(lane%4) + h][lane/4]), in (tile_m // 2) * tile_n +
    ceil(tile_n / 2) instructions with the lone block transposed, else
    ceil(tile_m / 2) * tile_n."""
    rng = np.random.default_rng()
    a_blocks = {i: rng.standard_normal((4, 8)) for i in range(tile_m)}
    b_blocks = {j: rng.standard_normal((4, 8)) for j in range(tile_n)}
    lines = dmma_products(tile_m, tile_n, lambda i, j: f"acc_{i}_{j}", lambda i: f"a{i}", lambda j: f"b{j}",
                          lone_transposed=lone_transposed)
    lone_steps = -(-tile_n // 2) if lone_transposed else tile_n
    assert len(lines) == tile_m // 2 * tile_n + (lone_steps if tile_m % 2 else 0)
    regs = _run_dmma_lines(lines, a_blocks, b_blocks)
    for i in range(tile_m):
        lone = lone_transposed and i == tile_m - 1 and tile_m % 2
        want = a_blocks[i].T @ np.stack([b_blocks[j] for j in range(tile_n)], axis=1).reshape(4, -1)
        for j in range(tile_n):
            for lane in range(32):
                for h in range(2):
                    m, n = (2 * (lane % 4) + h, lane // 4) if lone else (lane // 4, 2 * (lane % 4) + h)
                    assert np.isclose(regs[f"acc_{i}_{j}_{h}"][lane], want[m, 8 * j + n])


@pytest.mark.parametrize("conj", [False, True])
@pytest.mark.parametrize("tile_m, tile_n", [(7, 1), (3, 2), (2, 2)])
def test_gauss_atb_row_step_computes_the_complex_tile(tile_m, tile_n, conj):
    """Gauss's atb kernel (Config.gauss), its row step's fragment mixes and tensor steps
    run as PTX defines them and its combination evaluated per lane, gives every 8x8
    block of op(A)ᵀ B for the rows of one step: the pairs of blocks by three m16n8k4,
    a lone block by three m8n8k4."""
    rng = np.random.default_rng()
    problem = Problem("atb", "complex128", 8 * tile_m, 8 * tile_n, conj=conj)
    config = Config(tile_m=tile_m, tile_n=tile_n, mapping="blocked", row_groups=1, rows_per_stage=32, stages=3,
                    mma=True, gauss=True, stage_copy="bulk", blocks_per_sm=1)
    spec = KernelSpec(problem, config)
    lines = [line.strip() for line in kernel_source(spec).splitlines()]
    sums = re.compile(r"\b(rr|ii|mix)_\d")
    steps = [line for line in lines if line.startswith(("tsmm_dmma16(", "tsmm_dmma(")) and sums.search(line)]
    half_empty = any(line.startswith("tsmm_dmma(") for line in steps)
    assert half_empty == bool(tile_m % 2)
    a = {i: rng.standard_normal((4, 8)) + 1j * rng.standard_normal((4, 8)) for i in range(tile_m)}
    b = {j: rng.standard_normal((4, 8)) + 1j * rng.standard_normal((4, 8)) for j in range(tile_n)}
    fragments = {**{f"{i}.x": a[i].real for i in a}, **{f"{i}.y": a[i].imag for i in a}}
    b_fragments = {**{f"{j}.x": b[j].real for j in b}, **{f"{j}.y": b[j].imag for j in b}}
    for line in lines:  # the fragments' mixes, elementwise: const double a0_mix = a0.x + a0.y;
        mix = re.fullmatch(r"const double ([ab])(\d+)_mix = \1\2\.x ([-+]) \1\2\.y;", line)
        if mix:
            operand, index, sign = mix.groups()
            parts = fragments if operand == "a" else b_fragments
            parts[f"{index}_mix"] = parts[f"{index}.x"] + (1 if sign == "+" else -1) * parts[f"{index}.y"]
    regs = _run_dmma_lines(steps, fragments, b_fragments)
    row_steps = spec.row_spacing  # the row step runs its k-step's products that many times
    op_a = {i: np.conj(a[i]) if conj else a[i] for i in a}
    for line in lines:  # the combination: double2 acc_0_0_0 = make_double2(re, im);
        combined = re.fullmatch(r"double2 acc_(\d+)_(\d+)_(\d) = make_double2\((.*), (.*)\);", line)
        if not combined:
            continue
        i, j, h = map(int, combined.groups()[:3])
        want = op_a[i].T @ b[j] * row_steps
        for lane in range(32):
            values = {name: vals[lane] for name, vals in regs.items()}
            got = complex(eval(combined[4], {}, values), eval(combined[5], {}, values))
            assert np.isclose(got, want[lane // 4, 2 * (lane % 4) + h])


def test_dmma_lone_block_transposed_where_the_tile_has_one():
    """Config.lone_transposed serves DMMA atb with an odd tile_m; the search offers it beside
    each such tile, ranked by the tensor steps it saves, and the tuner's neighbours flip it
    and keep it where a step leaves the tile a lone block."""
    base = Config(tile_m=5, tile_n=3, mapping="blocked", row_groups=1, rows_per_stage=24, stages=2, unroll=2,
                  mma=True, stage_copy="bulk", blocks_per_sm=1, lone_transposed=True)
    problem = Problem("atb", "float64", 114, 114)
    validate(KernelSpec(problem, base))
    for other, change in ((problem, dict(tile_m=4)), (Problem("atb", "float32", 114, 114), dict(tf32x3=True)),
                          (Problem("ab", "float64", 40, 40), dict(c_source="global", stage_copy="vector"))):
        with pytest.raises(InvalidSpec, match="lone_transposed"):
            validate(KernelSpec(other, dataclasses.replace(base, **change)))
    assert (_dmma_steps(5, 3), _dmma_steps(5, 3, True), _dmma_steps(1, 7, True), _dmma_steps(4, 3)) == (9, 8, 4, 6)
    offered = [c for c in candidates(problem, 64) if c.mma]
    assert any(c.lone_transposed for c in offered)
    assert all(c.tile_m % 2 and not c.tf32x3 for c in offered if c.lone_transposed)
    moved = neighbours(problem, base)
    assert dataclasses.replace(base, lone_transposed=False) in moved
    assert all(c.lone_transposed == bool(c.tile_m % 2) for c in moved if c != dataclasses.replace(base, lone_transposed=False))


def test_wgmma_candidates_for_float32_ab_on_sm90_only():
    """The search ranks wgmma first for float32 ab on sm_90 (for the fused update with
    staged output only), and never offers it for atb, float64 or other architectures."""
    problem = Problem("ab", "float32", 49, 49)
    offered = candidates(problem, limit=16, arch="sm_90")
    assert offered[0] == default_config(problem, "sm_90") and all(c.wgmma for c in offered[:4])
    update = Problem("ab", "float32", 48, 48, update=True)
    offered_update = [c for c in candidates(update, limit=64, arch="sm_90") if c.wgmma]
    assert offered_update and all(c.stage_out for c in offered_update)
    assert {c.stage_copy for c in offered_update} == {"vector", "bulk"}
    for config in offered:
        validate(KernelSpec(problem, config))
    for other, arch in ((Problem("atb", "float32", 49, 49), "sm_90"), (Problem("ab", "float64", 49, 49), "sm_90"),
                        (problem, "sm_100")):
        assert not any(c.wgmma for c in candidates(other, limit=64, arch=arch))


def test_model_stages_wide_dmma_atb_by_bulk_copies_on_sm90():
    """On sm_90 the model's DMMA atb with a result beyond 64 x 64 entries stages by
    bulk copies, in whole passes of rows, where they fit its shared-memory budget: the
    four real views measured so (H100, 2026-11-25, docs/bench/h100-2026-11-25[ef]-*)
    exactly; float64 multiples of 8, whose passes are 32 rows, keep vector copies at
    88 x 88. Within 64 x 64 entries (the database's widths), and with no architecture
    named (the prebuilt set's), vector copies."""
    measured_rows = {Problem("atb", "float64", 74, 74): 24, Problem("atb", "float64", 102, 102): 16,
                     Problem("atb", "float32", 88, 88): 44, Problem("atb", "float32", 120, 120): 32}
    for problem, rows in measured_rows.items():
        config = default_config(problem, "sm_90")
        assert (config.stage_copy, config.rows_per_stage, config.stages, config.tile_m, config.tile_n) == (
            "bulk", rows, 3, 4, 4), config
        assert dataclasses.replace(config, stage_copy="vector") == default_config(problem)
    for problem in (Problem("atb", "float64", 88, 88), Problem("atb", "float64", 64, 64), Problem("atb", "float32", 64, 64)):
        assert default_config(problem, "sm_90").stage_copy == "vector", problem
    bulk = 0
    for dtype in ("float64", "float32"):
        for m in range(2, 129, 7):
            for n in range(66, 129, 5):
                problem = Problem("atb", dtype, m, n)
                config = default_config(problem, "sm_90")
                spec = KernelSpec(problem, config)
                validate(spec)
                assert spec.shared_bytes <= SHARED_BUDGET and registers_fit(spec), spec.name
                assert config.stage_copy == "vector" or m * n > 64 * 64, spec.name
                bulk += config.stage_copy == "bulk"
    assert bulk > 100


def test_model_stages_ab_out_however_wide():
    """The model's ab stages out beside A wherever out's rows are not whole 16-byte
    vectors, and on the DMMA path always, however much wider out is than A: on an
    H200 (2026-11-27) float64 11x54, 8x36, 8x48 and 1x41 and complex64 1x41 ran
    80-89 % of the copy roofline so and 29-71 % with out in the registers. FMA
    kernels whose out rows are whole vectors keep them in the registers (float32
    7x32 and 10x20 there: 86 and 66 % against 74-78 and 57 % staged)."""
    for problem in (Problem("ab", "float64", 11, 54), Problem("ab", "float64", 8, 36), Problem("ab", "float64", 8, 48),
                    Problem("ab", "float64", 1, 41), Problem("ab", "complex64", 1, 41)):
        config = default_config(problem, "sm_90")
        validate(KernelSpec(problem, config))
        assert config.stage_out, problem
    for problem in (Problem("ab", "float32", 7, 32), Problem("ab", "float32", 10, 20)):
        assert not default_config(problem, "sm_90").stage_out, problem
    for dtype in ("float64", "float32", "complex64"):
        for m in range(1, 65, 3):
            for n in range(1, 65, 2):
                problem = Problem("ab", dtype, m, n)
                config = default_config(problem, "sm_90")
                whole_vectors = n * problem.element_bytes % 16 == 0
                assert (config.stage_out or whole_vectors and not config.mma
                        or config == wide_tf32x3_ab_config(problem)), problem


def test_model_takes_wgmma_for_wide_float32_ab_on_sm90_only():
    """On sm_90 the model's float32 ab with M in 16..64 and N up to 64 is wgmma, valid and
    within an SM's share at its blocks per SM, with bulk copies where M is not a
    multiple of 32 and the blocks' registers (estimated) fit with their producer warps
    (squares up to 56); out up to 16 wide gets more warpgroups per SM where their
    registers fit (the shapes the H200 measured, forty-eighth round). Not
    for other architectures or none (the prebuilt set's), atb, float64, the update,
    or a width outside those."""
    for m in range(16, 65):
        for n in range(1, 65):
            problem = Problem("ab", "float32", m, n)
            config = default_config(problem, "sm_90")
            spec = KernelSpec(problem, config)
            validate(spec)
            assert config.wgmma and occupancy_ok(spec), spec.name
            assert config.stage_copy == "vector" or m % 32, spec.name
            if m == n and m > 32 and m % 32:  # the squares the H200 measured: bulk to 56
                assert (config.stage_copy == "bulk") == (m <= 56), spec.name
    for (m, n), warpgroups in {(16, 5): 4, (26, 5): 4, (27, 6): 4, (48, 1): 3, (64, 2): 3, (40, 40): 2}.items():
        config = default_config(Problem("ab", "float32", m, n), "sm_90")
        assert config.row_groups // 4 * config.blocks_per_sm == warpgroups, (m, n)
    for problem, arch in (
        (Problem("ab", "float32", 40, 40), ""), (Problem("ab", "float32", 40, 40), "sm_100"),
        (Problem("atb", "float32", 40, 40), "sm_90"), (Problem("ab", "float64", 40, 40), "sm_90"),
        (Problem("ab", "float32", 15, 40), "sm_90"), (Problem("ab", "float32", 40, 66), "sm_90"),
        (Problem("ab", "float32", 66, 40), "sm_90"),
    ):
        assert not default_config(problem, arch).wgmma
    assert default_config(Problem("ab", "float32", 40, 40, update=True), "sm_90").wgmma
    assert not any(spec.arch_specific for spec in prebuilt_specs())


def test_wgmma_search_offers_bulk_copies_where_m_allows():
    """The wgmma candidates of float32 ab come with vector and bulk copies where M is
    not a multiple of 32 (bulk ones staging out), with vector copies alone where it is;
    the neighbours of a wgmma kernel include it with the other copies where valid."""
    for m, bulk_expected in ((41, True), (17, True), (48, True), (40, True), (32, False), (64, False)):
        problem = Problem("ab", "float32", m, m)
        offered = [c for c in candidates(problem, limit=200, arch="sm_90") if c.wgmma]
        copies = {c.stage_copy for c in offered}
        assert copies == ({"vector", "bulk"} if bulk_expected else {"vector"}), (m, copies)
        assert all(c.stage_out for c in offered if c.stage_copy == "bulk")
        for config in offered:
            moved = neighbours(problem, config)
            if config.stage_copy == "bulk":
                assert dataclasses.replace(config, stage_copy="vector") in moved
            assert bulk_expected or all(c.stage_copy == "vector" for c in moved)
        if bulk_expected:
            vector = dataclasses.replace(next(c for c in offered if c.stage_copy == "bulk"), stage_copy="vector")
            assert dataclasses.replace(vector, stage_copy="bulk") in neighbours(problem, vector)


@pytest.mark.parametrize("op, width", [("atb", 1), ("atb", 30), ("atb", 64), ("ab", 1), ("ab", 37), ("ab", 64)])
def test_staged_float_fragments_take_one_bank_per_lane(op, width):
    """A warp's fragment read from staged float32 rows (atb: 4 rows x 8 columns,
    ab: 8 rows x 4 columns) touches 32 distinct 4-byte banks."""
    spec = KernelSpec(Problem(op, "float32", width, width), Config(mma=True, c_source="global", row_groups=1,
                                                                    rows_per_stage=8 if op == "ab" else 4))
    stride = spec.smem_stride(width)
    assert width <= stride < width + 32
    rows, cols = (4, 8) if op == "atb" else (8, 4)
    assert len({(r * stride + c) % 32 for r in range(rows) for c in range(cols)}) == 32


@pytest.mark.parametrize("m, n", [(w, w) for w in range(1, 65)] + [(3, 7), (64, 8), (2, 32), (13, 48), (6, 10), (12, 20), (3, 8)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_bulk_layout_fragments_take_distinct_banks(dtype, m, n):
    """Bulk-staged DMMA rows: a fragment read (4 rows s apart, one from each of 4
    groups, x 8 columns; doubles by half warps, 4 columns each) touches distinct
    banks in each operand; rows are unpadded within a group, groups keep the
    rows' 16-byte alignment, and the chunk is one unpadded span where the widths
    allow (neither a multiple of 8 doubles or 16 floats, and of one parity class)."""
    config = Config(tile_m=min(4, -(-m // 8)), tile_n=min(4, -(-n // 8)), mma=True, stage_copy="bulk",
                    row_groups=1, rows_per_stage=64)
    spec = KernelSpec(Problem("atb", dtype, m, n), config)
    validate(spec)
    vector, period = (2, 16) if dtype == "float64" else (4, 32)
    s = spec.row_spacing
    for width in (m, n):
        group = spec.group_stride(width)
        assert spec.smem_stride(width) == width and s * width <= group < s * width + period
        assert s * width % vector == 0 and group % vector == 0
        columns = 4 if dtype == "float64" else 8
        assert len({(k * group + c) % period for k in range(4) for c in range(columns)}) == 4 * columns
    # The spacings a width allows unpadded follow from its factors of 2: doubles
    # odd / 2 mod 4 / 4 mod 8, floats odd / 2 mod 4 / 4 mod 8 / 8 mod 16.
    classes = {min((width & -width).bit_length() - 1, 3 if dtype == "float64" else 4) for width in (m, n)}
    if len(classes) == 1 and classes != {3 if dtype == "float64" else 4}:
        assert all(spec.group_stride(width) == s * width for width in (m, n))


@pytest.mark.parametrize("m", [17, 18, 20, 33, 50, 63, 40, 64])
@pytest.mark.parametrize("tile_m, row_groups", [(1, 4), (2, 2), (4, 1), (2, 3), (2, 4)])
def test_bulk_ab_slabs_cover_each_pass_once(m, tile_m, row_groups):
    """Bulk-staged ab reads rows of A 8 to a slab, s apart (one from each of 8 groups):
    each pass's slabs take each of its rows exactly once, a half warp's fragment (4
    of those rows x 4 columns) touches 16 distinct bank pairs, and passes that
    would split a group of 8 s rows are rejected."""
    problem = Problem("ab", "float64", m, 24)
    config = Config(tile_m=tile_m, tile_n=1, mapping="blocked", row_groups=row_groups, rows_per_stage=8 * tile_m * row_groups,
                    c_source="global", mma=True, stage_out=True, stage_copy="bulk")
    spec = KernelSpec(problem, config)
    s = spec.layout[0]
    if tile_m * row_groups % s:
        with pytest.raises(InvalidSpec, match="bulk"):
            validate(spec)
        return
    validate(spec)
    assert spec.smem_stride(m) == m and spec.row_spacing == s
    rows = [8 * s * (z // s) + z % s + s * frag_row for z in range(tile_m * row_groups) for frag_row in range(8)]
    assert sorted(rows) == list(range(spec.rows_per_pass))
    group = spec.group_stride(m)
    assert len({(r * group + c) % 16 for r in range(4) for c in range(4)}) == 16


@pytest.mark.parametrize("dtype, m, n", [("float64", 33, 33), ("float64", 40, 24), ("float64", 17, 5),
                                         ("float32", 40, 40), ("float32", 64, 64), ("complex128", 48, 48),
                                         ("complex64", 9, 7)])
def test_fused_update_stages_y_beside_a(dtype, m, n):
    """With staged output the fused update's y arrives with A (KernelSpec.stages_y): each
    stage holds a chunk of y's rows after A's area, 16-byte aligned with a vector of
    slack for y's misalignment, counted in the shared memory; it is staged (by the
    producer warp with bulk copies, else by the issue step) only where beta reads it,
    and the threads apply the update as they gather out. The search offers such
    kernels for every dtype's update."""
    problem = Problem("ab", dtype, m, n, update=True)
    found = [c for c in candidates(problem, 64, "sm_90") if c.stage_out and not c.y_in_out]
    assert found
    for config in found:
        spec = KernelSpec(problem, config)
        a_area, y_area = spec.stage_elements()
        plain = KernelSpec(Problem("ab", dtype, m, n), config)
        assert spec.stages_y and not plain.stages_y
        assert a_area == plain.stage_elements()[0] and a_area * problem.element_bytes % 16 == 0
        assert y_area * problem.element_bytes % 16 == 0 and y_area >= config.rows_per_stage * n + problem.vector_elements
        assert spec.stage_bytes == plain.stage_bytes + y_area * problem.element_bytes
        assert spec.shared_bytes - plain.shared_bytes == config.stages * y_area * problem.element_bytes
        source = kernel_source(spec)
        staging = (f"if (read_y && lane == 1) tsmm_bulk_stage(slot_y(slot) + y_shift, y + row0 * {n}" if spec.bulk
                   else "if (read_y) tsmm_stage_copy<")
        assert staging in source and "update(acc" in source and ", sy[" in source


@pytest.mark.parametrize("dtype, m, n", [("float64", 33, 33), ("float64", 17, 5), ("complex128", 48, 48),
                                         ("float32", 106, 106)])
def test_fused_update_stages_y_in_out_buffers(dtype, m, n):
    """With bulk copies y may come through out's buffers instead (Config.y_in_out):
    the ring holds A alone, so the kernel takes plain ab's shared memory and one
    barrier per buffer of out; one thread stages each next chunk of y into the buffer
    whose store has read it, and the threads wait for it before the update. The
    search offers it for the bulk update kernels, and only those."""
    problem = Problem("ab", dtype, m, n, update=True)
    found = [c for c in candidates(problem, 64, "sm_90") if c.y_in_out]
    assert found and all(c.stage_out and c.stage_copy == "bulk" for c in found)
    for config in found:
        spec = KernelSpec(problem, config)
        plain = KernelSpec(Problem("ab", dtype, m, n), dataclasses.replace(config, y_in_out=False))
        assert not spec.stages_y and spec.stage_elements() == plain.stage_elements()
        assert spec.shared_bytes == plain.shared_bytes + 8 * spec.out_buffers
        source = kernel_source(spec)
        assert "y_into_out(step + 1);" in source and "tsmm_barrier_wait(&y_full[step & 1]" in source
        assert "sy = sout + out_shift;" in source and "slot_y" not in source
    for other in (dataclasses.replace(found[0], stage_copy="vector"), dataclasses.replace(found[0], stage_out=False)):
        with pytest.raises(InvalidSpec, match="y_in_out"):
            validate(KernelSpec(problem, other))
    with pytest.raises(InvalidSpec, match="y_in_out"):
        validate(KernelSpec(Problem("ab", dtype, m, n), found[0]))


@pytest.mark.parametrize("problem, config", [
    (Problem("ab", "float64", 52, 52), Config(tile_m=5, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=80,
                                              stages=2, c_source="global", mma=True, stage_out=True,
                                              stage_copy="bulk", blocks_per_sm=1)),
    (Problem("ab", "float64", 33, 33, update=True),
     Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=64, c_source="global", mma=True,
            stage_out=True, stage_copy="bulk", y_in_out=True, blocks_per_sm=1)),
    (Problem("ab", "float32", 41, 41), _wgmma_config(41, stage_out=True, stage_copy="bulk")),
])
def test_bulk_producer_issues_copies_before_taking_the_next_chunk(problem, config):
    """ab's producer warp issues a step's bulk copies, then takes the next step's chunk
    from the counter (an atomic's round trip), then arrives on the slot's barrier, which
    publishes that chunk to the consumers (and to the thread staging y into out's
    buffers): the copies never wait for the atomic (performance.md, fifty-first round)."""
    source = kernel_source(KernelSpec(problem, config))
    producer = source[source.index("// Producer warp"):source.index("} else {", source.index("// Producer warp"))]
    copies = [m.start() for m in re.finditer(r"tsmm_bulk_stage\(", producer)]
    take = producer.index("= take_chunk();")
    arrive = producer.index("tsmm_barrier_arrive(&full[slot]);")
    assert copies and max(copies) < take < arrive
    assert producer.index("tsmm_barrier_wait(&empty[slot]") < min(copies)


def test_the_update_carries_plain_abs_bulk_kernel_with_y_in_out_buffers_where_beside_a_does_not_fit():
    """complex64 53's real view (106 wide) on plain ab's wgmma kernel with bulk copies:
    y beside A would need 263 352 bytes of shared memory; carried to the update, the
    same kernel takes y through out's buffers. Where y fits beside A, it stays there."""
    wide = Problem("ab", "float32", 106, 106, update=True)
    plain = dataclasses.replace(wgmma_config(Problem("ab", "float32", 106, 106)), rows_per_stage=64, stages=2,
                                blocks_per_sm=1, stage_copy="bulk")
    assert KernelSpec(wide, plain).shared_bytes == 263_352 > MAX_SHARED_BYTES
    assert carried_to_update(wide, plain) == dataclasses.replace(plain, y_in_out=True)
    narrow = Problem("ab", "float64", 33, 33, update=True)
    config = Config(tile_m=2, tile_n=1, mapping="blocked", row_groups=2, rows_per_stage=64, c_source="global",
                    mma=True, stage_out=True, stage_copy="bulk", blocks_per_sm=1)
    assert carried_to_update(narrow, config) == config


def test_bulk_ab_needs_a_spacing_its_passes_hold_and_staged_output():
    config = Config(tile_m=2, tile_n=1, mapping="blocked", row_groups=2, rows_per_stage=64, c_source="global",
                    mma=True, stage_out=True, stage_copy="bulk")
    validate(KernelSpec(Problem("ab", "float64", 33, 33), config))
    validate(KernelSpec(Problem("ab", "float64", 33, 33, update=True), config))  # y staged with A (stages_y)
    validate(KernelSpec(Problem("ab", "float64", 40, 33), dataclasses.replace(config, row_groups=4)))
    validate(KernelSpec(Problem("ab", "float64", 40, 33), config))  # groups of 4 rows, padded: passes of 4 slabs
    one_slab = dataclasses.replace(config, tile_m=1, row_groups=1, rows_per_stage=64)
    for problem, changed in ((Problem("ab", "float64", 33, 33), one_slab),  # odd rows keep 16-byte groups in pairs
                             (Problem("ab", "float64", 33, 33), dataclasses.replace(config, stage_out=False)),
                             (Problem("ab", "float32", 33, 33), config)):
        with pytest.raises(InvalidSpec, match="bulk"):
            validate(KernelSpec(problem, changed))


def test_bulk_candidates_only_where_the_gpu_allows():
    for problem in (Problem("atb", "float64", 57, 57), Problem("atb", "float64", 13, 48), Problem("ab", "float64", 40, 40)):
        assert any(c.stage_copy == "bulk" for c in candidates(problem, 16, "sm_90"))
        assert not any(c.stage_copy == "bulk" for c in candidates(problem, 16, "sm_80"))


@pytest.mark.parametrize("problem", [Problem("atb", "float64", 52, 52), Problem("atb", "float32", 48, 48),
                                     Problem("ab", "float64", 33, 33), Problem("atb", "complex64", 7, 5)])
def test_neighbours_are_valid_one_step_moves(problem):
    """The tuner's local search: valid configurations that differ from the start in
    the stage geometry, occupancy or (atb) the tile's orientation only, rows per
    stage moving with the row groups pass for pass."""
    start = candidates(problem, 4, "sm_90")[1]
    moves = neighbours(problem, start)
    assert moves and start not in moves and len(set(moves)) == len(moves)
    movable = {"rows_per_stage", "row_groups", "stages", "blocks_per_sm", "tile_m", "tile_n", "fma_edges", "padded",
               "stage_copy", "ring_takes_chunks"}
    for config in moves:
        spec = KernelSpec(problem, config)
        validate(spec)
        if _covers_blocks_on_even_partitions(spec) and config.row_groups != start.row_groups:
            continue  # a balanced tile (_balanced_tiles): its own test
        changed = {f for f in movable | set(dataclasses.asdict(start)) if getattr(config, f) != getattr(start, f)}
        assert changed <= movable
        if "fma_edges" in changed:  # the warp tile at most trimmed to the core's blocks
            assert config.tile_m <= start.tile_m and config.tile_n <= start.tile_n
        elif problem.op == "ab" and "tile_n" in changed:  # DMMA: a block of columns more or fewer per warp
            assert config.mma and abs(config.tile_n - start.tile_n) == 1 and changed == {"tile_n"}
        elif problem.op == "ab" and "tile_m" in changed:  # slabs per warp, rows pass for pass
            assert config.tile_m in (2 * start.tile_m, start.tile_m // 2)
            passes = start.rows_per_stage // KernelSpec(problem, start).rows_per_pass
            assert config.rows_per_stage == passes * KernelSpec(problem, config).rows_per_pass
        elif changed & {"tile_m", "tile_n"}:  # transposed, or covering the blocks with no padded warp
            spec = KernelSpec(problem, config)
            exact = all(spec.mma_blocks(w) % t == 0 for w, t in ((problem.m, config.tile_m), (problem.n, config.tile_n)))
            assert (config.tile_m, config.tile_n) == (start.tile_n, start.tile_m) or (config.mma and exact)
        if "stage_copy" in changed:  # ab: vector or bulk copies; atb: bulk copies from a producer warp or inline
            assert config.mma and (problem.op == "ab" or {start.stage_copy, config.stage_copy} == {"bulk", "bulk_inline"})
        if "ring_takes_chunks" in changed:  # ab's cp.async ring alone: flipped on its own, or off for bulk copies
            assert problem.op == "ab" and (changed == {"ring_takes_chunks"} or not config.ring_takes_chunks)
        if "row_groups" in changed:
            passes = start.rows_per_stage // KernelSpec(problem, start).rows_per_pass
            assert config.rows_per_stage == passes * KernelSpec(problem, config).rows_per_pass
        if "blocks_per_sm" in changed and len(changed) > 1:  # the most that fit after another step
            assert config.blocks_per_sm < start.blocks_per_sm
            assert not _usable(KernelSpec(problem, dataclasses.replace(config, blocks_per_sm=config.blocks_per_sm + 1)))


def _covers_blocks_on_even_partitions(spec: KernelSpec) -> bool:
    """An atb tensor-core tile whose warps cover the blocks with none padded, as many on
    each of an SM's four sub-partitions, in one block per SM."""
    p, c = spec.problem, spec.config
    return (c.mma and p.op == "atb" and c.blocks_per_sm == 1
            and (spec.tiles_m * spec.tiles_n * c.row_groups) % 4 == 0
            and all(spec.mma_blocks(w) % t == 0 for w, t in ((p.m, c.tile_m), (p.n, c.tile_n))))


def test_neighbours_of_a_padded_tf32_atb_tile_spread_exact_tiles_over_the_sub_partitions():
    """complex64 atb 34's real view (68x68, 9x9 blocks of 8) from the 5x5 tiles in 2 row
    groups it was tuned to (8 warps, 52 tensor steps per k-step over 10x10 blocks): one
    step reaches 9x3 and 3x9 tiles in 4 row groups (12 warps, 42 steps), at the stage's
    rows, with bulk copies from the producer warp and inline; 3x3 tiles (9 warps, 45
    steps) would need 36 warps to spread evenly."""
    problem = Problem("atb", "float32", 68, 68)
    start = Config(tile_m=5, tile_n=5, mapping="blocked", row_groups=2, rows_per_stage=160, stages=2, unroll=2,
                   mma=True, tf32x3=True, c_source="shared", stage_copy="bulk", blocks_per_sm=1)
    balanced = [c for c in neighbours(problem, start, "sm_90") if c.row_groups == 4]
    assert {(c.tile_m, c.tile_n, c.stage_copy) for c in balanced} == {
        (tile_m, tile_n, copy) for tile_m, tile_n in ((9, 3), (3, 9)) for copy in ("bulk", "bulk_inline")}
    for config in balanced:
        assert _covers_blocks_on_even_partitions(KernelSpec(problem, config))
        assert config.rows_per_stage == 128 and not config.lone_transposed


def test_neighbours_of_a_padded_dmma_atb_tile_cover_the_blocks_exactly():
    """complex128 atb 53's real view (106x106, 14x14 blocks of 8) on the 5x3 warp
    tiles it was tuned to (15x15 blocks worked): one step reaches 7x2, whose warps
    cover the blocks with none padded; a tile that covers them already has no such
    step."""
    problem = Problem("atb", "float64", 106, 106)
    start = Config(tile_m=5, tile_n=3, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2, unroll=2,
                   mma=True, c_source="shared", stage_copy="bulk", blocks_per_sm=1)
    assert dataclasses.replace(start, tile_m=7, tile_n=2) in neighbours(problem, start, "sm_90")
    covering = Problem("atb", "float64", 120, 120)  # 15x15 blocks
    assert {(c.tile_m, c.tile_n) for c in neighbours(covering, start, "sm_90")} == {(5, 3), (3, 5)}


def test_neighbours_of_a_one_slab_dmma_ab_reach_more_slabs_and_bulk_copies():
    """The model's DMMA kernels for complex128 ab 50 and 51's real views (100 and
    102 wide, one slab of 8 rows a warp) with vector copies, as for GPUs without
    bulk copies: the local search reaches two slabs a warp, and bulk copies (102's
    one slab takes its rows padded to 108, a spacing of 1), in one step each (on an
    H100 the tuner ended at 50 on one slab with bulk copies, 60.8 %, and at 51 on 8
    slabs, 75.8 %, against the model's 49.7 and 46.9 %), and no bulk
    copies for GPUs without them."""
    for width in (100, 102):
        problem = Problem("ab", "float64", width, width)
        start = default_config(problem)
        assert (start.mma, start.tile_m, start.stage_copy) == (True, 1, "vector")
        moves = neighbours(problem, start, "sm_90")
        assert any(c.tile_m == 2 and c.stage_copy == "vector" for c in moves)
        assert any(c.tile_m == 1 and c.stage_copy == "bulk" for c in moves)
        assert not any(c.stage_copy == "bulk" for c in neighbours(problem, start, "sm_80"))


def test_neighbours_deepen_the_ring_at_the_blocks_per_sm_that_fit():
    """float64 ab 10x10's DMMA kernel at three blocks per SM: one more stage fits
    two blocks per SM, a neighbour the local search would otherwise never reach in
    one step."""
    problem = Problem("ab", "float64", 10, 10)
    start = Config(tile_m=7, tile_n=2, mapping="blocked", row_groups=4, rows_per_stage=224, stages=2, mma=True,
                   c_source="global", stage_out=True, stage_copy="bulk", blocks_per_sm=3, waves=8)
    assert _usable(KernelSpec(problem, start))
    assert not _usable(KernelSpec(problem, dataclasses.replace(start, stages=3)))
    assert dataclasses.replace(start, stages=3, blocks_per_sm=2) in neighbours(problem, start)


def test_neighbours_deal_a_full_ring_into_one_more_stage():
    """Gauss's complex128 atb 57x57 kernel in two 48-row stages, one block per SM: a
    third stage of the same rows would not fit its shared memory, the same ring's
    passes in three stages of 32 rows do, one step of the local search away."""
    problem = Problem("atb", "complex128", 57, 57)
    start = Config(tile_m=4, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=48, stages=2, unroll=2,
                   mma=True, gauss=True, c_source="shared", stage_copy="bulk_inline", blocks_per_sm=1)
    assert _usable(KernelSpec(problem, start))
    assert not _usable(KernelSpec(problem, dataclasses.replace(start, stages=3)))
    assert dataclasses.replace(start, stages=3, rows_per_stage=32) in neighbours(problem, start)


def test_neighbours_flip_the_order_of_abs_cp_async_ring_alone():
    """Whether ab's cp.async ring takes its chunks is the local search's to decide
    (Config.ring_takes_chunks): one neighbour of a ring kernel flips it, and none of a
    kernel with bulk copies (which always takes them), the flat walk or atb."""
    ring = Problem("ab", "float64", 43, 43)
    start = Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=64, c_source="global",
                   mma=True, stage_out=True)
    assert dataclasses.replace(start, ring_takes_chunks=True) in neighbours(ring, start, "sm_90")
    taking = dataclasses.replace(start, ring_takes_chunks=True)
    assert start in neighbours(ring, taking, "sm_90")
    assert dataclasses.replace(start, stage_copy="bulk") in neighbours(ring, taking, "sm_90")
    others = [(ring, dataclasses.replace(start, stage_copy="bulk")), (Problem("ab", "float64", 3, 7), flat_candidates(Problem("ab", "float64", 3, 7))[0]),
              (Problem("atb", "float64", 8, 8), default_config(Problem("atb", "float64", 8, 8)))]
    for problem, config in others:
        assert not any(c.ring_takes_chunks for c in neighbours(problem, config, "sm_90"))
    update = Problem("ab", "float64", 33, 7, update=True)  # beside it, the bulk update's own step: y in out's buffers
    bulk = Config(tile_m=2, tile_n=1, mapping="blocked", row_groups=2, rows_per_stage=64, c_source="global",
                  mma=True, stage_out=True, stage_copy="bulk")
    assert any(c.y_in_out for c in neighbours(update, bulk, "sm_90"))


@pytest.mark.parametrize("problem", [Problem("atb", "float32", 2, 2), Problem("ab", "float32", 4, 16),
                                     Problem("atb", "float64", 6, 3)])
def test_neighbours_flip_the_padding_where_it_changes_the_layout(problem):
    """Padding is the local search's to decide (the model does not rank it): an FMA
    kernel with an even staged width has a neighbour that differs in the padding
    alone, and the flip changes a staged row's stride. Odd widths and the tensor
    cores' layouts have no such neighbour, which would be the same kernel."""
    start = default_config(problem)
    flips = [c for c in neighbours(problem, start) if c == dataclasses.replace(start, padded=not start.padded)]
    assert len(flips) == 1
    strides = [KernelSpec(problem, c).smem_stride(w) for c in (start, flips[0]) for w in (problem.m, problem.n)]
    assert strides[:2] != strides[2:]
    for other in (Problem("atb", "float32", 3, 5), Problem("atb", "float64", 52, 52)):
        config = candidates(other, 1, "sm_90")[0]
        assert all(c.padded == config.padded for c in neighbours(other, config))


def test_flat_neighbours_move_the_grid_not_the_ring():
    """The flat mapping stages nothing: its neighbours move rows per stage, row
    groups, blocks per SM and waves of blocks, never stages."""
    problem = Problem("ab", "float64", 3, 7)
    start = flat_candidates(problem)[0]
    moves = neighbours(problem, start)
    assert any(c.waves != start.waves for c in moves)
    for config in moves:
        validate(KernelSpec(problem, config))
        changed = {f for f in dataclasses.asdict(start) if getattr(config, f) != getattr(start, f)}
        assert changed and changed <= {"rows_per_stage", "row_groups", "blocks_per_sm", "waves"}


def test_names_identify_the_source():
    p = Problem("ab", "float64", 5, 5)
    c = default_config(p)
    same_source = dataclasses.replace(c, waves=c.waves + 1)
    assert module_source([KernelSpec(p, c)]) == module_source([KernelSpec(p, same_source)])
    assert KernelSpec(p, c).name == KernelSpec(p, same_source).name
    for other_source in (dataclasses.replace(c, unroll=c.unroll + 1), dataclasses.replace(c, blocks_per_sm=c.blocks_per_sm + 1),
                         dataclasses.replace(c, ring_takes_chunks=True)):
        assert module_source([KernelSpec(p, c)]) != module_source([KernelSpec(p, other_source)])
        assert KernelSpec(p, c).name != KernelSpec(p, other_source).name


def test_later_fields_at_their_defaults_leave_sources_and_names_as_before():
    """A field added since (LATER_FIELDS) enters a kernel's name and source only where
    it is set: the kernels before it keep their names and cached cubins."""
    spec = KernelSpec(Problem("ab", "float64", 5, 5), default_config(Problem("ab", "float64", 5, 5)))
    for field in LATER_FIELDS:
        assert field not in spec.source_fields and field not in module_source([spec])
    before = {f.name: getattr(spec.config, f.name) for f in dataclasses.fields(Config)
              if f.name not in LATER_FIELDS + ("waves",)}
    assert spec.source_fields == before


def _nvcc_compile(specs, tmp_path) -> str:
    """``specs`` compiled for sm_90 as the package compiles them, warning-free: ptxas's
    register and spill report."""
    return _kernels.compile_with_report(specs, "sm_90", tmp_path / "sample.cu", "-Werror", "all-warnings")[1]


@pytest.mark.nvcc
def test_sample_compiles_for_sm90_without_warnings(tmp_path):
    specs = _sample_specs()
    assert any(s.config.mma for s in specs) and any(s.config.tf32x3 for s in specs)
    assert any(s.config.m_panels > 1 for s in specs)
    options = {(s.config.mapping, s.config.c_source, s.config.stages, s.problem.op) for s in specs}
    assert {"interleaved", "blocked", "flat"} <= {o[0] for o in options}
    assert {"shared", "global"} <= {o[1] for s in specs if s.problem.op == "ab" for o in [(s.config.mapping, s.config.c_source)]}
    assert {2, 3, 4} <= {o[2] for o in options}
    _nvcc_compile(specs, tmp_path)


@pytest.mark.parametrize("m", range(1, 129))
def test_wgmma_k_step_groups_cover_the_inner_index_within_the_registers(m):
    """A wgmma kernel's k-steps go to commit groups in order, each once, in whole
    vector loads of A's fragments: one group up to M = 72 (the kernels measured to
    64, the same source), and beyond it the fewest even groups within the register
    estimate (four at 128 x 128)."""
    for n in (8, 64, 128):
        for copy in ("vector", "bulk"):
            spec = KernelSpec(Problem("ab", "float32", m, n), _wgmma_config(n, stage_out=True, stage_copy=copy))
            if copy == "bulk" and not wgmma_fragment_vector(m):
                continue
            groups = spec.wgmma_groups
            assert [q for group in groups for q in group] == list(range(spec.wgmma_k_steps))
            assert all(len(group) % max(1, spec.fragment_vector // 2) == 0 for group in groups[:-1])
            assert max(map(len, groups)) - min(map(len, groups)) <= max(1, spec.fragment_vector // 2)
            assert (len(groups) == 1) == (spec.wgmma_n + WGMMA_STEP_REGISTERS * spec.wgmma_k_steps
                                          + WGMMA_FIXED_REGISTERS <= MAX_REGISTERS)
            assert spec.estimated_registers() <= MAX_REGISTERS
            if m <= 72 and n <= 72:
                assert len(groups) == 1
    assert len(KernelSpec(Problem("ab", "float32", 128, 128), _wgmma_config(128)).wgmma_groups) == 4


@pytest.mark.nvcc
def test_wgmma_kernels_compile_for_sm90a_without_spills(tmp_path):
    """wgmma kernels from 1 to 128 wide, staged output or not, by vector or bulk copies,
    several in one module (each width's product emitted once), build for sm_90a
    warning-free and without spilling at the register share their launch bounds give
    them, and ptxas fences the warpgroup a few times per kernel, not before every
    k-step (a select masking the last k-step made it fence 14 times at 49x49). Beyond
    an inner index of 72 the k-steps go in commit groups (2 to 4 here), without which
    the estimate exceeds the registers."""
    specs = [KernelSpec(Problem("ab", "float32", m, n),
                        _wgmma_config(n, stage_out=m % 2 == 1 or copy == "bulk", blocks_per_sm=b, stage_copy=copy,
                                      rows_per_stage=rows))
             for m, n, b, copy, rows in ((49, 49, 2, "vector", 128), (64, 64, 1, "vector", 128),
                                         (33, 17, 2, "vector", 128), (5, 3, 2, "vector", 128),
                                         (40, 64, 1, "vector", 128), (64, 1, 2, "vector", 128),
                                         (17, 56, 2, "vector", 128), (41, 41, 1, "bulk", 128),
                                         (57, 9, 2, "bulk", 128), (63, 63, 2, "bulk", 128), (48, 48, 2, "bulk", 128),
                                         (56, 56, 2, "bulk", 128), (16, 64, 2, "bulk", 128),
                                         (74, 74, 1, "bulk", 64), (88, 88, 1, "vector", 128),
                                         (112, 24, 1, "bulk", 128), (104, 48, 1, "bulk", 64),
                                         (128, 64, 1, "vector", 64))]
    assert {len(s.wgmma_groups) for s in specs} == {1, 2}
    report = _nvcc_compile(specs, tmp_path)
    usage = _kernels.ptxas_usage(report)
    assert len(usage) == len(specs) and all(spilled == 0 for _, spilled in usage.values()), report
    assert report.count("warpgroup.arrive is injected") <= 4 * len(specs), report


def _shipped_sm90_databases() -> tuple[dict, ...]:
    return tuple(_dispatch._database_file(path) for path in sorted(_dispatch.TUNING_DIR.glob("sm_90*.json")))


@pytest.mark.nvcc
def test_prebuilt_set_is_distinct_and_compiles(tmp_path):
    databases = _shipped_sm90_databases()
    for specs, model_only in ((prebuilt_specs(databases, "sm_90"), prebuilt_specs()),
                              (prebuilt_mtsm_specs(databases), prebuilt_mtsm_specs())):
        assert len({s.name for s in specs}) == len(specs) > len(model_only)
        assert not any(spec.arch_specific for spec in model_only)
        any_arch, sm90a = by_target(specs)  # the build compiles these apart, for sm_90a
        assert sm90a and all(spec.config.wgmma for spec in sm90a)
        _nvcc_compile(any_arch[::5], tmp_path)
        _nvcc_compile(sm90a, tmp_path)


@pytest.mark.skipif(_kernels.extension() is None, reason="package built without CUDA")
def test_extension_holds_the_kernels_the_shipped_databases_choose_for_prebuilt_problems(tuned_dispatch):
    """Built for sm_90 (the default), the extension holds, for each prebuilt problem,
    the kernel dispatch picks on an H100 or H200 at every K range, wgmma's (sm_90a)
    among them: those calls compile nothing at first use, and run without nvcc.
    Real views of complex problems are left out. The Gram matrices' kernels of the
    square atb problems are held too."""
    held, kernels, wgmma, grams = _kernels.prebuilt_names(), 0, 0, 0
    for device, problem, k in itertools.product(("NVIDIA H100 80GB HBM3", "NVIDIA H200"), prebuilt_problems(),
                                                (1 << 18, 1 << 22, 1 << 27)):
        for gram in (False, True) if problem.op == "atb" and problem.m == problem.n else (False,):
            spec = _dispatch.select_problem(dataclasses.replace(problem, gram=gram), k, "sm_90", device)
            if spec is not None and spec.problem == dataclasses.replace(problem, gram=gram):
                assert spec.name in held, (device, k, spec.name)
                kernels += spec.name not in {s.name for s in prebuilt_specs()}
                wgmma += spec.config.wgmma
                grams += gram
    assert kernels > 0 and wgmma > 0 and grams > 0  # some of them are not the model's, some wgmma's


@pytest.mark.skipif(_kernels.extension() is None, reason="package built without CUDA")
def test_extension_holds_the_mtsm_kernels_the_shipped_databases_choose_for_prebuilt_problems(tuned_dispatch):
    """mtsm alike: at each prebuilt mtsm problem and every size the databases tune,
    the kernel dispatch picks on an H100 or H200 is built in, wgmma's (sm_90a) too."""
    held, kernels, wgmma = _kernels.prebuilt_names(), 0, 0
    for device, problem, size in itertools.product(("NVIDIA H100 80GB HBM3", "NVIDIA H200"),
                                                   prebuilt_mtsm_problems(), (2048, 8192, 16384, 30720)):
        spec = _mtsm.select(problem.dtype, problem.transpose_a, problem.n, False, size, "sm_90", device)
        if spec is not None:
            assert spec.name in held, (device, size, spec.name)
            kernels += spec.name not in {s.name for s in prebuilt_mtsm_specs()}
            wgmma += spec.config.wgmma
    assert kernels > 0 and wgmma > 0
