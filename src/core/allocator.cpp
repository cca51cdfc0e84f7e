// The three allocators behind Storage::allocate, and their byte counters.
//
// Why a pinned *cache*: cudaHostAlloc costs milliseconds (it maps pages for the GPU), so the
// loader's batch ring and staging buffers reuse freed blocks of the same size class.
// Why cudaMallocAsync: the default memory pool with an unlimited release threshold keeps freed
// memory reserved for the next step, so steady-state training never calls the driver.
#include "stoker/core/allocator.h"

#include <fmt/format.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "core/cuda_util.h"
#include "stoker/core/error.h"

namespace stoker::core {

namespace {

constexpr size_t kHostAlignment = 64;

// The stream CudaGraph::capture is recording (nullptr: none), and the frees it deferred.
std::atomic<void*> g_capture_stream{nullptr};
// Graph-owned blocks alive (CudaGraph::capture reads what a capture left held).
std::atomic<int64_t> g_graph_live_count{0};
std::atomic<int64_t> g_graph_live_bytes{0};
std::mutex g_deferred_mu;
std::vector<std::pair<void*, void*>> g_deferred_frees;  // (pointer, stream)
constexpr int kMaxDevices = 64;

// current/peak bytes of one allocator; peak is a monotonic max over current.
struct Counters {
  std::atomic<size_t> current{0};
  std::atomic<size_t> peak{0};
  std::atomic<size_t> reserved{0};
  std::atomic<uint64_t> allocations{0};

  void add(size_t bytes) {
    const size_t now = current.fetch_add(bytes) + bytes;
    size_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    allocations.fetch_add(1);
  }
  void sub(size_t bytes) { current.fetch_sub(bytes); }
  MemoryStats stats() const {
    return {current.load(), peak.load(), reserved.load(), allocations.load()};
  }
  void reset_peak() { peak.store(current.load()); }
};

Counters g_host;
Counters g_pinned;
Counters g_device[kMaxDevices];

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::mutex g_oom_hook_mu;
OutOfMemoryHook g_oom_hook;
thread_local bool t_in_oom_hook = false;

// The installed hook's text for `device` ("" when none, or when called from inside the hook).
std::string out_of_memory_context(Device device) {
  if (t_in_oom_hook) return {};
  OutOfMemoryHook hook;
  {
    std::lock_guard<std::mutex> lock(g_oom_hook_mu);
    hook = g_oom_hook;
  }
  if (!hook) return {};
  t_in_oom_hook = true;
  std::string text;
  try {
    text = hook(device);
  } catch (...) {
    text.clear();  // the original out-of-memory error is what the user must see
  }
  t_in_oom_hook = false;
  return text.empty() ? text : "\n" + text;
}

void* host_alloc(size_t bytes) {
  void* p = std::aligned_alloc(kHostAlignment, round_up(bytes == 0 ? 1 : bytes, kHostAlignment));
  if (!p) {
    throw OutOfMemoryError(
        fmt::format("host allocation of {} failed ({}){}", format_bytes(bytes),
                    format_memory_stats(Device::cpu()), out_of_memory_context(Device::cpu())),
        detail::where(__FILE__, __LINE__), "free host memory or lower the batch size", bytes);
  }
  return p;
}

// Size classes: powers of two from 4 KiB, then multiples of 2 MiB above 2 MiB, so a ring of
// equal batches always hits the cache.
size_t pinned_size_class(size_t bytes) {
  if (bytes <= 4096) return 4096;
  if (bytes >= (2u << 20)) return round_up(bytes, 2u << 20);
  size_t c = 4096;
  while (c < bytes) c <<= 1;
  return c;
}

class PinnedCache {
 public:
  void* get(size_t size_class) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(size_class);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    void* p = nullptr;
#if STOKER_WITH_CUDA
    if (cuda_device_count() > 0) {
      const cudaError_t e = cudaHostAlloc(&p, size_class, cudaHostAllocPortable);
      if (e != cudaSuccess) {
        cudaGetLastError();
        throw OutOfMemoryError(
            fmt::format("pinned host allocation of {} failed: {} (pinned {} in use, {} reserved)",
                        format_bytes(size_class), cudaGetErrorString(e),
                        format_bytes(g_pinned.current.load()),
                        format_bytes(g_pinned.reserved.load())),
            detail::where(__FILE__, __LINE__),
            "lower prefetch depth or batch size; check `ulimit -l`", size_class);
      }
      g_pinned.reserved.fetch_add(size_class);
      return p;
    }
#endif
    p = host_alloc(size_class);  // no GPU: ordinary aligned memory behaves the same
    g_pinned.reserved.fetch_add(size_class);
    return p;
  }
  void put(void* p, size_t size_class) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[size_class].push_back(p);
  }

