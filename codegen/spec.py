"""Kernel specifications as plain data, and the checks that every spec must pass.

A ``Problem`` says what to compute (the problem type, in Tensile's words); a
``Config`` says how (the solution parameters). A ``KernelSpec`` pairs them. The
emitters turn a valid spec into CUDA; ``validate`` rejects a spec before any
compiler sees it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass

OPS = ("atb", "ab")
# Config fields added after 2026-11-27, whose defaults keep the kernels as they were
# (KernelSpec.source_fields).
LATER_FIELDS = ("ring_takes_chunks", "triangle")

# dtype name -> (C type of one real component, components per element)
DTYPES = {
    "float32": ("float", 1),
    "float64": ("double", 1),
    "complex64": ("float", 2),
    "complex128": ("double", 2),
}
# ptxas fits DMMA's m16n8k4 in 64 registers a thread but not in 56 ("cannot be
# compiled with specified register target constraints", nvcc 13.0, atb 13x13 tiles
# of 1x2 blocks at 480 and 544 threads, 2 blocks per SM): the estimate of a
# tensor-core kernel is at least that, so that no candidate fails the compile.
MMA_MIN_REGISTERS = 64

MAX_THREADS = 1024
MAX_SHARED_BYTES = 227 * 1024  # Hopper's opt-in limit per block
MAX_REGISTERS = 255
# wgmma's register estimate: per k-step of A fragments in flight (8 words, which ptxas
# keeps in 14 registers), and for addresses, indices and the loader.
WGMMA_STEP_REGISTERS = 14
WGMMA_FIXED_REGISTERS = 48
# Under a launch bound below its own count ptxas fits Gauss's atb with FMA edges into
# up to this many registers fewer than the estimate, keeping fewer of the edges' loads
# in flight (KernelSpec.bounded_registers). nvcc 13.0, complex128 atb, 168 registers
# a thread (2026-11-29): no spills at 34 (2x2 and 1x4 tiles, estimate 180-186), 49
# (2x3: 190), 50 (2x3: 210) and 51 (2x2: 184); 32-84 bytes at estimates 200-206 (35,
# 52); 172-560 bytes from 216 (36, 37, 51's 2x3, 53). The fit also varies with the
# stages (49's 2x3 in 48-row stages spilled 148 bytes, in 64-row ones none; 50's in
# 16-row ones 12-28): the timing judges what spills.
GAUSS_EDGE_SLACK = 42
FLAT_MAX_M = 16  # flat ab keeps C's columns for a thread's elements in registers: M x vector elements
STAGE_COPIES = ("vector", "element", "bulk", "bulk_inline")
# DMMA (FP64 tensor cores) serves float32 too: widened to double on the way from
# shared memory to the fragments (exact), accumulated in double.
MMA_DTYPES = ("float64", "float32")
VECTOR_BYTES = 16  # every stage is copied with 16-byte cp.async where alignment allows


class InvalidSpec(ValueError):
    """A spec that would not generate correct code; the message says why, after the
    kernel's name where a spec is given. The name is hashed only when the message
    is read: the search rejects hundreds of thousands of specs, and naming each
    one had taken half of its time (``codegen.search.candidates`` at float64 atb
    88x88: 12.4 s, 5.3 s since, on a 2-core development machine, 2026-11-25)."""

    def __init__(self, reasons: str, spec=None):
        super().__init__(reasons)
        self.reasons, self.spec = reasons, spec

    def __str__(self) -> str:
        return f"{self.spec.name}: {self.reasons}" if self.spec is not None else self.reasons


class ElementType:
    """What a problem's ``dtype`` means to the generated code."""

    dtype: str

    @property
    def real_type(self) -> str:
        return DTYPES[self.dtype][0]

    @property
    def components(self) -> int:
        return DTYPES[self.dtype][1]

    @property
    def element_bytes(self) -> int:
        return (4 if self.real_type == "float" else 8) * self.components

    @property
    def vector_elements(self) -> int:
        return VECTOR_BYTES // self.element_bytes


@dataclass(frozen=True)
class Problem(ElementType):
    op: str  # "atb": op(A)ᵀ B, reduced over K;  "ab": op(A) C
    dtype: str
    m: int
    n: int
    conj: bool = False  # op(A) = conj(A); only meaningful for complex dtypes
    # ab only: out = beta * y + alpha * op(A) C in the same pass (BLAS's update;
    # alpha and beta are launch arguments, y may be out itself)
    update: bool = False
    # atb only, M = N: A and B are one operand, the Gram matrix op(A)ᵀ A (Cholesky-QR,
    # Gram-Schmidt, Rayleigh-Ritz): its rows are staged once and read as both, half the
    # traffic of two operands
    gram: bool = False


def op_name(problem: Problem) -> str:
    """The operation's name in database keys, the bench and the tuner: ab's fused
    update is "ab_update", the Gram matrix (atb of one operand as both) "gram",
    operations of their own."""
    return "ab_update" if problem.update else "gram" if problem.gram else problem.op


def named_problem(op: str, dtype: str, m: int, n: int) -> Problem:
    """op_name's inverse: the problem of an operation ("atb", "ab", "ab_update" or
    "gram") of this shape. A complex Gram matrix is Aᴴ A, the Hermitian one that
    Cholesky-QR and Gram-Schmidt form (conj)."""
    gram = op == "gram"
    return Problem("ab" if op == "ab_update" else "atb" if gram else op, dtype, m, n,
                   conj=gram and DTYPES[dtype][1] == 2, update=op == "ab_update", gram=gram)


def problem_key(problem: Problem) -> str:
    """Database key; conj is left out (it flips signs and costs the same). ab's
    fused update has entries of its own: against XLA's dot and a separate
    elementwise pass it wins where plain ab may not; so has the Gram matrix, which
    reads one operand where atb reads two."""
    return f"{op_name(problem)}:{problem.dtype}:{problem.m}x{problem.n}"


def key_problem(key: str) -> Problem:
    """problem_key's inverse: the problem of an "op:dtype:MxN" key (conj, which keys
    leave out, False but for a complex Gram matrix's: named_problem)."""
    op, dtype, shape = key.split(":")
    m, n = map(int, shape.split("x"))
    return named_problem(op, dtype, m, n)


