// SequenceBatches (include/stoker/data/sequence_batches.h): the mixture schedule, the epoch's
// slicing into ranks and batches (with continuations), and the worker ring that fills batches.
//
// Why not the image Loader's ring: its slots, opener and workers are built around LMDB reads,
// JPEG decoding and a device-side normalization kernel; a token row is one memcpy-sized read of a
// mapping, so a small job queue of rows (below) is all the parallelism it needs.
#include "stoker/data/sequence_batches.h"

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "core/tensor_copy.h"
#include "stoker/core/error.h"
#include "stoker/core/stream.h"
#include "util/checksum.h"

namespace stoker::data {

namespace {

constexpr int64_t kPeriod = int64_t{1} << 20;
constexpr int kMaxSources = 255;

}  // namespace

// ---- GPU delivery slots ----------------------------------------------------------------------

// The pinned rows the workers fill, the device buffers the copy stream fills from them, and the
// events: `copied` (copy stream: the copy has run, the pinned rows may be rewritten) and
// `consumed` (consumer's stream: next() has read the device buffers, the next copy may overwrite
// them). Why device buffers of its own and a device-to-device copy in next(), not the caller's
// tensors filled directly: the pool frees a block on the stream that allocated it, so a tensor
// the copy stream allocated could be handed out again while the compute stream still reads it;
// fresh tensors of the consumer's stream are freed in its order (as the Loader's normalization).
struct SequenceBatches::Staging {
  Batch host, device;
  Event copied, consumed;
  std::atomic<bool> copy_queued{false};  // `copied` was recorded at least once

