"""Kernel spec -> CUDA C++ source.

The emitters write straight-line code with named registers: every loop over a
thread's tile is unrolled here in Python, so the compiler sees plain scalars
(never a register array indexed at run time). Each block of generated code
carries a comment naming the technique it implements.
"""

from __future__ import annotations

from .abi import PRELUDE
from .spec import KernelSpec, dmma_step_blocks, validate

_STAGE_COPY = r"""
// One element as an asynchronous copy of its own size (4, 8 or 16 bytes).
template <typename T>
__device__ __forceinline__ void tsmm_cp_async_element(T* smem, const T* gmem) {
  if constexpr (sizeof(T) == 16) tsmm_cp_async_16(smem, gmem);
  else if constexpr (sizeof(T) == 8) tsmm_cp_async_8(smem, gmem);
  else tsmm_cp_async_4(smem, gmem);
}

// How staged rows move (Config.stage_copy): 16-byte copies where alignment allows,
// or one copy per element (fewer instructions around each copy, which pays where
// the arithmetic, not memory, binds).
enum TsmmStageCopy { kTsmmVector, kTsmmElement };

// Stage `count` consecutive elements from `src` into shared memory. The
// destination mirrors the 16-byte-aligned window around `src` (element i
// lands at dst[shift + i]), so whatever the parity of M every whole vector
// moves as one 16-byte copy and only the ragged ends go element by element
// (with kTsmmElement, every element on its own).
template <typename T, int kThreads, int kCopy>
__device__ __forceinline__ void tsmm_stage_copy(T* dst, const T* src, int shift, int count) {
  if constexpr (kCopy == kTsmmElement) {
    for (int e = threadIdx.x; e < count; e += kThreads) tsmm_cp_async_element(dst + shift + e, src + e);
    return;
  }
  constexpr int kVec = 16 / sizeof(T);
  const T* window = src - shift;
  const int vectors = (shift + count + kVec - 1) / kVec;
  for (int v = threadIdx.x; v < vectors; v += kThreads) {
    const int first = v * kVec - shift;
    if (first >= 0 && first + kVec <= count) {
      tsmm_cp_async_16(dst + v * kVec, window + v * kVec);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        if (first + e >= 0 && first + e < count) {
          tsmm_cp_async_element(dst + v * kVec + e, window + v * kVec + e);
        }
      }
    }
  }
}

// Two neighbouring doubles as one 16-byte access where `vector` says they are aligned.
__device__ __forceinline__ void tsmm_store_pair(double* p, bool vector, double v0, double v1) {
  if (vector) {
    *reinterpret_cast<double2*>(p) = make_double2(v0, v1);
  } else {
    p[0] = v0;
    p[1] = v1;
  }
}
__device__ __forceinline__ double2 tsmm_load_pair(const double* p, bool vector) {
  return vector ? *reinterpret_cast<const double2*>(p) : make_double2(p[0], p[1]);
}
// The same for float32 on the FP64 tensor cores: double results, 8-byte accesses.
__device__ __forceinline__ void tsmm_store_pair(float* p, bool vector, double v0, double v1) {
  if (vector) {
    *reinterpret_cast<float2*>(p) = make_float2(static_cast<float>(v0), static_cast<float>(v1));
  } else {
    p[0] = static_cast<float>(v0);
    p[1] = static_cast<float>(v1);
  }
}
__device__ __forceinline__ double2 tsmm_load_pair(const float* p, bool vector) {
  const float2 v = vector ? *reinterpret_cast<const float2*>(p) : make_float2(p[0], p[1]);
  return make_double2(v.x, v.y);
}

// Elements a pointer lies past the previous 16-byte boundary.
template <typename T>
__device__ __forceinline__ int tsmm_misalignment(const T* p) {
  return static_cast<int>((reinterpret_cast<unsigned long long>(p) % 16) / sizeof(T));
}

// The other direction, for ab's staged output: `count` elements gathered at
// staged[shift + i] (dst's 16-byte window mirrored, as above) leave for dst[i]
// as whole 16-byte vectors, the ragged ends element by element.
template <typename T>
struct alignas(16) TsmmVector {
  T e[16 / sizeof(T)];
};
// 16-byte global accesses in PTX, so that they stay single instructions even after
// the compiler has split a vector's elements into registers.
template <typename T>
__device__ __forceinline__ TsmmVector<T> tsmm_load_global_vector(const T* p) {
  unsigned long long bits[2];
  asm volatile("ld.global.v2.b64 {%0, %1}, [%2];" : "=l"(bits[0]), "=l"(bits[1]) : "l"(__cvta_generic_to_global(p)));
  TsmmVector<T> v;
  memcpy(&v, bits, 16);
  return v;
}
template <typename T>
__device__ __forceinline__ void tsmm_store_global_vector(T* p, const TsmmVector<T>& v) {
  unsigned long long bits[2];
  memcpy(bits, &v, 16);
  asm volatile("st.global.v2.b64 [%0], {%1, %2};" :: "l"(__cvta_generic_to_global(p)), "l"(bits[0]), "l"(bits[1])
               : "memory");
}

template <int kThreads, typename T>
__device__ __forceinline__ void tsmm_copy_out(T* dst, const T* staged, int shift, int count) {
  constexpr int kVec = 16 / sizeof(T);
  using Vector = TsmmVector<T>;
  T* window = dst - shift;
  const int vectors = (shift + count + kVec - 1) / kVec;
#pragma unroll 4
  for (int v = threadIdx.x; v < vectors; v += kThreads) {
    const int first = v * kVec - shift;
    if (first >= 0 && first + kVec <= count) {
      tsmm_store_global_vector(window + v * kVec, *reinterpret_cast<const Vector*>(staged + v * kVec));
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const int i = v * kVec + e;
        if (first + e >= 0 && first + e < count) window[i] = staged[i];
      }
    }
  }
}

// Stage `rows` rows of kCols elements at a row stride of kStride elements
// (padding that spreads a column over the banks). Where rows are whole 16-byte
// vectors in both layouts and the source is aligned, they move as 16-byte
// copies (half or a quarter of the copy instructions) unless kCopy asks for
// elements; rows of floats in pairs as 8-byte copies (float32 on the tensor
// cores, whose padded strides are even); else element by element.
template <typename T, int kThreads, int kCols, int kStride, int kCopy>
__device__ __forceinline__ void tsmm_stage_copy_rows(T* dst, const T* src, int rows) {
  constexpr int kVec = 16 / sizeof(T);
  if constexpr (kCopy != kTsmmElement && kCols % kVec == 0 && kStride % kVec == 0) {
    if (tsmm_misalignment(src) == 0) {
      constexpr int kRowVectors = kCols / kVec;
      for (int v = threadIdx.x; v < rows * kRowVectors; v += kThreads) {
        const int row = v / kRowVectors;
        const int col = (v - row * kRowVectors) * kVec;
        tsmm_cp_async_16(dst + row * kStride + col, src + row * kCols + col);
      }
      return;
    }
  }
  if constexpr (kCopy != kTsmmElement && sizeof(T) == 4 && kCols % 2 == 0 && kStride % 2 == 0) {
    if (reinterpret_cast<unsigned long long>(src) % 8 == 0) {
      constexpr int kRowPairs = kCols / 2;
      for (int v = threadIdx.x; v < rows * kRowPairs; v += kThreads) {
        const int row = v / kRowPairs;
        const int col = (v - row * kRowPairs) * 2;
        tsmm_cp_async_8(dst + row * kStride + col, src + row * kCols + col);
      }
      return;
    }
  }
  for (int e = threadIdx.x; e < rows * kCols; e += kThreads) {
    const int row = e / kCols;
    tsmm_cp_async_element(dst + row * kStride + (e - row * kCols), src + e);
  }
}

// D += A B on the FP64 tensor cores, one m8n8k4 step (fragments as in the PTX ISA).
__device__ __forceinline__ void tsmm_dmma(double& d0, double& d1, double a, double b) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
               : "+d"(d0), "+d"(d1) : "d"(a), "d"(b));
}

// Two 8x8 blocks stacked along M that share B, as one m16n8k4 step on Hopper (A's
// rows 0-7 in a0, 8-15 in a1; D's in d0,d1 and d2,d3): the tensor cores do twice
// the work per instruction, where m8n8k4 issues half-empty.
__device__ __forceinline__ void tsmm_dmma16(double& d0, double& d1, double& d2, double& d3,
                                            double a0, double a1, double b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+d"(d0), "+d"(d1), "+d"(d2), "+d"(d3) : "d"(a0), "d"(a1), "d"(b));
#else
  tsmm_dmma(d0, d1, a0, b);
  tsmm_dmma(d2, d3, a1, b);
#endif
}

// A complex128 element in shared memory by two 8-byte loads, for Gauss's m16n8k4 A
// operands, which pair the real parts (and the imaginary parts) of two blocks'
// elements: a 16-byte load puts an element's parts side by side, to be moved
// apart into the pairs, four moves an element. Volatile: ptxas merges plain ones
// back into one 16-byte load.
__device__ __forceinline__ double2 tsmm_load_parts(const double2* p) {
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(p));
  double re, im;
  asm volatile("ld.volatile.shared.f64 %0, [%1];" : "=d"(re) : "r"(at));
  asm volatile("ld.volatile.shared.f64 %0, [%1+8];" : "=d"(im) : "r"(at));
  return make_double2(re, im);
}

// 3xTF32 (Config.tf32x3): a float as a TF32 part, rounded to nearest, and the exact
// remainder, which the tensor cores truncate to TF32 as they read it; hi * hi +
// hi * lo + lo * hi then carries the product to within 2^-20 of it. The rounding
// runs on the integer pipe (cvt.rna.tf32 runs on the conversion pipe, a quarter
// of its rate). An infinite input leaves a NaN remainder: its products are NaN.
struct tsmm_tf32_pair {
  unsigned hi, lo;
};
__device__ __forceinline__ tsmm_tf32_pair tsmm_split_tf32(float x) {
  const unsigned hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  return {hi, __float_as_uint(x - __uint_as_float(hi))};
}

// D += A B on the TF32 tensor cores, one m16n8k8 step with float32 sums (which
// the tensor cores truncate: callers keep such sums short). sm_80 and later, like
// the cp.async staging every kernel uses.
__device__ __forceinline__ void tsmm_mma_tf32(float& d0, float& d1, float& d2, float& d3, unsigned a0,
                                              unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Hopper's warpgroup MMA (wgmma, sm_90a only; Config.wgmma): the four warps of a
// warpgroup issue one asynchronous product together. `fence` orders their earlier
// register writes before it, `commit_and_wait` returns once its results are in the
// registers. B comes from shared memory through a descriptor: without swizzle, its
// start and the byte offsets between core matrices (8 rows x 16 bytes, contiguous)
// along K (leading) and along N (stride), each in 16-byte units. Declared in the
// host pass too, which checks the kernels that call them (the prebuilt set's).
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ unsigned long long tsmm_wgmma_desc(const void* matrix, unsigned leading_bytes,
                                                              unsigned stride_bytes) {
  const unsigned long long start = static_cast<unsigned>(__cvta_generic_to_shared(matrix)) & 0x3ffffu;
  return start >> 4 | static_cast<unsigned long long>(leading_bytes >> 4) << 16
         | static_cast<unsigned long long>(stride_bytes >> 4) << 32;
}
__device__ __forceinline__ void tsmm_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void tsmm_wgmma_commit_and_wait() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
#endif

// Hopper's bulk copies (TMA, cp.async.bulk) and transaction barriers (mbarrier):
// one thread moves a whole span, and the barrier's phase completes once its
// arrivals are in and the bytes it was told to expect have landed. Declared in
// the host pass too, which checks the kernels that call them (the prebuilt set's).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned tsmm_shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void tsmm_barrier_init(unsigned long long* barrier, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(tsmm_shared_address(barrier)), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void tsmm_barrier_arrive(unsigned long long* barrier) {
  asm volatile("{ .reg .b64 state; mbarrier.arrive.shared::cta.b64 state, [%0]; }"
               :: "r"(tsmm_shared_address(barrier)) : "memory");
}
__device__ __forceinline__ void tsmm_barrier_wait(unsigned long long* barrier, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(tsmm_shared_address(barrier)), "r"(parity) : "memory");
  } while (!done);
}

// This thread's shared-memory accesses are ordered before later bulk (async-proxy) ones.
__device__ __forceinline__ void tsmm_fence_shared_for_bulk() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// A span of `count` elements from src to dst, equally misaligned modulo 16 bytes,
// moves as a middle of whole 16-byte vectors (one bulk copy) between two ragged
// ends: this copies the ends with plain loads and stores and returns (head,
// middle), the elements before the first 16-byte boundary of `global` (dst or
// src, whichever lies in global memory) and the elements of the middle.
template <typename T>
__device__ __forceinline__ int2 tsmm_bulk_ragged_ends(T* dst, const T* src, int count, const T* global) {
  const int head = min(count, static_cast<int>((16 - reinterpret_cast<unsigned long long>(global) % 16) % 16 / sizeof(T)));
  const int middle = (count - head) * static_cast<int>(sizeof(T)) / 16 * 16 / static_cast<int>(sizeof(T));
  for (int e = 0; e < head; ++e) dst[e] = src[e];
  for (int e = head + middle; e < count; ++e) dst[e] = src[e];
  return make_int2(head, middle);
}

// Stage `count` elements from src to dst (dst and src equally misaligned modulo 16
// bytes): the aligned middle as one bulk copy whose bytes `barrier` expects, the
// ragged ends (at most one vector's worth each) by plain loads and stores, which
// the caller's arrival on `barrier` publishes.
template <typename T>
__device__ __forceinline__ void tsmm_bulk_stage(T* dst, const T* src, int count, unsigned long long* barrier) {
  const int2 span = tsmm_bulk_ragged_ends(dst, src, count, src);
  const int head = span.x, middle = span.y;
  // Order these generic-proxy stores before any later bulk (async-proxy) write to the slot.
  tsmm_fence_shared_for_bulk();
  if (middle > 0) {
    const unsigned bytes = middle * sizeof(T), bar = tsmm_shared_address(barrier);
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(tsmm_shared_address(dst + head)), "l"(src + head), "r"(bytes), "r"(bar) : "memory");
  }
}

// The other direction, for ab's staged output: `count` elements from shared memory
// (src equally misaligned as dst modulo 16 bytes) to dst, the aligned middle as one
// bulk store committed as its own group, the ragged ends by plain stores. The
// caller's threads have written src and fenced it for the async proxy
// (tsmm_fence_shared_for_bulk) before a barrier that this thread passed.
template <typename T>
__device__ __forceinline__ void tsmm_bulk_store(T* dst, const T* src, int count) {
  const int2 span = tsmm_bulk_ragged_ends(dst, src, count, dst);
  const int head = span.x, middle = span.y;
  if (middle > 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(dst + head), "r"(tsmm_shared_address(src + head)), "r"(middle * static_cast<unsigned>(sizeof(T)))
                 : "memory");
  }
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Wait until this thread's bulk stores have read their source (kDone: also written
// their destination), so the source may be overwritten (or the block may exit).
template <bool kDone>
__device__ __forceinline__ void tsmm_bulk_store_wait() {
  if constexpr (kDone) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  else asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// A barrier among the first `threads` threads (the consumer warps), leaving out the producer.
__device__ __forceinline__ void tsmm_consumer_barrier(int threads) {
  asm volatile("bar.sync 1, %0;" :: "r"(threads) : "memory");
}
#endif

// The fused update's scalar arithmetic, alpha * x and alpha * x + beta * y, for
// real and complex (.x real, .y imaginary) elements.
__device__ __forceinline__ float tsmm_scale(const double* s, float x) { return static_cast<float>(s[0]) * x; }
__device__ __forceinline__ double tsmm_scale(const double* s, double x) { return s[0] * x; }
__device__ __forceinline__ float2 tsmm_scale(const double* s, float2 x) {
  const float re = static_cast<float>(s[0]), im = static_cast<float>(s[1]);
  return make_float2(re * x.x - im * x.y, re * x.y + im * x.x);
}
__device__ __forceinline__ double2 tsmm_scale(const double* s, double2 x) {
  return make_double2(s[0] * x.x - s[1] * x.y, s[0] * x.y + s[1] * x.x);
}
__device__ __forceinline__ float tsmm_add(float x, float y) { return x + y; }
__device__ __forceinline__ double tsmm_add(double x, double y) { return x + y; }
__device__ __forceinline__ float2 tsmm_add(float2 x, float2 y) { return make_float2(x.x + y.x, x.y + y.y); }
__device__ __forceinline__ double2 tsmm_add(double2 x, double2 y) { return make_double2(x.x + y.x, x.y + y.y); }

"""


