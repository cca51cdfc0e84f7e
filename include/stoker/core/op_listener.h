// OpListener: a hook around every op launch (name, FLOP and byte counts), installed per thread
// only while diagnostics time a step op by op; otherwise one thread-local load per op. Nested ops
// are reported once, as the outermost; ModuleScope names the module an op runs in.
// Thread-safety: everything here is per thread.
// Details: docs/diagnostics.md#where-the-gpu-time-goes-op-timed-steps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/core/device.h"
#include "stoker/core/dtype.h"

namespace stoker::core {

// What an op costs, for its place on the roofline: arithmetic and memory traffic. Bytes count
// every tensor the op reads or writes once (a lower bound of its real traffic); FLOPs are the
// op's own formula (docs/diagnostics.md lists them).
struct OpCost {
  double flops = 0;
  double bytes = 0;
  DType dtype = DType::f32;  // of the op's first tensor: which compute roof applies
  // GEMMs (gemm, gemm_batched): the problem's m, n, k (0 for other ops), for the alignment check
  // of the op table (tensor cores want rows of whole 16-byte vectors).
  int64_t m = 0, n = 0, k = 0;
};

// The name the gradient syncs report each bucket's reduction under (on the comm stream; the op
// table counts it as communication, beside the compute stream's ops).
inline constexpr const char* kGradSyncBucketOp = "grad_sync_bucket";

class OpListener {
 public:
  virtual ~OpListener() = default;
  // `name` is a string literal (the backend function's name: "gemm", "layernorm_forward").
  virtual void op_begin(const char* name, Device device, const OpCost& cost) = 0;
  virtual void op_end() = 0;
};

// This thread's listener (nullptr: none, the common case).
OpListener* op_listener();
// Installs `listener` on this thread (nullptr removes it); returns the previous one.
OpListener* set_op_listener(OpListener* listener);

// This thread's module path while a listener is installed: the names pushed by ModuleScope,
// outermost first.
const std::vector<std::string_view>& module_stack();
// "layer1.0.conv1" (the stack joined with dots; "" when empty).
std::string module_path();

// Pushes `name` (which must outlive the scope) while a listener is installed; a no-op otherwise.
class ModuleScope {
 public:
  explicit ModuleScope(std::string_view name);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  bool pushed_ = false;
};

// Sets this thread's module stack to its first `depth` names for its lifetime, then puts the
// rest back: for work a container runs on its own behalf from inside a child's call
// (nn::Residual's shortcut, run from within its body's backward). A no-op without a listener.
class ModuleStackTruncate {
 public:
  explicit ModuleStackTruncate(size_t depth);
  ~ModuleStackTruncate();
  ModuleStackTruncate(const ModuleStackTruncate&) = delete;
  ModuleStackTruncate& operator=(const ModuleStackTruncate&) = delete;

 private:
  std::vector<std::string_view> removed_;  // the names above `depth`, outermost first
};

// Reports one op to this thread's listener for its lifetime (what the ops' dispatch does; for
// ops outside src/ops, e.g. a custom kernel).
class OpScope {
 public:
  OpScope(const char* name, Device device, const OpCost& cost) : listener_(op_listener()) {
    if (listener_) listener_->op_begin(name, device, cost);
  }
  ~OpScope() {
    if (listener_) listener_->op_end();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpListener* listener_;
};

}  // namespace stoker::core