@dataclass(frozen=True, repr=False)
class Config:
    """How a kernel computes. Fields and the techniques they select:

    tile_m, tile_n   per-thread register tile (Ernst et al.). atb: tile_m
                     columns of A × tile_n columns of B. ab: tile_m rows of A
                     × tile_n columns of C (an outer product per inner index).
    mapping          "interleaved": a thread's tile takes every (tiles)-th
                     index, so neighbouring threads read neighbouring shared
                     words (the transposed mapping); "blocked": contiguous.
                     "flat" (ab, FMA, tile 1x1, M up to FLAT_MAX_M): out is
                     one span of 16-byte vectors dealt out to the threads a
                     pass of whole rows at a time, each thread computing whole
                     vectors from its row of A (read through L1) and C's
                     columns for its elements (in registers): nothing is
                     staged, and every warp stores one contiguous span, for
                     products whose traffic is mostly out's writes.
    row_groups       threads that split the rows of a stage (atb), or the
                     row tiles side by side (ab); the thread-count factor.
    rows_per_stage   rows of A (and B) staged per pipeline step.
    stages           shared-memory buffers in flight: stage i+stages-1 is
                     loaded while stage i is used (leap-frogging).
    unroll           unroll depth of the row loop.
    c_source         ab only: where C is read from, "shared" or "global".
    padded           stage rows of even width at an odd stride (one element of
                     padding), so threads reading the same column of different
                     rows hit different banks; such rows are copied element by
                     element instead of in 16-byte vectors.
    mma              FP64 tensor cores (mma.sync m8n8k4), float64 and float32
                     (widened to double in registers, accumulated in double). atb:
                     tile_m x tile_n 8x8 blocks of the result per warp, a row
                     group is a set of warps taking 4-row steps. ab: a warp
                     holds C in registers and turns tile_m slabs of 8 rows
                     into tile_m x tile_n 8x8 blocks of out; C is read from
                     global memory once (c_source "global").
    tf32x3           float32 with mma only: the TF32 tensor cores (mma.sync
                     m16n8k8) instead of DMMA. Each float is split into a TF32
                     part and a remainder (3xTF32: hi*hi + hi*lo + lo*hi), so each
                     product is within 2^-20 of exact, random in sign (float32's
                     own rounding: 2^-24). The tensor cores' truncating float32
                     sums are kept short: atb adds each row step's into
                     round-to-nearest totals, ab sums hi*hi and the correction
                     terms apart. An m16n8k8 step is two DMMA k-steps side by side
                     and two 8-row blocks stacked along M: the tiles, fragments
                     and staged layouts stay DMMA's; a row step of atb takes 8
                     rows per fragment row where DMMA takes 4. It spares float32
                     DMMA's widening conversions, which cost as much pipe time as
                     the DMMAs themselves.
    wgmma            float32 ab with tf32x3 only (the update with stage_out;
                     sm_90a): Hopper's warpgroup MMA
                     (wgmma.mma_async m64nNk8) instead of mma.sync. C, split
                     once per block, sits in shared memory as wgmma's B operand,
                     read by the tensor cores for every warp, where mma.sync
                     needs C's fragments in every warp's registers; four warps (a
                     warpgroup, row_groups a multiple of 4) turn 64 staged rows
                     into 64 rows of out per instruction, all N columns at once
                     (tile_m 2 slabs of 8 rows per warp, tile_n all blocks of
                     8 columns). Measured on an H200 (scripts/probe_tf32.py),
                     the TF32 tensor cores run 455 TFLOP/s through wgmma
                     m64n64k8 and 303 through mma.sync m16n8k8. Beyond an
                     inner index M of 72 the k-steps go to the tensor cores in
                     commit groups (KernelSpec.wgmma_groups).
    stage_out        ab only: each chunk's rows of out are gathered in shared memory
                     and leave as one contiguous span in 16-byte vectors (the
                     fused update's y staged beside A: stages_y), instead of each
                     thread storing its own tile: whole-sector writes whatever
                     the parity of N and the fragment layout.
    y_in_out         ab's fused update with staged output and bulk copies: y's chunk
                     is bulk-copied into the buffer of out that the chunk's result
                     will leave from, one chunk ahead (once that buffer's store two
                     chunks back has read it), and each element of y is read and
                     overwritten there by the same thread; the ring holds A alone.
                     Beside A (stages_y) y takes a stage's share in every slot:
                     at complex64 53 (a real view 106 wide) plain ab's wgmma kernel
                     then needs 263 352 bytes of shared memory, 209 064 with y in
                     out's buffers.
    stage_copy       how staged rows of A (and B) move: "vector", 16-byte copies
                     where alignment allows; "element", one copy per element (a
                     simpler loop, for kernels bound by their arithmetic rather
                     than by memory); "bulk" (DMMA, sm_90), a producer
                     warp moves each stage with Hopper's bulk copies (TMA,
                     cp.async.bulk) that count down a transaction barrier per
                     slot, so the consumer warps issue no copies and never wait
                     for each other (no block-wide barrier per stage). Their
                     rows are staged in unpadded groups of s, one bulk copy a
                     group, with padding between groups only where a DMMA step
                     taking its rows s apart would hit a bank twice (see
                     bulk_layout; wgmma's rows are unpadded, one bulk copy a
                     chunk, M not a multiple of 32). ab's staged output then
                     leaves the same way, one bulk store per chunk from two
                     buffers in turn, so the store of one chunk overlaps the next.
                     "bulk_inline" (atb): the same copies and barriers, issued by
                     the first consumer warp instead of a producer warp, so that
                     the warps' registers are not capped for a warp that holds
                     none (nvcc caps a block of 9 warps at 168 per thread, 8 at
                     255: cuBLAS's 8-warp Gauss tiles of complex128 Aᴴ B hold 240).
    fma_edges        atb with mma only: the tensor cores take the result's core of whole
                     8x8 blocks (M and N rounded down to multiples of 8) and the FMA
                     units its edges (the last M mod 8 rows and N mod 8 columns), in
                     the same warps from the same staged rows, where padding the edges
                     to whole blocks would cost tensor work: at 50x50 DMMA computes
                     48x48 instead of 56x56, 3xTF32 48x48 instead of 64x56 (its
                     blocks go in 16-row pairs). Each lane quad's four lanes take the
                     entries of one edge slot on their fragment rows, summed across the
                     quad at the end; a slot holds whole rows of the N edge (one A
                     element against the N mod 8 edge columns of B) and whole columns of
                     the M edge, so a row costs a load per unit and per edge column.
                     With gauss the edges stay complex, a complex FMA (four real
                     ones) per entry and row: at 49..55 the core is 48x48 where
                     Gauss's blocks would pad to 56x56.
    lone_transposed  atb on DMMA (mma without tf32x3) with an odd tile_m: the warp
                     tile's lone last block of M runs transposed, N's blocks j
                     and j+1 as an m16n8k4's 16 rows against its 8 columns (the
                     same fragment registers: an A fragment's rows are a B
                     fragment's columns), in ceil(tile_n / 2) steps where one
                     m8n8k4 per block takes tile_n. Hopper issues m8n8k4
                     half-empty (32.9 against 65.5 TFLOP/s as m16n8k4 on an
                     H200), so a lone block costs a pair's tensor time: 5x3
                     tiles issue 8 steps instead of 9. 3xTF32 atb always runs its
                     lone block so (tf32_products).
    gauss            complex128 atb and ab (the update with stage_out), with mma only:
                     Gauss's three real products
                     (3M) on DMMA instead of the real view's four. Per 8x8 block
                     of the complex result, P1 = Re(a)ᵀ Re(b), P2 = Im(a)ᵀ Im(b)
                     and P3 = (Re a ± Im a)ᵀ (Re b + Im b) (minus for conj);
                     then Aᵀ B = P1 - P2 + i (P3 - P1 - P2) and Aᴴ B = P1 + P2
                     + i (P3 - P1 + P2). Three DMMA per block where the real
                     view takes four, and M and N pad to blocks of 8 where the
                     real view pads 2M and 2N: 12-25 % fewer tensor steps at
                     49..64. On an H200 (2026-11-26) it won 49..52, 54 and 56
                     by 0.3-4.7 points of roofline and lost 57..63. Staged
                     rows stay complex (16-byte elements; those of the blocks
                     that pair up in an m16n8k4 A operand by two 8-byte loads);
                     the sums P3 - P1 ∓ P2 cancel, so the
                     imaginary part's error is bounded by u times (|Re a| +
                     |Im a|)ᵀ (|Re b| + |Im b|), at most twice the modulus
                     bound of the four-product form. ab's A C takes the same
                     sums with C as b and no conj; its warps keep C's complex
                     fragments in registers and form the mix per step, and a
                     16-byte A fragment element serves 8 complex columns where
                     the real view's two 8-byte ones serve 4 (8 real): half the
                     shared loads per output at the same tile.
    m_panels         atb only: the M rows of the result are split into this many
                     panels, one per blockIdx.y, when one block's registers
                     cannot hold all of them (each panel streams A and B again).
    blocks_per_sm    resident blocks per SM to aim for: the launch bounds cap the
                     registers at that share, and the grid holds that many
                     blocks per SM (times waves).
    waves            launch parameter: grids of waves x blocks_per_sm blocks per
                     SM, each block taking fewer chunks; the hardware then starts
                     blocks in order, which keeps the front of addresses compact
                     (on an H200 a full-grid copy measured 7 % faster than a
                     grid-stride one, scripts/probe_bandwidth.py).
    ring_takes_chunks  ab with the cp.async ring (not bulk copies, not flat): the
                     block's thread 0 takes each chunk after its first from the
                     batch item's counter, as the bulk kernels' producer warp
                     always does (KernelSpec.chunk_slots), instead of striding
                     through K in a fixed order. On an H100 (2026-11-27) that ran
                     14 dispatched float64 ring kernels 0.98-1.10x their speed
                     (1.04x in geometric mean) but 25 float32 ones 0.71-1.09x
                     (0.92x), for no cause found: the model sets it for float64
                     on sm_90 (model.RING_TAKES_CHUNKS_DTYPES), and elsewhere
                     the tuner's local search decides (search.neighbours).
    triangle         atb's Gram matrix (Problem.gram) only, square tiles on a square
                     grid (tile_m = tile_n, as many tiles along M as along N), no
                     panels: the result is Hermitian (symmetric for
                     real dtypes and plain Aᵀ A), so only the tiles on and above
                     the diagonal are computed, T (T + 1) / 2 of a T x T grid, and
                     each entry above the diagonal is written to its mirror too
                     (conjugated for Aᴴ A). Where the tensor work binds (float64
                     48 and 64, complex128 16 and 32 on their real views) that is
                     the work of the computed tiles alone; the result is exactly
                     Hermitian, each pair of mirrored entries one sum (Aᴴ A's
                     diagonal written real). With DMMA the warps also skip the
                     tensor steps of blocks that are never stored, below a
                     diagonal tile's diagonal or past the width
                     (KernelSpec.block_idle): 4x4 tiles of 7 blocks a side
                     (float64 49..56) issue 16 steps where their three tiles
                     hold 24. With fma_edges (DMMA, Gauss; not 3xTF32, whose
                     fragments are split) the triangle of the core's tiles runs,
                     and the FMA units take the N edge alone, mirrored onto the M
                     edge: each diagonal tile multiplies the A fragments it holds
                     by the last N mod 8 columns (one load of each per row), and
                     the tile at place (0, 0) also the corner's upper half:
                     float64 49 runs a triangle of 6 blocks a side and one edge
                     column where it would pad to 7 blocks.
    """

    tile_m: int = 1
    tile_n: int = 1
    mapping: str = "interleaved"
    row_groups: int = 32
    rows_per_stage: int = 64
    stages: int = 3
    unroll: int = 1
    c_source: str = "shared"
    padded: bool = False
    mma: bool = False
    tf32x3: bool = False
    wgmma: bool = False
    stage_out: bool = False
    stage_copy: str = "vector"
    y_in_out: bool = False
    fma_edges: bool = False
    lone_transposed: bool = False
    gauss: bool = False
    m_panels: int = 1
    blocks_per_sm: int = 2
    waves: int = 1
    ring_takes_chunks: bool = False
    triangle: bool = False

    def __repr__(self) -> str:
        """The tile and the fields set away from their defaults, which rebuild it: the
        tuner's log lines stay readable (a third of the length of all 24 fields)."""
        changed = (f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                   if f.name in ("tile_m", "tile_n") or getattr(self, f.name) != f.default)
        return f"Config({', '.join(changed)})"