class _Arith:
    """Code snippets for the element type: real scalars, or complex as float2/double2
    (.x real, .y imaginary) with the complex product written out in real FMAs."""

    def __init__(self, problem):  # a Problem or an MtsmProblem
        self.real = problem.real_type
        self.complex = problem.components == 2
        self.elem = f"{self.real}2" if self.complex else self.real
        self.conj = problem.conj

    def zero(self) -> str:
        return f"make_{self.elem}(0, 0)" if self.complex else "0"

    def add(self, x: str, y: str) -> str:
        if self.complex:
            return f"make_{self.elem}({x}.x + {y}.x, {x}.y + {y}.y)"
        return f"{x} + {y}"

    def mirrored(self, x: str) -> str:
        """The entry of op(A)ᵀ A mirrored across the diagonal from x: conj(x) for Aᴴ A, else x."""
        return f"make_{self.elem}({x}.x, -{x}.y)" if self.conj else x

    def fma(self, acc: str, a: str, b: str) -> list[str]:
        """acc += op(a) * b, op = conj when the problem says so."""
        if not self.complex:
            return [f"{acc} = fma({a}, {b}, {acc});"]
        if self.conj:  # conj(a) * b: the imaginary part of a changes sign
            return [
                f"{acc}.x = fma({a}.x, {b}.x, {acc}.x);",
                f"{acc}.x = fma({a}.y, {b}.y, {acc}.x);",
                f"{acc}.y = fma({a}.x, {b}.y, {acc}.y);",
                f"{acc}.y = fma(-{a}.y, {b}.x, {acc}.y);",
            ]
        return [
            f"{acc}.x = fma({a}.x, {b}.x, {acc}.x);",
            f"{acc}.x = fma(-{a}.y, {b}.y, {acc}.x);",
            f"{acc}.y = fma({a}.x, {b}.y, {acc}.y);",
            f"{acc}.y = fma({a}.y, {b}.x, {acc}.y);",
        ]


def gauss_combination(tm: int, tn: int, sign: str, declaration: str) -> list[str]:
    """Gauss's combination of a lane's three sums of each 8x8 block (Config.gauss) into
    its complex entries acc: rr ∓ ii + i (mix - rr ∓ ii), ``sign`` "-" (Aᵀ B, A C) or
    "+" (Aᴴ B, whose mix takes Re a - Im a)."""
    return [f"{declaration} acc_{i}_{j}_{h} = make_double2(rr_{i}_{j}_{h} {sign} ii_{i}_{j}_{h}, "
            f"mix_{i}_{j}_{h} - rr_{i}_{j}_{h} {sign} ii_{i}_{j}_{h});"
            for i in range(tm) for j in range(tn) for h in range(2)]


def in_pair(i: int, tm: int) -> bool:
    """Whether block i of a tm-block side is half of an m16n8k4 A operand (dmma_products
    pairs blocks i and i+1; a lone last block runs alone)."""
    return i < tm - tm % 2


def dmma_products(tm: int, tn: int, acc, a, b, lone_transposed=False, spare="spare", live=None) -> list[str]:
    """The DMMA steps of a tm x tn tile of 8x8 blocks (dmma_step_blocks); ``acc(i, j)``
    names block (i, j)'s accumulator pair (suffixes _0, _1), ``a(i)`` and ``b(j)`` its
    fragments. Blocks i and i+1 share B, so each such pair is one m16n8k4. A lone
    last block of M is one m8n8k4 per block, or with ``lone_transposed``
    (Config.lone_transposed) computed transposed: B's blocks j and j+1 as the
    m16n8k4's 16 rows against its fragment as the 8 columns, a zero partner
    (into the pair ``spare``) at an odd last j; its sums then hold [2*(lane%4) + h][lane/4]
    of each block. ``live(blocks)``, where given, is the condition under which a
    step runs (None: always)."""
    lines = []
    for blocks in dmma_step_blocks(tm, tn, lone_transposed):
        i, j = blocks[0]
        if in_pair(i, tm):
            step = (f"tsmm_dmma16({acc(i, j)}_0, {acc(i, j)}_1, {acc(i + 1, j)}_0, {acc(i + 1, j)}_1, "
                    f"{a(i)}, {a(i + 1)}, {b(j)});")
        elif not lone_transposed:
            step = f"tsmm_dmma({acc(i, j)}_0, {acc(i, j)}_1, {a(i)}, {b(j)});"
        else:
            low, b_low = ((f"{acc(i, j + 1)}_0", f"{acc(i, j + 1)}_1"), b(j + 1)) if len(blocks) == 2 else \
                ((f"{spare}_0", f"{spare}_1"), "0.0")
            step = f"tsmm_dmma16({acc(i, j)}_0, {acc(i, j)}_1, {low[0]}, {low[1]}, {b(j)}, {b_low}, {a(i)});"
        condition = live(blocks) if live else None
        lines.append(f"if ({condition}) {step}" if condition else step)
    return lines


def _idle_block_skips(spec: KernelSpec):
    """(declarations, live) for dmma_products where the spec skips idle blocks
    (KernelSpec.skips_idle_blocks): a flag per block of the warp tile that is idle
    in some tile (KernelSpec.block_idle), declared where a step takes it, and
    ``live(blocks)``, the condition of a step (None where one of its blocks is
    never idle); without skips, ([], None)."""
    if not spec.skips_idle_blocks:
        return [], None
    p, c = spec.problem, spec.config
    places = spec.triangle_places()
    flags = {}
    for i in range(c.tile_m):
        for j in range(c.tile_n):
            if not any(spec.block_idle(place, i, j) for place in places):
                continue
            parts = [f"warp_{axis} * {tile} + {index} < {spec.mma_blocks(width)}"
                     for axis, tile, index, width in (("m", c.tile_m, i, p.m), ("n", c.tile_n, j, p.n))
                     if any(place[axis == "n"] * tile + index >= spec.mma_blocks(width) for place in places)]
            flags[i, j] = " && ".join(parts + (["!diagonal_tile"] if i > j else []))
    used = {block for blocks in dmma_step_blocks(c.tile_m, c.tile_n, c.lone_transposed)
            if all(block in flags for block in blocks) for block in blocks}
    declarations = [
        "// Idle blocks (Config.triangle): a block past the width, or below a diagonal tile's",
        "// diagonal, is never stored, so the warp skips each tensor step whose blocks all are",
        "// idle (a branch uniform over the warp): the tensor work of the triangle alone.",
        *[f"const bool live_{i}_{j} = {condition};" for (i, j), condition in flags.items() if (i, j) in used],
    ] if used else []

    def live(blocks) -> str | None:
        if not all(block in flags for block in blocks):
            return None
        return " || ".join(f"live_{i}_{j}" for i, j in blocks)
    return declarations, live


def tf32_products(tm: int, tn: int, acc, a, b, terms=("lo_hi", "hi_lo", "hi_hi"), lone_transposed=False) -> list[str]:
    """The 3xTF32 steps of a tm x tn tile of 8x8 blocks (Config.tf32x3): blocks i
    and i+1 stacked along M share B, one m16n8k8 each; ``a(i, h)`` and ``b(j, h)``
    name the split fragments of the step's two k halves, ``acc(i, j)`` block
    (i, j)'s pair of sums. A lone last block of M pads its partner's rows with
    zeros into ``spare``; with ``lone_transposed`` it computes its blocks transposed
    instead, B's blocks j and j+1 as the 16 rows and its own fragments as the 8
    columns (the same registers: an A fragment's rows are a B fragment's columns),
    in ceil(tn / 2) steps, not tn, its sums then holding [2*(lane%4) + h][lane/4]
    of each block. The small terms go first, so the sum carries them before it
    grows."""
    lines = []
    for term in terms:
        x, y = term.split("_")
        for i in range(0, tm - tm % 2, 2):
            for j in range(tn):
                lines.append(
                    f"tsmm_mma_tf32({acc(i, j)}_0, {acc(i, j)}_1, {acc(i + 1, j)}_0, {acc(i + 1, j)}_1, "
                    f"{a(i, 0)}.{x}, {a(i + 1, 0)}.{x}, {a(i, 1)}.{x}, {a(i + 1, 1)}.{x}, {b(j, 0)}.{y}, {b(j, 1)}.{y});")
        if tm % 2 and not lone_transposed:
            i = tm - 1
            lines += [f"tsmm_mma_tf32({acc(i, j)}_0, {acc(i, j)}_1, spare_0, spare_1, {a(i, 0)}.{x}, 0u, "
                      f"{a(i, 1)}.{x}, 0u, {b(j, 0)}.{y}, {b(j, 1)}.{y});" for j in range(tn)]
        elif tm % 2:
            i = tm - 1
            for j in range(0, tn, 2):
                low = (f"{acc(i, j + 1)}_0", f"{acc(i, j + 1)}_1") if j + 1 < tn else ("spare_0", "spare_1")
                b_low = [f"{b(j + 1, h)}.{y}" if j + 1 < tn else "0u" for h in (0, 1)]
                lines.append(
                    f"tsmm_mma_tf32({acc(i, j)}_0, {acc(i, j)}_1, {low[0]}, {low[1]}, {b(j, 0)}.{y}, {b_low[0]}, "
                    f"{b(j, 1)}.{y}, {b_low[1]}, {a(i, 0)}.{x}, {a(i, 1)}.{x});")
    return lines


def tf32_partial_sums(tm: int, tn: int, lone_transposed=False) -> list[str]:
    """3xTF32's partial sums of a tm x tn tile of 8x8 blocks, beside its totals
    ``acc_i_j_h``: ``part_i_j_h`` (the tensor cores' float32 sums, which they
    truncate, so callers keep them short), the zero partner that tf32_products
    (with the same ``lone_transposed``) leaves a lone block, and ``flush()``, which
    adds the parts to the totals (rounding to nearest) and starts them again from
    zero."""
    blocks = [(i, j, h) for i in range(tm) for j in range(tn) for h in range(2)]
    spare = tm % 2 and (tn % 2 or not lone_transposed)
    return [
        f"float {', '.join(f'part_{i}_{j}_{h} = 0' for i, j, h in blocks)};",
        *(["float spare_0 = 0, spare_1 = 0;  // a lone block's zero partner"] if spare else []),
        "auto flush = [&]() {",
        *[f"  acc_{i}_{j}_{h} += part_{i}_{j}_{h};" for i, j, h in blocks],
        f"  {' = '.join(f'part_{i}_{j}_{h}' for i, j, h in blocks)} = 0;",
        "};",
    ]


def _indent(lines: list[str], depth: int) -> str:
    pad = "  " * depth
    return "\n".join(pad + line if line else "" for line in lines)


def _tile_indices(name: str, owner: str, tile: int, tiles: int, extent: int, mapping: str,
                  offset: str | None = None, total: int | None = None) -> list[str]:
    """Declare the `tile` indices a thread owns along one axis of length `extent`.

    Interleaved (transposed) mapping: index owner + i*tiles, so neighbouring
    threads touch neighbouring shared-memory words (no bank conflicts).
    Blocked: owner*tile + i. Indices past the end are clamped for reading and
    masked when storing; that guard appears only when tiles*tile > extent, or
    when the axis is one panel (starting at run-time `offset`) of `total`."""
    lines = []
    if offset is not None:
        lines.append(f"const int {name}_last = min({offset} + {extent}, {total}) - 1;  // clamp inside the panel")
    for i in range(tile):
        local = f"{owner} + {i * tiles}" if mapping == "interleaved" else f"{owner} * {tile} + {i}"
        if offset is not None:
            inside = [f"{offset} + {local} < {total}"] + ([f"{local} < {extent}"] if tiles * tile > extent else [])
            lines.append(f"const int {name}{i} = min({offset} + {local}, {name}_last);")
            lines.append(f"const bool {name}{i}_valid = {' && '.join(inside)};")
        elif tiles * tile > extent:
            lines.append(f"const int {name}{i} = min({local}, {extent - 1});")
            lines.append(f"const bool {name}{i}_valid = {local} < {extent};")
        else:
            lines.append(f"const int {name}{i} = {local};")
    return lines


