#include "stoker/data/loader.h"

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <chrono>
#include <optional>

#include "stoker/core/error.h"
#include "stoker/data/decode.h"
#include "stoker/data/record.h"
#include "stoker/ops/image.h"

namespace stoker::data {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

// One batch in flight: pinned host pixels/labels, their device copies, and the events that
// order the copy (producer -> consumer) and the normalization (consumer -> producer's reuse).
struct Loader::Slot {
  Tensor pixels, labels;          // pinned host, u8 [B, S, S, 3] and i64 [B]
  Tensor dev_pixels, dev_labels;  // on the device (GPU loaders only)
  Event copied, consumed;
  bool consumed_recorded = false;
  int64_t generation = 0, batch = 0, count = 0;
  std::string error;  // policy fail: the first bad sample's key and reason
};

// Per-thread decode state, created lazily on each arena thread.
struct Loader::Workers {
  explicit Workers(int threads) : arena(threads) {}
  struct PerThread {
    JpegDecoder decoder;
    std::optional<LmdbImageDataset::Reader> reader;
  };
  tbb::task_arena arena;
  tbb::enumerable_thread_specific<PerThread> state;
  std::mutex stats_mu;
  double decode_s = 0, copy_s = 0;
};

Loader::Loader(const LmdbImageDataset& dataset, LoaderOptions options)
    : dataset_(dataset),
      options_(options),
      sampler_(dataset.size(), SamplerOptions{.shuffle = options.shuffle,
                                              .seed = options.seed,
                                              .rank = options.rank,
                                              .world_size = options.world_size,
                                              .tail = ShardTail::pad,
                                              .batch_size = options.batch_size,
                                              .drop_last = options.drop_last}) {
  STOKER_CHECK(options_.batch_size > 0 && options_.prefetch >= 1 && options_.threads >= 0,
               "Loader: batch_size (", options_.batch_size, ") and prefetch (", options_.prefetch,
               ") must be >= 1 and threads (", options_.threads, ") >= 0 (0 = all cores)");
  STOKER_CHECK(core::is_float(options_.dtype), "Loader: output dtype ", dtype_name(options_.dtype),
               " must be f32, f16 or bf16");
  STOKER_CHECK_HINT(dataset.size() > 0, "pack images with `stoker pack`",
                    "Loader: ", dataset.path().string(), " holds no samples");
  threads_ = options_.threads > 0 ? options_.threads
                                  : static_cast<int>(std::thread::hardware_concurrency());
  workers_ = std::make_unique<Workers>(threads_);
  const int64_t s = options_.transform.output_size, b = options_.batch_size;
  for (int i = 0; i < options_.prefetch + 1; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->pixels = Tensor::empty_pinned({b, s, s, 3}, DType::u8);
    slot->labels = Tensor::empty_pinned({b}, DType::i64);
    if (options_.device.is_cuda()) {
      slot->dev_pixels = Tensor::empty({b, s, s, 3}, DType::u8, options_.device);
      slot->dev_labels = Tensor::empty({b}, DType::i64, options_.device);
      slot->copied = Event::create(options_.device);
      slot->consumed = Event::create(options_.device);
    }
    free_.push_back(slot.get());
    slots_.push_back(std::move(slot));
  }
  producer_ = std::thread([this] { produce(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (producer_.joinable()) producer_.join();
  if (options_.device.is_cuda()) synchronize_device(options_.device);  // copies in flight
}

int64_t Loader::samples_per_epoch() const {
  return options_.drop_last ? sampler_.num_batches() * options_.batch_size : sampler_.num_samples();
}

void Loader::reset_queue(int64_t epoch, int64_t first_batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    while (!ready_.empty()) {
      free_.push_back(ready_.front());
      ready_.pop_front();
    }
    sampler_.set_epoch(epoch);
    STOKER_CHECK(first_batch >= 0 && first_batch <= sampler_.num_batches(),
                 "Loader::restore: "
                 "batch ",
                 first_batch, " outside an epoch of ", sampler_.num_batches(), " batches");
    epoch_ = epoch;
    next_to_fill_ = consumed_ = first_batch;
  }
  cv_.notify_all();
}

void Loader::start_epoch(int64_t epoch) { reset_queue(epoch, 0); }
void Loader::restore(int64_t epoch, int64_t batch_index) { reset_queue(epoch, batch_index); }

void Loader::produce() {
  for (;;) {
    Slot* slot = nullptr;
    int64_t epoch = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || (!free_.empty() && epoch_ >= 0 && next_to_fill_ < sampler_.num_batches());
      });
      if (stop_) return;
      slot = free_.front();
      free_.pop_front();
      slot->generation = generation_;
      slot->batch = next_to_fill_++;
      epoch = epoch_;
    }
    // The previous consumer of this slot may still be normalizing from its device buffer.
    if (slot->consumed_recorded) {
      while (!slot->consumed.query()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      slot->consumed_recorded = false;
    }
    slot->error.clear();
    try {
      fill(*slot, slot->batch, epoch);
    } catch (const std::exception& e) {
      slot->error = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (slot->generation == generation_) {
        ready_.push_back(slot);
      } else {
        free_.push_back(slot);  // start_epoch/restore moved on while this batch was made
      }
    }
    cv_.notify_all();
  }
}

void Loader::fill(Slot& slot, int64_t batch, int64_t epoch) {
  std::vector<int64_t> indices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto span = sampler_.batch(batch);
    indices.assign(span.begin(), span.end());
  }
  slot.count = static_cast<int64_t>(indices.size());
  const int64_t s = options_.transform.output_size;
  const size_t image_bytes = static_cast<size_t>(s * s * 3);
  uint8_t* pixels = static_cast<uint8_t*>(slot.pixels.data());
  int64_t* labels = static_cast<int64_t*>(slot.labels.data());
  std::mutex error_mu;
  std::string first_error;
  const int64_t n = dataset_.size();
  workers_->arena.execute([&] {
    tbb::parallel_for(int64_t{0}, static_cast<int64_t>(indices.size()), [&](int64_t i) {
      auto& st = workers_->state.local();
      if (!st.reader) st.reader.emplace(dataset_);
      const auto t0 = Clock::now();
      // Policy skip: walk forward from the sampled index to the next sample that decodes.
      const int64_t tries = options_.on_corrupt == CorruptPolicy::skip ? n : 1;
      std::string reason;
      for (int64_t k = 0; k < tries; ++k) {
        const int64_t idx = (indices[i] + k) % n;
        std::string err;
        const auto sample = st.reader->try_read(idx, &err);
        if (sample) {
          try {
            augment_into(st.decoder, sample->payload, sample_key(idx), static_cast<uint64_t>(epoch),
                         static_cast<uint64_t>(idx), options_.transform,
                         pixels + static_cast<size_t>(i) * image_bytes);
            labels[i] = sample->label;
            if (k > 0) skipped_.fetch_add(k);
            std::lock_guard<std::mutex> lock(workers_->stats_mu);
            workers_->decode_s += since(t0);
            return;
          } catch (const std::exception& e) {
            err = e.what();
          }
        }
        if (reason.empty()) reason = err;
      }
      std::lock_guard<std::mutex> lock(error_mu);
      if (first_error.empty()) {
        first_error = options_.on_corrupt == CorruptPolicy::skip
                          ? "no valid sample left to replace a bad one: " + reason
                          : reason +
                                " (set LoaderOptions::on_corrupt = CorruptPolicy::skip to "
                                "replace bad samples)";
      }
    });
  });
  STOKER_CHECK(first_error.empty(), "Loader (", dataset_.path().string(), ", epoch ", epoch,
               ", batch ", batch, "): ", first_error);
  if (options_.device.is_cuda()) {
    const auto t0 = Clock::now();
    const core::StreamGuard guard(core::copy_stream(options_.device));
    core::detail::copy_bytes(slot.dev_pixels, slot.pixels);
    core::detail::copy_bytes(slot.dev_labels, slot.labels);
    slot.copied.record(core::copy_stream(options_.device));
    std::lock_guard<std::mutex> lock(workers_->stats_mu);
    workers_->copy_s += since(t0);
  }
}

