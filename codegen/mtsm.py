"""MTSM kernels: a large dense A (M and K long) times a tall & skinny X (K, N).

Kernels for both layouts of A (row-major, batch items contiguous):

``transpose_a=True``, out = op(A)ᵀ X with A (K, M): a wide "atb". A block owns a
strip of ``block_rows`` columns of A (rows of out) and streams down the rows of
A; each thread owns ``rows_per_thread`` consecutive columns (one 16-byte
vector) × ``tile_n`` columns of X as register accumulators (TSM2R's
outer-product formulation). The rows of the strip and the matching rows of X go
through a ring of shared-memory stages (cp.async); X rows are read as
broadcasts.

``transpose_a=False``, out = op(A) X with A (M, K): a block owns ``block_rows``
rows of A and streams along K in chunks; the A tile and the matching rows of X
go through the ring. A warp's 32 lanes own 32 neighbouring rows (conflict-free
with an odd row stride of 16-byte words in shared memory) and read X rows as
broadcasts; the warps of a block split the chunk's K range (``k_groups``) and
the columns of X (``n_groups``), then add their partial sums in shared memory
in a fixed order.

``mma`` (float64 and float32, either layout): the same staging, with the
products on the FP64 tensor cores (mma.sync m8n8k4), for the widths that would
bind the FMA units; float32 is widened to double (exactly) on the way from
shared memory to the fragments, and the sums are rounded once at the end.
``tf32x3`` (float32 with ``mma``): the TF32 tensor cores instead (mma.sync
m16n8k8, 3xTF32 as in atb and ab), on the same staged layouts. ``wgmma``
(with ``tf32x3``, sm_90a): the same products as Hopper's warpgroup MMA, whose
TF32 rate is half again mma.sync's; each block splits X's chunk into the B
operand's layout once for all its warpgroups.

All: when rows/strips alone give too few blocks for the GPU, K is split over
``gridDim.y`` (decided by the lowering); each split writes its partial result
and ``<name>_finalize`` adds the splits in a fixed order (deterministic, no
atomics). ``gridDim.z`` is the batch item. M and K are run-time values, so one
kernel serves every size for a given (transpose_a, dtype, N, conj).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

from .abi import PRELUDE
from .emit import _STAGE_COPY, _Arith, _wgmma_tf32, dmma_products, tf32_partial_sums, tf32_products
from .model import SM_REGISTERS, SM_SHARED_BYTES, SM_THREADS
from .spec import (DTYPES, MAX_REGISTERS, MAX_SHARED_BYTES, MAX_THREADS, MMA_DTYPES, VECTOR_BYTES, ElementType,
                   InvalidSpec, _ceil_div, _round_up, fragment_stride)

MAX_N = 64

ARGS_STRUCT = """\
// Arguments of every jax_tsmm mtsm kernel, passed by value. Launch grid:
// (blocks along M, splits of K, batch items).
struct TsmmMtsmArgs {
  const void* a;              // transpose_a: (batch, K, M); else (batch, M, K)
  const void* x;              // (batch, K, N)
  void* out;                  // (batch, M, N)
  void* partials;             // (splits, batch, M, N) when gridDim.y > 1
  long long m;                // rows of out
  long long k;                // the contracted dimension
  long long batch;            // batch items (gridDim.z)
  long long a_batch_stride;   // elements between batch items; 0 where a broadcasts
  long long x_batch_stride;   // elements between batch items; 0 where x broadcasts
  long long splits;           // blocks along K (gridDim.y of the main kernel)
  long long chunks_per_split; // chunks of K that one blockIdx.y covers
};
"""

FINALIZE_THREADS = 256


@dataclass(frozen=True)
class MtsmProblem(ElementType):
    transpose_a: bool
    dtype: str
    n: int
    conj: bool = False

    @property
    def words(self) -> int:
        """32-bit registers per element."""
        return self.element_bytes // 4

    @property
    def line_k_steps(self) -> int:
        """DMMA's 4-entry k-steps in one 128-byte line of a row of A: A X's tensor-core
        chunks hold whole lines (4 for doubles, 8 for floats)."""
        return 128 // (4 * self.element_bytes)


def mtsm_key(transpose_a: bool, dtype: str, n: int) -> str:
    """Database key of an mtsm problem (its kernels serve any M and K); conj is left out."""
    return f"{'mtsm_t' if transpose_a else 'mtsm'}:{dtype}:n{n}"


def mtsm_key_problem(key: str) -> MtsmProblem:
    """mtsm_key's inverse: the problem of an "mtsm[_t]:dtype:nN" key (conj False)."""
    op, dtype, n = key.split(":")
    return MtsmProblem(op == "mtsm_t", dtype, int(n.removeprefix("n")))


@dataclass(frozen=True)
class MtsmConfig:
    """How an MTSM kernel computes.

    tile_n           columns of X (and out) per thread; n_groups = ceil(N / tile_n)
                     sets of threads share the A data and split N.
    rows_per_thread  transpose_a=True: consecutive columns of A per thread (read as
                     one vector); False: rows of A per thread (lane + 32 i).
    lanes            transpose_a=True: threads along the strip (a multiple of 32).
    row_warps        transpose_a=False: warps side by side along the rows.
    k_groups         transpose_a=False: warps splitting each chunk's K range.
    k_steps          transpose_a=False: 16-byte vectors of K per thread per chunk.
    chunk_rows       transpose_a=True: rows of A per stage.
    stages           shared-memory ring depth (stages - 1 chunks in flight).
    blocks_per_sm    resident blocks to aim for (__launch_bounds__ minimum).
    mma              float64, float32: the FP64 tensor cores (DMMA, mma.sync m8n8k4), for
                     widths that would bind the FMA units. Then a warp owns
                     rows_per_thread blocks of 8 rows of out times all of N
                     (tile_n = N, in 8-column blocks); row_warps warps side by side
                     along the rows (k_groups = 1), each taking k_steps 4-entry
                     steps of K per chunk, in both layouts.
    tf32x3           float32 with mma: the TF32 tensor cores (mma.sync m16n8k8) instead
                     of DMMA, each float split into a TF32 part and a remainder
                     (3xTF32, as Config.tf32x3 for atb and ab). An m16n8k8 step is
                     two DMMA k-steps side by side and two 8-row blocks stacked
                     along M (k_steps and rows_per_thread even), so the staged
                     layouts stay DMMA's; it spares the widening conversions,
                     which cost DMMA float32 as much pipe time as its products.
    wgmma            with tf32x3 (sm_90a): the products as wgmma m64nNk8 instructions
                     of warpgroups (row_warps a multiple of 4), each warp's
                     rows_per_thread blocks of 8 rows as halves of its 16 rows in
                     rows_per_thread / 2 tiles of 64 rows; X's chunk goes from its
                     staged rows into the B operand's core matrices, split, once
                     per block. On an H100 it won Aᵀ X at N = 16 and lost to the
                     mma.sync kernels at A X 32 and 64, where its split pass and
                     barriers per chunk leave few warps eligible (performance.md,
                     forty-second round).
    """

    tile_n: int
    rows_per_thread: int
    lanes: int = 0
    row_warps: int = 1
    k_groups: int = 1
    k_steps: int = 1
    chunk_rows: int = 0
    stages: int = 3
    blocks_per_sm: int = 2
    mma: bool = False
    tf32x3: bool = False
    wgmma: bool = False