 private:
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
};

PinnedCache& pinned_cache() {
  static auto* cache = new PinnedCache();  // never destroyed: blocks may outlive static dtors
  return *cache;
}

#if STOKER_WITH_CUDA
// Keeps freed pool memory reserved (threshold = max) so later steps reuse it.
void configure_pool(int device) {
  static std::once_flag flags[kMaxDevices];
  std::call_once(flags[device], [device] {
    cudaMemPool_t pool;
    STOKER_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    STOKER_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  });
}

size_t pool_reserved(int device) {
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) return 0;
  uint64_t reserved = 0;
  if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess)
    return 0;
  return reserved;
}
#endif

}  // namespace

std::string format_bytes(size_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes < 1024)
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else if (b < 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024);
  else if (b < 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  return buf;
}

MemoryStats memory_stats(Device d) {
  if (d.is_cpu()) {
    MemoryStats s = g_host.stats();
    s.reserved_bytes = s.current_bytes;  // no host cache: the allocator holds what is in use
    return s;
  }
  STOKER_CHECK(d.index >= 0 && d.index < kMaxDevices, "memory_stats: bad device ", d.str());
  MemoryStats s = g_device[d.index].stats();
#if STOKER_WITH_CUDA
  if (d.index < cuda_device_count()) s.reserved_bytes = pool_reserved(d.index);
#endif
  return s;
}

MemoryStats pinned_memory_stats() { return g_pinned.stats(); }

void reset_peak_memory(Device d) {
  if (d.is_cpu()) return g_host.reset_peak();
  STOKER_CHECK(d.index >= 0 && d.index < kMaxDevices, "reset_peak_memory: bad device ", d.str());
  g_device[d.index].reset_peak();
}

void reset_peak_pinned_memory() { g_pinned.reset_peak(); }

GraphMemoryStats graph_memory_stats(Device d) {
  GraphMemoryStats s;
#if STOKER_WITH_CUDA
  if (!d.is_cuda() || d.index >= cuda_device_count()) return s;
  const auto read = [&](cudaGraphMemAttributeType what) {
    unsigned long long v = 0;  // cuuint64_t
    STOKER_CUDA_CHECK(cudaDeviceGetGraphMemAttribute(d.index, what, &v));
    return static_cast<size_t>(v);
  };
  s.used_bytes = read(cudaGraphMemAttrUsedMemCurrent);
  s.used_high_bytes = read(cudaGraphMemAttrUsedMemHigh);
  s.reserved_bytes = read(cudaGraphMemAttrReservedMemCurrent);
#else
  (void)d;
#endif
  return s;
}

void reset_graph_memory_peak(Device d) {
#if STOKER_WITH_CUDA
  if (!d.is_cuda() || d.index >= cuda_device_count()) return;
  unsigned long long zero =
      0;  // cuuint64_t; the only value the attribute takes: back to the current use
  STOKER_CUDA_CHECK(cudaDeviceSetGraphMemAttribute(d.index, cudaGraphMemAttrUsedMemHigh, &zero));
#else
  (void)d;
#endif
}

std::string format_memory_stats(Device d) {
  const MemoryStats s = memory_stats(d);
  return fmt::format("{}: current {}, peak {}, reserved {}", d.str(), format_bytes(s.current_bytes),
                     format_bytes(s.peak_bytes), format_bytes(s.reserved_bytes));
}

