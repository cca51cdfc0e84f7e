// Allocators: 64-byte aligned cpu memory, a caching pinned-host pool, and a stream-ordered cuda
// pool (cudaMallocAsync, memory kept reserved); each keeps current/peak bytes in use and reserved.
// Ownership: a cuda block is freed on the stream that allocated it; a tensor used on another
// stream must be kept alive by the caller until that stream is done (ordered through events).
// Thread-safety: thread-safe. Details: docs/architecture.md#tensors-and-memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "stoker/core/device.h"

namespace stoker::core {

struct MemoryStats {
  size_t current_bytes = 0;   // held by live allocations
  size_t peak_bytes = 0;      // highest current_bytes since start or reset_peak_memory
  size_t reserved_bytes = 0;  // held by the allocator (>= current: cached or pool memory)
  uint64_t allocations = 0;   // number of allocations served
};

// Device memory (cuda:N) or aligned host memory (cpu).
MemoryStats memory_stats(Device d);
MemoryStats pinned_memory_stats();
void reset_peak_memory(Device d);
void reset_peak_pinned_memory();

// CUDA graphs' own allocations on device `d` (what a captured step allocates inside its graph:
// core::CudaGraph, TrainerOptions::cuda_graph), which memory_stats does not see when the graph
// is launched — CUDA makes them, not stoker's pool (the capture went through its bookkeeping
// once). From cudaDeviceGetGraphMemAttribute; zeros for the CPU and without
// CUDA. reset_graph_memory_peak sets the high-water mark back to what is in use.
struct GraphMemoryStats {
  size_t used_bytes = 0;       // allocated by graphs now
  size_t used_high_bytes = 0;  // highest used_bytes since the last reset
  size_t reserved_bytes = 0;   // held for graphs by the driver
};
GraphMemoryStats graph_memory_stats(Device d);
void reset_graph_memory_peak(Device d);

// "cuda:0: current 1.50 GiB, peak 2.00 GiB, reserved 2.00 GiB" — for logs and errors.
std::string format_memory_stats(Device d);
// "1.50 GiB", "512 B", ...
std::string format_bytes(size_t bytes);

// Out-of-memory context from higher layers: when an allocation on a device fails, the
// allocator calls the installed hook (if any) with the device and appends the text it returns
// to the OutOfMemoryError's message (the Trainer installs one that returns its memory report
// and ranked advice). The hook runs on the allocating thread, must not allocate device memory
// and must not throw; a failure inside it is not reported twice. Returns the previous hook, so
// an owner can restore it. Thread-safe.
using OutOfMemoryHook = std::function<std::string(Device)>;
OutOfMemoryHook set_out_of_memory_hook(OutOfMemoryHook hook);

// A block of memory owned by whoever holds the last shared_ptr to it.
class Storage {
 public:
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

  // `bytes` on `device`; pinned host memory when `pinned` (device must be cpu). Throws
  // OutOfMemoryError with the pool's stats when the memory is not there.
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device, bool pinned = false);

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_{};
  bool pinned_ = false;
  bool graph_owned_ = false;  // allocated while CudaGraph::capture recorded its stream
  void* stream_ = nullptr;    // cuda: the stream that allocated it (freed there)
};

namespace detail {
// CudaGraph::capture's bookkeeping (core/graph.h). While `stream` is being captured, a block
// allocated before the capture and released during it is not freed in the capture (a captured
// free of memory the graph did not allocate is invalid) but queued, and end_capture_frees()
// frees the queue once the capture has ended. Blocks allocated during the capture are graph
// memory: freed in the graph when released during it, or later like any block.
void begin_capture_frees(void* stream);
void end_capture_frees();
// Graph memory blocks alive now, and their bytes (all devices): what a capture leaves held.
struct GraphBlocks {
  int64_t count = 0;
  int64_t bytes = 0;
};
GraphBlocks live_graph_blocks();
}  // namespace detail

}  // namespace stoker::core

namespace stoker {
using core::memory_stats;
using core::MemoryStats;
}  // namespace stoker
