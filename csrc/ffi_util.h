// Small helpers shared by the FFI handlers.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace jax_tsmm {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxGridYZ = 65535;

// Bytes per element of the dtypes kernels are generated for; 0 for the others.
inline int ElementBytes(xla::ffi::DataType dtype) {
  switch (dtype) {
    case xla::ffi::DataType::F32:
      return 4;
    case xla::ffi::DataType::F64:
    case xla::ffi::DataType::C64:
      return 8;
    case xla::ffi::DataType::C128:
      return 16;
    default:
      return 0;
  }
}

inline int64_t CeilDiv(int64_t x, int64_t y) { return (x + y - 1) / y; }

// "(2, 3)", or "(5,)" for one dimension, as Python prints shapes.
inline std::string ShapeString(xla::ffi::AnyBuffer::Dimensions dims) {
  std::string text = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(dims[i]);
  }
  return text + (dims.size() == 1 ? ",)" : ")");
}

}  // namespace jax_tsmm