OutOfMemoryHook set_out_of_memory_hook(OutOfMemoryHook hook) {
  std::lock_guard<std::mutex> lock(g_oom_hook_mu);
  std::swap(hook, g_oom_hook);
  return hook;
}

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device, bool pinned) {
  std::shared_ptr<Storage> s(new Storage());
  s->bytes_ = bytes;
  s->device_ = device;
  s->pinned_ = pinned;
  if (device.is_cpu()) {
    if (pinned) {
      s->data_ = pinned_cache().get(pinned_size_class(bytes));
      g_pinned.add(bytes);
    } else {
      s->data_ = host_alloc(bytes);
      g_host.add(bytes);
    }
    return s;
  }
  STOKER_CHECK(!pinned, "Storage::allocate: pinned memory is host memory; pass Device::cpu()");
#if STOKER_WITH_CUDA
  STOKER_CHECK_HINT(device.index >= 0 && device.index < cuda_device_count(),
                    "use best_device() or check CUDA_VISIBLE_DEVICES", "cannot allocate on ",
                    device.str(), ": ", cuda_device_count(), " CUDA devices visible");
  configure_pool(device.index);
  DeviceScope scope(device.index);
  cudaStream_t stream = cuda_stream(device);
  void* p = nullptr;
  const cudaError_t e = cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, stream);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw OutOfMemoryError(
        fmt::format("CUDA out of memory: requested {} ({} bytes) on {}{}", format_bytes(bytes),
                    bytes, format_memory_stats(device), out_of_memory_context(device)),
        detail::where(__FILE__, __LINE__),
        "lower the batch size, use bf16/fp16, or enable activation checkpointing", bytes);
  }
  STOKER_CUDA_CHECK(e);
  s->data_ = p;
  s->stream_ = stream;
  s->graph_owned_ = g_capture_stream.load() == stream;
  if (s->graph_owned_) {
    g_graph_live_count.fetch_add(1);
    g_graph_live_bytes.fetch_add(static_cast<int64_t>(bytes));
  }
  g_device[device.index].add(bytes);
  return s;
#else
  STOKER_THROW("cannot allocate on ", device.str(),
               ": stoker was built without CUDA "
               "(reconfigure with -DSTOKER_WITH_CUDA=ON)");
#endif
}

Storage::~Storage() {
  if (!data_) return;
  if (device_.is_cpu()) {
    if (pinned_) {
      pinned_cache().put(data_, pinned_size_class(bytes_));
      g_pinned.sub(bytes_);
    } else {
      std::free(data_);
      g_host.sub(bytes_);
    }
    return;
  }
#if STOKER_WITH_CUDA
  g_device[device_.index].sub(bytes_);
  if (graph_owned_) {
    g_graph_live_count.fetch_sub(1);
    g_graph_live_bytes.fetch_sub(static_cast<int64_t>(bytes_));
  }
  if (!graph_owned_ && g_capture_stream.load() == stream_) {
    const std::lock_guard<std::mutex> lock(g_deferred_mu);
    g_deferred_frees.emplace_back(data_, stream_);
    return;
  }
  // Stream-ordered free: the block returns to the pool after work queued on its stream.
  if (cudaFreeAsync(data_, static_cast<cudaStream_t>(stream_)) != cudaSuccess) {
    // A destructor cannot throw; clear the error so it does not surface in an unrelated call.
    static std::atomic<bool> warned{false};
    const cudaError_t e = cudaGetLastError();
    if (!warned.exchange(true))
      std::fprintf(stderr, "stoker: warning: freeing device memory failed: %s\n",
                   cudaGetErrorString(e));
  }
#endif
}

namespace detail {

void begin_capture_frees(void* stream) { g_capture_stream.store(stream); }

GraphBlocks live_graph_blocks() { return {g_graph_live_count.load(), g_graph_live_bytes.load()}; }

void end_capture_frees() {
  g_capture_stream.store(nullptr);
  std::vector<std::pair<void*, void*>> frees;
  {
    const std::lock_guard<std::mutex> lock(g_deferred_mu);
    frees.swap(g_deferred_frees);
  }
#if STOKER_WITH_CUDA
  for (const auto& [p, stream] : frees) cudaFreeAsync(p, static_cast<cudaStream_t>(stream));
  cudaGetLastError();
#endif
}

}  // namespace detail

}  // namespace stoker::core