  // Before the pinned rows are rewritten: their last copy must have run. Polled, not
  // Event::synchronize: this is not a host sync of the step (the copy is long queued).
  void wait_copied() const {
    if (!copy_queued.load(std::memory_order_acquire)) return;
    while (!copied.query()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
};

SequenceBatches::Staging* SequenceBatches::acquire_slot() {
  {
    std::lock_guard<std::mutex> lock(slot_mu_);
    if (!free_slots_.empty()) {
      Staging* slot = free_slots_.front();
      free_slots_.pop_front();
      return slot;
    }
  }
  // Allocated on the consumer's stream (freed in its order); `consumed` recorded after the
  // allocation orders the first copy into the buffers after it.
  auto slot = std::make_unique<Staging>();
  slot->host = empty_batch();
  auto make = [&](const Tensor& like) {
    return like.defined() ? Tensor::empty(like.shape(), like.dtype(), options_.device) : Tensor();
  };
  slot->device.input = make(slot->host.input);
  slot->device.target = make(slot->host.target);
  slot->device.positions = make(slot->host.positions);
  slot->device.documents = make(slot->host.documents);
  slot->device.size = slot->host.size;
  slot->copied = Event::create(options_.device);
  slot->consumed = Event::create(options_.device);
  slot->consumed.record(core::current_stream(options_.device));
  std::lock_guard<std::mutex> lock(slot_mu_);
  slots_.push_back(std::move(slot));
  return slots_.back().get();
}

void SequenceBatches::release_slot(Staging* slot) {
  std::lock_guard<std::mutex> lock(slot_mu_);
  free_slots_.push_back(slot);
}

void SequenceBatches::queue_copy(Staging& slot) const {
  const Stream copy = core::copy_stream(options_.device);
  const core::StreamGuard guard(copy);
  slot.consumed.block(copy);  // next()'s read of the device buffers' previous batch
  for (const auto& [dst, src] : {std::pair{slot.device.input, slot.host.input},
                                 std::pair{slot.device.target, slot.host.target},
                                 std::pair{slot.device.positions, slot.host.positions},
                                 std::pair{slot.device.documents, slot.host.documents}})
    if (src.defined()) core::detail::copy_bytes_unowned(dst, src);  // the slot outlives it
  slot.copied.record(copy);
  slot.copy_queued.store(true, std::memory_order_release);
}

Batch SequenceBatches::deliver(Staging& slot) const {
  const Stream stream = core::current_stream(options_.device);
  slot.copied.block(stream);
  auto take = [&](const Tensor& staged) {
    if (!staged.defined()) return Tensor();
    Tensor out = Tensor::empty(staged.shape(), staged.dtype(), options_.device);
    core::detail::copy_bytes(out, staged);
    return out;
  };
  Batch batch;
  batch.input = take(slot.device.input);
  batch.target = take(slot.device.target);
  batch.positions = take(slot.device.positions);
  batch.documents = take(slot.device.documents);
  batch.size = slot.device.size;
  slot.consumed.record(stream);
  return batch;
}

// ---- the worker ring -------------------------------------------------------------------------

// Jobs are batches in delivery order; workers take rows of the oldest unfinished one. A job is
// shared with the workers, so one dropped by a reset is finished into buffers nobody reads. To a
// GPU a job fills a slot, and the worker that finishes its last row queues the slot's copy; a
// dropped job's slot goes back once no worker is inside it (`active`).
struct SequenceBatches::Ring {
  struct Job {
    int64_t epoch = 0, batch = 0;
    int64_t start = 0, first = 0;  // the epoch's plan (SequenceBatches::fill_row)
    Batch host;                    // CPU: the batch itself
    Staging* slot = nullptr;       // GPU: where it is assembled (host is then slot->host)
    int64_t next_row = 0, rows_left = 0;
    int active = 0;          // workers filling a row of it or queueing its copy
    bool done = false;       // every row filled (and, to a GPU, the copy queued)
    bool cancelled = false;  // dropped by seek/clear
    std::exception_ptr error;
  };

  explicit Ring(SequenceBatches& owner) : owner(owner) {
    for (int i = 0; i < owner.options_.threads; ++i) workers.emplace_back([this] { work(); });
  }
  ~Ring() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    work_cv.notify_all();
    for (auto& t : workers) t.join();
  }

  void work() {
    const int64_t bs = owner.options_.batch_size;
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      std::shared_ptr<Job> job;
      work_cv.wait(lock, [&] {
        if (stop) return true;
        for (auto& j : jobs)
          if (j->next_row < bs) {
            job = j;
            return true;
          }
        return false;
      });
      if (stop) return;
      const int64_t row = job->next_row++;
      ++job->active;
      lock.unlock();
      std::exception_ptr error;
      try {
        if (job->slot) job->slot->wait_copied();
        owner.fill_row(job->epoch, job->start, job->first, job->batch, row, job->host);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && !job->error) job->error = error;
      const bool last = --job->rows_left == 0;
      if (last && job->slot && !job->error && !job->cancelled) {
        lock.unlock();
        try {
          owner.queue_copy(*job->slot);
        } catch (...) {
          error = std::current_exception();
        }
        lock.lock();
        if (error && !job->error) job->error = error;
      }
      --job->active;
      if (last) {
        job->done = true;
        done_cv.notify_all();
      }
      release_if_idle(*job);
    }
  }

  // A dropped job's slot, once no worker is inside it (under mu).
  void release_if_idle(Job& job) {
    if (job.cancelled && job.active == 0 && job.slot) {
      owner.release_slot(job.slot);
      job.slot = nullptr;
    }
  }
  void cancel(const std::shared_ptr<Job>& job) {
    job->cancelled = true;
    release_if_idle(*job);
  }

  // Opens jobs after the last one (or from (epoch, batch) when empty) up to `depth`.
  void top_up(int64_t epoch, int64_t batch) {
    std::lock_guard<std::mutex> lock(mu);
    while (static_cast<int>(jobs.size()) < owner.options_.prefetch) {
      int64_t e = epoch, b = batch;
      if (!jobs.empty()) {
        e = jobs.back()->epoch;
        b = jobs.back()->batch + 1;
        if (b >= owner.batches_) {
          ++e;
          b = owner.first_batch(e);
        }
      }
      auto job = std::make_shared<Job>();
      job->epoch = e;
      job->batch = b;
      job->start = owner.start_of(e);
      job->first = owner.first_batch(e);
      if (owner.options_.device.is_cuda()) {
        job->slot = owner.acquire_slot();
        job->host = job->slot->host;  // shares the pinned buffers
      } else {
        job->host = owner.empty_batch();
      }
      job->rows_left = owner.options_.batch_size;
      jobs.push_back(std::move(job));
    }
    work_cv.notify_all();
  }