@dataclass(frozen=True)
class MtsmSpec:
    problem: MtsmProblem
    config: MtsmConfig

    @property
    def n_groups(self) -> int:
        return _ceil_div(self.problem.n, self.config.tile_n)

    @property
    def n_blocks(self) -> int:
        """mma: 8-column blocks of N."""
        return _ceil_div(self.problem.n, 8)

    @property
    def x_stride(self) -> int:
        """Elements between staged rows of X: every row 16-byte aligned, wide enough
        for the last n group's reads past N. mma: 4 or 12 modulo 16 doubles (8 or 24
        modulo 32 floats), so the 4 rows x 8 columns of a B fragment fall in distinct banks."""
        if self.config.mma:
            return self._fragment_stride(8 * self.n_blocks, "atb")
        return _round_up(self.n_groups * self.config.tile_n, self.problem.vector_elements)

    @property
    def threads(self) -> int:
        c = self.config
        if c.mma:
            return 32 * c.row_warps * c.k_groups
        if self.problem.transpose_a:
            return c.lanes * self.n_groups
        return 32 * c.row_warps * c.k_groups * self.n_groups

    @property
    def block_rows(self) -> int:
        """Rows of out (columns of A with transpose_a) one block computes."""
        c = self.config
        if c.mma:
            return 8 * c.rows_per_thread * c.row_warps
        if self.problem.transpose_a:
            return c.lanes * c.rows_per_thread
        return 32 * c.row_warps * c.rows_per_thread

    @property
    def chunk(self) -> int:
        """Entries of K per pipeline step."""
        c = self.config
        if c.mma:
            return 4 * c.k_groups * c.k_steps
        if self.problem.transpose_a:
            return c.chunk_rows
        return self.problem.vector_elements * c.k_groups * c.k_steps

    @property
    def a_stride(self) -> int:
        """Elements between staged rows of the A tile. transpose_a=False: an odd
        number of 16-byte words, so 8 lanes reading 8 rows hit 8 distinct bank groups.
        mma: strides for conflict-free A fragments (4 rows x 8 entries with
        transpose_a, else 8 rows x 4 entries)."""
        if self.config.mma:
            if self.problem.transpose_a:
                return self._fragment_stride(self.block_rows, "atb")
            return self._fragment_stride(self.chunk, "ab")
        if self.problem.transpose_a:
            return self.block_rows
        vec = self.problem.vector_elements
        return self.chunk + (vec if (self.chunk // vec) % 2 == 0 else 0)

    def _fragment_stride(self, width: int, layout: str) -> int:
        """A DMMA operand's staged row stride: ``layout`` "atb" for fragments of 4
        rows x 8 columns, "ab" for 8 rows x 4 columns (fragment_stride)."""
        return fragment_stride(width, self.problem.element_bytes, layout)

    @property
    def arch_specific(self) -> bool:
        """Whether the kernels use sm_90a's arch-specific instructions (wgmma)."""
        return self.config.wgmma

    @property
    def wgmma_tiles(self) -> int:
        """wgmma: tiles of 64 rows per warpgroup."""
        return self.config.rows_per_thread // 2

    @property
    def x_split_offset(self) -> int:
        """wgmma: where X's split chunk starts in shared memory, after the ring."""
        return _round_up(self.config.stages * self.stage_bytes, 128)

    @property
    def x_split_bytes(self) -> int:
        """wgmma: two buffers (by chunk parity) of X's chunk as the B operand, its TF32
        parts and their remainders."""
        return 2 * 2 * self.chunk * 8 * self.n_blocks * 4 if self.config.wgmma else 0

    @property
    def stage_bytes(self) -> int:
        p = self.problem
        a_rows = self.chunk if p.transpose_a else self.block_rows
        a_elems = a_rows * self.a_stride
        return (a_elems + self.chunk * self.x_stride) * p.element_bytes

    @property
    def reduction_bytes(self) -> int:
        return (self.config.k_groups - 1) * self.block_rows * self.x_stride * self.problem.element_bytes

    @property
    def shared_bytes(self) -> int:
        """The stage ring, reused for the block-local reduction once drained; wgmma's
        split X after it."""
        if self.config.wgmma:
            return self.x_split_offset + self.x_split_bytes
        return max(self.config.stages * self.stage_bytes, self.reduction_bytes)

    def estimated_registers(self) -> int:
        p, c = self.problem, self.config
        if c.wgmma:  # per tile D's total and a chunk's two sums, its split A fragments (and their loads)
            return self.wgmma_tiles * (3 * 4 * self.n_blocks + 10 * (self.chunk // 8)) + 80
        if c.tf32x3:  # two floats of D per 8x8 block, summed and total; hi and lo of two k halves per fragment
            return 4 * c.rows_per_thread * self.n_blocks + 4 * (c.rows_per_thread + self.n_blocks) + 40
        if c.mma:  # two doubles of D per 8x8 block, one double per A and B fragment
            return (2 * c.rows_per_thread * self.n_blocks + c.rows_per_thread + self.n_blocks) * 2 + 40
        accumulators = c.rows_per_thread * c.tile_n * p.words
        if p.transpose_a:  # one A vector and one X slice per row
            operands = (c.rows_per_thread + c.tile_n) * p.words
        else:  # a vector of K per row of A, and the X slice of one of its entries at a time
            operands = (c.rows_per_thread * p.vector_elements + c.tile_n) * p.words
        return accumulators + operands + 40

    def resident_blocks(self) -> int:
        """Blocks per SM that the limits allow (registers as estimated)."""
        by_smem = SM_SHARED_BYTES // (self.shared_bytes + 1024)
        by_threads = SM_THREADS // self.threads
        by_registers = SM_REGISTERS // (self.threads * _round_up(self.estimated_registers(), 8))
        return min(by_smem, by_threads, by_registers)

    @property
    def name(self) -> str:
        p = self.problem
        digest = hashlib.sha1(repr((p, self.config)).encode()).hexdigest()[:10]
        layout = "t" if p.transpose_a else "n"
        conj = "c" if p.conj else ""
        return f"tsmm_mtsm{layout}{conj}_{p.dtype}_n{p.n}_{digest}"


def validate(spec: MtsmSpec) -> None:
    """Raise InvalidSpec unless ``spec`` generates correct code within the hardware limits."""
    p, c = spec.problem, spec.config
    errors = []
    if p.dtype not in DTYPES:
        raise InvalidSpec(f"dtype must be one of {tuple(DTYPES)}, got {p.dtype!r}")
    if not 1 <= p.n <= MAX_N:
        errors.append(f"N must lie in 1..{MAX_N}, got {p.n}")
    if p.conj and p.components == 1:
        errors.append("conj applies to complex dtypes only")
    if not 1 <= c.tile_n <= p.n:
        errors.append(f"tile_n {c.tile_n} must lie in 1..N")
    if c.stages < 2 or c.blocks_per_sm < 1:
        errors.append("stages must be >= 2 and blocks_per_sm >= 1")
    if c.mma:
        if p.dtype not in MMA_DTYPES or c.tile_n != p.n or c.k_groups != 1:
            errors.append(f"mma (DMMA) serves {' and '.join(MMA_DTYPES)} only, with tile_n = N and k_groups = 1")
        if c.rows_per_thread < 1 or c.row_warps < 1 or c.k_groups < 1 or c.k_steps < 1:
            errors.append("rows_per_thread, row_warps, k_groups and k_steps must be >= 1")
        if c.tf32x3 and (p.dtype != "float32" or c.k_steps % 2 or c.rows_per_thread % 2):
            errors.append("tf32x3 serves float32 only, with even k_steps and rows_per_thread (an m16n8k8 step "
                          "takes two of each)")
        if c.wgmma and (not c.tf32x3 or c.row_warps % 4 or c.k_steps > 16):
            errors.append("wgmma runs 3xTF32 (tf32x3) in warpgroups (row_warps a multiple of 4) with at most "
                          "16 k-steps a chunk (the tensor cores truncate the float32 sums of a chunk)")
    elif c.tf32x3 or c.wgmma:
        errors.append("tf32x3 and wgmma run on the tensor cores: each needs mma")
    elif p.transpose_a:
        if c.rows_per_thread < 1 or p.vector_elements % c.rows_per_thread:
            errors.append(f"rows_per_thread {c.rows_per_thread} must divide {p.vector_elements} "
                          "(one aligned vector of A per thread and row)")
        if c.lanes < 32 or c.lanes % 32:
            errors.append(f"lanes {c.lanes} must be a positive multiple of 32 (one n group per warp)")
        if c.chunk_rows < 1:
            errors.append("chunk_rows must be >= 1")
    else:
        if c.rows_per_thread < 1 or c.row_warps < 1 or c.k_groups < 1 or c.k_steps < 1:
            errors.append("rows_per_thread, row_warps, k_groups and k_steps must be >= 1")
    if errors:
        raise InvalidSpec("; ".join(errors), spec)
    if spec.threads > MAX_THREADS:
        errors.append(f"{spec.threads} threads per block exceed {MAX_THREADS}")
    if spec.shared_bytes > MAX_SHARED_BYTES:
        errors.append(f"{spec.shared_bytes} bytes of shared memory exceed {MAX_SHARED_BYTES}")
    if spec.estimated_registers() > MAX_REGISTERS:
        errors.append(f"about {spec.estimated_registers()} registers per thread exceed {MAX_REGISTERS}")
    if spec.resident_blocks() < c.blocks_per_sm:
        errors.append(f"only {spec.resident_blocks()} blocks fit one SM, not blocks_per_sm {c.blocks_per_sm}")
    if errors:
        raise InvalidSpec("; ".join(errors), spec)


# --- the model's default configuration ---------------------------------------------

TARGET_THREADS = 256
STAGE_BYTES = 32 * 1024  # 3 stages x 2 blocks in flight per SM cover DRAM latency
ROW_SEGMENT_BYTES = 256  # transpose_a=False: bytes of each row of A per chunk (whole DRAM bursts)
STAGES = 3
BLOCKS_PER_SM = 2
REGISTER_BUDGET = SM_REGISTERS // (TARGET_THREADS * BLOCKS_PER_SM)
# float64 widths that keep the FMA units more than half busy run on the FP64 tensor cores.
MMA_MIN_UTILIZATION = 0.5


def default_config(problem: MtsmProblem) -> MtsmConfig:
    """A valid configuration from the model: register tiles within the budget of
    two resident blocks of 256 threads, 32 KiB stages, 3 stages; stages shrink to fit.
    float64 widths that would keep the FMA units busy run on DMMA instead."""
    if problem.dtype == "float64" and fma_utilization(problem) > MMA_MIN_UTILIZATION:
        config = _mma_config(problem)
    elif problem.transpose_a:
        # One 16-byte vector of A per thread and row; the rest of the budget for N.
        rows_per_thread = problem.vector_elements
        tile_n = _tile_n(problem, lambda tn: _registers(problem, rows_per_thread, tn) <= REGISTER_BUDGET)
        n_groups = _ceil_div(problem.n, tile_n)
        lanes = max(32, TARGET_THREADS // n_groups // 32 * 32)
        strip_bytes = lanes * rows_per_thread * problem.element_bytes
        chunk_rows = max(1, STAGE_BYTES // strip_bytes)
        config = MtsmConfig(tile_n=tile_n, rows_per_thread=rows_per_thread, lanes=lanes,
                            chunk_rows=chunk_rows, stages=STAGES, blocks_per_sm=BLOCKS_PER_SM)
    else:
        rows_per_thread, tile_n = _plain_tile(problem)
        n_groups = _ceil_div(problem.n, tile_n)
        k_groups = max(1, TARGET_THREADS // 32 // n_groups)
        k_steps = max(1, ROW_SEGMENT_BYTES // VECTOR_BYTES // k_groups)
        config = MtsmConfig(tile_n=tile_n, rows_per_thread=rows_per_thread, k_groups=k_groups,
                            k_steps=k_steps, stages=STAGES, blocks_per_sm=BLOCKS_PER_SM)
    return _shrink_to_fit(problem, config)


def _mma_config(problem: MtsmProblem) -> MtsmConfig:
    """DMMA: 8 warps side by side along the rows, each up to 4 blocks of 8 rows x
    all of N (as many as the register budget allows; 2 for A X, whose stages
    hold whole 128-byte lines of each row), K steps for a ~32 KiB stage."""
    row_warps = TARGET_THREADS // 32
    for blocks in (4, 2, 1) if problem.transpose_a else (2, 1):
        config = MtsmConfig(tile_n=problem.n, rows_per_thread=blocks, row_warps=row_warps, mma=True,
                            stages=STAGES, blocks_per_sm=BLOCKS_PER_SM)
        probe = MtsmSpec(problem, config)
        if probe.estimated_registers() <= REGISTER_BUDGET:
            break
    bytes_per_k = (probe.block_rows + probe.x_stride) * problem.element_bytes
    k_steps = max(1, STAGE_BYTES // (4 * bytes_per_k))
    if not problem.transpose_a:  # whole 128-byte lines of each row of A per chunk
        lines = problem.line_k_steps
        k_steps = max(lines, k_steps // lines * lines)
    return dataclasses.replace(config, k_steps=k_steps)


def _plain_tile(problem: MtsmProblem) -> tuple[int, int]:
    """A X: the register tile (rows of A, columns of N) with the most FMAs per
    shared-memory wavefront that fits the register budget. Per 16-byte vector of
    K a thread loads one vector per row (4 wavefronts a warp, distinct rows) and
    the tile's X columns for each entry (broadcasts, one wavefront per vector)."""
    vec = problem.vector_elements

    def fmas_per_wavefront(tile: tuple[int, int]) -> float:
        rows, tn = tile
        x_loads = vec * (tn // vec if tn % vec == 0 else tn)
        return rows * vec * tn / (4 * rows + x_loads)

    tiles = [(rows, _tile_n(problem, lambda tn, rows=rows: _registers(problem, rows, tn) <= REGISTER_BUDGET))
             for rows in (1, 2, 4) if _registers(problem, rows, 1) <= REGISTER_BUDGET]
    # At most one warp per n group in a block of TARGET_THREADS.
    tiles = [tile for tile in tiles if _ceil_div(problem.n, tile[1]) <= TARGET_THREADS // 32]
    return max(tiles, key=lambda tile: (fmas_per_wavefront(tile), tile[1]))


def _tile_n(problem: MtsmProblem, fits) -> int:
    """A tile of N's columns that ``fits``: the widest even split of N, unless a
    whole number of 16-byte vectors of several elements, at least half as wide,
    divides N (vector loads of X, no wasted columns)."""
    widest = next(w for w in range(problem.n, 0, -1) if fits(w))
    vec = problem.vector_elements
    dividing = [w for w in range(vec, widest + 1, vec) if problem.n % w == 0]
    if vec > 1 and dividing and 2 * dividing[-1] >= widest:
        return dividing[-1]
    return _ceil_div(problem.n, _ceil_div(problem.n, widest))


def _registers(problem: MtsmProblem, rows_per_thread: int, tile_n: int) -> int:
    config = MtsmConfig(tile_n=tile_n, rows_per_thread=rows_per_thread)
    return MtsmSpec(problem, config).estimated_registers()


def _shrink_to_fit(problem: MtsmProblem, config: MtsmConfig) -> MtsmConfig:
    """Halve the stage (rows of a chunk, or K steps) until the spec is valid."""
    while True:
        spec = MtsmSpec(problem, config)
        try:
            validate(spec)
            return config
        except InvalidSpec:
            if problem.transpose_a and config.chunk_rows > 1:
                config = dataclasses.replace(config, chunk_rows=config.chunk_rows // 2)
            elif (config.mma or not problem.transpose_a) and config.k_steps > 1:
                config = dataclasses.replace(config, k_steps=config.k_steps // 2)
            elif not problem.transpose_a and config.rows_per_thread > 1:
                config = dataclasses.replace(config, rows_per_thread=config.rows_per_thread // 2)
            else:
                raise


# An H100 SXM per SM and clock: DRAM read bytes (~3.35 TB/s over 132 SMs at ~1.75
# GHz), and FMA warp instructions (128 FP32 or 64 FP64 lanes).
READ_BYTES_PER_CLOCK = 14.5
FMA_WARP_INSTRUCTIONS_PER_CLOCK = {"float": 4, "double": 2}


def fma_utilization(problem: MtsmProblem) -> float:
    """Fraction of the FMA units' rate that N FMAs (4 real ones for complex) per
    element of A need at full read bandwidth: above 1 the FMA units, not memory,
    bound these kernels."""
    elements = READ_BYTES_PER_CLOCK / problem.element_bytes
    warp_fmas = elements * problem.n * problem.components**2 / 32
    return warp_fmas / FMA_WARP_INSTRUCTIONS_PER_CLOCK[problem.real_type]


PIPELINE_FILL_CHUNKS = 1  # a block's start (first loads in flight), in chunks of streaming
FINALIZE_CHUNKS = 1  # the finalize launch


def splits(spec: MtsmSpec, m: int, k: int, batch: int, multiprocessors: int) -> int:
    """Blocks along K (gridDim.y) for an (m, k) problem with ``batch`` items.

    Time model, in chunk times of one block: the blocks run in waves of
    ``multiprocessors * blocks_per_sm`` slots, each block streams its chunks
    after a pipeline fill; a split adds the finalize launch and 2 s N elements
    of partial-sum traffic per row of out against K elements of A. The best s up
    to the number of chunks wins (the smallest among equals)."""
    blocks = _ceil_div(m, spec.block_rows) * batch
    slots = multiprocessors * spec.config.blocks_per_sm
    chunks = _ceil_div(k, spec.chunk)
    ideal = blocks * chunks / slots

    def cost(s: int) -> float:
        waves = _ceil_div(blocks * s, slots)
        time = waves * (_ceil_div(chunks, s) + PIPELINE_FILL_CHUNKS) + (FINALIZE_CHUNKS if s > 1 else 0)
        return time / ideal + 2 * s * spec.problem.n / k

    return min(range(1, max(1, min(chunks, 4 * slots)) + 1), key=lambda s: (cost(s), s))


# --- emitter -------------------------------------------------------------------------


def _load_run(ar: _Arith, names: list[str], pointer: str, aligned: bool) -> list[str]:
    """Load len(names) consecutive elements at `pointer` (shared memory) into named
    registers, as 16-byte vector loads where `aligned` says each group of 16 bytes
    starts on a 16-byte boundary (fewer load instructions per FMA)."""
    width = VECTOR_BYTES // (8 if ar.real == "double" else 4) // (2 if ar.complex else 1)
    if not aligned or width == 1 or len(names) % width:
        return [f"const {ar.elem} {name} = {pointer}[{i}];" for i, name in enumerate(names)]
    vector = f"{ar.real}4" if ar.real == "float" else "double2"
    lines = []
    for v in range(len(names) // width):
        reg = f"{names[v * width]}_v"
        lines.append(f"const {vector} {reg} = *reinterpret_cast<const {vector}*>({pointer} + {v * width});")
        parts = ("x", "y", "z", "w")[: VECTOR_BYTES // (8 if ar.real == "double" else 4)]
        for i in range(width):
            name = names[v * width + i]
            if ar.complex:
                lines.append(f"const {ar.elem} {name} = make_{ar.elem}({reg}.{parts[2 * i]}, {reg}.{parts[2 * i + 1]});")
            else:
                lines.append(f"const {ar.elem} {name} = {reg}.{parts[i]};")
    return lines


def _indent(lines: list[str], depth: int) -> list[str]:
    return ["  " * depth + line if line else "" for line in lines]


def _prologue(spec: MtsmSpec, ar: _Arith) -> list[str]:
    p = spec.problem
    e = ar.elem
    return [
        "// Work split: blockIdx.x = block of out's rows, blockIdx.y = split of K,",
        "// blockIdx.z = batch item. Split y covers chunks chunk_begin .. + chunks_per_split.",
        "const long long item = blockIdx.z;",
        f"const {e}* __restrict__ a = static_cast<const {e}*>(args.a) + item * args.a_batch_stride;",
        f"const {e}* __restrict__ x = static_cast<const {e}*>(args.x) + item * args.x_batch_stride;",
        f"{e}* __restrict__ dst = (gridDim.y == 1 ? static_cast<{e}*>(args.out)",
        f"    : static_cast<{e}*>(args.partials) + blockIdx.y * args.batch * args.m * {p.n}) + item * args.m * {p.n};",
        f"const long long num_chunks = (args.k + {spec.chunk} - 1) / {spec.chunk};",
        "const long long chunk_begin = blockIdx.y * args.chunks_per_split;",
        "const long long my_chunks = max(0LL, min(num_chunks, chunk_begin + args.chunks_per_split) - chunk_begin);",
        "const int tid = threadIdx.x;",
        "extern __shared__ __align__(16) unsigned char tsmm_smem[];",
        f"auto slot_a = [&](int slot) {{ return reinterpret_cast<{e}*>(tsmm_smem + slot * {spec.stage_bytes}); }};",
        f"auto slot_x = [&](int slot) {{ return slot_a(slot) + {spec.stage_bytes // p.element_bytes - spec.chunk * spec.x_stride}; }};",
        "// 16-byte copies need 16-byte aligned rows: a whole number of vectors per row",
        "// and an aligned base (batch items of odd size break it); else element copies.",
        *(["const bool x_vectors = tsmm_misalignment(x) == 0;"] if p.n % p.vector_elements == 0 else []),
        f"const bool a_vectors = args.{'m' if p.transpose_a else 'k'} % {p.vector_elements} == 0 "
        "&& tsmm_misalignment(a) == 0;",
    ]


def _pipeline(spec: MtsmSpec, issue: list[str], consume: list[str]) -> list[str]:
    """The multi-stage cp.async ring (leap-frogging): chunk step+stages-1 is
    loading while chunk step is computed on, which hides DRAM latency."""
    s, r = spec.config.stages, spec.chunk
    return [
        "auto issue = [&](long long step) {",
        "  if (step < my_chunks) {",
        f"    const long long k0 = (chunk_begin + step) * {r};  // first entry of K in the chunk",
        f"    const int rows = static_cast<int>(min(static_cast<long long>({r}), args.k - k0));",
        f"    const int slot = static_cast<int>(step % {s});",
        *_indent(issue, 2),
        "  }",
        "  // Commit even an empty group so wait_group counts stay uniform at the tail.",
        "  tsmm_cp_async_commit();",
        "};",
        f"for (int step = 0; step < {s - 1}; ++step) issue(step);",
        "for (long long step = 0; step < my_chunks; ++step) {",
        f"  // Chunk `step` has landed once at most {s - 2} newer groups are pending; the",
        "  // barrier also says every thread is done with the slot refilled next.",
        f"  tsmm_cp_async_wait<{s - 2}>();",
        "  __syncthreads();",
        f"  issue(step + {s - 1});",
        f"  const int rows = static_cast<int>(min(static_cast<long long>({r}), args.k - (chunk_begin + step) * {r}));",
        f"  const int slot = static_cast<int>(step % {s});",
        *_indent(consume, 1),
        "}",
        "tsmm_cp_async_wait<0>();",
        "__syncthreads();",
    ]


def _x_copy(spec: MtsmSpec, ar: _Arith, zero_tail: bool) -> list[str]:
    """Stage `rows` rows of X from row k0 at a row stride of x_stride. With
    `zero_tail`, rows past K (up to the full chunk) are zeroed: the A X kernel
    consumes whole chunks."""
    p = spec.problem
    e, n, vec, t = ar.elem, p.n, p.vector_elements, spec.threads
    limit = spec.chunk if zero_tail else "rows"
    zero = [f"  else sx[e] = {ar.zero()};"] if zero_tail else []
    lines = [f"{e}* sx = slot_x(slot);", f"const {e}* gx = x + k0 * {n};"]
    if spec.x_stride == n:
        lines += [
            "if (x_vectors) {",
            "  // Contiguous rows: 16-byte copies (row k0 starts aligned: chunks hold whole vectors).",
            f"  for (int v = tid; v < {spec.chunk * n // vec}; v += {t}) {{",
            f"    const int e = v * {vec};",
            f"    if (e + {vec} <= rows * {n}) tsmm_cp_async_16(sx + e, gx + e);",
            "    else {",
            f"      for (int q = 0; q < {vec}; ++q) {{",
            f"        if (e + q < rows * {n}) tsmm_cp_async_element(sx + e + q, gx + e + q);",
            *([f"        else sx[e + q] = {ar.zero()};"] if zero_tail else []),
            "      }",
            "    }",
            "  }",
            "} else {",
            f"  for (int e = tid; e < {limit} * {n}; e += {t}) {{",
            f"    if (e < rows * {n}) tsmm_cp_async_element(sx + e, gx + e);",
            *_indent(zero, 1),
            "  }",
            "}",
        ]
    else:
        elements = [
            f"for (int e = tid; e < {limit} * {n}; e += {t}) {{",
            f"  const int r = e / {n};",
            f"  if (e < rows * {n}) tsmm_cp_async_element(sx + r * {spec.x_stride} + e - r * {n}, gx + e);",
            *([f"  else sx[r * {spec.x_stride} + e - r * {n}] = {ar.zero()};"] if zero_tail else []),
            "}",
        ]
        if n % vec:
            lines += [f"// Rows padded to {spec.x_stride} elements (16-byte aligned): element copies."] + elements
        else:
            per_row = n // vec
            lines += [
                f"// Rows padded to {spec.x_stride} elements (16-byte aligned): 16-byte copies of whole chunks",
                "// of aligned rows, else element copies.",
                f"if (x_vectors && rows == {spec.chunk}) {{",
                f"  for (int v = tid; v < {spec.chunk * per_row}; v += {t}) {{",
                f"    const int r = v / {per_row};",
                f"    tsmm_cp_async_16(sx + r * {spec.x_stride} + (v - r * {per_row}) * {vec}, gx + v * {vec});",
                "  }",
                "} else {",
                *_indent(elements, 1),
                "}",
            ]
    return lines


def _a_copy(spec: MtsmSpec, ar: _Arith, origin: str) -> tuple[list[str], list[str]]:
    """Staging a chunk of A: (setup before the ring, the issue step's lines).
    ``origin`` names the block's first row of out (A X) or column of A (Aᵀ X).

    A X stages ``block_rows`` lines of ``chunk`` entries (rows past M repeat row
    M-1, never stored; entries past K are zeroed); Aᵀ X stages ``chunk`` lines
    of ``block_rows`` columns (columns past M left stale, never stored; lines
    past K zeroed where the kernel consumes whole chunks, as mma does). A whole
    chunk of a block inside M copies the same lines every time, so each thread's
    first line, its column and the step between its lines are worked out once:
    the copies of the ring then cost an add each, where the general loop spends
    about 25 instructions of index and bounds arithmetic per 16-byte copy."""
    p, c = spec.problem, spec.config
    e, vec, t, stride = ar.elem, p.vector_elements, spec.threads, spec.a_stride
    zero_tail = c.mma or not p.transpose_a
    if p.transpose_a:
        lines, vectors = spec.chunk, spec.block_rows // vec
        first, line_stride, chunk_offset = f"a + copy_line * args.m + {origin} + copy_col", "args.m", "k0 * args.m"
        comment = [f"// The strip: the chunk's rows of A, {vectors} vectors each, coalesced. Columns past M",
                   "// are left stale (their sums are never stored)"
                   + ("; rows past K are zeroed (whole chunks are consumed)." if zero_tail else ".")]
        general = [
            f"for (int v = tid; v < rows * {vectors}; v += {t}) {{",
            f"  const int r = v / {vectors};",
            f"  const int col = (v - r * {vectors}) * {vec};",
            f"  const long long gcol = {origin} + col;",
            f"  const {e}* src = a + (k0 + r) * args.m + gcol;",
            f"  if (a_vectors && gcol + {vec} <= args.m) tsmm_cp_async_16(sa + r * {stride} + col, src);",
            "  else {",
            f"    for (int q = 0; q < {vec}; ++q) {{",
            f"      if (gcol + q < args.m) tsmm_cp_async_element(sa + r * {stride} + col + q, src + q);",
            "    }",
            "  }",
            "}",
        ]
        if zero_tail:
            br = spec.block_rows
            general.append(f"for (int e = rows * {br} + tid; e < {lines * br}; e += {t}) "
                           f"sa[e / {br} * {stride} + e % {br}] = {ar.zero()};")
    else:
        lines, vectors = spec.block_rows, spec.chunk // vec
        first, line_stride, chunk_offset = f"a + ({origin} + copy_line) * args.k + copy_col", "args.k", "k0"
        comment = [f"// The tile: {lines} rows x {spec.chunk} entries of K, {vectors} vectors a row. Rows past M",
                   "// repeat row M-1 (never stored); entries past K are zeroed (whole chunks are consumed)."]
        general = [
            f"for (int v = tid; v < {lines * vectors}; v += {t}) {{",
            f"  const int r = v / {vectors};",
            f"  const int col = (v - r * {vectors}) * {vec};",
            f"  const {e}* src = a + min({origin} + r, args.m - 1) * args.k + k0 + col;",
            f"  {e}* to = sa + r * {stride} + col;",
            f"  if (a_vectors && col + {vec} <= rows) tsmm_cp_async_16(to, src);",
            "  else {",
            f"    for (int q = 0; q < {vec}; ++q) {{",
            "      if (col + q < rows) tsmm_cp_async_element(to + q, src + q);",
            f"      else to[q] = {ar.zero()};",
            "    }",
            "  }",
            "}",
        ]
    issue = comment + [f"{e}* sa = slot_a(slot);"]
    if t % vectors or (lines * vectors) % t:  # threads do not take whole, equal shares of lines
        return [], issue + general
    step = t // vectors  # lines between one thread's copies
    setup = [
        "// Whole chunks: each thread copies the same lines of every chunk, from here.",
        f"const int copy_line = tid / {vectors};",
        f"const int copy_col = (tid % {vectors}) * {vec};",
        f"const {e}* a_copy = {first};",
        f"const long long copy_step = {step}LL * {line_stride};  // elements between the thread's lines",
        f"const bool whole_block = {origin} + {spec.block_rows} <= args.m;",
    ]
    issue += [
        f"if (a_vectors && whole_block && rows == {spec.chunk}) {{",
        f"  const {e}* src = a_copy + {chunk_offset};",
        f"  {e}* to = sa + copy_line * {stride} + copy_col;",
        "  #pragma unroll",
        f"  for (int i = 0; i < {lines * vectors // t}; ++i) tsmm_cp_async_16(to + i * {step * stride}, src + i * copy_step);",
        "} else {",
        *_indent(general, 1),
        "}",
    ]
    return setup, issue


def _emit_transposed(spec: MtsmSpec, ar: _Arith) -> list[str]:
    """op(A)ᵀ X, A (K, M): column strips of A, one vector of columns per thread."""
    p, c = spec.problem, spec.config
    e, vec, n = ar.elem, p.vector_elements, p.n
    cols, tn, w = c.rows_per_thread, c.tile_n, spec.block_rows
    ragged_n = spec.n_groups * tn > n
    body = _prologue(spec, ar) + [
        "",
        f"// Thread place: columns strip0 + lane*{cols} .. +{cols} of A (rows of out) times",
        f"// columns n_group*{tn} .. +{tn} of X. A warp shares its n group, so X reads broadcast.",
        f"const long long strip0 = static_cast<long long>(blockIdx.x) * {w};",
        f"const int lane = tid % {c.lanes};",
        f"const int n_group = tid / {c.lanes};",
        "",
        "// Register tile of partial sums over this block's rows of A.",
        *[f"{e} acc_{i}_{j} = {ar.zero()};" for i in range(cols) for j in range(tn)],
        "",
        "// One row of A: an outer product of the thread's A vector and its X slice.",
        f"auto row_step = [&](const {e}* sa, const {e}* sx, int r) {{",
        *_indent(_load_run(ar, [f"a{i}" for i in range(cols)], f"(sa + r * {w} + lane * {cols})", True), 1),
        *_indent(_load_run(ar, [f"x{j}" for j in range(tn)], f"(sx + r * {spec.x_stride} + n_group * {tn})",
                           tn % vec == 0), 1),
        *["  " + line for i in range(cols) for j in range(tn) for line in ar.fma(f"acc_{i}_{j}", f"a{i}", f"x{j}")],
        "};",
        "",
    ]
    a_setup, a_issue = _a_copy(spec, ar, "strip0")
    body += a_setup
    issue = a_issue + _x_copy(spec, ar, zero_tail=False)
    consume = [
        f"const {e}* sa = slot_a(slot);",
        f"const {e}* sx = slot_x(slot);",
        f"if (rows == {c.chunk_rows}) {{",
        f"  // Full chunk: a compile-time trip count of {c.chunk_rows}.",
        "#pragma unroll",
        f"  for (int r = 0; r < {c.chunk_rows}; ++r) row_step(sa, sx, r);",
        "} else {",
        "  for (int r = 0; r < rows; ++r) row_step(sa, sx, r);",
        "}",
    ]
    body += _pipeline(spec, issue, consume)
    body += ["", "// Store the tile: out rows past M and columns past N are skipped."]
    for i in range(cols):
        for j in range(tn):
            guards = [f"strip0 + lane * {cols} + {i} < args.m"]
            if ragged_n:
                guards.append(f"n_group * {tn} + {j} < {n}")
            body.append(f"if ({' && '.join(guards)}) dst[(strip0 + lane * {cols} + {i}) * {n} + n_group * {tn} + {j}] = acc_{i}_{j};")
    return body


def _emit_plain(spec: MtsmSpec, ar: _Arith) -> list[str]:
    """op(A) X, A (M, K): row tiles of A streamed along K."""
    p, c = spec.problem, spec.config
    e, vec, n = ar.elem, p.vector_elements, p.n
    tr, tn, br, sa_stride = c.rows_per_thread, c.tile_n, spec.block_rows, spec.a_stride
    ragged_n = spec.n_groups * tn > n
    k_per_group = c.k_steps * vec
    body = _prologue(spec, ar) + [
        "",
        f"// Thread place: rows lane + 32*(row_warp + {c.row_warps}*i) of the block's {br}, columns",
        f"// n_group*{tn} .. +{tn} of X, and the chunk's K entries k_group*{k_per_group} .. +{k_per_group}.",
        "// A warp shares its n group and k group, so X reads broadcast.",
        f"const long long row_base = static_cast<long long>(blockIdx.x) * {br};",
        "const int lane = tid % 32;",
        "const int warp = tid / 32;",
        f"const int n_group = warp % {spec.n_groups};",
        f"const int k_group = warp / {spec.n_groups} % {c.k_groups};",
        f"const int row_warp = warp / {spec.n_groups * c.k_groups};",
        *[f"const int row{i} = lane + 32 * (row_warp + {c.row_warps * i});" for i in range(tr)],
        "",
        "// Register tile of partial sums over this thread's share of K.",
        *[f"{e} acc_{i}_{j} = {ar.zero()};" for i in range(tr) for j in range(tn)],
        "",
    ]
    a_setup, a_issue = _a_copy(spec, ar, "row_base")
    body += a_setup
    issue = a_issue + _x_copy(spec, ar, zero_tail=True)
    step = [
        f"const {e}* sa = slot_a(slot) + k_group * {k_per_group};",
        f"const {e}* sx = slot_x(slot) + k_group * {k_per_group * spec.x_stride} + n_group * {tn};",
        "// Per K vector: the thread's rows as 16-byte loads, then one X row per entry",
        "// (a broadcast) and its outer product with the rows' entries.",
        "#pragma unroll",
        f"for (int s = 0; s < {c.k_steps}; ++s) {{",
    ]
    for i in range(tr):
        step += _indent(_load_run(ar, [f"a{i}_{q}" for q in range(vec)], f"(sa + row{i} * {sa_stride} + s * {vec})", True), 1)
    for q in range(vec):
        step += _indent(_load_run(ar, [f"x{q}_{j}" for j in range(tn)], f"(sx + (s * {vec} + {q}) * {spec.x_stride})",
                                  tn % vec == 0), 1)
        step += ["  " + line for i in range(tr) for j in range(tn) for line in ar.fma(f"acc_{i}_{j}", f"a{i}_{q}", f"x{q}_{j}")]
    step += ["}"]
    body += _pipeline(spec, issue, ["(void)rows;  // whole chunks: the tail is zero-padded"] + step)

    def store(i: int, j: int) -> str:
        guards = [f"row_base + row{i} < args.m"] + ([f"n_group * {tn} + {j} < {n}"] if ragged_n else [])
        return f"if ({' && '.join(guards)}) dst[(row_base + row{i}) * {n} + n_group * {tn} + {j}] = acc_{i}_{j};"

    stores = [store(i, j) for i in range(tr) for j in range(tn)]
    if c.k_groups == 1:
        return body + ["", "// Store the tile: rows past M and columns past N are skipped."] + stores
    slot = lambda group, i, j: f"reduce[(({group} - 1) * {br} + row{i}) * {spec.x_stride} + n_group * {tn} + {j}]"
    return body + [
        "",
        f"// Block-local reduction: k groups 1..{c.k_groups - 1} leave their tiles in shared memory",
        "// (the drained ring); k group 0 adds them in a fixed order (bitwise reproducible)",
        "// and stores the tile, skipping rows past M and columns past N.",
        f"{e}* reduce = reinterpret_cast<{e}*>(tsmm_smem);",
        "if (k_group > 0) {",
        *[f"  {slot('k_group', i, j)} = acc_{i}_{j};" for i in range(tr) for j in range(tn)],
        "}",
        "__syncthreads();",
        "if (k_group == 0) {",
        f"  for (int g = 1; g < {c.k_groups}; ++g) {{",
        *[f"    acc_{i}_{j} = {ar.add(f'acc_{i}_{j}', slot('g', i, j))};" for i in range(tr) for j in range(tn)],
        "  }",
        *_indent(stores, 1),
        "}",
    ]


def _staged_a(spec: MtsmSpec, row: str, k: str) -> str:
    """The staged element of A at ``row`` (of out) and entry ``k`` of the chunk, in
    either layout: the tensor-core kernels' A fragments."""
    if spec.problem.transpose_a:
        return f"sa[({k}) * {spec.a_stride} + {row}]"
    return f"sa[{row} * {spec.a_stride} + {k}]"


def _emit_mma(spec: MtsmSpec, ar: _Arith) -> list[str]:
    """The FP64 tensor cores (DMMA, mma.sync m8n8k4), both layouts: a warp's 8x8
    blocks of out accumulate 8x4 fragments of op(A) times 4x8 fragments of X per 4
    entries of K. Twice float64's FMA rate, for the widths that would bind the FMA
    units; float32 stays float in shared memory (the bytes DRAM delivers) and is
    widened exactly as each fragment is read. With tf32x3, float32 on the TF32
    tensor cores instead: the same fragments, two k-steps and two 8-row blocks per
    m16n8k8."""
    p, c = spec.problem, spec.config
    tf32 = c.tf32x3
    e = ar.elem
    n = p.n
    tm, nb, br = c.rows_per_thread, spec.n_blocks, spec.block_rows
    xs = spec.x_stride
    body = _prologue(spec, ar) + [
        "",
        f"// Thread place: warp `warp_m` owns blocks warp_m*{tm} .. +{tm} of 8 rows of the",
        f"// block's {br} times all {nb} blocks of 8 columns of N, over the whole chunk.",
        f"const long long row_base = static_cast<long long>(blockIdx.x) * {br};",
        "const int lane = tid % 32;",
        "const int warp_m = tid / 32;",
        *(["// PTX m16n8k8 tf32 fragments: A (16x8, row) holds [lane/4 (+8)][lane%4 (+4)], B (8x8,",
           "// col) [lane%4 (+4)][lane/4], D (16x8) [lane/4 (+8)][2*(lane%4) + h]: per 8x8 block, a",
           "// DMMA k-step's fragments in each k half."] if tf32 else
          ["// PTX m8n8k4 f64 fragments: A (8x4, row) holds [lane/4][lane%4], B (4x8, col)",
           "// [lane%4][lane/4], D (8x8) [lane/4][2*(lane%4) + h]."]),
        "const int frag_k = lane % 4;",
        *[f"const int row{i} = (warp_m * {tm} + {i}) * 8 + lane / 4;  // of the block's rows" for i in range(tm)],
        "",
        *[f"{'float' if tf32 else 'double'} acc_{i}_{j}_{h} = 0;" for i in range(tm) for j in range(nb) for h in range(2)],
        *(["// The tensor cores truncate their float32 sums: `part` sums at most 8 m16n8k8 steps",
           "// from zero, then `flush` adds it to the totals, which round to nearest.",
           *tf32_partial_sums(tm, nb)] if tf32 else []),
        "",
    ]
    a_setup, a_copy = _a_copy(spec, ar, "row_base")
    body += a_setup
    if tf32:
        steps = c.k_steps // 2
        step = [
            "  const int kk0 = s * 8 + frag_k, kk1 = kk0 + 4;  // this lane's entries of K in each k half",
            *[f"  const tsmm_tf32_pair a{i}_{h} = tsmm_split_tf32({_staged_a(spec, f'row{i}', f'kk{h}')});"
              for h in (0, 1) for i in range(tm)],
            *[f"  const tsmm_tf32_pair b{j}_{h} = tsmm_split_tf32(sx[kk{h} * {xs} + {j * 8} + lane / 4]);"
              for h in (0, 1) for j in range(nb)],
            *["  " + line for line in tf32_products(tm, nb, lambda i, j: f"part_{i}_{j}", lambda i, h: f"a{i}_{h}",
                                                    lambda j, h: f"b{j}_{h}")],
            f"  if (s % 8 == 7 || s == {steps - 1}) flush();",
        ]
    else:
        steps = c.k_steps
        step = [
            "  const int kk = s * 4 + frag_k;  // this lane's entry of K",
            *[f"  const double a{i} = {_staged_a(spec, f'row{i}', 'kk')};" for i in range(tm)],
            *[f"  const double b{j} = sx[kk * {xs} + {j * 8} + lane / 4];" for j in range(nb)],
            *["  " + line for line in dmma_products(tm, nb, lambda i, j: f"acc_{i}_{j}", lambda i: f"a{i}",
                                                    lambda j: f"b{j}")],
        ]
    consume = [
        "(void)rows;  // whole chunks: the tail is zero-padded",
        f"const {e}* sa = slot_a(slot);",
        f"const {e}* sx = slot_x(slot);",
        "#pragma unroll",
        f"for (int s = 0; s < {steps}; ++s) {{",
        *step,
        "}",
    ]
    body += _pipeline(spec, a_copy + _x_copy(spec, ar, zero_tail=True), consume)

    positions = [(f"acc_{i}_{j}_{h}", f"row{i}", f"{j * 8 + h} + 2 * frag_k")
                 for i in range(tm) for j in range(nb) for h in range(2)]

    def store(acc: str, row: str, col: str) -> str:
        guards = [f"row_base + {row} < args.m"] + ([f"{col} < {n}"] if 8 * nb > n else [])
        value = acc if e == "double" or tf32 else f"static_cast<{e}>({acc})"  # float32 on DMMA: rounded once, here
        return f"if ({' && '.join(guards)}) dst[(row_base + {row}) * {n} + {col}] = {value};"

    stores = [store(*position) for position in positions]
    return body + ["", "// Store the blocks: rows past M and columns past N are skipped."] + stores


def _emit_wgmma(spec: MtsmSpec, ar: _Arith) -> list[str]:
    """3xTF32 on Hopper's warpgroup MMA (wgmma m64nNk8, MtsmConfig.wgmma), both
    layouts: A's fragments come from the staged rows into registers as for
    mma.sync (any layout of A serves), split there; X's chunk, which wgmma reads
    from shared memory K-major only, is rewritten split into the B operand's core
    matrices once per block and chunk. A chunk's products start from zero in two
    sums per tile (hi x hi, and the correction terms), added to the totals once
    the chunk is done: the tensor cores truncate their float32 sums.

    The products run asynchronously: a chunk's wgmma are in flight while the
    block passes the ring's barrier, issues its copies and splits the next chunk
    of X into the other of two buffers (by the chunk's parity); they are waited
    for before the next A fragments are loaded. wgmma reads its A registers until
    it completes, and ptxas does not keep them from reuse: fragments loaded
    before the wait gave wrong sums (H100, 2026-11-27), and two sets of them
    chosen by parity have ptxas serialize every wgmma (the branches' joins move
    the sums while the products are in flight)."""
    p = spec.problem
    e, n, t = ar.elem, p.n, spec.threads
    n8, chunk, xs = 8 * spec.n_blocks, spec.chunk, spec.x_stride
    tiles, k8, regs = spec.wgmma_tiles, spec.chunk // 8, 4 * spec.n_blocks
    split_floats = chunk * n8  # of the TF32 parts; as many remainders follow
    body = [
        "#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)",
        '#error "MtsmConfig.wgmma needs sm_90a (wgmma)"',
        "#endif",
        *_prologue(spec, ar),
        "",
        f"// Thread place: warpgroup `group` owns tiles group*{tiles} .. +{tiles} of 64 of the block's",
        f"// {spec.block_rows} rows; a warp takes 16 rows of each tile, as wgmma's A operand in",
        "// registers: the m16n8k8 A fragment [lane/4 (+8)][lane%4 (+4)]. D of those rows:",
        "// [lane/4][8*block + 2*(lane%4) + h] in d[4*block + h], row lane/4 + 8 in d[4*block + 2 + h].",
        f"const long long row_base = static_cast<long long>(blockIdx.x) * {spec.block_rows};",
        "const int lane = tid % 32;",
        "const int group = tid / 128;",
        "const int frag_k = lane % 4;",
        *[f"const int row{u}_{i} = (group * {tiles} + {u}) * 64 + tid / 32 % 4 * 16 + lane / 4 + {8 * i};"
          for u in range(tiles) for i in (0, 1)],
        "",
        "// X's chunk as wgmma's B operand, in buffer (chunk parity): K-major core matrices of",
        f"// 8 columns x 4 entries of K (128 contiguous bytes), 128 bytes apart along K and {chunk * 32}",
        f"// along N; the remainders {split_floats * 4} bytes after the TF32 parts.",
        f"float* x_split = reinterpret_cast<float*>(tsmm_smem + {spec.x_split_offset});",
        *[f"const unsigned long long x_{part}{b} = tsmm_wgmma_desc(x_split + {(2 * b + q) * split_floats}, 128, "
          f"{chunk * 32});" for b in (0, 1) for q, part in enumerate(("hi", "lo"))],
        "",
        "// Per tile: the totals, and a chunk's two sums (hi x hi, and the corrections), zero",
        "// until the first chunk's products land in them.",
        *[f"float total{u}[{regs}] = {{}}, sum{u}[{regs}] = {{}}, fix{u}[{regs}] = {{}};" for u in range(tiles)],
        "",
    ]
    a_setup, a_copy = _a_copy(spec, ar, "row_base")
    body += a_setup
    flush = [f"for (int r = 0; r < {regs}; ++r) total{u}[r] += sum{u}[r] + fix{u}[r];" for u in range(tiles)]

    fragments = [
        f"const tsmm_tf32_pair a{u}_{q}_{i}_{h} = tsmm_split_tf32("
        f"{_staged_a(spec, f'row{u}_{i}', f'{8 * q + 4 * h} + frag_k')});"
        for u in range(tiles) for q in range(k8) for h in (0, 1) for i in (0, 1)
    ]
    products = []
    for u in range(tiles):
        for q in range(k8):
            hi = ", ".join(f"a{u}_{q}_{i}_{h}.hi" for h in (0, 1) for i in (0, 1))
            lo = ", ".join(f"a{u}_{q}_{i}_{h}.lo" for h in (0, 1) for i in (0, 1))
            start = "_set" if q == 0 else ""
            products += [
                f"tsmm_wgmma_tf32_n{n8}{start}(sum{u}, {hi}, x_hi + {16 * q});",
                f"tsmm_wgmma_tf32_n{n8}{start}(fix{u}, {lo}, x_hi + {16 * q});",
                f"tsmm_wgmma_tf32_n{n8}(fix{u}, {hi}, x_lo + {16 * q});",
            ]
    consume = [
        "(void)rows;  // whole chunks: the tail is zero-padded",
        f"const {e}* sa = slot_a(slot);",
        f"const {e}* sx = slot_x(slot);",
        "// The split pass, into the buffer the chunk before last read (its products are in),",
        "// while the chunk before's products run:",
        "// each warp writes whole core matrices, reading 4 staged rows x 8 columns of X",
        "// (distinct banks at this row stride). Columns past N hold stale values, whose",
        "// sums are never stored.",
        f"float* x_now = x_split + step % 2 * {2 * split_floats};",
        f"for (int e = tid; e < {split_floats}; e += {t}) {{",
        f"  const int core = e / 32, k = core % {chunk // 4} * 4 + e % 4, col = core / {chunk // 4} * 8 + e % 32 / 4;",
        f"  const tsmm_tf32_pair part = tsmm_split_tf32(sx[k * {xs} + col]);",
        "  x_now[e] = __uint_as_float(part.hi);",
        f"  x_now[{split_floats} + e] = __uint_as_float(part.lo);",
        "}",
        "tsmm_fence_shared_for_bulk();  // the tensor cores read it through the async proxy",
        "__syncthreads();",
        "const unsigned long long x_hi = step % 2 ? x_hi1 : x_hi0, x_lo = step % 2 ? x_lo1 : x_lo0;",
        "// The chunk before's products are in (and added up) before this chunk's fragments take",
        f"// the registers they read; then every k-step's A fragments, split, and {3 * k8 * tiles} wgmma,",
        "// left in flight.",
        "tsmm_wgmma_wait<0>();",
        *flush,
        *fragments,
        "tsmm_wgmma_fence();",
        *products,
        "tsmm_wgmma_commit();",
    ]
    body += _pipeline(spec, a_copy + _x_copy(spec, ar, zero_tail=True), consume)
    body += ["// The last chunk's products.", "tsmm_wgmma_wait<0>();", *flush]
    body += ["", "// Store the tiles: rows past M and columns past N are skipped."]
    for u in range(tiles):
        for j in range(spec.n_blocks):
            for i in (0, 1):
                for h in (0, 1):
                    col = f"{8 * j + h} + 2 * frag_k"
                    guards = [f"row_base + row{u}_{i} < args.m"] + ([f"{col} < {n}"] if n8 > n else [])
                    body.append(f"if ({' && '.join(guards)}) dst[(row_base + row{u}_{i}) * {n} + {col}] = "
                                f"total{u}[{4 * j + 2 * i + h}];")
    return body


def _finalize(spec: MtsmSpec, ar: _Arith) -> list[str]:
    e, n = ar.elem, spec.problem.n
    return [
        "// Second stage of the deterministic split-K reduction: each output element",
        "// adds the main launch's args.splits partials in split order. Unrolled, so",
        "// that several independent loads are in flight ahead of the additions.",
        f"const long long total = args.batch * args.m * {n};",
        "const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;",
        "if (idx >= total) return;",
        f"const {e}* __restrict__ partial = static_cast<const {e}*>(args.partials) + idx;",
        f"{e} sum = partial[0];",
        "#pragma unroll 8",
        f"for (long long s = 1; s < args.splits; ++s) sum = {ar.add('sum', 'partial[s * total]')};",
        f"static_cast<{e}*>(args.out)[idx] = sum;",
    ]


def kernel_source(spec: MtsmSpec) -> str:
    """The kernels of ``spec`` (main and ``_finalize``) without the prelude."""
    validate(spec)
    p, c = spec.problem, spec.config
    ar = _Arith(p)
    emit = _emit_wgmma if c.wgmma else _emit_mma if c.mma else _emit_transposed if p.transpose_a else _emit_plain
    body = emit(spec, ar)
    lines = [
        f"// {spec.name}: mtsm transpose_a={p.transpose_a} {p.dtype} N={p.n} conj={p.conj}",
        f"// {c}",
        f"// threads={spec.threads} shared_bytes={spec.shared_bytes} block_rows={spec.block_rows} chunk={spec.chunk}",
        f'extern "C" __global__ void __launch_bounds__({spec.threads}, {c.blocks_per_sm}) {spec.name}(const TsmmMtsmArgs args) {{',
        *_indent(body, 1),
        "}",
        "",
        f'extern "C" __global__ void __launch_bounds__({FINALIZE_THREADS}) {spec.name}_finalize(const TsmmMtsmArgs args) {{',
        *_indent(_finalize(spec, ar), 1),
        "}",
        "",
    ]
    return "\n".join(lines)


_WGMMA_IN_FLIGHT = """\
// wgmma left in flight (MtsmConfig.wgmma): `commit` closes a group of this
// warpgroup's products, `wait<N>` returns once at most N groups are still running.
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void tsmm_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void tsmm_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
#endif
"""


def module_source(specs: list[MtsmSpec]) -> str:
    """A self-contained translation unit (no includes) with the kernels of ``specs``."""
    wgmma_widths = sorted({8 * spec.n_blocks for spec in specs if spec.config.wgmma})
    return "\n".join(["// Generated by jax_tsmm's codegen (mtsm); do not edit.", PRELUDE, _STAGE_COPY, ARGS_STRUCT]
                     + ([_WGMMA_IN_FLIGHT] if wgmma_widths else [])
                     + [_wgmma_tf32(n, accumulate) for n in wgmma_widths for accumulate in (True, False)]
                     + [kernel_source(spec) for spec in specs])


def header() -> str:
    """``mtsm_args.h`` for the C++ launcher (csrc/mtsm_handler.cc)."""
    return "// Generated by codegen/mtsm.py; do not edit.\n#pragma once\n\n" + ARGS_STRUCT