def _tile_place(spec: KernelSpec, index: str, name_m: str, name_n: str) -> list[str]:
    """Declare the place (name_m, name_n) on the grid of tiles (or warps) of tile `index`."""
    if not spec.config.triangle:
        return [f"const int {name_m} = {index} % {spec.tiles_m};",
                f"const int {name_n} = {index} / {spec.tiles_m};"]
    return [
        "// Triangle (Config.triangle): the result is Hermitian, so only the tiles on and above",
        "// the diagonal run, column by column: column c holds rows 0..c, from tile c (c + 1) / 2",
        "// on (the square root is exact at those starts, 8 t + 1 = (2 c + 1)^2).",
        f"const int {name_n} = static_cast<int>((sqrtf(8.0f * {index} + 1.0f) - 1.0f) / 2.0f);",
        f"const int {name_m} = {index} - {name_n} * ({name_n} + 1) / 2;",
        f"const bool diagonal_tile = {name_m} == {name_n};  // holds both halves of its entries",
    ]


def _valid(name: str, i: int, tiles: int, tile: int, extent: int, paneled: bool = False) -> str | None:
    return f"{name}{i}_valid" if paneled or tiles * tile > extent else None


_STAGE_COPY_KINDS = {"vector": "kTsmmVector", "element": "kTsmmElement"}


def _staging(spec: KernelSpec, elem: str, operand: str, width: int) -> tuple[str, str]:
    """(copy statement for the issue step, offset of row 0 in the staged slot) for
    an operand whose rows have `width` elements."""
    src = f"{operand} + row0 * {width}"
    copy_kind = _STAGE_COPY_KINDS[spec.config.stage_copy]
    if spec.is_padded(width):
        copy = (f"tsmm_stage_copy_rows<{elem}, {spec.threads}, {width}, {spec.smem_stride(width)}, {copy_kind}>"
                f"(slot_{operand}(slot), {src}, rows);")
        return copy, "0"
    copy = (f"tsmm_stage_copy<{elem}, {spec.threads}, {copy_kind}>"
            f"(slot_{operand}(slot), {src}, {operand}_shift, rows * {width});")
    return copy, f"{operand}_shift"


_SHARED_MEMORY = "extern __shared__ __align__(16) unsigned char tsmm_smem[];"


def _work_split(spec: KernelSpec, arith: _Arith, b_name: str) -> list[str]:
    """The block's batch item, its operands and its share of the chunks of K."""
    e = arith.elem
    lines = [
        "// Work split: blockIdx.x = batch item * grid_k + the block's first chunk of K.",
        "const long long item = blockIdx.x / args.grid_k;",
        "const long long first_chunk = blockIdx.x % args.grid_k;",
        f"const {e}* __restrict__ a = static_cast<const {e}*>(args.a) + tsmm_batch_offset(args, item, args.a_batch_stride);",
        *([] if spec.problem.gram else [  # a Gram matrix reads a alone
            f"const {e}* __restrict__ {b_name} = static_cast<const {e}*>(args.b) + tsmm_batch_offset(args, item, args.b_batch_stride);"]),
        f"const long long num_chunks = (args.k + {spec.rows_per_chunk} - 1) / {spec.rows_per_chunk};",
    ]
    if not spec.chunk_slots:  # a fixed order (KernelSpec.chunk_slots)
        return lines + [
            "const long long my_chunks = first_chunk < num_chunks ? (num_chunks - first_chunk + args.grid_k - 1) / args.grid_k : 0;",
            "const int tid = threadIdx.x;",
        ]
    return lines + [
        "const int tid = threadIdx.x;",
        _SHARED_MEMORY,
        *([
            "// Chunks taken (ab with bulk copies): after its first, a block takes each chunk from the",
            "// item's counter as it gets to it, so the chunks in flight on the whole GPU stay one",
            "// narrow window of addresses. Blocks striding through K in a fixed order drift apart:",
            "// on an H200 such copies ran 7 % under those taking chunks (scripts/probe_bandwidth.py);",
            "// on an H100 these kernels ran 3 % (float64) and 7 % (float32) faster taking them.",
        ] if spec.bulk else [
            "// Chunks taken (Config.ring_takes_chunks): after its first, a block",
            "// takes each chunk from the item's counter as it gets to it, as the kernels with bulk",
            "// copies do, so the chunks in flight on the whole GPU stay one narrow window of addresses.",
        ]),
        "// chunk_ring holds the chunks of the steps taken and not yet done, step % its length.",
        "unsigned* const chunk_counter = args.chunk_counters + item;",
        "auto take_chunk = [&]() { return args.grid_k + static_cast<long long>(atomicAdd(chunk_counter, 1u)); };",
        f"long long* const chunk_ring = reinterpret_cast<long long*>(tsmm_smem + {spec.chunk_offset});",
    ]


def _block_prologue(spec: KernelSpec, arith: _Arith, b_name: str) -> list[str]:
    p = spec.problem
    return _work_split(spec, arith, b_name) + [
        *([] if spec.chunk_slots else [_SHARED_MEMORY]),  # else declared with the ring of chunks taken
        "",
        "// Every stage starts a whole number of 16-byte vectors into the matrix, so one",
        "// misalignment per operand, taken from the batch item's base, serves all stages.",
        *([] if spec.is_padded(p.m) and not spec.bulk else ["const int a_shift = tsmm_misalignment(a);"]),
        *(["const int b_shift = tsmm_misalignment(b);"]
          if p.op == "atb" and not p.gram and (spec.bulk or not spec.is_padded(p.n)) else []),
    ]


def _step_chunk(spec: KernelSpec) -> list[str]:
    """Where step `step` of a block's walk over K lands: its chunk (atb's fixed
    order, ab's ring of chunks taken), first row, row count (short in the last
    chunk) and ring slot."""
    r = spec.rows_per_chunk
    chunk = f"chunk_ring[step % {spec.chunk_slots}]" if spec.chunk_slots else "first_chunk + step * args.grid_k"
    return [
        f"const long long chunk = {chunk};",
        f"const long long row0 = chunk * {r};",
        f"const int rows = static_cast<int>(min(static_cast<long long>({r}), args.k - row0));",
        f"const int slot = static_cast<int>(step % {spec.config.stages});",
    ]


def _pipeline(spec: KernelSpec, issue: list[str], consume: list[str]) -> list[str]:
    """The multi-stage cp.async ring shared by both ops (leap-frogging).

    `issue` copies chunk `chunk` (rows row0 .. row0+rows) into ring slot `slot`;
    `consume` computes on slot `slot` (row0 and rows given). The loads of stages-1 later chunks stay
    in flight while one chunk is consumed, hiding DRAM latency. With
    Config.ring_takes_chunks (ab) thread 0 takes each chunk (_work_split) a step
    before its copies are issued, which that step's barrier publishes, and the walk
    ends at the first chunk past K."""
    s = spec.config.stages
    chunk, *place = _step_chunk(spec)
    taken = spec.chunk_slots > 0
    if taken:
        start = ["if (tid == 0) {",
                 "  chunk_ring[0] = first_chunk;",
                 f"  for (int step = 1; step < {s}; ++step) chunk_ring[step] = take_chunk();",
                 "}",
                 "__syncthreads();"]
        issue_guard, issue_body = [f"  {chunk}", "  if (chunk < num_chunks) {"], place + issue
        walk = "for (long long step = 0;; ++step) {"
        barrier_tells = ["  // the barrier also tells us every thread is done with the slot refilled next,",
                         "  // and publishes the chunk thread 0 took last step."]
        step_body = [
            f"  {chunk}",
            "  if (chunk >= num_chunks) break;",
            f"  issue(step + {s - 1});",
            "  long long taken = 0;",
            "  if (tid == 0) taken = take_chunk();  // stored after this step's products, which hide its latency",
            *["  " + line for line in place + consume],
            f"  if (tid == 0) chunk_ring[(step + {s}) % {spec.chunk_slots}] = taken;  // the entry of step - 1, done",
        ]
    else:
        start = []
        issue_guard, issue_body = ["  if (step < my_chunks) {"], [chunk, *place] + issue
        walk = "for (long long step = 0; step < my_chunks; ++step) {"
        barrier_tells = ["  // the barrier also tells us every thread is done with the slot refilled next."]
        step_body = [f"  issue(step + {s - 1});", *["  " + line for line in [chunk, *place] + consume]]
    return [
        *start,
        "auto issue = [&](long long step) {",
        *issue_guard,
        *["    " + line for line in issue_body],
        "  }",
        "  // Commit even an empty group so wait_group counts stay uniform at the tail.",
        "  tsmm_cp_async_commit();",
        "};",
        "",
        f"// Prologue: put the first {s - 1} chunks in flight.",
        f"for (int step = 0; step < {s - 1}; ++step) issue(step);",
        "",
        walk,
        f"  // Chunk `step` has landed once at most {s - 2} newer groups are pending;",
        *barrier_tells,
        f"  tsmm_cp_async_wait<{s - 2}>();",
        "  __syncthreads();",
        *step_body,
        "}",
        "tsmm_cp_async_wait<0>();",
        "__syncthreads();",
    ]


def _bulk_pipeline(spec: KernelSpec, consume: list[str], finish: list[str] = (), drain: list[str] = ()) -> list[str]:
    """The ring of bulk copies: chunk `step` goes into slot step % stages once the
    consumers have released the slot (barrier `empty`), and the consumer warps
    compute on a slot once its bytes have landed (barrier `full`). With a producer
    warp (Config.stage_copy "bulk") each consumer warp waits only for its data,
    never for the other warps, and issues no copy instructions; inline ("bulk_inline")
    the first consumer warp issues them (KernelSpec.producer_warp). ab's chunks are
    taken (_work_split) by the staging warp, each a step ahead: the entry of step + 1
    is in chunk_ring once step's slot is full, and the walk ends at the first
    chunk past K, whose slot fills with no bytes. `finish` runs in every consumer
    thread after its warp has released the slot, `drain` once after the consumers'
    last chunk."""
    p, s = spec.problem, spec.config.stages
    consumer_warps = spec.consumer_threads // 32
    operands = [("a", p.m), ("b", p.n)] if p.op == "atb" and not p.gram else [("a", p.m)]
    taken = spec.chunk_slots > 0

    def stage(operand: str, width: int, lane: int) -> list[str]:
        spacing, group = spec.row_spacing, spec.group_stride(width)
        if not spec.groups_padded(width):  # the chunk is one contiguous span
            return [f"if (lane == {lane}) tsmm_bulk_stage(slot_{operand}(slot) + {operand}_shift, "
                    f"{operand} + row0 * {width}, rows * {width}, &full[slot]);"]
        return [f"for (int group = lane; group * {spacing} < rows; group += 32) {{  // padded groups: one bulk copy each",
                f"  tsmm_bulk_stage(slot_{operand}(slot) + {operand}_shift + group * {group}, "
                f"{operand} + (row0 + group * {spacing}) * {width}, min({spacing}, rows - group * {spacing}) * {width}, "
                "&full[slot]);",
                "}"]

    stage_y = [  # the chunk's rows of y, one span, on the slot's barrier (only where beta reads them)
        f"if (read_y && lane == 1) tsmm_bulk_stage(slot_y(slot) + y_shift, y + row0 * {p.n}, rows * {p.n}, &full[slot]);"
    ] if spec.stages_y else []
    chunk, row0, rows, slot = _step_chunk(spec)
    y_in_out = [  # Config.y_in_out: the thread that stores out's chunks (_ab_bulk_store) stages y's
        "auto y_into_out = [&](long long step) {  // y's chunk `step` into the buffer its out leaves from",
        f"  {chunk}",
        f"  {row0}",
        f"  {rows}",
        f"  tsmm_bulk_stage(slot_out(step) + out_shift, y + row0 * {p.n}, rows * {p.n}, &y_full[step & 1]);",
        "  tsmm_barrier_arrive(&y_full[step & 1]);",
        "};",
    ] if spec.config.y_in_out else []
    place = [slot, f"const unsigned round = static_cast<unsigned>(step / {s});"]
    barriers = [
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900",
        '#error "Config.stage_copy = bulk needs sm_90 or newer (cp.async.bulk, transaction barriers)"',
        "#endif",
        "// Slot barriers: `full` completes when the slot's chunk has landed (the staging warp's",
        "// arrival plus the bytes of its bulk copies), `empty` when every consumer warp is done.",
        f"unsigned long long* full = reinterpret_cast<unsigned long long*>(tsmm_smem + {spec.barrier_offset});",
        f"unsigned long long* empty = full + {s};",
        *([f"unsigned long long* y_full = empty + {s};  // Config.y_in_out: y's chunk is in buffer b of out"]
          if spec.config.y_in_out else []),
        "if (tid == 0) {",
        f"  for (int i = 0; i < {s}; ++i) {{",
        "    tsmm_barrier_init(&full[i], 1);",
        f"    tsmm_barrier_init(&empty[i], {consumer_warps});",
        "  }",
        *([f"  for (int b = 0; b < {spec.out_buffers}; ++b) tsmm_barrier_init(&y_full[b], 1);"]
          if spec.config.y_in_out else []),
        '  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");',
        *(["  chunk_ring[0] = first_chunk;"] if taken else []),
        "}",
        "__syncthreads();",
    ]
    copies = [*[line for lane, (operand, width) in enumerate(operands) for line in stage(operand, width, lane)],
              *stage_y]
    staging = [  # one warp's copies of chunk `step` into its slot, the slot released first
        chunk,
        row0,
        rows,
        *place,
        f"if (step >= {s}) tsmm_barrier_wait(&empty[slot], (round - 1) & 1);",
        *copies,
    ] if not taken else [
        *place,
        f"if (step >= {s}) tsmm_barrier_wait(&empty[slot], (round - 1) & 1);",
        "__syncwarp();  // lane 0's entry of this step, taken the step before",
        chunk,
        row0,
        rows,
        "if (chunk < num_chunks) {",
        *["  " + line for line in copies],
        "}",
        "// The next step's chunk, taken once this step's copies are on their way, so that the",
        "// atomic's round trip delays only the arrival below (the bytes land later), not them.",
        f"if (lane == 0) chunk_ring[(step + 1) % {spec.chunk_slots}] = take_chunk();  // the entry of step - {s}, done",
    ]
    staging += [
        "__syncwarp();  // every lane's copies are issued and counted before the arrival",
        "if (lane == 0) tsmm_barrier_arrive(&full[slot]);",
    ]
    consumer_step = [
        *([*place, "tsmm_barrier_wait(&full[slot], round & 1);", chunk, "if (chunk >= num_chunks) break;", row0, rows]
          if taken else [chunk, row0, rows, *place, "tsmm_barrier_wait(&full[slot], round & 1);"]),
        *consume,
        "__syncwarp();  // the whole warp has read the slot",
        "if (lane == 0) tsmm_barrier_arrive(&empty[slot]);",
        *finish,
    ]
    walk = "for (long long step = 0;; ++step) {" if taken else "for (long long step = 0; step < my_chunks; ++step) {"
    if not spec.producer_warp:  # atb alone (Config.stage_copy "bulk_inline")
        return [
            *barriers,
            "// Bulk copies issued inline: the first warp stages the first chunks, then at each",
            "// step refills the slot of the step before, once every warp has released it (having",
            "// passed that step itself, it mostly waits for no one). A warp of its own would",
            "// cap every warp's registers (KernelSpec.producer_warp).",
            "auto stage_chunk = [&](long long step) {",
            *["  " + line for line in staging],
            "};",
            f"if (tid < 32) for (long long step = 0; step < my_chunks && step < {s}; ++step) stage_chunk(step);",
            walk,
            f"  if (tid < 32 && step >= 1 && step + {s - 1} < my_chunks) stage_chunk(step + {s - 1});",
            *["  " + line for line in consumer_step],
            "}",
            *drain,
        ]
    return [
        *barriers,
        f"if (tid >= {spec.consumer_threads}) {{",
        f"  // Producer warp: up to {s} chunks ahead of the slowest consumer warp.",
        "  " + walk,
        *["    " + line for line in staging],
        *(["    if (chunk >= num_chunks) break;"] if taken else []),
        "  }",
        "} else {",
        *["  " + line for line in y_in_out],
        *(["  if (tid == 0 && read_y && first_chunk < num_chunks) y_into_out(0);"] if y_in_out else []),
        "  " + walk,
        *["    " + line for line in consumer_step],
        "  }",
        *["  " + line for line in drain],
        "}",
    ]


