// jax_tsmm._tsmm_cuda: hands the FFI handlers to Python for
// jax.ffi.register_ffi_target(name, capsule, platform="CUDA").

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "handlers.h"
#include "kernel_cache.h"

namespace nb = nanobind;

namespace {

nb::capsule HandlerCapsule(XLA_FFI_Error* (*handler)(XLA_FFI_CallFrame*)) {
  return nb::capsule(reinterpret_cast<void*>(handler));
}

}  // namespace

NB_MODULE(_tsmm_cuda, m) {
  m.doc() = "CUDA launchers of jax_tsmm's generated kernels, as XLA FFI handlers.";
  m.def(
      "registrations",
      [] {
        nb::dict handlers;
        handlers["tsmm_atb"] = HandlerCapsule(TsmmAtb);
        handlers["tsmm_ab"] = HandlerCapsule(TsmmAb);
        handlers["tsmm_ab_update"] = HandlerCapsule(TsmmAbUpdate);
        handlers["tsmm_mtsm"] = HandlerCapsule(TsmmMtsm);
        handlers["tsmm_stream_read"] = HandlerCapsule(TsmmStreamRead);
        handlers["tsmm_stream_copy"] = HandlerCapsule(TsmmStreamCopy);
        return handlers;
      },
      "FFI target name -> PyCapsule of its handler (platform CUDA).");
  m.def("prebuilt_kernels", &jax_tsmm::PrebuiltKernelNames,
        "Names of the kernels compiled into this module (pass library=\"\" for them).");
}
