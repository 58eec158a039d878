// Kernels that only move memory: the bandwidth ceilings the benchmark compares
// the tsmm kernels with. Both need 16-byte aligned buffers.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

namespace jax_tsmm {

// Reads all `bytes` of `x` with `blocks` blocks. `block_values` (`blocks` of
// them) is written only where a thread's fold of its bits hits a fixed
// pattern, which keeps the reads alive and, with random data, never happens.
cudaError_t LaunchStreamRead(const void* x, size_t bytes, double* block_values,
                             unsigned int blocks, cudaStream_t stream);

// Copies `bytes` from `x` to `out`.
cudaError_t LaunchStreamCopy(const void* x, void* out, size_t bytes, cudaStream_t stream);

}  // namespace jax_tsmm
