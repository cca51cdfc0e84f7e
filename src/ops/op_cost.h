// Private: the cost of one backend call (FLOP and byte counts) for core::OpListener, and the
// profiled dispatch behind every DispatchStub (src/ops/dispatch.h).
//
// The bytes are those of every tensor argument (read or written once); the FLOPs follow the
// op's name: 2·|c|·k for GEMMs (k from op(a)'s shape), 2·|y|·|w|/K for convolutions, and a
// per-element count for the rest (op_cost.cpp has the table; docs/diagnostics.md lists it).
// Computed only when a listener is installed.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "stoker/core/op_listener.h"
#include "stoker/core/tensor.h"
#include "stoker/ops/fp8.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops::detail {

// The tensors of a call, gathered from its arguments (other arguments are ignored).
struct CostArgs {
  std::vector<const Tensor*> tensors;
  const GemmOptions* gemm = nullptr;
  void add(const Tensor& t) { tensors.push_back(&t); }
  void add(const GemmOptions& o) { gemm = &o; }
  void add(const Fp8CastOutputs& o) {  // the codes it writes (scale_inv and amax: 4 bytes)
    if (o.codes) tensors.push_back(o.codes);
    if (o.codes_t) tensors.push_back(o.codes_t);
  }
  void add(std::span<const Tensor> ts) {
    for (const Tensor& t : ts) tensors.push_back(&t);
  }
  template <class T>
  void add(const T&) {}
};

core::OpCost op_cost(std::string_view name, const CostArgs& args);

template <class F, class... A>
decltype(auto) profiled_call(const char* name, Device device, F&& f, const A&... args) {
  core::OpListener* listener = core::op_listener();
  if (!listener) [[likely]]
    return f();
  CostArgs c;
  (c.add(args), ...);
  const core::OpScope scope(name, device, op_cost(name, c));
  return f();
}

}  // namespace stoker::ops::detail