def _emit_atb(spec: KernelSpec) -> str:
    ar = _Arith(spec.problem)
    body, outputs = (_atb_mma_body if spec.config.mma else _atb_fma_body)(spec, ar)
    body += _atb_block_reduction(spec, ar, outputs)
    return _kernels(spec, [(spec.name, spec.threads, body), (spec.name + "_finalize", None, _atb_finalize(spec, ar))])


def _atb_slots(spec: KernelSpec, e: str) -> list[str]:
    a_elems, _ = spec.stage_elements()
    return [
        f"auto slot_a = [&](int slot) {{ return reinterpret_cast<{e}*>(tsmm_smem + slot * {spec.stage_bytes}); }};",
        *([] if spec.problem.gram else [
            f"auto slot_b = [&](int slot) {{ return reinterpret_cast<{e}*>(tsmm_smem + slot * {spec.stage_bytes} + {a_elems * spec.problem.element_bytes}); }};"]),
    ]


def _atb_consume(spec: KernelSpec, e: str, step_rows: int, flush_every: int = 0) -> tuple[list[str], list[str]]:
    """(issue, consume) for the ring: `row_step(sa, sb, r, rows, guarded)` covers
    `step_rows` rows from r; row groups take turns. Full chunks pass `guarded` false,
    which folds away the guards of rows past `rows` (the compiler cannot prove them
    true); the last, partial chunk passes true. With ``flush_every``, `flush()`
    follows every that many row steps and ends each chunk."""
    p, c = spec.problem, spec.config
    rg = c.row_groups
    if spec.bulk:  # the producer warp stages (_bulk_pipeline), each operand at its shift
        (copy_a, offset_a), (copy_b, offset_b) = ("", "a_shift"), ("", "b_shift")
    else:
        copy_a, offset_a = _staging(spec, e, "a", p.m)
        copy_b, offset_b = _staging(spec, e, "b", p.n)
    staged_b = [f"const {e}* sb = slot_b(slot) + {offset_b};"]
    if p.gram:
        copy_b, staged_b = "", [
            "// A Gram matrix: its one operand's rows, staged once, serve as both A and B (half",
            "// the traffic of two operands, and half the shared memory of a stage).",
            f"const {e}* sb = sa;"]
    full_steps = spec.rows_per_chunk // (rg * step_rows)
    full_step = f"row_step(sa, sb, (row_group + i * {rg}) * {step_rows}, {spec.rows_per_chunk}, false);"
    if flush_every:
        full_loop = [
            f"  for (int i = 0; i < {full_steps}; ++i) {{",
            f"    {full_step}",
            f"    if (i % {flush_every} == {flush_every - 1} || i == {full_steps - 1}) flush();",
            "  }",
        ]
        partial_loop = [
            f"  for (int r = row_group * {step_rows}, i = 0; r < rows; r += {rg * step_rows}, ++i) {{",
            "    row_step(sa, sb, r, rows, true);",
            f"    if (i % {flush_every} == {flush_every - 1}) flush();",
            "  }",
            "  flush();",
        ]
    else:
        full_loop = [f"  for (int i = 0; i < {full_steps}; ++i) {full_step}"]
        partial_loop = [f"  for (int r = row_group * {step_rows}; r < rows; r += {rg * step_rows}) row_step(sa, sb, r, rows, true);"]
    consume = [
        "(void)row0;  // atb reduces over rows; their position does not matter",
        f"const {e}* sa = slot_a(slot) + {offset_a};",
        *staged_b,
        f"if (rows == {spec.rows_per_chunk}) {{",
        f"  // Full chunk: a compile-time trip count of {full_steps}.",
        f"#pragma unroll {c.unroll}",
        *full_loop,
        "} else {",
        *partial_loop,
        "}",
    ]
    return [copy for copy in (copy_a, copy_b) if copy], consume


def _atb_fma_body(spec: KernelSpec, ar: _Arith) -> tuple[list[str], list[tuple[str, str, str, str | None]]]:
    """Register tiles on the FMA units: each thread an outer product per row."""
    p, c = spec.problem, spec.config
    e = ar.elem
    tm, tn = c.tile_m, c.tile_n
    tiles_m, tiles_n = spec.tiles_m, spec.tiles_n
    tiles = spec.tile_count
    pm = spec.panel_m
    paneled = c.m_panels > 1
    rg = c.row_groups
    body = _block_prologue(spec, ar, "b") + [
        "",
        f"// Thread place: register tile ({tm}x{tn}) `tile` of the M x N result, rows `row_group` mod {rg}.",
        f"const int tile = tid % {tiles};",
        f"const int row_group = tid / {tiles};",
        *_tile_place(spec, "tile", "tile_m", "tile_n"),
        *([f"const int m0 = blockIdx.y * {pm};  // this block's panel of the result's rows"] if paneled else []),
        *_tile_indices("col_a", "tile_m", tm, tiles_m, pm, c.mapping,
                       offset="m0" if paneled else None, total=p.m),
        *_tile_indices("col_b", "tile_n", tn, tiles_n, p.n, c.mapping),
        "",
        "// Register tile of partial sums over this thread's rows.",
        *[f"{e} acc_{i}_{j} = {ar.zero()};" for i in range(tm) for j in range(tn)],
        "",
        *_atb_slots(spec, e),
        "",
        "// One row: the outer product of op(A)'s and B's slices, straight from shared memory.",
        f"auto row_step = [&](const {e}* sa, const {e}* sb, int r, int, bool) {{",
        *[f"  const {e} a{i} = sa[r * {spec.smem_stride(p.m)} + col_a{i}];" for i in range(tm)],
        *[f"  const {e} b{j} = sb[r * {spec.smem_stride(p.n)} + col_b{j}];" for j in range(tn)],
        *["  " + line for i in range(tm) for j in range(tn) for line in ar.fma(f"acc_{i}_{j}", f"a{i}", f"b{j}")],
        "};",
        "",
    ]
    issue, consume = _atb_consume(spec, e, 1)
    body += _pipeline(spec, issue, consume)
    outputs = []
    for i in range(tm):
        for j in range(tn):
            guards = [g for g in (_valid("col_a", i, tiles_m, tm, pm, paneled), _valid("col_b", j, tiles_n, tn, p.n)) if g]
            if c.triangle:  # a diagonal tile holds both halves of its entries: the upper one is kept
                guards.append(f"(!diagonal_tile || col_a{i} <= col_b{j})")
            outputs.append((f"acc_{i}_{j}", f"col_a{i}", f"col_b{j}", " && ".join(guards) or None))
    return body, outputs


