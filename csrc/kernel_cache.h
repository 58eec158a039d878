// Finding and launching the generated kernels.
// Everything here is cached for the life of the process and safe to call from
// several threads at once (XLA runs each device's work on its own thread).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <cuda_runtime_api.h>

#include "xla/ffi/api/ffi.h"

namespace jax_tsmm {

// The entry points of one generated kernel, usable with cudaLaunchKernel.
struct KernelEntry {
  const void* main = nullptr;
  const void* finalize = nullptr;  // atb only: adds the grid_k partial sums
};

// Resolves kernel `name` from the kernels built into this module (`library`
// empty) or from the cubin at path `library`, which is loaded once and never
// unloaded. With `needs_finalize`, `<name>_finalize` is resolved as well.
xla::ffi::Error FindKernel(std::string_view library, std::string_view name,
                           bool needs_finalize, KernelEntry* entry);

// Launches `function` (from FindKernel) with `args`, its one by-value
// parameter, opting in first where `shared_bytes` of dynamic shared memory
// exceed the default 48 KiB; a failure names kernel `name` of `library`.
xla::ffi::Error LaunchKernel(const void* function, dim3 grid, int threads,
                             int shared_bytes, void* args, cudaStream_t stream,
                             std::string_view name, std::string_view library);

// Names of the kernels built into this module.
std::vector<std::string> PrebuiltKernelNames();

// "<what> failed for kernel '<name>' (<where>): <CUDA's message>"; also clears
// CUDA's last-error state so that the next launch is not blamed for it.
xla::ffi::Error CudaFailure(std::string_view what, std::string_view name,
                            std::string_view library, cudaError_t error);

}  // namespace jax_tsmm
