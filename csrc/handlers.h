// The XLA FFI handlers of this module, as C symbols for nanobind to wrap.
#pragma once

#include "xla/ffi/api/c_api.h"

extern "C" {
XLA_FFI_Error* TsmmAtb(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* TsmmAb(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* TsmmAbUpdate(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* TsmmMtsm(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* TsmmStreamRead(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* TsmmStreamCopy(XLA_FFI_CallFrame* call_frame);
}
