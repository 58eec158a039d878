#include "kernel_cache.h"

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "prebuilt_kernels.h"

namespace ffi = xla::ffi;

namespace jax_tsmm {
namespace {

// Dynamic shared memory a kernel may use without opting in.
constexpr int kDefaultDynamicSharedBytes = 48 * 1024;

std::string Where(std::string_view library) {
  return library.empty() ? "built into jax_tsmm"
                         : "library '" + std::string(library) + "'";
}

const TsmmPrebuilt* FindPrebuilt(std::string_view name) {
  // Built once, never destroyed: handlers may still run while the process exits.
  static const auto* by_name = [] {
    auto* table = new std::unordered_map<std::string_view, const TsmmPrebuilt*>();
    for (int i = 0; i < kTsmmPrebuiltCount; ++i) {
      table->emplace(kTsmmPrebuilt[i].name, &kTsmmPrebuilt[i]);
    }
    return table;
  }();
  auto found = by_name->find(name);
  return found == by_name->end() ? nullptr : found->second;
}

// Everything learned at run time, behind one lock: after the first call for a
// kernel or device each lookup is a map find.
struct Caches {
  std::mutex mutex;
  std::map<std::string, cudaLibrary_t> libraries;  // by path; never unloaded
  std::map<std::pair<std::string, std::string>, KernelEntry> library_kernels;  // (path, name)
  std::map<std::pair<const void*, int>, int> shared_limits;  // (function, device) -> bytes
};

Caches& GetCaches() {
  static auto* caches = new Caches();  // never destroyed, as above
  return *caches;
}

// Resolves a kernel of `library` (already loaded) by name.
ffi::Error GetLibraryKernel(cudaLibrary_t library, const std::string& path,
                            const std::string& name, const void** function) {
  cudaKernel_t kernel;
  cudaError_t error = cudaLibraryGetKernel(&kernel, library, name.c_str());
  if (error != cudaSuccess) return CudaFailure("cudaLibraryGetKernel", name, path, error);
  // A cudaKernel_t stands in for the function symbol in cudaLaunchKernel and
  // cudaFuncSetAttribute.
  *function = reinterpret_cast<const void*>(kernel);
  return ffi::Error::Success();
}

}  // namespace

ffi::Error CudaFailure(std::string_view what, std::string_view name,
                       std::string_view library, cudaError_t error) {
  cudaGetLastError();  // reset the non-sticky error state we are reporting here
  return ffi::Error::Internal("jax_tsmm: " + std::string(what) + " failed for kernel '" +
                              std::string(name) + "' (" + Where(library) +
                              "): " + cudaGetErrorName(error) + ": " +
                              cudaGetErrorString(error));
}

ffi::Error FindKernel(std::string_view library, std::string_view name,
                      bool needs_finalize, KernelEntry* entry) {
  if (library.empty()) {
    const TsmmPrebuilt* prebuilt = FindPrebuilt(name);
    if (prebuilt == nullptr) {
      return ffi::Error(ffi::ErrorCode::kNotFound,
                        "jax_tsmm: kernel '" + std::string(name) +
                            "' is not built into jax_tsmm and no library was given");
    }
    if (needs_finalize && prebuilt->finalize == nullptr) {
      return ffi::Error::Internal("jax_tsmm: prebuilt kernel '" + std::string(name) +
                                  "' has no _finalize kernel");
    }
    *entry = {prebuilt->kernel, prebuilt->finalize};
    return ffi::Error::Success();
  }

  Caches& caches = GetCaches();
  std::lock_guard<std::mutex> lock(caches.mutex);
  std::pair<std::string, std::string> key(library, name);
  auto cached = caches.library_kernels.find(key);
  if (cached != caches.library_kernels.end() &&
      (!needs_finalize || cached->second.finalize != nullptr)) {
    *entry = cached->second;
    return ffi::Error::Success();
  }

  const std::string& path = key.first;
  auto loaded = caches.libraries.find(path);
  if (loaded == caches.libraries.end()) {
    cudaLibrary_t handle;
    cudaError_t error = cudaLibraryLoadFromFile(&handle, path.c_str(), nullptr, nullptr, 0,
                                                nullptr, nullptr, 0);
    if (error != cudaSuccess) return CudaFailure("cudaLibraryLoadFromFile", name, path, error);
    loaded = caches.libraries.emplace(path, handle).first;
  }

  KernelEntry resolved;
  ffi::Error error = GetLibraryKernel(loaded->second, path, key.second, &resolved.main);
  if (error.failure()) return error;
  if (needs_finalize) {
    error = GetLibraryKernel(loaded->second, path, key.second + "_finalize", &resolved.finalize);
    if (error.failure()) return error;
  }
  caches.library_kernels[key] = resolved;
  *entry = resolved;
  return ffi::Error::Success();
}

ffi::Error LaunchKernel(const void* function, dim3 grid, int threads, int shared_bytes,
                        void* args, cudaStream_t stream, std::string_view name,
                        std::string_view library) {
  if (shared_bytes > kDefaultDynamicSharedBytes) {
    int device = 0;
    if (cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) {
      return CudaFailure("cudaGetDevice", name, library, error);
    }
    Caches& caches = GetCaches();
    std::lock_guard<std::mutex> lock(caches.mutex);
    int& allowed = caches.shared_limits[{function, device}];
    if (allowed < shared_bytes) {
      // Applies to the current device, which is `device`.
      cudaError_t error = cudaFuncSetAttribute(
          function, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
      if (error != cudaSuccess) {
        return CudaFailure("cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", name, library,
                           error);
      }
      allowed = shared_bytes;
    }
  }
  void* params[] = {args};
  cudaError_t error = cudaLaunchKernel(function, grid, dim3(threads), params, shared_bytes, stream);
  if (error == cudaSuccess) error = cudaGetLastError();
  if (error != cudaSuccess) return CudaFailure("cudaLaunchKernel", name, library, error);
  return ffi::Error::Success();
}

std::vector<std::string> PrebuiltKernelNames() {
  std::vector<std::string> names;
  names.reserve(kTsmmPrebuiltCount);
  for (int i = 0; i < kTsmmPrebuiltCount; ++i) names.emplace_back(kTsmmPrebuilt[i].name);
  return names;
}

}  // namespace jax_tsmm