def _atb_mma_body(spec: KernelSpec, ar: _Arith) -> tuple[list[str], list[tuple[str, str, str, str | None]]]:
    """Tensor cores: each warp owns tile_m x tile_n 8x8 blocks of the result; row
    groups of warps take turns over the rows. DMMA (mma.sync m8n8k4) consumes 4
    rows per k-step: twice the FMA units' rate for float64, for the wide shapes
    that turn compute-bound on them; for float32 (widened to double) the FMA
    units' rate with a fraction of their instructions and shared loads. 3xTF32
    (Config.tf32x3, float32) consumes 8 rows per k-step, two DMMA k-steps' rows
    side by side, with no widening. Gauss (Config.gauss, complex128) takes three
    DMMA per 8x8 block of the complex result where its real view takes four."""
    p, c = spec.problem, spec.config
    e = ar.elem
    tm, tn = c.tile_m, c.tile_n
    warps = spec.tile_count
    s = spec.row_spacing
    tf32 = c.tf32x3
    gauss = c.gauss
    halves = (0, 1) if tf32 else (0,)
    # Gauss: real part rr ∓ ii, imaginary part mix - rr ∓ ii, A's mix re ± im (Aᵀ B, then Aᴴ B).
    gauss_sign, mix_sign = ("+", "-") if p.conj else ("-", "+")
    # Gauss's three real sums (else the one sum of a block), each with the fragment part it
    # multiplies and the zero partner of its transposed lone block.
    sum_parts = (("rr", ".x"), ("ii", ".y"), ("mix", "_mix")) if gauss else (("acc", ""),)
    spares = [f"spare_{name}" for name, _ in sum_parts] if gauss else ["spare"]

    live_flags, live = _idle_block_skips(spec)

    def in_pairs(operand: str, i: int) -> bool:
        """Whether block i of the operand is half of an m16n8k4 A operand: A's pairs,
        or all of B's against a transposed lone block (dmma_products)."""
        if operand == "a":
            return in_pair(i, tm)
        return bool(tm % 2 and c.lone_transposed)

    def k_step(t: int) -> list[str]:
        """k-step t of a row step: in each half h, rows r + 4 s h + t + s * frag_k, one per
        lane quad (row t of groups r / s + 4 h + frag_k)."""
        lines = []
        for h in halves:
            base = f"r + {4 * s * h}" if h else "r"
            row = f"{base} + frag_k" if s == 1 else f"{base} + {t} + {s} * frag_k"

            def at(width: int) -> str:
                stride = spec.smem_stride(width)
                if not spec.groups_padded(width):  # evenly strided rows
                    return f"({row}) * {stride}"
                group = f"r / {s} + {4 * h} + frag_k" if h else f"r / {s} + frag_k"
                return f"({group}) * {spec.group_stride(width)}" + (f" + {t * stride}" if t else "")

            suffix = f"_{h}" if tf32 else ""
            if tf32:
                load = lambda operand, i, width: (  # noqa: E731
                    f"const tsmm_tf32_pair {operand}{i}{suffix} = "
                    f"tsmm_split_tf32(inside{suffix} ? s{operand}[{at(width)} + col_{operand}{i}] : 0.0f);")
            elif gauss:
                load = lambda operand, i, width: (  # noqa: E731
                    f"const double2 {operand}{i} = inside ? "
                    + (f"tsmm_load_parts(s{operand} + {at(width)} + col_{operand}{i})" if in_pairs(operand, i)
                       else f"s{operand}[{at(width)} + col_{operand}{i}]")
                    + " : make_double2(0, 0);")
            else:
                load = lambda operand, i, width: (  # noqa: E731
                    f"const double {operand}{i} = inside ? s{operand}[{at(width)} + col_{operand}{i}] : 0.0;")
            lines += [
                f"const bool inside{suffix} = !guarded || {row} < rows;",
                *[load("a", i, p.m) for i in range(tm)],
                *[load("b", j, p.n) for j in range(tn)],
                *edge_row(at(p.m), at(p.n), f"inside{suffix}", suffix),
            ]
        if tf32:
            return lines + tf32_products(tm, tn, lambda i, j: f"part_{i}_{j}", lambda i, h: f"a{i}_{h}",
                                         lambda j, h: f"b{j}_{h}", lone_transposed=True)
        if gauss:
            lines += [*[f"const double a{i}_mix = a{i}.x {mix_sign} a{i}.y;" for i in range(tm)],
                      *[f"const double b{j}_mix = b{j}.x + b{j}.y;" for j in range(tn)]]
        for (name, part), spare in zip(sum_parts, spares):
            lines += dmma_products(tm, tn, lambda i, j, name=name: f"{name}_{i}_{j}",
                                   lambda i, part=part: f"a{i}{part}", lambda j, part=part: f"b{j}{part}",
                                   lone_transposed=c.lone_transposed, spare=spare, live=live)
        return lines

    # fma_edges: slot `edge_slot` takes rows edge_slot + u * slots of the result against the
    # N edge's columns (m-units) and core columns edge_slot + u * slots against the M
    # edge's rows (n-units); the lanes of a quad take the same entries on their own rows.
    # The triangle's edges come from its diagonal tiles' A fragments instead: a thread's A
    # element of block i is the operand's column (warp_m * tile_m + i) * 8 + lane / 4 at its
    # k-row, so the N edge's entries of those rows take one load per edge column and row
    # (the slots' take one per unit besides).
    acc_type = "float" if tf32 else "double"
    # Gauss's edges stay complex: one complex FMA (four real ones) per entry and row.
    edge_type, edge_zero = ("double2", ar.zero()) if gauss else (acc_type, "0")
    core_m, core_n = 8 * spec.mma_blocks(p.m), 8 * spec.mma_blocks(p.n)
    edge_m, edge_n = spec.edge(p.m), spec.edge(p.n)
    m_units, n_units = spec.edge_units
    slots = spec.edge_slots
    triangle_edges = c.fma_edges and c.triangle
    corner = [(i, q) for q in range(edge_n) for i in range(q + 1)] if triangle_edges else []
    edge_sums = [f"edge_m{u}_{q}" for u in range(m_units) for q in range(edge_n)] + \
        [f"edge_n{u}_{q}" for u in range(n_units) for q in range(edge_m)] + \
        [f"edge_{i}_{q}" for i in range(tm) for q in range(edge_n) if triangle_edges] + \
        [f"corner_{i}_{q}" for i, q in corner]

    def edge_row(a_row: str, b_row: str, inside: str, suffix: str) -> list[str]:
        """One row of a slot's edge entries: A and B elements of its units and of the
        edges, then an FMA per entry; the triangle's on its diagonal tiles, from their
        A fragments."""
        def load(name: str, operand: str, row: str, col: str) -> str:
            return f"const {edge_type} {name}{suffix} = {inside} ? s{operand}[{row} + {col}] : {edge_zero};"
        if triangle_edges:
            return [
                "if (diagonal_tile) {  // the N edge of the tile's own rows (a branch uniform over the warp)",
                *["  " + load(f"eb_edge{q}", "b", b_row, str(core_n + q)) for q in range(edge_n)],
                *["  " + line for i in range(tm) for q in range(edge_n)
                  for line in ar.fma(f"edge_{i}_{q}", f"a{i}", f"eb_edge{q}")],
                "  if (warp_m == 0) {  // and the corner, on and above its diagonal",
                *["    " + line for i, q in corner for line in ar.fma(f"corner_{i}_{q}", f"eb_edge{i}", f"eb_edge{q}")],
                "  }",
                "}",
            ]
        return [
            *[load(f"ea{u}", "a", a_row, f"edge_row{u}") for u in range(m_units)],
            *[load(f"eb_edge{q}", "b", b_row, str(core_n + q)) for q in range(edge_n) if m_units],
            *[load(f"eb{u}", "b", b_row, f"edge_col{u}") for u in range(n_units)],
            *[load(f"ea_edge{q}", "a", a_row, str(core_m + q)) for q in range(edge_m) if n_units],
            *[line for u in range(m_units) for q in range(edge_n)
              for line in ar.fma(f"edge_m{u}_{q}", f"ea{u}{suffix}", f"eb_edge{q}{suffix}")],
            *[line for u in range(n_units) for q in range(edge_m)
              for line in ar.fma(f"edge_n{u}_{q}", f"ea_edge{q}{suffix}", f"eb{u}{suffix}")],
        ]  # empty without fma_edges: no edges, no units

    edge_places = [
        "",
        f"// Edges on the FMA units (fma_edges): the tensor cores take the {core_m}x{core_n} core, so",
        *([f"// {p.m}x{p.n} pads to no extra block; the triangle's diagonal tiles multiply the A fragments",
           f"// they hold by the N edge's {edge_n} columns, the tile at (0, 0) also the corner's upper half,",
           "// each lane on its fragment rows; the stores mirror them onto the M edge."] if triangle_edges else [
            f"// {p.m}x{p.n} pads to no extra block; slot `edge_slot` of {slots} (a lane quad) takes the",
            f"// N edge's {edge_n} columns for rows edge_slot + u * {slots}"
            + (f" and the M edge's {edge_m} rows for core columns edge_slot + u * {slots};" if n_units else ";"),
            "// the quad's lanes each on their fragment rows.",
            "const int edge_slot = warp * 8 + lane / 4;",
            *[f"const int edge_row{u} = min(edge_slot + {u * slots}, {p.m - 1});" for u in range(m_units)],
            *[f"const int edge_col{u} = min(edge_slot + {u * slots}, {core_n - 1});" for u in range(n_units)],
        ]),
        f"{edge_type} {', '.join(f'{name} = {edge_zero}' for name in edge_sums)};",
    ] if spec.config.fma_edges else []
    edge_parts = [".x", ".y"] if gauss else [""]
    edge_quad_sums = [
        "// Edge sums: the four lanes of a quad took different rows of the same entries.",
        *[f"{name}{part} += __shfl_xor_sync(0xffffffffu, {name}{part}, {d});"
          for d in (1, 2) for name in edge_sums for part in edge_parts],
    ] if spec.config.fma_edges else []

    step_rows = spec.mma_k * s
    padded_groups = [str(spec.group_stride(w)) for w in (p.m, p.n) if spec.groups_padded(w)]
    row_step = ["  " + line for line in k_step(0)] if s == 1 else [
        line for t in range(s) for line in [f"  {{  // k-step {t}", *["    " + x for x in k_step(t)], "  }"]]
    # 3xTF32: the tensor cores truncate their float32 sums, so they sum 8 k-steps at
    # most (flush_every row steps) from zero before the totals, which round to nearest.
    flush_every = max(1, 8 // s) if tf32 else 0
    sums = [
        "// The tensor cores truncate their float32 sums: `part` sums at most 8 k-steps",
        f"// ({flush_every} row step{'s' if flush_every > 1 else ''}) from zero, then `flush` adds it to the totals,"
        " which round to nearest.",
        *tf32_partial_sums(tm, tn, lone_transposed=True),
    ] if tf32 else []
    if tf32:
        step_comment = (f"// {step_rows} rows: {s} m16n8k8 k-step(s) per two 8x8 blocks, each taking a DMMA"
                        f" k-step's rows in two halves {4 * s} rows apart")
    elif s > 1:
        per_block = "three DMMA k-steps (Gauss)" if gauss else "DMMA k-steps"
        step_comment = f"// {step_rows} rows: {s} {per_block} per 8x8 block, each taking 4 rows {s} apart"
    else:
        step_comment = "// Four rows: " + ("three DMMA per 8x8 block (Gauss)" if gauss else "one DMMA per 8x8 block")
    if s > 1:
        step_comment += " (bank-conflict-free unpadded rows" + (
            "" if not padded_groups else f", in groups of {s} padded to {' and '.join(padded_groups)} elements") + ")"
    body = _block_prologue(spec, ar, "b") + [
        "",
        f"// Thread place: warp (warp_m, warp_n) owns {tm}x{tn} blocks of 8x8; warps in row",
        f"// group g take the {step_rows}-row steps g, g+{c.row_groups}, ... of each stage.",
        *([f"// Threads from {spec.consumer_threads} on are the producer warp (row group {c.row_groups})."]
          if spec.producer_warp else []),
        "const int lane = tid % 32;",
        f"const int warp = tid / 32 % {warps};",
        f"const int row_group = tid / {32 * warps};",
        *_tile_place(spec, "warp", "warp_m", "warp_n"),
        *(["// PTX m16n8k8 tf32 fragments: A (16x8, row) holds [lane/4 (+8)][lane%4 (+4)], B (8x8,",
           "// col) [lane%4 (+4)][lane/4], D (16x8) [lane/4 (+8)][2*(lane%4) + h]: per 8x8 block, a",
           "// DMMA k-step's fragments in each k half.",
           *([f"// Block row {tm - 1} has no partner: it runs transposed, N's blocks j and j+1 as the",
              "// 16 rows against its 8 columns, which pads no rows (or half a step, at an odd",
              "// last j) where a zero partner would pad half of every step; its sums hold",
              "// [2*(lane%4) + h][lane/4] of each block."] if tm % 2 else [])] if tf32 else
          ["// PTX m8n8k4 f64 fragments: A (8x4, row) holds [lane/4][lane%4], B (4x8, col)",
           "// [lane%4][lane/4], D (8x8) [lane/4][2*(lane%4) + h].",
           *([f"// Block row {tm - 1} has no partner: it runs transposed, N's blocks j and j+1 as an",
              "// m16n8k4's 16 rows against its 8 columns, where an m8n8k4 per block would issue",
              "// half-empty (Hopper runs m8n8k4 at half m16n8k4's rate); its sums hold",
              "// [2*(lane%4) + h][lane/4] of each block."] if c.lone_transposed else [])]),
        *(["// Gauss's 3M: per 8x8 block of the complex result three real sums, rr = Re(a)ᵀ Re(b),",
           f"// ii = Im(a)ᵀ Im(b) and mix = (Re a {mix_sign} Im a)ᵀ (Re b + Im b), combined once",
           "// at the end: three DMMA where the real view takes four. Elements of blocks that",
           "// pair up in an m16n8k4 A operand are read by two 8-byte loads (tsmm_load_parts)."]
          if gauss else []),
        "// Columns past M or N are clamped for reading; their results are never stored.",
        "const int frag_k = lane % 4;",
        *[f"const int col_a{i} = min((warp_m * {tm} + {i}) * 8 + lane / 4, {p.m - 1});" for i in range(tm)],
        *[f"const int col_b{j} = min((warp_n * {tn} + {j}) * 8 + lane / 4, {p.n - 1});" for j in range(tn)],
        "",
        *[f"{acc_type} {name}_{i}_{j}_{h} = 0;" for name, _ in sum_parts
          for i in range(tm) for j in range(tn) for h in range(2)],
        *([f"double {spare}_0 = 0, {spare}_1 = 0;  // the lone block's zero partner" for spare in spares]
          if c.lone_transposed and tn % 2 else []),
        *live_flags,
        *sums,
        *edge_places,
        "",
        *_atb_slots(spec, e),
        "",
        step_comment + "; rows past `rows` (the last chunk) count as zero.",
        *(["// float32 fragments are widened to double (exactly) as they leave shared memory."]
          if e == "float" and not tf32 else []),
        f"auto row_step = [&](const {e}* sa, const {e}* sb, int r, int rows, bool guarded) {{",
        *row_step,
        "};",
        "",
    ]
    issue, consume = _atb_consume(spec, e, step_rows, flush_every)
    if spec.bulk:
        body += _bulk_pipeline(spec, consume) + ["__syncthreads();  // the ring is drained: the reduction may reuse it"]
    else:
        body += _pipeline(spec, issue, consume)
    body += edge_quad_sums
    if gauss:
        body += ["// Gauss's combination of each lane's entries into the complex result.",
                 *gauss_combination(tm, tn, gauss_sign, "double2")]
    outputs = []
    for i in range(tm):
        lone = (tf32 or c.lone_transposed) and i == tm - 1 and tm % 2  # transposed (tf32_products, dmma_products)
        for j in range(tn):
            for h in range(2):
                d_row, d_col = "lane / 4", f"2 * (lane % 4) + {h}"
                m = f"((warp_m * {tm} + {i}) * 8 + {d_col if lone else d_row})"
                n = f"((warp_n * {tn} + {j}) * 8 + {d_row if lone else d_col})"
                # The triangle's diagonal tiles hold both halves of their entries: the upper one is kept.
                upper = f" && (!diagonal_tile || {m} <= {n})" if c.triangle else ""
                outputs.append((f"acc_{i}_{j}_{h}", m, n, f"{m} < {min(core_m, p.m)} && {n} < {min(core_n, p.n)}"
                                + upper))
    for u in range(m_units):
        for q in range(edge_n):
            outputs.append((f"edge_m{u}_{q}", f"(edge_slot + {u * slots})", str(core_n + q),
                            f"lane % 4 == 0 && edge_slot + {u * slots} < {p.m}"))
    for i in range(tm if triangle_edges else 0):
        m = f"((warp_m * {tm} + {i}) * 8 + lane / 4)"
        for q in range(edge_n):
            outputs.append((f"edge_{i}_{q}", m, str(core_n + q), f"lane % 4 == 0 && diagonal_tile && {m} < {core_m}"))
    for i, q in corner:
        outputs.append((f"corner_{i}_{q}", str(core_m + i), str(core_n + q), "lane == 0 && warp_m == 0 && warp_n == 0"))
    for u in range(n_units):
        for q in range(edge_m):
            outputs.append((f"edge_n{u}_{q}", str(core_m + q), f"(edge_slot + {u * slots})",
                            f"lane % 4 == 0 && edge_slot + {u * slots} < {core_n}"))
    return body, outputs


def _atb_block_reduction(spec: KernelSpec, ar: _Arith, outputs) -> list[str]:
    """Row groups 1.. leave their partial sums in shared memory (the drained ring);
    row group 0 adds them in a fixed order and writes one partial per block."""
    p, c = spec.problem, spec.config
    e = ar.elem
    rg = c.row_groups
    mn = p.m * p.n
    pmn = spec.panel_m * p.n  # one row group's share
    local = (lambda m: f"({m} - m0)") if c.m_panels > 1 else (lambda m: m)

    def each(action) -> list[str]:
        return [f"if ({guard}) {action(acc, m, n)}" if guard else action(acc, m, n) for acc, m, n, guard in outputs]

    def store(acc: str, m: str, n: str, guard: str | None) -> list[str]:
        if not c.triangle:
            entry = f"partial[{m} * {p.n} + {n}] = {acc};"
            return [f"if ({guard}) {entry}" if guard else entry]
        # The entries on and above the diagonal (the outputs' guards) are mirrored, so that
        # each pair of mirrored entries is one sum (exactly Hermitian); Aᴴ A's diagonal, sums
        # of |a|², is real: the rounding of its imaginary part is dropped.
        value = f"row == col ? make_{e}({acc}.x, 0) : {acc}" if ar.conj else acc
        return ["{",
                f"  const int row = {m}, col = {n};",
                f"  if ({guard}) {{",
                f"    partial[row * {p.n} + col] = {value};",
                f"    if (row != col) partial[col * {p.n} + row] = {ar.mirrored(acc)};",
                "  }",
                "}"]

    body = [
        "",
        f"// Block-local reduction: row groups 1..{rg - 1} leave their tiles in shared memory",
        "// (the drained ring); row group 0 adds them in a fixed order, so results are",
        "// bitwise reproducible, and writes one partial per block, laid out",
        "// [item][first_chunk] (with grid_k == 1, straight into out).",
        f"{e}* partial = static_cast<{e}*>(args.partials) + static_cast<long long>(blockIdx.x) * {mn};",
    ]
    # The bulk pipeline's producer warp (row group rg) holds no sums.
    producer_out = f" && row_group < {rg}" if spec.producer_warp else ""
    if rg > 1:
        slot = lambda group, m, n: f"reduce[({group} - 1) * {pmn} + {local(m)} * {p.n} + {n}]"
        body += [
            f"{e}* reduce = reinterpret_cast<{e}*>(tsmm_smem);",
            f"if (row_group > 0{producer_out}) {{",
            *["  " + line for line in each(lambda acc, m, n: f"{slot('row_group', m, n)} = {acc};")],
            "}",
            "__syncthreads();",
            "if (row_group == 0) {",
            f"  for (int g = 1; g < {rg}; ++g) {{",
            *["    " + line for line in each(lambda acc, m, n: f"{acc} = {ar.add(acc, slot('g', m, n))};")],
            "  }",
        ]
    else:
        body += ["if (row_group == 0) {" if spec.producer_warp else "{"]
    body += [*["  " + line for output in outputs for line in store(*output)], "}"]
    return body


def _atb_finalize(spec: KernelSpec, ar: _Arith) -> list[str]:
    e = ar.elem
    mn = spec.problem.m * spec.problem.n
    lanes_add = (f"make_{e}(sum.x + __shfl_down_sync(0xffffffffu, sum.x, offset), "
                 f"sum.y + __shfl_down_sync(0xffffffffu, sum.y, offset))") if ar.complex else \
        "sum + __shfl_down_sync(0xffffffffu, sum, offset)"
    return [
        "// Second stage of the deterministic reduction: one warp per output element. Its",
        "// lanes stride over the grid_k partials, then a fixed shuffle tree adds the lanes:",
        "// the same order on every run, and grid_k / 32 dependent loads instead of grid_k.",
        "const long long element = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;",
        "const int lane = threadIdx.x % 32;",
        f"if (element >= args.batch * {mn}) return;  // whole warps",
        f"const long long item = element / {mn};",
        f"const {e}* partial = static_cast<const {e}*>(args.partials) + item * args.grid_k * {mn} + element % {mn};",
        f"{e} sum = {ar.zero()};",
        f"for (long long g = lane; g < args.grid_k; g += 32) sum = {ar.add('sum', f'partial[g * {mn}]')};",
        "#pragma unroll",
        f"for (int offset = 16; offset > 0; offset /= 2) sum = {lanes_add};",
        f"if (lane == 0) static_cast<{e}*>(args.out)[element] = sum;",
    ]


def _emit_ab(spec: KernelSpec) -> str:
    """Rows of A staged through the ring; each pass of the block's threads turns
    `rows_per_pass` staged rows into rows of out (FMA register tiles or DMMA)."""
    p = spec.problem
    ar = _Arith(spec.problem)
    e = ar.elem
    passes = spec.rows_per_chunk // spec.rows_per_pass

    body = _block_prologue(spec, ar, "c") + _ab_out(spec, e)
    if p.update:
        body += [
            f"auto update = [&]({e} acc, {e} y_value) {{",
            "  return read_y ? tsmm_add(tsmm_scale(args.alpha, acc), tsmm_scale(args.beta, y_value))",
            "                : tsmm_scale(args.alpha, acc);",
            "};",
        ]
    setup, tile_pass = (_ab_mma_tiles if spec.config.mma else _ab_fma_tiles)(spec, ar)
    body += [
        "",
        *setup,
        "",
        f"auto slot_a = [&](int slot) {{ return reinterpret_cast<{e}*>(tsmm_smem + {spec.c_shared_bytes} + slot * {spec.stage_bytes}); }};",
        *([f"auto slot_y = [&](int slot) {{ return slot_a(slot) + {spec.stage_elements()[0]}; }};",
           "const int y_shift = tsmm_misalignment(y);"] if spec.stages_y else []),
    ]
    offset_a = "a_shift" if spec.bulk else _staging(spec, e, "a", p.m)[1]
    consume = [
        f"const {e}* sa = slot_a(slot) + {offset_a};",
        *([f"{e}* sout = slot_out(step);"] if spec.bulk else []),
        *([f"const {e}* sy = slot_y(slot) + y_shift;"] if spec.stages_y else []),
        *([f"const {e}* sy = sout + out_shift;"] if spec.config.y_in_out else []),
        f"if (rows == {spec.rows_per_chunk}) {{",
        f"  // Full chunk: {passes} passes of the block's row tiles.",
        f"  for (int pass = 0; pass < {passes}; ++pass) {{",
        f"    const int base = pass * {spec.rows_per_pass};",
        *["    " + line for line in tile_pass(False)],
        "  }",
        "} else {",
        "  // Last, partial chunk: rows past the end are computed on stale shared data and not stored.",
        f"  for (int base = 0; base < rows; base += {spec.rows_per_pass}) {{",
        *["    " + line for line in tile_pass(not spec.config.stage_out)],
        "  }",
        "}",
    ]
    if spec.config.stage_out:
        body += [
            *([f"auto slot_out = [&](long long step) {{ return reinterpret_cast<{e}*>("
               f"tsmm_smem + {spec.out_stage_offset} + (step & 1) * {spec.out_stage_bytes}); }};"] if spec.bulk else
              [f"{e}* sout = reinterpret_cast<{e}*>(tsmm_smem + {spec.out_stage_offset});"]),
            "// Chunks start a whole number of vectors into out: one shift serves them all.",
            "const int out_shift = tsmm_misalignment(out);",
        ]
    if spec.bulk:
        body += [""] + _bulk_pipeline(spec, consume, *_ab_bulk_store(spec))
    else:
        issue = [_staging(spec, e, "a", p.m)[0]]
        if spec.stages_y:  # the chunk's rows of y, one span (only where beta reads them)
            issue.append(f"if (read_y) tsmm_stage_copy<{e}, {spec.threads}, {_STAGE_COPY_KINDS[spec.config.stage_copy]}>"
                         f"(slot_y(slot), y + row0 * {p.n}, y_shift, rows * {p.n});")
        if spec.config.stage_out:
            consume += _ab_copy_out(spec)
        body += [""] + _pipeline(spec, issue, consume)
    return _kernels(spec, [(spec.name, spec.threads, body)])


def _ab_out(spec: KernelSpec, e: str) -> list[str]:
    """out (and the fused update's y) of the block's batch item."""
    p = spec.problem
    if not p.update:
        return [f"{e}* __restrict__ out = static_cast<{e}*>(args.out) + item * args.k * {p.n};"]
    return [
        "// Fused update (BLAS's beta * y + alpha * A C): y is read in the pass that writes",
        "// out, and only where beta is nonzero. No __restrict__: y may be out itself, which",
        "// is safe because each element is read and then written by the same thread.",
        f"{e}* out = static_cast<{e}*>(args.out) + item * args.k * {p.n};",
        f"const {e}* y = static_cast<const {e}*>(args.y) + item * args.k * {p.n};",
        "const bool read_y = args.beta[0] != 0 || args.beta[1] != 0;",
    ]


def _emit_ab_flat(spec: KernelSpec) -> str:
    """Flat mapping (Config.mapping): out as one span of 16-byte vectors, a pass of
    the block's threads covering whole rows, vector `tid` of each pass to this
    thread. Its elements' columns, and C's values for them, never change; their
    rows of A come through L1, where the lanes of a row share each line. No
    staging and no barriers: for products whose traffic is mostly out's writes,
    every warp's store is one contiguous span whatever N is."""
    p, c = spec.problem, spec.config
    ar = _Arith(p)
    e = ar.elem
    vec, n, m = p.vector_elements, p.n, p.m
    reach = spec.flat_rows
    window = reach > 1  # rows of out are not whole vectors
    passes = c.rows_per_stage // spec.rows_per_pass
    body = _work_split(spec, ar, "c") + _ab_out(spec, e) + [""]
    if window:
        body += [
            "// Rows of out are not whole vectors: the item's out starts `shift` elements past a",
            "// 16-byte boundary, and the vectors of that aligned window are dealt out,",
            f"// {spec.threads} a pass ({spec.rows_per_pass} rows); its ragged ends go element by element.",
            "const int shift = tsmm_misalignment(out);",
            f"{e}* const out_window = out - shift;",
            *([f"const {e}* const y_window = y - shift;",
               "const bool y_vectors = tsmm_misalignment(y) == shift;  // else y is read element by element"]
              if p.update else []),
            "// Element i of this thread's vector: its column, and its row relative to the pass",
            f"// (kept nonnegative by adding {vec} rows before dividing; -1: the previous row).",
        ]
        for i in range(vec):
            body += [
                f"const int place{i} = tid * {vec} + {i} - shift + {n * vec};",
                f"const int col{i} = place{i} % {n};",
                f"const int pass_row{i} = place{i} / {n} - {vec};",
            ]
        body += ["// The vector may straddle rows: element i takes row `row` + from<i> of A."]
        body += [f"const int from{i} = pass_row{i} - pass_row0;" for i in range(1, vec)]
    else:
        body += [
            f"// Rows of out are whole vectors, dealt out {spec.threads} a pass ({spec.rows_per_pass} rows):",
            "// this thread's elements share one row. They go out as one 16-byte store where",
            "// out is aligned (XLA's buffers are), else element by element.",
            f"{e}* const out_window = out;",
            "const bool out_vectors = tsmm_misalignment(out) == 0;",
            *([f"const {e}* const y_window = y;", "const bool y_vectors = tsmm_misalignment(y) == 0;"]
              if p.update else []),
            f"const int col0 = tid * {vec} % {n};",
            *[f"const int col{i} = col0 + {i};" for i in range(1, vec)],
            f"const int pass_row0 = tid * {vec} / {n};",
        ]
    body += [
        "// C's column of each element, in registers for the whole walk over K.",
        *[f"const {e} c{i}_{k} = c[{k * n} + col{i}];" for i in range(vec) for k in range(m)],
    ]

    def operand(i: int, k: int) -> str:
        if not window or i == 0:
            return f"a0_{k}"
        chain = f"a{reach - 1}_{k}"
        for d in range(reach - 2, -1, -1):
            chain = f"(from{i} == {d} ? a{d}_{k} : {chain})"
        return chain

    loads = [
        f"const {e}* a_row0 = a + min(max(row, 0LL), args.k - 1) * {m};",
        *[f"const {e} a0_{k} = __ldg(a_row0 + {k});" for k in range(m)],
    ]
    for d in range(1, reach):
        loads += [
            f"{e} " + ", ".join(f"a{d}_{k} = a0_{k}" for k in range(m)) + ";",
            f"if (from{vec - 1} >= {d}) {{  // this thread's vector reaches row {d} past its first",
            f"  const {e}* a_row{d} = a + min(row + {d}, args.k - 1) * {m};",
            *[f"  a{d}_{k} = __ldg(a_row{d} + {k});" for k in range(m)],
            "}",
        ]

    def result(i: int, y_value: str) -> str:
        if not p.update:
            return f"acc{i}"
        return (f"read_y ? tsmm_add(tsmm_scale(args.alpha, acc{i}), tsmm_scale(args.beta, {y_value})) "
                f": tsmm_scale(args.alpha, acc{i})")

    whole = [f"TsmmVector<{e}> value;"]
    if p.update:
        whole += [
            f"TsmmVector<{e}> y_value;",
            "if (read_y && y_vectors) {",
            f"  y_value = tsmm_load_global_vector(y_window + vector * {vec});",
            "} else if (read_y) {",
            *[f"  y_value.e[{i}] = y_window[vector * {vec} + {i}];" for i in range(vec)],
            "}",
        ]
    whole += [f"value.e[{i}] = {result(i, f'y_value.e[{i}]')};" for i in range(vec)]
    whole += [f"tsmm_store_global_vector(out_window + vector * {vec}, value);"]
    ragged = []
    for i in range(vec):
        row_i = f"row + from{i}" if window and i > 0 else "row"
        at = f"vector * {vec} + {i}"
        ragged += [f"if ({row_i} >= 0 && {row_i} < args.k) out_window[{at}] = {result(i, f'y_window[{at}]')};"]
    whole_test = f"row >= 0 && row + from{vec - 1} < args.k" if window else "out_vectors && row < args.k"
    body += [
        "",
        "for (long long step = 0; step < my_chunks; ++step) {",
        "  const long long chunk = first_chunk + step * args.grid_k;",
        f"  #pragma unroll {c.unroll}",
        f"  for (int pass = 0; pass < {passes}; ++pass) {{",
        f"    const long long row = chunk * {c.rows_per_stage} + pass * {spec.rows_per_pass} + pass_row0;",
        "    if (row >= args.k) break;",
        "    // A's rows for this vector, clamped inside the matrix (elements outside are not stored).",
        *["    " + line for line in loads],
        *[f"    {e} acc{i} = {ar.zero()};" for i in range(vec)],
        *["    " + line for i in range(vec) for k in range(m) for line in ar.fma(f"acc{i}", operand(i, k), f"c{i}_{k}")],
        f"    const long long vector = chunk * {c.rows_per_stage * n // vec} + pass * {spec.threads} + tid;",
        f"    if ({whole_test}) {{",
        *["      " + line for line in whole],
        "    } else {",
        *["      " + line for line in ragged],
        "    }",
        "  }",
        "}",
    ]
    return _kernels(spec, [(spec.name, spec.threads, body)])


def _ab_bulk_store(spec: KernelSpec) -> tuple[list[str], list[str]]:
    """(finish, drain) of the bulk pipeline for ab: each chunk of out leaves as one
    bulk store, and the last ones land before the block exits."""
    finish = [
        "// Staged output, bulk: once every consumer thread has fenced its tiles and passed",
        "// the barrier, one thread stores the chunk's span with one bulk copy, which",
        "// overlaps the next chunk (written into the other buffer).",
        "tsmm_fence_shared_for_bulk();",
        "if (tid == 0) tsmm_bulk_store_wait<false>();  // the other buffer's store has read it",
        *([f"if (tid == 0 && read_y && chunk_ring[(step + 1) % {spec.chunk_slots}] < num_chunks) "
           "y_into_out(step + 1);  // into that buffer (the staging warp took its chunk with this one's)"]
          if spec.config.y_in_out else []),
        f"tsmm_consumer_barrier({spec.consumer_threads});",
        f"if (tid == 0) tsmm_bulk_store(out + row0 * {spec.problem.n}, sout + out_shift, rows * {spec.problem.n});",
    ]
    return finish, ["if (tid == 0) tsmm_bulk_store_wait<true>();  // the last stores have landed"]


def _ab_copy_out(spec: KernelSpec) -> list[str]:
    """The end of a chunk with staged output: after a barrier, all threads copy the
    chunk's span of out in 16-byte vectors."""
    return [
        "// Staged output: the chunk's rows of out are one contiguous span; once all tiles",
        "// are in shared memory it leaves in whole 16-byte vectors (full sectors).",
        "__syncthreads();",
        f"tsmm_copy_out<{spec.threads}>(out + row0 * {spec.problem.n}, sout, out_shift, rows * {spec.problem.n});",
    ]


def _ab_store(spec: KernelSpec, ar: _Arith, tiles: list[tuple[tuple[str, ...], str, str, str | None]]) -> tuple[list[str], list[str]]:
    """(y prefetch, stores) for (accumulators, row in the chunk, first column, guard)
    tuples: one accumulator, or two of neighbouring columns stored as a pair
    (``out_pairs``/``y_pairs`` say whether pairs are 16-byte aligned). The y loads
    go before the products, so their latency hides behind them."""
    p = spec.problem

    def guarded(guard: str | None, line: str) -> str:
        return f"if ({guard}) {line}" if guard else line

    if spec.config.stage_out:  # into the chunk's span in shared memory, the update applied with y's
        # staged rows (stages_y)
        def store(accs, row, col):
            at = f"({row}) * {p.n} + {col}"
            values = [f"update({acc}, sy[{at}{f' + {h}' if h else ''}])" if p.update else acc
                      for h, acc in enumerate(accs)]
            if len(accs) == 1:
                return f"sout[out_shift + {at}] = {values[0]};"
            return f"tsmm_store_pair(&sout[out_shift + {at}], out_pairs, {values[0]}, {values[1]});"
        y_wait = ["if (read_y) tsmm_barrier_wait(&y_full[step & 1], (step >> 1) & 1);  // y's chunk has landed"
                  ] if spec.config.y_in_out else []
        return [], y_wait + [guarded(guard, store(accs, row, col)) for accs, row, col, guard in tiles]

    at = lambda row, col: f"(row0 + {row}) * {p.n} + {col}"  # noqa: E731
    prefetch = []
    if p.update:
        loads = []
        for accs, row, col, guard in tiles:
            if len(accs) == 1:
                loads.append(guarded(guard, f"y_{accs[0]} = y[{at(row, col)}];"))
            else:
                pair = f"tsmm_load_pair(&y[{at(row, col)}], y_pairs)"
                loads.append(guarded(guard, f"{{ const double2 v = {pair}; y_{accs[0]} = v.x; y_{accs[1]} = v.y; }}"))
        prefetch = [
            "// y's tile, loaded ahead of the products.",
            *[f"{ar.elem} y_{acc} = {ar.zero()};" for accs, _, _, _ in tiles for acc in accs],
            "if (read_y) {",
            *["  " + line for line in loads],
            "}",
        ]
    value = lambda acc: f"update({acc}, y_{acc})" if p.update else acc  # noqa: E731
    stores = []
    for accs, row, col, guard in tiles:
        if len(accs) == 1:
            stores.append(guarded(guard, f"out[{at(row, col)}] = {value(accs[0])};"))
        else:
            stores.append(guarded(guard, f"tsmm_store_pair(&out[{at(row, col)}], out_pairs, {value(accs[0])}, {value(accs[1])});"))
    return prefetch, stores


def _ab_fma_tiles(spec: KernelSpec, ar: _Arith):
    """Register tiles on the FMA units: per inner index m, a thread's tile_m values
    of A and tile_n values of C feed tile_m x tile_n FMAs (TSM2L's outer products)."""
    p, c = spec.problem, spec.config
    e = ar.elem
    tm, tn = c.tile_m, c.tile_n  # rows of A x columns of C per thread
    lanes = spec.tiles_m  # threads side by side along N
    rg = c.row_groups
    setup = [
        f"// Thread place: columns `lane` of N ({tn} per thread), rows `row_group` of each pass",
        f"// ({tm} per thread, {spec.rows_per_pass} per pass of the block): a {tm}x{tn} register tile.",
        f"const int lane = tid % {lanes};",
        f"const int row_group = tid / {lanes};",
        *_tile_indices("col", "lane", tn, lanes, p.n, c.mapping),
        *[
            f"const int tile_row{i} = {f'row_group + {i * rg}' if c.mapping == 'interleaved' else f'row_group * {tm} + {i}'};"
            for i in range(tm)
        ],
    ]
    if c.c_source == "shared":
        setup += [
            "// C is small: every block keeps a copy in shared memory, read as broadcasts.",
            f"{e}* sc = reinterpret_cast<{e}*>(tsmm_smem);",
            f"for (int idx = tid; idx < {p.m * p.n}; idx += {spec.threads}) sc[idx] = c[idx];",
            "__syncthreads();",
        ]
        c_read = "sc[m * {n} + col{j}]"
    else:
        setup += ["// C is read through the read-only cache; it stays resident in L1."]
        c_read = "__ldg(&c[m * {n} + col{j}])"

    def tile_pass(guard_rows: bool) -> list[str]:
        tiles = []
        for i in range(tm):
            for j in range(tn):
                guards = [g for g in (f"base + tile_row{i} < rows" if guard_rows else None,
                                      _valid("col", j, lanes, tn, p.n)) if g]
                tiles.append(((f"acc_{i}_{j}",), f"base + tile_row{i}", f"col{j}", " && ".join(guards) or None))
        prefetch, stores = _ab_store(spec, ar, tiles)
        return [
            *[f"{e} acc_{i}_{j} = {ar.zero()};" for i in range(tm) for j in range(tn)],
            *prefetch,
            "// Outer products over the inner index m: per m, the thread's A values and C values",
            f"// feed {tm * tn} FMAs.",
            f"#pragma unroll {c.unroll}",
            f"for (int m = 0; m < {p.m}; ++m) {{",
            *[f"  const {e} a{i} = sa[(base + tile_row{i}) * {spec.smem_stride(p.m)} + m];" for i in range(tm)],
            *[f"  const {e} c{j} = {c_read.format(n=p.n, j=j)};" for j in range(tn)],
            *["  " + line for i in range(tm) for j in range(tn) for line in ar.fma(f"acc_{i}_{j}", f"a{i}", f"c{j}")],
            "}",
            *stores,
        ]

    return setup, tile_pass


def _ab_mma_tiles(spec: KernelSpec, ar: _Arith):
    """Tensor cores for wide ab: DMMA (mma.sync m8n8k4) for float64, which turns
    compute-bound on the FMA units, and float32 (widened to double), or 3xTF32
    (Config.tf32x3, float32; m16n8k8: two 4-wide steps side by side and two
    slabs stacked), or for complex128 by Gauss's three real products on DMMA
    (Config.gauss). C lives in registers as the B fragments of every 4-wide step
    of the inner index; a warp turns tile_m slabs of 8 staged rows into tile_m x
    tile_n 8x8 blocks of out per pass. With Config.wgmma, C lives in shared
    memory instead and each warpgroup's products are wgmma instructions."""
    p, c = spec.problem, spec.config
    tm, tn = c.tile_m, c.tile_n
    warps_n = spec.tiles_m
    tf32, wgmma, gauss = c.tf32x3, c.wgmma, c.gauss
    k_steps = -(-p.m // spec.mma_k) * spec.mma_k // 4  # 4-wide steps, whole m16n8k8 steps for TF32
    stride = spec.smem_stride(p.m)
    vector = spec.fragment_vector
    # With N even a lane's two columns of a block are neighbours at an even offset
    # in every row: one 16-byte store (whole sectors) wherever the base is aligned.
    # (A complex element is 16 bytes on its own.)
    pairs = p.n % 2 == 0 and not gauss
    if wgmma:
        n8, k8 = spec.wgmma_n, spec.wgmma_k_steps
        c_from = [
            "// C as wgmma's B operand, split into TF32 parts once per block: K-major core",
            "// matrices of 8 columns of out x 4 of the inner index (128 contiguous bytes), those",
            f"// along the inner index 128 bytes apart, those along N {k8 * 256} bytes apart; the lo",
            f"// parts {8 * k8 * n8 * 4} bytes after the hi parts; zero past M and N.",
            *([f"// Row k of the operand is C's row {_vector_order(vector)}: the order in which",
               f"// a lane's {vector} neighbouring floats of A's rows serve its fragments (see the products)."]
              if vector > 1 else []),
            "float* c_split = reinterpret_cast<float*>(tsmm_smem);",
            f"for (int e = tid; e < {8 * k8 * n8}; e += {spec.threads}) {{",
            f"  const int k = e / {n8}, n = e % {n8};",
            f"  const tsmm_tf32_pair part = tsmm_split_tf32(k < {p.m} && n < {p.n} ? "
            f"__ldg(&c[({_vector_order(vector)}) * {p.n} + n]) : 0.0f);",
            f"  const int at = (n / 8 * {2 * k8} + k / 4) * 32 + n % 8 * 4 + k % 4;",
            "  c_split[at] = __uint_as_float(part.hi);",
            f"  c_split[{8 * k8 * n8} + at] = __uint_as_float(part.lo);",
            "}",
            "tsmm_fence_shared_for_bulk();  // the tensor cores read C through the async proxy, like bulk copies",
            "__syncthreads();",
            *(["// Lanes whose last 4-wide step reads past M (into the next staged row) keep none of it.",
               f"const unsigned inside_m = frag_k < {p.m % 4} ? 0xffffffffu : 0u;"] if p.m % 4 else []),
            *([f"// A stage mirrors A's misalignment: {4 * vector}-byte loads where it leaves them aligned.",
               f"const bool a_vectors = a_shift % {vector} == 0;"] if vector > 1 else []),
            f"const unsigned long long c_hi = tsmm_wgmma_desc(c_split, 128, {k8 * 256});",
            f"const unsigned long long c_lo = tsmm_wgmma_desc(c_split + {8 * k8 * n8}, 128, {k8 * 256});",
        ]
    elif gauss:
        c_from = [
            "// C as B fragments, loaded once: c_<step>_<block> = C[4*step + frag_k][8*block + frag_row],",
            "// complex (Re and Im, which Gauss's products read apart), zero past M or N so that the",
            "// steps and blocks that overhang add nothing. Their mix Re + Im is formed per step:",
            "// registers, not the adds, bound how many warps run.",
            *[f"const int c_col{j} = (warp_n * {tn} + {j}) * 8 + frag_row;" for j in range(tn)],
            *[f"const double2 c_{ks}_{j} = {ks * 4} + frag_k < {p.m} && c_col{j} < {p.n} ? "
              f"__ldg(&c[({ks * 4} + frag_k) * {p.n} + c_col{j}]) : make_double2(0, 0);"
              for ks in range(k_steps) for j in range(tn)],
        ]
    else:
        c_from = [
            "// C as B fragments, loaded once: c_<step>_<block> = C[4*step + frag_k][8*block + frag_row],",
            "// zero past M or N so that the steps and blocks that overhang add nothing"
            + (" (split into TF32 parts)." if tf32 else "."),
            *[f"const int c_col{j} = (warp_n * {tn} + {j}) * 8 + frag_row;" for j in range(tn)],
            *[
                (f"const tsmm_tf32_pair c_{ks}_{j} = tsmm_split_tf32({ks * 4} + frag_k < {p.m} && c_col{j} < {p.n} ? "
                 f"__ldg(&c[({ks * 4} + frag_k) * {p.n} + c_col{j}]) : 0.0f);" if tf32 else
                 f"const double c_{ks}_{j} = {ks * 4} + frag_k < {p.m} && c_col{j} < {p.n} ? "
                 f"__ldg(&c[({ks * 4} + frag_k) * {p.n} + c_col{j}]) : 0.0;")
                for ks in range(k_steps) for j in range(tn)
            ],
        ]
    setup = [
        *([
            "#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)",
            '#error "Config.wgmma needs sm_90a (wgmma)"',
            "#endif",
        ] if wgmma else []),
        f"// Thread place: warp `warp_n` owns {tn} blocks of 8 columns of N; warps of row group g",
        f"// take rows [g * {8 * tm}, (g + 1) * {8 * tm}) of each pass, as {tm} slabs of 8.",
        "const int lane = tid % 32;",
        f"const int warp_n = tid / 32 % {warps_n};",
        f"const int row_group = tid / {32 * warps_n};",
        "// PTX m8n8k4 f64 fragments: A (8x4, row) holds [lane/4][lane%4], B (4x8, col)",
        "// [lane%4][lane/4], D (8x8) [lane/4][2*(lane%4) + h].",
        *(["// wgmma m64nNk8 tf32: each warp holds an m16n8k8 A fragment of its 16 rows, and D of",
           "// those rows: [lane/4][8*block + 2*(lane%4) + h] in d[4*block + h], row lane/4 + 8 in",
           "// d[4*block + 2 + h]."]
          if wgmma else []),
        *(["// Gauss's 3M: per 8x8 block of complex out three real sums, rr = Re(a) Re(c),",
           "// ii = Im(a) Im(c) and mix = (Re a + Im a)(Re c + Im c), combined once per pass:",
           "// three DMMA where the real view takes four. Slabs that pair up in an m16n8k4 A",
           "// operand read their elements by two 8-byte loads (tsmm_load_parts)."]
          if gauss else []),
        "const int frag_row = lane / 4;",
        "const int frag_k = lane % 4;",
        "",
        *c_from,
        "// Columns of out this lane stores: D's [.][2*frag_k + h] of each block.",
        *[f"const int out_col{j}_{h} = (warp_n * {tn} + {j}) * 8 + 2 * frag_k + {h};"
          for j in range(tn) for h in range(1 if pairs else 2)],
    ]
    col_overhang = warps_n * tn * 8 > p.n
    if pairs:
        setup += [
            "// Even N: a lane's two neighbouring columns go out as one 16-byte access where aligned.",
            "const bool out_pairs = tsmm_misalignment(out) == 0;",
            *(["const bool y_pairs = tsmm_misalignment(y) == 0;"] if p.update and not c.stage_out else []),
        ]

    spacing, group = spec.row_spacing, spec.group_stride(p.m)
    padded_groups = spec.groups_padded(p.m)
    if spacing > 1:
        setup += [
            f"// Bulk-staged rows are unpadded: slab z = row_group * {tm} + i of a pass takes 8 rows",
            f"// {spacing} apart, {8 * spacing} * (z / {spacing}) + z % {spacing} + {spacing} * frag_row, so a fragment's rows",
            "// hit distinct banks; the pass's slabs still cover its rows once.",
            *[f"const int slab_row{i} = {8 * spacing} * ((row_group * {tm} + {i}) / {spacing}) + "
              f"(row_group * {tm} + {i}) % {spacing} + {spacing} * frag_row;" for i in range(tm)],
        ]
    if padded_groups:
        setup += [
            f"// The rows lie in groups of {spacing} padded to {group} elements: row z % {spacing} of group",
            f"// 8 * (z / {spacing}) + frag_row of the pass.",
            *[f"const int slab_at{i} = (8 * ((row_group * {tm} + {i}) / {spacing}) + frag_row) * {group} + "
              f"(row_group * {tm} + {i}) % {spacing} * {stride};" for i in range(tm)],
        ]

    def slab_row(i: int) -> str:
        return f"slab + {i * 8} + frag_row" if spacing == 1 else f"base + slab_row{i}"

    def slab_at(i: int) -> str:
        """Where the lane's row of slab i starts in the stage."""
        return f"base / {spacing} * {group} + slab_at{i}" if padded_groups else f"({slab_row(i)}) * {stride}"

    def acc(i: int, j: int, h: int) -> str:
        """Slab i's sum at block j's column h: a register of wgmma's D, or a named one."""
        return f"acc[{4 * j + 2 * i + h}]" if wgmma else f"acc_{i}_{j}_{h}"

    def tile_pass(guard_rows: bool) -> list[str]:
        tiles = []
        for i in range(tm):
            row = slab_row(i)
            for j in range(tn):
                for h in range(1 if pairs else 2):
                    guards = [g for g in (f"{row} < rows" if guard_rows else None,
                                          f"out_col{j}_{h} < {p.n}" if col_overhang else None) if g]
                    accs = (acc(i, j, 0), acc(i, j, 1)) if pairs else (acc(i, j, h),)
                    tiles.append((accs, row, f"out_col{j}_{h}", " && ".join(guards) or None))
        prefetch, stores = _ab_store(spec, ar, tiles)

        def a_fragment(i: int, ks: int, parts: bool = False) -> str:
            """Slab i's A at inner index 4 ks + frag_k; columns past M are masked (the
            padding of a staged row is never written). ``parts``: a complex element by
            two 8-byte loads (tsmm_load_parts)."""
            at = f"tsmm_load_parts(sa + {slab_at(i)} + {ks * 4} + frag_k)" if parts else \
                f"sa[{slab_at(i)} + {ks * 4} + frag_k]"
            zero = ar.zero() if gauss else "0.0f"
            if ks * 4 >= p.m:
                return zero
            if ks * 4 + 4 <= p.m:
                return at
            if wgmma:  # a bit mask: a select here has ptxas fence the warpgroup before every k-step
                return f"__uint_as_float(__float_as_uint({at}) & inside_m)"
            return f"frag_k < {p.m - ks * 4} ? {at} : {zero}"

        if wgmma:
            groups = spec.wgmma_groups
            lines = [
                *([f"const int slab = base + row_group * {8 * tm};"] if spacing == 1 else []),
                "// The tensor cores truncate their float32 sums: hi x hi (acc) and the small",
                f"// correction terms (fix) are summed apart, {k8} steps each, then added once.",
                f"float acc[{n8 // 2}] = {{}}, fix[{n8 // 2}] = {{}};",
            ]
            if len(groups) > 1:
                lines += [f"// {len(groups)} commit groups of k-steps: every k-step's split A fragments at once would",
                          "// not fit the registers beside acc and fix; a group's are dead once its wgmma are done."]
            for steps in groups:
                group = [
                    *(_vector_fragments(vector, steps, slab_at) if vector > 1 else []),
                    (f"// Every k-step's A fragment, split, before the {3 * k8} wgmma of the pass read them."
                     if len(groups) == 1 else
                     f"// k-steps {steps.start}..{steps.stop - 1}: A fragments, split, before their "
                     f"{3 * len(steps)} wgmma read them."),
                    *[f"const tsmm_tf32_pair a{i}_{q}_{h} = tsmm_split_tf32("
                      f"{_vector_element(vector, i, q, h) if vector > 1 else a_fragment(i, 2 * q + h)});"
                      for q in steps for h in (0, 1) for i in (0, 1)],
                    "tsmm_wgmma_fence();",
                ]
                for q in steps:
                    regs = lambda x, q=q: ", ".join(f"a{i}_{q}_{h}.{x}" for h in (0, 1) for i in (0, 1))  # noqa: E731
                    group += [
                        f"tsmm_wgmma_tf32_n{n8}(fix, {regs('lo')}, c_hi + {16 * q});",
                        f"tsmm_wgmma_tf32_n{n8}(fix, {regs('hi')}, c_lo + {16 * q});",
                        f"tsmm_wgmma_tf32_n{n8}(acc, {regs('hi')}, c_hi + {16 * q});",
                    ]
                group.append("tsmm_wgmma_commit_and_wait();")
                lines += group if len(groups) == 1 else ["{", *["  " + line for line in group], "}"]
            lines += [" ".join(f"acc[{r}] += fix[{r}];" for r in range(r0, min(r0 + 4, n8 // 2)))
                      for r0 in range(0, n8 // 2, 4)]
            return lines + stores
        if tf32:
            lines = [
                *([f"const int slab = base + row_group * {8 * tm};"] if spacing == 1 else []),
                "// The tensor cores truncate their float32 sums: hi x hi (acc) and the small",
                f"// correction terms (fix) are summed apart, {k_steps // 2} steps each, then added once.",
                *[f"float acc_{i}_{j}_{h} = 0, fix_{i}_{j}_{h} = 0;" for i in range(tm) for j in range(tn) for h in range(2)],
                *(["float spare_0 = 0, spare_1 = 0;  // a lone last slab's zero partner"] if tm % 2 else []),
                *prefetch,
                f"// {k_steps // 2} m16n8k8 steps of 8 along the inner index, per two slabs and 8 columns.",
            ]
            for q in range(k_steps // 2):
                lines += [
                    "{",
                    *[f"  const tsmm_tf32_pair a{i}_{h} = tsmm_split_tf32({a_fragment(i, 2 * q + h)});"
                      for i in range(tm) for h in (0, 1)],
                    *["  " + line for line in tf32_products(
                        tm, tn, lambda i, j: f"fix_{i}_{j}", lambda i, h: f"a{i}_{h}",
                        lambda j, h, q=q: f"c_{2 * q + h}_{j}", terms=("lo_hi", "hi_lo"))],
                    *["  " + line for line in tf32_products(
                        tm, tn, lambda i, j: f"acc_{i}_{j}", lambda i, h: f"a{i}_{h}",
                        lambda j, h, q=q: f"c_{2 * q + h}_{j}", terms=("hi_hi",))],
                    "}",
                ]
            lines += [f"acc_{i}_{j}_{h} += fix_{i}_{j}_{h};" for i in range(tm) for j in range(tn) for h in range(2)]
            return lines + stores
        if gauss:
            sums = (("rr", lambda i: f"a{i}.x", lambda j, ks: f"c_{ks}_{j}.x"),
                    ("ii", lambda i: f"a{i}.y", lambda j, ks: f"c_{ks}_{j}.y"),
                    ("mix", lambda i: f"a{i}_mix", lambda j, ks: f"c{j}_mix"))
            lines = [
                *([f"const int slab = base + row_group * {8 * tm};"] if spacing == 1 else []),
                *[f"double {name}_{i}_{j}_{h} = 0;" for name, _, _ in sums
                  for i in range(tm) for j in range(tn) for h in range(2)],
                f"// {k_steps} steps of 4 along the inner index, three DMMA per 8x8 block each.",
            ]
            for ks in range(k_steps):
                lines += [
                    "{",
                    *[f"  const double2 a{i} = {a_fragment(i, ks, parts=in_pair(i, tm))};" for i in range(tm)],
                    *[f"  const double a{i}_mix = a{i}.x + a{i}.y;" for i in range(tm)],
                    *[f"  const double c{j}_mix = c_{ks}_{j}.x + c_{ks}_{j}.y;" for j in range(tn)],
                    *["  " + line for name, a, b in sums for line in dmma_products(
                        tm, tn, lambda i, j, name=name: f"{name}_{i}_{j}", a, lambda j, b=b, ks=ks: b(j, ks))],
                    "}",
                ]
            lines += ["// Gauss's combination: out = rr - ii + i (mix - rr - ii).",
                      *gauss_combination(tm, tn, "-", "const double2")]
            return lines + stores
        lines = [
            *([f"const int slab = base + row_group * {8 * tm};"] if spacing == 1 else []),
            *[f"double acc_{i}_{j}_{h} = 0;" for i in range(tm) for j in range(tn) for h in range(2)],
            *prefetch,
            f"// {k_steps} steps of 4 along the inner index, one DMMA per 8x8 block each.",
        ]
        for ks in range(k_steps):
            lines += [
                "{",
                *[f"  const double a{i} = {a_fragment(i, ks)};" for i in range(tm)],
                *["  " + line for line in dmma_products(tm, tn, lambda i, j: f"acc_{i}_{j}", lambda i: f"a{i}",
                                                         lambda j, ks=ks: f"c_{ks}_{j}")],
                "}",
            ]
        return lines + stores

    return setup, tile_pass


def _vector_order(vector: int) -> str:
    """wgmma with vector fragment loads (KernelSpec.fragment_vector): the row of C, as a
    C expression of the operand's row k, at which a lane's neighbouring floats of A
    serve its fragments. Within each run of 4 * vector rows, lane quad position t
    (k % 4) reads floats vector * t onwards: element 2u + h serves k-step u of the
    run, fragment half h (k % 8 / 4). One float at a time: row k itself."""
    if vector == 1:
        return "k"
    run = 4 * vector
    steps = " + k % 16 / 8 * 2" if vector == 4 else ""
    return f"k / {run} * {run} + k % 4 * {vector}{steps} + k % 8 / 4"


def _vector_fragments(vector: int, k_steps: range, slab_at) -> list[str]:
    """wgmma: the loads of the A fragments of a pass's ``k_steps``, vector floats per
    lane and slab at once (bank-conflict-free rows, see wgmma_fragment_vector), in the
    order of _vector_order; one by one where A's misalignment leaves them unaligned."""
    per_run = vector // 2
    runs = range(k_steps.start // per_run, k_steps.stop // per_run)
    names = [f"a{i}_v{r}" for r in runs for i in (0, 1)]

    def at(i: int, r: int, e: int = 0) -> str:
        return f"sa[{slab_at(i)} + {4 * vector * r} + {vector} * frag_k{f' + {e}' if e else ''}]"

    return [
        f"// A's fragments, {vector} floats per lane and slab at once: their k-steps' inner index runs in the",
        f"// order of C's operand rows ({vector * 4}-row runs, quad position t's floats {vector} * t onwards).",
        f"float{vector} {', '.join(names)};",
        "if (a_vectors) {",
        *[f"  a{i}_v{r} = *reinterpret_cast<const float{vector}*>(&{at(i, r)});" for r in runs for i in (0, 1)],
        "} else {",
        *[f"  a{i}_v{r} = make_float{vector}({', '.join(at(i, r, e) for e in range(vector))});"
          for r in runs for i in (0, 1)],
        "}",
    ]


def _vector_element(vector: int, i: int, q: int, h: int) -> str:
    """Slab i's element of k-step q, fragment half h, among the _vector_fragments."""
    per_run = vector // 2
    return f"a{i}_v{q // per_run}.{'xyzw'[2 * (q % per_run) + h]}"


def _kernels(spec: KernelSpec, kernels: list[tuple[str, int | None, list[str]]]) -> str:
    p, c = spec.problem, spec.config
    parts = [
        f"// {spec.name}: {p.op} {p.dtype} M={p.m} N={p.n} conj={p.conj}",
        "// " + ", ".join(f"{field}={value!r}" for field, value in spec.source_fields.items()),
        f"// threads={spec.threads} shared_bytes={spec.shared_bytes} rows_per_chunk={spec.rows_per_chunk}",
    ]
    for name, threads, body in kernels:
        # The blocks per SM the launch aims for cap the registers: uncapped, DMMA ab at
        # 58x58 with two column blocks per warp took 162, too many for two blocks.
        bounds = f"__launch_bounds__({threads}, {c.blocks_per_sm}) " if threads else ""
        parts += [
            f'extern "C" __global__ void {bounds}{name}(const TsmmArgs args) {{',
            _indent(body, 1),
            "}",
            "",
        ]
    return "\n".join(parts)


def kernel_source(spec: KernelSpec) -> str:
    """The kernels of ``spec`` without the shared prelude; raises InvalidSpec for a bad spec."""
    validate(spec)
    if spec.problem.op == "atb":
        return _emit_atb(spec)
    return _emit_ab_flat(spec) if spec.flat else _emit_ab(spec)


def _wgmma_tf32(n: int, accumulate: bool = True) -> str:
    """The wgmma product of one width: 64 rows x n columns of float32 sums += A (64 x 8
    TF32, each warp's 16 rows as an m16n8k8 A fragment in registers) x B (8 x n
    TF32 in shared memory); without ``accumulate`` (``..._set``) the sums are
    overwritten, D = A B, which starts a sum without zeroing its registers."""
    regs = n // 2
    accs = ", ".join(f"%{i}" for i in range(regs))
    return "\n".join([
        "#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)",
        f"__device__ __forceinline__ void tsmm_wgmma_tf32_n{n}{'' if accumulate else '_set'}(float (&d)[{regs}], "
        "unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long b) {",
        f'  asm volatile("{{\\n.reg .pred accumulate;\\nsetp.ne.b32 accumulate, {int(accumulate)}, 0;\\n"',
        f'               "wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32 {{{accs}}}, "',
        f'               "{{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}, %{regs + 4}, accumulate, 1, 1;\\n}}\\n"',
        "               : " + ", ".join(f'"+f"(d[{i}])' for i in range(regs)),
        '               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));',
        "}",
        "#endif",
        "",
    ])


def module_source(specs: list[KernelSpec]) -> str:
    """A self-contained translation unit (no includes) holding the kernels of ``specs``."""
    wgmma_widths = sorted({spec.wgmma_n for spec in specs if spec.config.wgmma})
    return "\n".join(["// Generated by jax_tsmm's codegen; do not edit.", PRELUDE, _STAGE_COPY]
                     + [_wgmma_tf32(n) for n in wgmma_widths] + [kernel_source(spec) for spec in specs])