  // Drops every job that is not (epoch, batch) or after it.
  void seek(int64_t epoch, int64_t batch) {
    std::lock_guard<std::mutex> lock(mu);
    while (!jobs.empty() && (jobs.front()->epoch != epoch || jobs.front()->batch != batch)) {
      cancel(jobs.front());
      jobs.pop_front();
    }
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& job : jobs) cancel(job);
    jobs.clear();
  }

  // Waits for (epoch, batch) — the oldest job after top_up() — and takes it.
  std::shared_ptr<Job> take(int64_t epoch, int64_t batch) {
    seek(epoch, batch);
    top_up(epoch, batch);
    std::unique_lock<std::mutex> lock(mu);
    std::shared_ptr<Job> job = jobs.front();
    done_cv.wait(lock, [&] { return job->done; });
    jobs.pop_front();
    return job;
  }

  SequenceBatches& owner;
  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::deque<std::shared_ptr<Job>> jobs;
  bool stop = false;
  std::vector<std::thread> workers;
};

// ---- construction ----------------------------------------------------------------------------

SequenceBatches::SequenceBatches(std::vector<SequenceSource> sources,
                                 SequenceBatchesOptions options)
    : sources_(std::move(sources)), options_(options) {
  STOKER_CHECK(!sources_.empty(), "SequenceBatches: no source");
  STOKER_CHECK(static_cast<int>(sources_.size()) <= kMaxSources,
               "SequenceBatches: ", sources_.size(), " sources, more than the ", kMaxSources,
               " a mixture may have");
  STOKER_CHECK(options_.batch_size > 0, "SequenceBatches: batch_size ", options_.batch_size,
               " must be positive");
  STOKER_CHECK(
      options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size,
      "SequenceBatches: rank ", options_.rank, " is not in [0, world_size = ", options_.world_size,
      ")");
  STOKER_CHECK(options_.dtype == DType::i32 || options_.dtype == DType::i64,
               "SequenceBatches: dtype must be i32 or i64");
  STOKER_CHECK(options_.threads >= 0 && options_.prefetch >= 1, "SequenceBatches: threads ",
               options_.threads, " must be >= 0 and prefetch ", options_.prefetch, " >= 1");
  STOKER_CHECK(options_.sequences_per_epoch >= 0, "SequenceBatches: sequences_per_epoch ",
               options_.sequences_per_epoch, " must be >= 0 (0: the sources' sequences)");
  double total = 0;
  int64_t sum = 0;
  for (auto& s : sources_) {
    STOKER_CHECK(s.sequences != nullptr, "SequenceBatches: a source without sequences");
    if (s.name.empty()) s.name = s.sequences->name();
    STOKER_CHECK_HINT(std::isfinite(s.weight) && s.weight > 0,
                      "give every source a positive weight, e.g. --mix \"a.idx:0.7,b:0.3\"",
                      "SequenceBatches: the weight ", s.weight, " of ", s.name,
                      " must be positive");
    STOKER_CHECK_HINT(s.sequences->context() == sources_.front().sequences->context(),
                      "cut every source with the same context", "SequenceBatches: ", s.name,
                      " has context ", s.sequences->context(), ", ", sources_.front().name, " has ",
                      sources_.front().sequences->context());
    total += s.weight;
    sum += s.sequences->size();
  }
  m_ = options_.sequences_per_epoch > 0 ? options_.sequences_per_epoch : sum;

  // Quotas of the period: largest remainders, at least one each.
  const auto n = static_cast<int>(sources_.size());
  period_ = n == 1 ? 1 : kPeriod;
  quota_.assign(static_cast<size_t>(n), 0);
  std::vector<std::pair<double, int>> remainders;
  int64_t given = 0;
  for (int s = 0; s < n; ++s) {
    const double exact = sources_[static_cast<size_t>(s)].weight / total * period_;
    quota_[static_cast<size_t>(s)] = std::max<int64_t>(1, static_cast<int64_t>(exact));
    given += quota_[static_cast<size_t>(s)];
    remainders.push_back({exact - std::floor(exact), s});
  }
  std::sort(remainders.begin(), remainders.end(), [](auto& a, auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  for (size_t i = 0; given < period_; i = (i + 1) % remainders.size(), ++given)
    ++quota_[static_cast<size_t>(remainders[i].second)];
  while (given > period_) {  // minimum quotas took too much: take from the largest
    auto it = std::max_element(quota_.begin(), quota_.end());
    --*it;
    --given;
  }
  // The smooth weighted round-robin over one period (exact integers).
  period_source_.resize(static_cast<size_t>(period_));
  period_rank_.resize(static_cast<size_t>(period_));
  std::vector<int64_t> count(static_cast<size_t>(n), 0);
  for (int64_t g = 0; g < period_; ++g) {
    int best = 0;
    int64_t best_deficit = INT64_MIN;
    for (int s = 0; s < n; ++s) {
      const int64_t deficit =
          (g + 1) * quota_[static_cast<size_t>(s)] - count[static_cast<size_t>(s)] * period_;
      if (deficit > best_deficit) {
        best_deficit = deficit;
        best = s;
      }
    }
    period_source_[static_cast<size_t>(g)] = static_cast<uint8_t>(best);
    period_rank_[static_cast<size_t>(g)] =
        static_cast<uint32_t>(count[static_cast<size_t>(best)]++);
  }

  const int64_t per_batch = options_.world_size * options_.batch_size;
  batches_ = options_.tail == ShardTail::pad ? (m_ + per_batch - 1) / per_batch : m_ / per_batch;
  STOKER_CHECK_HINT(batches_ > 0, "use a smaller batch or context, fewer ranks, or ShardTail::pad",
                    "SequenceBatches: an epoch of ", m_, " sequences makes no full batch of ",
                    options_.batch_size, " on each of ", options_.world_size, " ranks");
  if (options_.threads > 0) ring_ = std::make_unique<Ring>(*this);
}

SequenceBatches::~SequenceBatches() {
  ring_.reset();  // no worker queues a copy any more
  // Copies in flight must end before their slots' buffers are freed. A destructor must not throw
  // (that ends the process): a device that already failed is reported, not rethrown.
  for (const auto& slot : slots_) {
    if (!slot->copy_queued.load()) continue;
    try {
      slot->copied.synchronize();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "stoker SequenceBatches: while shutting down: %s\n", e.what());
      break;
    }
  }
}

// ---- the order -------------------------------------------------------------------------------

SequenceBatches::Slot SequenceBatches::slot(int64_t g) const {
  const int64_t k = g % period_;
  const int s = period_source_[static_cast<size_t>(k)];
  const int64_t c =
      (g / period_) * quota_[static_cast<size_t>(s)] + period_rank_[static_cast<size_t>(k)];
  const int64_t n = sources_[static_cast<size_t>(s)].sequences->size();
  const int64_t f = c / n, pos = c % n;
  if (!options_.shuffle) return {s, pos};
  const IndexPermutation perm(n, options_.seed, (static_cast<uint64_t>(s) << 40) + f + 1);
  return {s, perm(pos)};
}

int64_t SequenceBatches::taken(int s, int64_t g) const {
  const int64_t k = g % period_;
  int64_t c = (g / period_) * quota_[static_cast<size_t>(s)];
  for (int64_t i = 0; i < k; ++i) c += period_source_[static_cast<size_t>(i)] == s;
  return c;
}

int64_t SequenceBatches::start_of(int64_t epoch) const {
  return epoch == cont_epoch_ ? cont_progress_ : 0;
}

int64_t SequenceBatches::first_batch(int64_t epoch) const {
  const int64_t per_batch = options_.world_size * options_.batch_size;
  const int64_t left = m_ - start_of(epoch);
  const int64_t batches =
      options_.tail == ShardTail::pad ? (left + per_batch - 1) / per_batch : left / per_batch;
  return batches_ - batches;
}

std::vector<int64_t> SequenceBatches::batch_slots(int64_t epoch, int64_t b) const {
  const int64_t first = first_batch(epoch);
  STOKER_CHECK(epoch >= 0 && b >= first && b < batches_, "SequenceBatches: batch ", b,
               " is not in [", first, ", ", batches_, ") of epoch ", epoch);
  std::vector<int64_t> slots;
  const int64_t base =
      start_of(epoch) + ((b - first) * options_.world_size + options_.rank) * options_.batch_size;
  for (int64_t j = 0; j < options_.batch_size; ++j) {
    int64_t i = base + j;
    if (i >= m_) i = (i - m_) % m_;  // pad: the epoch's first slots again
    slots.push_back(epoch * m_ + i);
  }
  return slots;
}

// ---- batches ---------------------------------------------------------------------------------

Batch SequenceBatches::empty_batch() const {
  const int64_t bs = options_.batch_size, t = sources_.front().sequences->context();
  const bool pin = options_.device.is_cuda();
  auto make = [&](const Shape& shape) {
    return pin ? Tensor::empty_pinned(shape, options_.dtype) : Tensor::empty(shape, options_.dtype);
  };
  Batch b;
  b.input = make({bs, t});
  b.target = make({bs * t});
  if (options_.document_masks) {
    b.positions = make({bs, t});
    b.documents = make({bs, t});
  }
  b.size = bs;
  return b;
}

void SequenceBatches::fill_row(int64_t epoch, int64_t start, int64_t first, int64_t b, int64_t row,
                               Batch& host) const {
  const int64_t t = sources_.front().sequences->context();
  const int64_t bs = options_.batch_size;
  int64_t i = start + ((b - first) * options_.world_size + options_.rank) * bs + row;
  if (i >= m_) i = (i - m_) % m_;
  const Slot s = slot(epoch * m_ + i);
  const size_t offset = static_cast<size_t>(row * t) * dtype_size(options_.dtype);
  auto at = [&](const Tensor& x) {
    return x.defined() ? static_cast<char*>(x.data()) + offset : nullptr;
  };
  sources_[static_cast<size_t>(s.source)].sequences->fill(s.sequence, options_.dtype,
                                                          at(host.input), at(host.target),
                                                          at(host.positions), at(host.documents));
}

Batch SequenceBatches::assemble(int64_t epoch, int64_t b) const {
  Batch host = empty_batch();
  const int64_t start = start_of(epoch), first = first_batch(epoch);
  for (int64_t row = 0; row < options_.batch_size; ++row)
    fill_row(epoch, start, first, b, row, host);
  return host;
}

bool SequenceBatches::next(Batch& batch) {
  STOKER_CHECK(epoch_ >= 0, "SequenceBatches::next called before start_epoch");
  if (batch_ >= batches_) return false;
  const bool gpu = options_.device.is_cuda();
  Batch host;
  Staging* slot = nullptr;
  if (ring_) {
    auto job = ring_->take(epoch_, batch_);
    if (job->error) {
      if (job->slot) release_slot(job->slot);
      ring_->clear();
      std::rethrow_exception(job->error);
    }
    host = std::move(job->host);
    slot = job->slot;
    ring_->top_up(epoch_, batch_ + 1);
  } else if (gpu) {
    slot = acquire_slot();
    try {
      slot->wait_copied();
      const int64_t start = start_of(epoch_), first = first_batch(epoch_);
      for (int64_t row = 0; row < options_.batch_size; ++row)
        fill_row(epoch_, start, first, batch_, row, slot->host);
      queue_copy(*slot);
    } catch (...) {
      release_slot(slot);
      throw;
    }
  } else {
    host = assemble(epoch_, batch_);
  }
  ++batch_;
  if (!gpu) {
    batch = std::move(host);
    return true;
  }
  try {
    batch = deliver(*slot);
  } catch (...) {
    release_slot(slot);
    throw;
  }
  release_slot(slot);
  return true;
}

void SequenceBatches::start_epoch(int64_t epoch) {
  STOKER_CHECK(epoch >= 0, "SequenceBatches::start_epoch: epoch ", epoch, " must be >= 0");
  // Batches prepared for the continued epoch (or later) followed its plan; those of the plain
  // epochs after it stay valid.
  if (cont_epoch_ >= epoch && ring_) ring_->clear();
  cont_epoch_ = -1;
  cont_progress_ = 0;
  epoch_ = epoch;
  batch_ = 0;
}

void SequenceBatches::restore(int64_t epoch, int64_t batch_index) {
  start_epoch(epoch);
  STOKER_CHECK(batch_index >= 0 && batch_index <= batches_, "SequenceBatches::restore: batch ",
               batch_index, " is outside the epoch of ", batches_, " batches");
  batch_ = batch_index;
}

int64_t SequenceBatches::epoch_progress() const {
  if (epoch_ < 0) return 0;
  const int64_t done = std::max<int64_t>(0, batch_ - first_batch(epoch_));
  return std::min(m_, start_of(epoch_) + done * options_.world_size * options_.batch_size);
}

bool SequenceBatches::continue_epoch(int64_t epoch, int64_t progress) {
  STOKER_CHECK(epoch >= 0, "SequenceBatches::continue_epoch: epoch ", epoch, " must be >= 0");
  STOKER_CHECK(progress >= 0 && progress <= m_, "SequenceBatches::continue_epoch: epoch progress ",
               progress, " is not in [0, ", m_, "] (sequences of the epoch the job consumed)");
  if (ring_) ring_->clear();
  cont_epoch_ = epoch;
  cont_progress_ = progress;
  epoch_ = epoch;
  batch_ = first_batch(epoch);
  return true;
}

// ---- reports ---------------------------------------------------------------------------------

std::vector<SourceProgress> SequenceBatches::source_progress() const {
  const int64_t g = std::max<int64_t>(0, epoch_) * m_ + epoch_progress();
  double total = 0;
  for (const auto& s : sources_) total += s.weight;
  std::vector<SourceProgress> out;
  for (int s = 0; s < num_sources(); ++s) {
    const auto& src = sources_[static_cast<size_t>(s)];
    out.push_back({src.name, src.weight / total, src.sequences->size(), taken(s, g)});
  }
  return out;
}

std::string SequenceBatches::report() const {
  std::string out;
  for (const auto& p : source_progress()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ": weight %.4f, %.3f epochs (", p.weight, p.epochs());
    out += fmt::format("{}{}{} of its {} sequences)\n", p.name, buf, p.taken, p.sequences);
  }
  return out;
}

