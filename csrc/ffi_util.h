// Small helpers shared by the FFI handlers.
#pragma once

#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace jax_tsmm {

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
