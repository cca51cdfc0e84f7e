// Streams and events on a GPU: the role streams, StreamGuard routing ops to another stream, and
// Event::record/block ordering work across streams. Ordering is checked deterministically: a
// host callback holds a stream closed (a "gate") until the test opens it, so a missing wait
// shows up as a wrong value, not as a timing race. Kernels launched behind a gate must have run
// once before (CUDA lazy loading synchronizes the device on a kernel's first launch).
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "test_util.h"

#if STOKER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace stoker::core {
namespace {

using test::gpu;

#if STOKER_WITH_CUDA
// Blocks stream `s` (from the host's point of view: its later work does not start) until
// open() or destruction.
class Gate {
 public:
  explicit Gate(const Stream& s) {
    EXPECT_EQ(cudaLaunchHostFunc(static_cast<cudaStream_t>(s.handle()), &Gate::wait, this),
              cudaSuccess);
  }
  ~Gate() { open(); }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  static void CUDART_CB wait(void* p) {
    auto* g = static_cast<Gate*>(p);
    std::unique_lock<std::mutex> lock(g->mu_);
    g->cv_.wait(lock, [g] { return g->open_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};
#endif

TEST(StreamGpuTest, RoleStreamsExistAndDiffer) {
  STOKER_REQUIRE_GPU();
  const Stream compute = compute_stream(gpu()), copy = copy_stream(gpu()),
               comm = comm_stream(gpu());
  for (const Stream& s : {compute, copy, comm}) {
    EXPECT_TRUE(s.is_cuda());
    EXPECT_NE(s.handle(), nullptr);
    EXPECT_EQ(s.device(), gpu());
  }
  EXPECT_NE(compute.handle(), copy.handle());
  EXPECT_NE(compute.handle(), comm.handle());
  EXPECT_NE(copy.handle(), comm.handle());
  EXPECT_EQ(compute_stream(gpu()), compute) << "long-lived: the same stream every call";
  EXPECT_EQ(current_stream(gpu()), compute) << "ops run on the compute stream by default";
}

TEST(StreamGpuTest, GuardSetsAndRestoresTheCurrentStream) {
  STOKER_REQUIRE_GPU();
  const Stream a = Stream::create(gpu());
  const Stream b = Stream::create(gpu(), /*priority=*/-1);
  EXPECT_NE(a.handle(), b.handle());
  EXPECT_NE(a.handle(), compute_stream(gpu()).handle());
  {
    StreamGuard ga(a);
    EXPECT_EQ(current_stream(gpu()), a);
    {
      StreamGuard gb(b);
      EXPECT_EQ(current_stream(gpu()), b);
    }
    EXPECT_EQ(current_stream(gpu()), a);
  }
  EXPECT_EQ(current_stream(gpu()), compute_stream(gpu()));
}

TEST(StreamGpuTest, SynchronizeCountsHostSyncs) {
  STOKER_REQUIRE_GPU();
  const Stream s = Stream::create(gpu());
  uint64_t before = host_sync_count();
  s.synchronize();
  EXPECT_EQ(host_sync_count(), before + 1);
  EXPECT_TRUE(s.query());
  EXPECT_EQ(host_sync_count(), before + 1) << "query() is not a sync";
  before = host_sync_count();
  synchronize_device(gpu());
  EXPECT_EQ(host_sync_count(), before + 1);
  Event e = Event::create(gpu());
  EXPECT_NE(e.handle(), nullptr);
  e.record(s);
  before = host_sync_count();
  e.synchronize();
  EXPECT_EQ(host_sync_count(), before + 1);
  EXPECT_TRUE(e.query());
}

#if STOKER_WITH_CUDA
TEST(StreamGpuTest, OpsRunOnTheGuardsStream) {
  STOKER_REQUIRE_GPU();
  const Tensor x = test::poisoned({1 << 16}, DType::f32, gpu());  // also loads the fill kernel
  synchronize_device(gpu());
  const Stream s = Stream::create(gpu());
  {
    Gate gate(s);
    {
      StreamGuard guard(s);
      ops::fill(x, 7.0);
    }
    EXPECT_FALSE(s.query()) << "the fill waits behind the gate on the guard's stream";
    EXPECT_TRUE(compute_stream(gpu()).query()) << "nothing was queued on the compute stream";
    gate.open();
    s.synchronize();
  }
  EXPECT_TRUE(test::matches_rounded(x, std::vector<float>(1 << 16, 7.0f)));
}

TEST(StreamGpuTest, EventOrdersWorkAcrossStreams) {
  STOKER_REQUIRE_GPU();
  const int64_t n = (1 << 20) + 3;
  const Tensor x = test::poisoned({n}, DType::f32, gpu());
  const Tensor y = Tensor::empty({n}, DType::f32, gpu());
  ops::fill(y, 1.0);
  // Run every kernel used behind the gate once first: with CUDA's lazy module loading, the first
  // launch of a kernel loads its module, which waits for the whole device, gated stream included.
  ops::axpy(y, 0.0f, y);
  synchronize_device(gpu());
  const Stream a = Stream::create(gpu());
  const Stream b = Stream::create(gpu());
  Event ready = Event::create(gpu());
  {
    Gate gate(a);  // stream a cannot run until the gate opens
    {
      StreamGuard guard(a);
      ops::fill(x, 3.0);
    }
    ready.record(a);
    ready.block(b);  // b waits for a's fill, on the device
    {
      StreamGuard guard(b);
      ops::axpy(y, 2.0f, x);  // without the wait this would read the NaN poison
    }
    EXPECT_FALSE(b.query()) << "b must wait for the event of gated stream a";
    EXPECT_FALSE(ready.query());
    gate.open();
    b.synchronize();
  }
  EXPECT_TRUE(ready.query());
  EXPECT_TRUE(test::matches_rounded(y, std::vector<float>(static_cast<size_t>(n), 7.0f)));
}

TEST(StreamGpuTest, TimingEvents) {
  STOKER_REQUIRE_GPU();
  Event start = Event::create(gpu(), /*timing=*/true);
  Event end = Event::create(gpu(), /*timing=*/true);
  const Tensor x = Tensor::empty({1 << 20}, DType::f32, gpu());
  start.record(current_stream(gpu()));
  ops::random_normal(x, 0.0f, 1.0f, 1, 0);
  end.record(current_stream(gpu()));
  end.synchronize();
  const float ms = Event::elapsed_ms(start, end);
  EXPECT_GE(ms, 0.0f);
  EXPECT_TRUE(std::isfinite(ms));
}
#endif

}  // namespace
}  // namespace stoker::core