SourceIdentity SequenceBatches::identity() const {
  constexpr int64_t kEdgeTokens = 4096;
  SourceIdentity id;
  id.batch_size = options_.batch_size;
  id.seed = options_.seed;
  id.samples = m_;
  std::string fp =
      fmt::format("token sequences, {} per epoch{}{}", m_, options_.shuffle ? "" : ", in order",
                  options_.tail == ShardTail::pad ? "" : ", tail dropped");
  for (int s = 0; s < num_sources(); ++s) {
    const TokenSequences& seq = *sources_[static_cast<size_t>(s)].sequences;
    const TokenCorpus& c = seq.corpus();
    const int64_t n = c.num_tokens();
    const int64_t head = std::min(n, kEdgeTokens);
    const int64_t tail_start = std::max(head, n - kEdgeTokens);
    std::vector<int64_t> edges(static_cast<size_t>(head + (n - tail_start)));
    c.read(0, head, edges.data());
    c.read(tail_start, n - tail_start, edges.data() + head);
    fp += fmt::format(
        "; [{}] quota {}/{}: {} tokens of {} documents, {} sequences of {}{}, corpus xxh3 of the "
        "first and last {} tokens {}",
        s, quota_[static_cast<size_t>(s)], period_, seq.num_tokens(), seq.num_documents(),
        seq.size(), seq.context() + 1, seq.options().cross_documents ? "" : " per document",
        kEdgeTokens,
        util::checksum_hex(util::checksum64(edges.data(), edges.size() * sizeof(int64_t))));
    id.location += (s ? ", " : "") + sources_[static_cast<size_t>(s)].name;
  }
  id.fingerprint = fp;
  return id;
}

}  // namespace stoker::data