@dataclass(frozen=True)
class KernelSpec:
    problem: Problem
    config: Config

    # -- derived geometry (used by emitters, validation and the launcher) --

    @property
    def panel_m(self) -> int:
        """atb: rows of the result one block computes (all M unless split into panels)."""
        return _ceil_div(self.problem.m, self.config.m_panels)

    @property
    def tiles_m(self) -> int:
        """atb: tiles along a panel of M (with mma: warps along M). ab: threads along N
        (each holding tile_n columns; with mma: warps, each tile_n blocks of 8)."""
        p, c = self.problem, self.config
        if c.mma:
            return _ceil_div(self.mma_blocks(p.m) if p.op == "atb" else _ceil_div(p.n, 8),
                             c.tile_m if p.op == "atb" else c.tile_n)
        return _ceil_div(self.panel_m, c.tile_m) if p.op == "atb" else _ceil_div(p.n, c.tile_n)

    @property
    def tiles_n(self) -> int:
        p, c = self.problem, self.config
        if p.op == "ab":
            return 1
        if c.mma:
            return _ceil_div(self.mma_blocks(p.n), c.tile_n)
        return _ceil_div(p.n, c.tile_n)

    def mma_blocks(self, width: int) -> int:
        """atb with mma: 8-wide blocks of the result along an axis of this width that
        the tensor cores compute (whole ones only with fma_edges)."""
        return width // 8 if self.config.fma_edges else _ceil_div(width, 8)

    def edge(self, width: int) -> int:
        """atb with fma_edges: the last rows (or columns) of the result along an axis
        of this width that the FMA units compute."""
        return width % 8 if self.config.fma_edges else 0

    @property
    def tile_count(self) -> int:
        """atb: the tiles (with mma: warps) of a row group, tiles_m x tiles_n, or with
        Config.triangle those on and above the diagonal of the square grid."""
        if self.config.triangle:
            return self.tiles_m * (self.tiles_m + 1) // 2
        return self.tiles_m * self.tiles_n

    def triangle_places(self) -> list[tuple[int, int]]:
        """Config.triangle: (warp_m, warp_n) on the grid of tiles of each tile of a row
        group, in the emitter's order (_tile_place): on and above the diagonal, column
        by column."""
        return [(row, col) for col in range(self.tiles_m) for row in range(col + 1)]

    def block_idle(self, place: tuple[int, int], i: int, j: int) -> bool:
        """DMMA atb with Config.triangle: whether block (i, j) of the tile at ``place``
        computes nothing stored, lying past the width or below a diagonal tile's
        diagonal (the warp skips a tensor step whose blocks all are idle)."""
        (warp_m, warp_n), c, p = place, self.config, self.problem
        return (warp_m * c.tile_m + i >= self.mma_blocks(p.m) or warp_n * c.tile_n + j >= self.mma_blocks(p.n)
                or (warp_m == warp_n and i > j))

    @property
    def skips_idle_blocks(self) -> bool:
        """DMMA atb's triangle (Config.triangle, not 3xTF32) skips the tensor steps of
        idle blocks (block_idle)."""
        return self.config.triangle and self.config.mma and not self.config.tf32x3

    @property
    def tensor_steps(self) -> int:
        """DMMA atb: the tensor steps (m16n8k4 or half-empty m8n8k4, dmma_step_blocks)
        a row group's warps issue per k-step, less those skipped (skips_idle_blocks)."""
        c = self.config
        steps = dmma_step_blocks(c.tile_m, c.tile_n, c.lone_transposed)
        if not self.skips_idle_blocks:
            return self.tile_count * len(steps)
        return sum(not all(self.block_idle(place, i, j) for i, j in blocks)
                   for place in self.triangle_places() for blocks in steps)

    @property
    def edge_slots(self) -> int:
        """fma_edges: the slots the edge entries are dealt to, one per lane quad of a row group."""
        return 8 * self.tile_count

    @property
    def edge_units(self) -> tuple[int, int]:
        """fma_edges of the whole grid: per slot, the rows of the result whose N-edge
        entries it takes (all M rows among the slots) and the core columns whose M-edge
        entries it takes; none with Config.triangle, whose diagonal tiles take the N
        edge's entries of their own rows (triangle_edge_sums)."""
        p = self.problem
        if self.config.triangle:
            return 0, 0
        m_units = _ceil_div(p.m, self.edge_slots) if self.edge(p.n) else 0
        n_units = _ceil_div(8 * self.mma_blocks(p.n), self.edge_slots) if self.edge(p.m) else 0
        return m_units, n_units

    @property
    def triangle_edge_sums(self) -> tuple[int, int]:
        """fma_edges with Config.triangle: the sums a thread of a diagonal tile holds, the
        N edge's entries of its fragment rows (tile_m per edge column) and the corner's
        entries on and above its diagonal (the tile at place (0, 0) alone stores them)."""
        if not (self.config.fma_edges and self.config.triangle):
            return 0, 0
        edge = self.edge(self.problem.n)
        return self.config.tile_m * edge, edge * (edge + 1) // 2

    @property
    def edge_registers(self) -> int:
        """fma_edges: the elements a thread holds for the edges, its sums and, per row,
        its loads (0 without edges)."""
        p = self.problem
        m_units, n_units = self.edge_units
        return (m_units * self.edge(p.n) + n_units * self.edge(p.m) + sum(self.triangle_edge_sums)
                + m_units + n_units + self.edge(p.m) + self.edge(p.n))

    @property
    def flat(self) -> bool:
        return self.config.mapping == "flat"

    @property
    def flat_rows(self) -> int:
        """Flat ab: rows of A one thread's vector of out may touch (more than one only where
        rows of out are not whole vectors: then a vector may straddle rows)."""
        p = self.problem
        vec = p.vector_elements
        return 1 if p.n % vec == 0 else (p.n + vec - 2) // p.n + 1

    @property
    def consumer_threads(self) -> int:
        """Threads that compute (all of them, unless a producer warp stages the rows). Flat
        ab: row_groups times the fewest threads whose vectors of out span whole rows."""
        p = self.problem
        if self.flat:
            return self.config.row_groups * p.n // math.gcd(p.n, p.vector_elements)
        return self.tile_count * self.config.row_groups * (32 if self.config.mma else 1)

    @property
    def threads(self) -> int:
        return self.consumer_threads + (32 if self.producer_warp else 0)

    @property
    def bulk(self) -> bool:
        """Whether bulk copies stage the rows (Config.stage_copy "bulk" or "bulk_inline")."""
        return self.config.stage_copy in ("bulk", "bulk_inline")

    @property
    def ab_ring(self) -> bool:
        """ab staged through the cp.async ring (neither bulk copies, which always take
        their chunks, nor the flat walk): where Config.ring_takes_chunks applies."""
        return self.problem.op == "ab" and not self.flat and not self.bulk

    @property
    def producer_warp(self) -> bool:
        """Whether a warp of its own issues the bulk copies (Config.stage_copy "bulk")."""
        return self.config.stage_copy == "bulk"

    @property
    def arch_specific(self) -> bool:
        """Whether the kernels use sm_90a's arch-specific instructions (wgmma): built
        for sm_90a, they run on compute capability 9.0 alone."""
        return self.config.wgmma

    @property
    def wgmma_n(self) -> int:
        """wgmma: N padded to whole blocks of 8 columns, the instructions' width."""
        return _round_up(self.problem.n, 8)

    @property
    def wgmma_k_steps(self) -> int:
        """wgmma: steps of 8 along the inner index M."""
        return _ceil_div(self.problem.m, 8)

    @property
    def wgmma_groups(self) -> list[range]:
        """wgmma: the k-steps whose A fragments a warpgroup splits and hands to one
        commit group of wgmma, in turn: all of them at once where their registers fit
        beside the accumulators (M and N up to 72 at least), else the fewest even
        groups that fit, each whole vector loads (wider, a complex64 problem's real
        view; each group's fragments are dead once its wgmma are done)."""
        per_load = max(1, self.fragment_vector // 2)  # k-steps of one vector load
        loads = self.wgmma_k_steps // per_load
        room = MAX_REGISTERS - self.wgmma_n - WGMMA_FIXED_REGISTERS
        fitting = max(1, room // (WGMMA_STEP_REGISTERS * per_load))
        count = _ceil_div(loads, fitting)
        ends = [(loads * g // count) * per_load for g in range(count + 1)]
        return [range(start, end) for start, end in zip(ends, ends[1:])]

    @property
    def fragment_vector(self) -> int:
        """wgmma: floats per load of a lane's A fragments (wgmma_fragment_vector where
        the rows are bulk-staged, unpadded; else 1)."""
        return wgmma_fragment_vector(self.problem.m) if self.config.wgmma and self.bulk else 1

    @property
    def layout(self) -> tuple[int, int, int] | None:
        """bulk_layout of the staged operands: A and B (atb), A alone (ab, whose pass
        takes the rows of its slabs in groups of the spacing: at most the largest
        power of two that divides the slabs, so a tile of 2 slabs in one row group
        stages rows of a multiple of 8 doubles 2 apart, not 8). None: no spacing fits."""
        p, c = self.problem, self.config
        slabs = c.row_groups * c.tile_m
        max_spacing = min(8, slabs & -slabs) if p.op == "ab" else 8
        return bulk_layout(p.m, p.n if p.op == "atb" else p.m, p.element_bytes, p.op, max_spacing)

    @property
    def row_spacing(self) -> int:
        """Rows between the rows one DMMA fragment takes from a stage (1: consecutive
        rows): atb's 4 rows of a k-step, ab's 8 rows of a slab (bulk_layout; wgmma:
        wgmma_row_spacing)."""
        if self.config.wgmma:
            return wgmma_row_spacing(self.problem.m)
        return self.layout[0] if self.bulk else 1

    @property
    def rows_per_pass(self) -> int:
        """Rows one pass of all the block's threads covers; stages hold whole passes."""
        p, c = self.problem, self.config
        if self.flat:
            return self.threads * p.vector_elements // p.n
        if p.op == "ab":
            return c.row_groups * c.tile_m * (8 if c.mma else 1)
        return c.row_groups * (self.mma_k * self.row_spacing if c.mma else 1)

    @property
    def mma_k(self) -> int:
        """The inner extent of one tensor-core step: 4 (DMMA m8n8k4), 8 (TF32 m16n8k8)."""
        return 8 if self.config.tf32x3 else 4

    @property
    def rows_per_chunk(self) -> int:
        """Rows of the long axis one block consumes per pipeline step."""
        return self.config.rows_per_stage

    def is_padded(self, width: int) -> bool:
        """Whether a staged operand of this row width is laid out with padding."""
        return self.smem_stride(width) != width

    def smem_stride(self, width: int) -> int:
        """Elements between staged rows of an operand of this width (within a group of
        row_spacing rows). FMA tiles read one column of many rows: an odd stride.
        DMMA fragments read 4 rows x 8 columns (atb) or 8 rows x 4 columns (ab's A):
        strides that put every lane of a request in its own bank (see
        fragment_stride); bulk-staged rows are unpadded (see group_stride)."""
        p = self.problem
        if self.bulk:
            return width
        if self.config.wgmma:  # unpadded but for multiples of 8 (see wgmma_row_spacing)
            return width if width % 8 else width + 4
        if self.config.mma:
            return fragment_stride(width, p.element_bytes, p.op)
        return width + 1 if self.config.padded and width % 2 == 0 else width

    def group_stride(self, width: int) -> int:
        """Elements between the first rows of neighbouring groups of row_spacing staged
        rows: staged row j of a chunk sits at (j / s) * group_stride + (j % s) * smem_stride."""
        if self.bulk and not self.config.wgmma:
            _, group_m, group_n = self.layout
            return group_m if width == self.problem.m else group_n
        return self.row_spacing * self.smem_stride(width)

    def groups_padded(self, width: int) -> bool:
        """Whether padding lies between the groups of staged rows of this width (else
        the rows are evenly strided, and a bulk-staged chunk is one contiguous span)."""
        return self.group_stride(width) != self.row_spacing * self.smem_stride(width)

    @property
    def stages_y(self) -> bool:
        """ab's fused update with staged output: each chunk's rows of y are staged
        beside A's (the second area of a stage; with bulk copies by the producer
        warp), and the threads apply the update as they gather the chunk of out,
        which then leaves as plain vectors or one bulk store. (y's loads in the
        copy-out would wait there, after the chunk's products: 72-76 % of the copy
        roofline at 8x8 and 64x64 on an H100.)"""
        return self.problem.update and self.config.stage_out and not self.config.y_in_out

    def stage_elements(self) -> tuple[int, int]:
        """Elements of the A and B areas of one stage (for ab, the second holds y's rows
        where stages_y), each a whole number of 16-byte vectors: padded rows, or the
        aligned window (one vector of slack for the shift)."""
        p, c = self.problem, self.config
        vec = p.vector_elements
        if self.flat:
            return 0, 0
        if self.stages_y:  # y's chunk, one contiguous span like out's (out_stage_bytes)
            y_area = _round_up(c.rows_per_stage * p.n, vec) + vec

        def area(width: int) -> int:
            # wgmma's last 4-wide step reads (and masks) up to 3 elements past a row: one more vector
            overread = vec if c.wgmma and width % 4 else 0
            if self.bulk:  # the operand's misalignment (shift) is mirrored, padded or not
                return c.rows_per_stage // self.row_spacing * self.group_stride(width) + vec + overread
            if self.is_padded(width):
                return _round_up(c.rows_per_stage * self.smem_stride(width), vec)
            return _round_up(c.rows_per_stage * width, vec) + vec + overread

        if p.op == "atb":
            return area(p.m), 0 if p.gram else area(p.n)
        return area(p.m), y_area if self.stages_y else 0

    @property
    def stage_bytes(self) -> int:
        a, b = self.stage_elements()
        return (a + b) * self.problem.element_bytes

    @property
    def c_shared_bytes(self) -> int:
        p = self.problem
        if self.config.wgmma:  # C's TF32 parts, hi then lo, each padded to whole k-steps and blocks of 8
            return 2 * 8 * self.wgmma_k_steps * self.wgmma_n * p.element_bytes
        if p.op != "ab" or self.config.c_source != "shared" or self.config.mma:
            return 0
        return _round_up(p.m * p.n * p.element_bytes, VECTOR_BYTES)

    @property
    def out_stage_bytes(self) -> int:
        """ab with stage_out: one chunk of out, as the aligned window of the span."""
        p = self.problem
        if p.op != "ab" or not self.config.stage_out:
            return 0
        return (_round_up(self.config.rows_per_stage * p.n, p.vector_elements) + p.vector_elements) * p.element_bytes

    @property
    def out_buffers(self) -> int:
        """ab with stage_out: chunks of out staged at once (bulk stores: one leaves
        while the next is computed)."""
        return 2 if self.bulk else 1

    @property
    def reduction_bytes(self) -> int:
        p = self.problem
        return (self.config.row_groups - 1) * self.panel_m * p.n * p.element_bytes if p.op == "atb" else 0

    @property
    def out_stage_offset(self) -> int:
        """ab: bytes before the staged chunks of out (C's copy, the ring)."""
        return self.c_shared_bytes + self.config.stages * self.stage_bytes

    @property
    def barrier_offset(self) -> int:
        """Bytes before the bulk pipeline's barriers, which must outlive everything
        else: the ring (or atb's reduction that reuses it), ab's chunks of out."""
        ring = max(self.config.stages * self.stage_bytes, self.reduction_bytes)
        return _round_up(ring + self.c_shared_bytes + self.out_buffers * self.out_stage_bytes, VECTOR_BYTES)

    @property
    def chunk_slots(self) -> int:
        """ab with bulk copies, or with the cp.async ring where Config.ring_takes_chunks:
        the chunks of K taken and not yet consumed (8 bytes each in shared memory), a
        ring of stages + 1 (the chunk of each step in flight and the one taken next).
        Other kernels take their chunks in a fixed order: atb's partial sums must add
        up the same every run."""
        takes = self.bulk or self.config.ring_takes_chunks
        return self.config.stages + 1 if self.problem.op == "ab" and takes else 0

    @property
    def chunk_offset(self) -> int:
        """Bytes before ab's ring of chunks taken, after everything else."""
        return _round_up(self._bytes_before_chunks, 8)

    @property
    def _bytes_before_chunks(self) -> int:
        if self.bulk:
            return self.barrier_offset + 8 * (2 * self.config.stages + self.config.y_in_out * self.out_buffers)
        ring = self.config.stages * self.stage_bytes
        return max(ring, self.reduction_bytes) + self.c_shared_bytes + self.out_stage_bytes

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory: the stage ring (reused for atb's block-local
        reduction once the ring is drained) plus ab's copy of C and chunk of out,
        the bulk pipeline's two 8-byte barriers per slot (and one per buffer of
        out that y is staged in, Config.y_in_out), and ab's chunks taken."""
        if not self.chunk_slots:
            return self._bytes_before_chunks
        return self.chunk_offset + 8 * self.chunk_slots

    def estimated_registers(self) -> int:
        """32-bit registers per thread: accumulators and operand registers of one
        row step, plus a fixed allowance for addresses, indices and the loader."""
        p, c = self.problem, self.config
        # DMMA works in double; 3xTF32 holds each float as two TF32 parts and its
        # accumulators twice (round-to-nearest totals and the tensor cores' short sums).
        words = (2 if p.real_type == "double" or c.mma else 1) * p.components
        if self.flat:  # C's columns, A's rows, the vector of out (and y's)
            vec = p.vector_elements
            return (p.m * vec + self.flat_rows * p.m + vec * (2 if p.update else 1)) * words + 40
        if c.wgmma:  # acc and fix of a warp's 16 rows, the split A fragments of a group's k-steps
            # (nvcc 13.0 used 96..235 registers at M = N = 9..64, one group)
            steps = max(len(group) for group in self.wgmma_groups)
            return self.wgmma_n + WGMMA_STEP_REGISTERS * steps + WGMMA_FIXED_REGISTERS
        if c.gauss and p.op == "ab":  # three real sums per block, C's complex fragments, A's (re, im, mix;
            # nvcc keeps more than one k-step's in flight: 126, 158-162 and 168-202 registers for tiles of
            # 1, 2 and 3 slabs at 50..61, nvcc 13.0)
            return c.tile_m * c.tile_n * 3 * 2 * 2 + _ceil_div(p.m, 4) * c.tile_n * 4 + c.tile_m * 12 + c.tile_n * 6 + 44
        if c.gauss:  # complex edge sums and loads (fma_edges) beside the tile's
            return self._gauss_atb_tile_registers() + self.edge_registers * words
        outputs = c.tile_m * c.tile_n * (2 if c.mma else 1)  # a DMMA block: 2 per lane
        outputs += 2 if c.lone_transposed and c.tile_n % 2 else 0  # the lone block's zero partner
        outputs += self.edge_registers
        halves = 2 if c.tf32x3 else 1  # an m16n8k8 step's fragments: two DMMA k-steps'
        operands = (c.tile_m + c.tile_n) * words * halves
        if c.mma and p.op == "ab":  # C's fragments stay in registers
            operands = (c.tile_m * halves + _ceil_div(p.m, 4) * c.tile_n) * words
        update_tile = outputs * words if p.update and not c.stage_out else 0  # y, loaded ahead
        estimate = outputs * words + operands + update_tile + 40
        return max(estimate, MMA_MIN_REGISTERS) if c.mma else estimate

    def _gauss_atb_tile_registers(self) -> int:
        """Gauss's atb tile: three real sums per DMMA block (2 per lane each); fragments:
        re, im and the mix (nvcc 13.0 used 94, 128 and 167 registers for tiles of 1x2,
        2x2 and 4x2 blocks)."""
        c = self.config
        spares = 3 * 2 * 2 if c.lone_transposed and c.tile_n % 2 else 0  # the lone block's zero partners
        return c.tile_m * c.tile_n * 3 * 2 * 2 + (c.tile_m + c.tile_n) * 3 * 2 + spares + 56

    def bounded_registers(self) -> int:
        """The registers a launch bound must allow for ptxas to fit the kernel without
        (much) spilling: the estimate, but for Gauss's atb with FMA edges up to
        GAUSS_EDGE_SLACK fewer, never fewer than its tile's. 49's 2 x 3 Gauss tiles with
        edges in 12 warps (estimate 190, bound 168), the tuner's winner there on an H200
        (2026-11-29), and 50's (210) compile without spills."""
        estimate = self.estimated_registers()
        if self.config.gauss and self.problem.op == "atb":
            return max(self._gauss_atb_tile_registers(), estimate - GAUSS_EDGE_SLACK)
        return estimate

    @property
    def source_fields(self) -> dict:
        """The Config fields that shape the source, in order: all but the launch
        parameter waves, and those of LATER_FIELDS only where they differ from their
        defaults, so that the kernels before them keep byte-identical sources, names
        and cached cubins."""
        c = self.config
        return {f.name: getattr(c, f.name) for f in dataclasses.fields(c)  # asdict deep-copies
                if f.name != "waves" and (f.name not in LATER_FIELDS or getattr(c, f.name) != f.default)}

    @property
    def name(self) -> str:
        """Kernel symbol: readable prefix + hash of everything that shapes the source."""
        p = self.problem
        digest = hashlib.sha1(repr((p, sorted(self.source_fields.items()))).encode()).hexdigest()[:10]
        op = p.op + ("c" if p.conj else "") + ("_update" if p.update else "") + ("_gram" if p.gram else "")
        return f"tsmm_{op}_{p.dtype}_m{p.m}_n{p.n}_{digest}"


def dmma_step_blocks(tile_m: int, tile_n: int, lone_transposed: bool = False) -> list[tuple[tuple[int, int], ...]]:
    """The 8x8 blocks (i, j) of a tile_m x tile_n warp tile that each DMMA step
    computes, in issue order: blocks i and i+1 of a column share B, one m16n8k4; a
    lone last block of M runs alone, an m8n8k4 (which Hopper issues half-empty), or
    with ``lone_transposed`` (Config.lone_transposed) beside its neighbour j+1 in one
    m16n8k4 (alone at an odd last j)."""
    steps = [((i, j), (i + 1, j)) for i in range(0, tile_m - tile_m % 2, 2) for j in range(tile_n)]
    last = tile_m - 1
    if tile_m % 2 and not lone_transposed:
        steps += [((last, j),) for j in range(tile_n)]
    elif tile_m % 2:
        steps += [((last, j), (last, j + 1)) if j + 1 < tile_n else ((last, j),) for j in range(0, tile_n, 2)]
    return steps


def fragment_row_bytes(element_bytes: int, op: str) -> int:
    """Bytes of one staged row that a phase of a DMMA (or 3xTF32) fragment load reads.
    A warp's loads of 4, 8 or 16 bytes are served in phases of 128 bytes (the whole
    warp, half warps, quarter warps). atb's fragments take lane % 4 as the row, so a
    phase reads 4 rows of 32 bytes (8 floats, 4 doubles, 2 complex elements); ab's A
    takes lane / 4 as the row and lane % 4 as the column, 4 elements of each row."""
    return 4 * element_bytes if op == "ab" else 32


def _bank_residues(element_bytes: int, op: str) -> range:
    """Row offsets, in elements modulo the 128 bytes that span the 32 banks, that put
    each row a phase reads in banks of its own: odd multiples of fragment_row_bytes
    (doubles 4 or 12 modulo 16; floats 8 or 24 modulo 32 for atb, 4 modulo 8 for ab;
    complex 2 or 6 modulo 8 for atb, 4 for ab)."""
    period = 128 // element_bytes
    step = fragment_row_bytes(element_bytes, op) // element_bytes
    return range(step, period, 2 * step)


def fragment_stride(width: int, element_bytes: int, op: str) -> int:
    """The narrowest row stride >= width of staged rows that DMMA fragments read
    with ``op``'s layout, every lane of a phase in its own banks (_bank_residues)."""
    period = 128 // element_bytes
    residues = _bank_residues(element_bytes, op)
    return next(s for s in range(width, width + period) if s % period in residues)


def bulk_layout(m: int, n: int, element_bytes: int = 8, op: str = "atb",
                max_spacing: int = 8) -> tuple[int, int, int] | None:
    """(row spacing s, group stride of A, group stride of B) for bulk-staged DMMA rows
    of doubles or floats (or 16-byte complex elements, Config.gauss) that fragments
    read with ``op``'s layout. A DMMA step takes rows r, r+s, r+2s, r+3s (the sum
    over rows does not care which; ab's slab, 8 rows s apart). Staged rows lie in
    groups of s, each an unpadded
    span (one bulk copy; the whole chunk is one span where the groups need no
    padding between them), so a fragment's rows sit a group stride apart and hit
    distinct banks when that stride is one of _bank_residues (a quarter or three
    quarters of the banks for atb: 4 or 12 modulo 16 doubles, read by half warps;
    8 or 24 modulo 32 floats). Group strides stay whole vectors, so
    every group keeps the operand's alignment. The spacing with the least padding
    per row wins, the larger one on a tie (fewer, longer copies): doubles odd
    widths s = 4 unpadded, 2 mod 4 s = 2, 4 mod 8 s = 1, multiples of 8 s = 8
    with 4 elements between groups; floats odd s = 8, 2 mod 4 s = 4, 4 mod 8
    s = 2, 8 mod 16 s = 1, multiples of 16 s = 8 with 8 between groups. Spacings
    past ``max_spacing`` are not tried; None where no spacing keeps the alignment."""
    period = 128 // element_bytes
    residues = _bank_residues(element_bytes, op)
    vector = 16 // element_bytes
    best, best_cost = None, None
    for s in (x for x in (1, 2, 4, 8) if x <= max_spacing):
        if any(s * width % vector for width in (m, n)):
            continue  # groups would not keep the rows' 16-byte alignment
        groups = [next(g for g in range(s * width, s * width + period, vector) if g % period in residues)
                  for width in (m, n)]
        cost = (sum(groups) - s * (m + n)) / s
        if best is None or cost <= best_cost:
            best, best_cost = (s, *groups), cost
    return best


def has_bulk_copies(arch: str) -> bool:
    """Whether GPUs of ``arch`` ("sm_90", "sm_90a", ...) have cp.async.bulk and transaction barriers."""
    return int(arch.removeprefix("sm_").rstrip("af")) >= 90


def has_wgmma(arch: str) -> bool:
    """Whether GPUs of ``arch`` run wgmma kernels: sm_90 alone (they are built for its
    arch-specific sm_90a target, which no other architecture runs)."""
    return arch == "sm_90"


def wgmma_row_spacing(m: int) -> int:
    """Rows between the 8 rows of a wgmma A fragment (8 rows x 4 columns of floats per
    request) read from rows of m floats staged unpadded: s * m an odd multiple of 4
    puts the 8 rows in 8 distinct groups of 4 banks (odd m: s = 4, 2 mod 4: 2, 4 mod
    8: 1). Multiples of 8 have no such s: their rows are padded by 4 floats (s = 1),
    or, staged unpadded, read in vectors (wgmma_fragment_vector)."""
    return next((s for s in (1, 2, 4) if s * m % 8 == 4), 1)


def wgmma_fragment_vector(m: int) -> int:
    """Floats a lane reads at once from unpadded staged rows of m floats, a multiple
    of 8, for its wgmma A fragments: the k-steps' inner index is permuted (C's rows
    with it) so that a lane's elements of one k-step (2) or of two (4) neighbour each
    other. A request of 8- or 16-byte loads is served by half or quarter warps, 4 or
    2 consecutive rows of 32 or 64 bytes: they take distinct banks where m is 8 or 24
    modulo 32 (8-byte loads) or 16 modulo 32 (16-byte). 0: no such vector (multiples
    of 32, whose rows all start in bank 0)."""
    return {8: 2, 24: 2, 16: 4}.get(m % 32, 0) if m % 8 == 0 else 1


def _ceil_div(x: int, y: int) -> int:
    return -(-x // y)


def _round_up(x: int, y: int) -> int:
    return _ceil_div(x, y) * y


def bulk_copies_serve(spec: KernelSpec) -> bool:
    """Whether bulk copies can stage ``spec``'s rows (its kind and layout, not its sizes)."""
    p, c = spec.problem, spec.config
    if not (c.mma and (p.dtype in MMA_DTYPES or c.gauss)):
        return False
    if p.op == "atb":
        return True
    if not c.stage_out:
        return False
    if c.wgmma:  # rows unpadded (see smem_stride): the chunk is one span. Padded rows, a bulk copy
        # each, ran float32 24 and 48 at 30 and 52 % on an H200 (performance.md, seventeenth round).
        return wgmma_fragment_vector(p.m) > 0
    return (p.dtype == "float64" or c.gauss) and spec.layout is not None


def validate(spec: KernelSpec) -> None:
    """Raise InvalidSpec unless ``spec`` generates correct code within the hardware limits."""
    p, c = spec.problem, spec.config
    errors = []
    if p.op not in OPS:
        errors.append(f"op must be one of {OPS}, got {p.op!r}")
    if p.dtype not in DTYPES:
        errors.append(f"dtype must be one of {tuple(DTYPES)}, got {p.dtype!r}")
    if errors:
        raise InvalidSpec("; ".join(errors))
    if not (1 <= p.m <= 128 and 1 <= p.n <= 128):
        errors.append(f"M and N must lie in 1..128, got {p.m}x{p.n}")
    if p.conj and p.components == 1:
        errors.append("conj applies to complex dtypes only")
    if p.update and p.op != "ab":
        errors.append("update applies to ab only")
    if p.gram and not (p.op == "atb" and p.m == p.n):
        errors.append("gram applies to atb with M = N only")
    if c.stage_out and p.op != "ab":
        errors.append("stage_out applies to ab only")
    if c.triangle and not (p.gram and c.tile_m == c.tile_n and c.m_panels == 1 and not (c.fma_edges and c.tf32x3)):
        errors.append("triangle serves Gram matrices with square tiles, without panels, its FMA edges DMMA's")
    if c.mapping not in ("interleaved", "blocked", "flat"):
        errors.append(f"mapping must be 'interleaved', 'blocked' or 'flat', got {c.mapping!r}")
    if c.mapping == "flat" and not (
        p.op == "ab" and p.m <= FLAT_MAX_M and not c.mma and (c.tile_m, c.tile_n) == (1, 1) and c.c_source == "global"
        and not c.stage_out and not c.padded and c.stage_copy == "vector"
    ):
        errors.append(f"the flat mapping serves FMA ab with M up to {FLAT_MAX_M}, a 1x1 tile, C from global memory, "
                      "nothing staged or padded")
        raise InvalidSpec("; ".join(errors), spec)
    if c.stage_copy not in STAGE_COPIES:
        errors.append(f"stage_copy must be one of {STAGE_COPIES}, got {c.stage_copy!r}")
    if c.c_source not in ("shared", "global"):
        errors.append(f"c_source must be 'shared' or 'global', got {c.c_source!r}")
    if not 1 <= c.m_panels <= (p.m if p.op == "atb" else 1):
        errors.append(f"m_panels {c.m_panels} must lie in 1..M for atb and be 1 for ab")
        raise InvalidSpec("; ".join(errors), spec)
    if c.stage_copy == "bulk_inline" and p.op != "atb":
        errors.append("bulk_inline serves atb only (ab's bulk pipeline keeps its producer warp)")
        raise InvalidSpec("; ".join(errors), spec)
    if c.ring_takes_chunks and not spec.ab_ring:
        errors.append("ring_takes_chunks serves ab with the cp.async ring (bulk copies always take their chunks)")
        raise InvalidSpec("; ".join(errors), spec)
    if c.y_in_out and not (p.update and c.stage_out and spec.bulk):
        errors.append("y_in_out serves ab's fused update with staged output and bulk copies")
        raise InvalidSpec("; ".join(errors), spec)
    if spec.bulk and not bulk_copies_serve(spec):
        errors.append("bulk stage copies serve DMMA atb (float64, float32, complex128 by Gauss), and ab with "
                      "staged output: DMMA (float64, complex128 by Gauss) whose rows some spacing "
                      "that divides a pass's slabs keeps aligned, wgmma with M not a multiple of 32")
        raise InvalidSpec("; ".join(errors), spec)
    if c.tf32x3 and not (c.mma and p.dtype == "float32"):
        errors.append("tf32x3 applies to float32 with mma")
        raise InvalidSpec("; ".join(errors), spec)
    if c.wgmma and not (
        c.tf32x3 and p.op == "ab" and (c.stage_out or not p.update) and c.c_source == "shared"
        and (c.tile_m, c.tile_n) == (2, _ceil_div(p.n, 8)) and c.row_groups % 4 == 0
    ):
        errors.append("wgmma serves 3xTF32 ab (the update with staged output), C from shared memory, whole warpgroups "
                      "(row_groups a multiple of 4) of warps with 2 slabs of 8 rows and all blocks of 8 "
                      "columns each")
        raise InvalidSpec("; ".join(errors), spec)
    if c.fma_edges and not (p.op == "atb" and c.mma and p.m >= 8 and p.n >= 8 and (p.m % 8 or p.n % 8)):
        errors.append("fma_edges serves mma atb with M and N from 8 and at least one not a multiple of 8")
        raise InvalidSpec("; ".join(errors), spec)
    if c.lone_transposed and not (p.op == "atb" and c.mma and not c.tf32x3 and c.tile_m % 2):
        errors.append("lone_transposed serves DMMA atb (not 3xTF32, which always does it) with an odd tile_m")
        raise InvalidSpec("; ".join(errors), spec)
    if c.gauss and not (p.dtype == "complex128" and c.mma and (c.stage_out or not p.update)):
        errors.append("gauss serves complex128 atb and ab (the update with staged output) with mma")
        raise InvalidSpec("; ".join(errors), spec)
    if c.mma and ((p.dtype not in MMA_DTYPES and not c.gauss) or c.m_panels != 1
                  or (p.op == "ab" and c.c_source != ("shared" if c.wgmma else "global"))):
        errors.append(f"mma (DMMA) serves {' and '.join(MMA_DTYPES)} (complex128 with gauss) without panels, "
                      "for ab with C from global memory (wgmma: from shared memory)")
        raise InvalidSpec("; ".join(errors), spec)
    inner_m = spec.panel_m if p.op == "atb" else c.rows_per_stage
    if c.mma:
        tile_limits = (spec.mma_blocks(p.m), spec.mma_blocks(p.n)) if p.op == "atb" else (_ceil_div(inner_m, 8), _ceil_div(p.n, 8))
    else:
        tile_limits = (inner_m, p.n)
    if not (1 <= c.tile_m <= tile_limits[0] and 1 <= c.tile_n <= tile_limits[1]):
        errors.append(f"tile {c.tile_m}x{c.tile_n} does not fit the problem")
    if c.row_groups < 1 or c.stages < 2 or c.unroll < 1 or c.blocks_per_sm < 1 or c.waves < 1:
        errors.append("row_groups, unroll, blocks_per_sm and waves must be >= 1 and stages >= 2")
    rows_per_pass = spec.rows_per_pass
    if c.rows_per_stage < 1 or c.rows_per_stage % rows_per_pass:
        errors.append(
            f"rows_per_stage {c.rows_per_stage} must be a positive multiple of {rows_per_pass} "
            "(the rows one pass of the block's threads covers)"
        )
    if c.rows_per_stage % p.vector_elements:
        errors.append(
            f"rows_per_stage {c.rows_per_stage} must be a multiple of {p.vector_elements} so "
            "that every stage starts 16-byte aligned relative to the matrix"
        )
    if errors:
        raise InvalidSpec("; ".join(errors), spec)
    if spec.threads > MAX_THREADS:
        errors.append(f"{spec.threads} threads per block exceed {MAX_THREADS}")
    if spec.shared_bytes > MAX_SHARED_BYTES:
        errors.append(f"{spec.shared_bytes} bytes of shared memory exceed {MAX_SHARED_BYTES}")
    if spec.estimated_registers() > MAX_REGISTERS:
        errors.append(f"about {spec.estimated_registers()} registers per thread exceed {MAX_REGISTERS}")
    if errors:
        raise InvalidSpec("; ".join(errors), spec)