bool Loader::next(Batch& batch) {
  STOKER_CHECK(epoch_ >= 0, "Loader::next called before start_epoch");
  Slot* slot = nullptr;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (consumed_ >= sampler_.num_batches()) return false;
    const auto t0 = Clock::now();
    const bool ok =
        cv_.wait_for(lock, std::chrono::duration<double>(options_.stall_timeout_s),
                     [&] { return !ready_.empty() && ready_.front()->generation == generation_; });
    counters_.consumer_wait_s += since(t0);
    STOKER_CHECK_HINT(ok, "raise LoaderOptions::stall_timeout_s for very slow storage", "Loader (",
                      dataset_.path().string(), "): no batch for ", options_.stall_timeout_s,
                      " s (epoch ", epoch_, ", batch ", consumed_,
                      "): the decode threads made no progress");
    slot = ready_.front();
    ready_.pop_front();
    ++consumed_;
  }
  auto give_back = [&] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(slot);
    }
    cv_.notify_all();
  };
  if (!slot->error.empty()) {
    const std::string error = slot->error;
    give_back();
    throw Error(error, "loader.cpp (decode thread)", "");
  }
  const int64_t b = slot->count, s = options_.transform.output_size;
  const Shape out_shape =
      options_.layout == ops::Layout::nchw ? Shape{b, 3, s, s} : Shape{b, s, s, 3};
  Tensor input = Tensor::empty(out_shape, options_.dtype, options_.device);
  Tensor target = Tensor::empty({b}, DType::i64, options_.device);
  if (options_.device.is_cuda()) {
    const Stream stream = core::current_stream(options_.device);
    slot->copied.block(stream);
    ops::normalize_images(input, slot->dev_pixels.slice(0, b), options_.mean, options_.std,
                          options_.layout);
    core::detail::copy_bytes(target, slot->dev_labels.slice(0, b));
    slot->consumed.record(stream);
    slot->consumed_recorded = true;
  } else {
    ops::normalize_images(input, slot->pixels.slice(0, b), options_.mean, options_.std,
                          options_.layout);
    core::detail::copy_bytes(target, slot->labels.slice(0, b));
  }
  give_back();
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.batches += 1;
    counters_.samples += b;
  }
  batch.input = input;
  batch.target = target;
  batch.size = b;
  return true;
}

LoaderCounters Loader::counters() const {
  LoaderCounters c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = counters_;
  }
  {
    std::lock_guard<std::mutex> lock(workers_->stats_mu);
    c.decode_s = workers_->decode_s;
    c.copy_s = workers_->copy_s;
  }
  c.skipped = skipped_.load();
  return c;
}

}  // namespace stoker::data
