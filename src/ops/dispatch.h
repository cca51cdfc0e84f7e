// Private: the one interface between the ops front ends (src/ops/<family>.cpp: argument checks,
// then the dispatch) and their backends (src/ops/cpu/, src/ops/cuda/, kernels/*.cu). An op's
// backend entry point is declared once, with its signature, in src/ops/<family>_stubs.h; each
// backend registers its implementation from its own file; the front end calls the stub with the
// device. Backends may assume valid, contiguous, same-device inputs. docs/architecture.md,
// "Adding an op", has the recipe. Thread-safety: stubs are constants, callable from any thread.
//
//   src/ops/foo_stubs.h    STOKER_DECLARE_STUB(foo, void(const Tensor& y, const Tensor& x));
//   src/ops/cpu/foo.cpp    namespace stoker::ops::cpu { ... STOKER_REGISTER_STUB(foo, impl); }
//   kernels/foo.cu         namespace stoker::ops::cuda { ... STOKER_REGISTER_STUB(foo, impl); }
//   src/ops/foo.cpp        checks, then foo_stub(x.device(), y, x);
//
// Registration is a constant-initialized definition of the backend's slot (a function pointer
// declared `extern` by STOKER_DECLARE_STUB), not a self-registering static object: the stubs
// live in static libraries, where an object file that only registers itself at start-up is
// dropped by the linker because nothing references it. Here the front end's call references the
// slot, so the linker must take the backend's object file, a backend that forgot to register
// fails the link (not the first call), and no registration can run after a call made during
// static initialization.
#pragma once

#include "ops/op_cost.h"
#include "stoker/core/error.h"
#include "stoker/core/tensor.h"

namespace stoker::ops {

template <class Sig>
class DispatchStub;

// An op's backend entry point: its name (for core::OpListener, op_cost.cpp) and the slot of each
// backend. Calls go to the slot of the device's backend, profiled like every op (op_cost.h).
template <class R, class... A>
class DispatchStub<R(A...)> {
 public:
  using Fn = R (*)(A...);
  constexpr DispatchStub(const char* name, const Fn* cpu, const Fn* cuda)
      : name_(name), cpu_(cpu), cuda_(cuda) {}

  const char* name() const { return name_; }

  // The implementation for `device` (validated before: CUDA tensors reach here only in CUDA
  // builds); for a caller that reports its own cost.
  Fn fn(Device device) const {
#if STOKER_WITH_CUDA
    const Fn* slot = device.is_cuda() ? cuda_ : cpu_;
#else
    const Fn* slot = cpu_;
#endif
    STOKER_CHECK(slot != nullptr, "internal: ops::", name_, " has no ", device.str(),
                 " implementation");
    return *slot;
  }

  R operator()(Device device, A... args) const {
    return detail::profiled_call(
        name_, device, [&]() -> R { return fn(device)(args...); }, args...);
  }

 private:
  const char* name_;
  const Fn* cpu_;
  const Fn* cuda_;
};

}  // namespace stoker::ops

#if STOKER_WITH_CUDA
#define STOKER_DETAIL_CUDA_SLOT(name) &::stoker::ops::cuda::name##_impl
#else
#define STOKER_DETAIL_CUDA_SLOT(name) nullptr
#endif

// At namespace stoker::ops scope of src/ops/<family>_stubs.h: declares op `name` with its
// signature (a function type, parameter names welcome) once for every backend: the type
// name_fn, the slots cpu::name_impl and cuda::name_impl, and the stub name_stub.
#define STOKER_DECLARE_STUB(name, ...)                      \
  using name##_fn = __VA_ARGS__;                            \
  namespace cpu {                                           \
  extern name##_fn* const name##_impl;                      \
  }                                                         \
  namespace cuda {                                          \
  extern name##_fn* const name##_impl;                      \
  }                                                         \
  inline constexpr DispatchStub<name##_fn> name##_stub {    \
#name, &cpu::name##_impl, STOKER_DETAIL_CUDA_SLOT(name) \
  }

// The same for an op that only the CUDA backend implements (its front end rejects CPU tensors).
#define STOKER_DECLARE_CUDA_STUB(name, ...)              \
  using name##_fn = __VA_ARGS__;                         \
  namespace cuda {                                       \
  extern name##_fn* const name##_impl;                   \
  }                                                      \
  inline constexpr DispatchStub<name##_fn> name##_stub { \
#name, nullptr, STOKER_DETAIL_CUDA_SLOT(name)        \
  }

// Inside namespace stoker::ops::cpu or stoker::ops::cuda of the backend's own file, after the
// implementation: fills that backend's slot of op `name` with `impl`, a function of exactly the
// declared signature (anything else does not compile). In another namespace it defines nothing
// the front end sees, and the link fails.
#define STOKER_REGISTER_STUB(name, impl) \
  constinit ::stoker::ops::name##_fn* const name##_impl = &(impl)
