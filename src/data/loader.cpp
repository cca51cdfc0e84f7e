// Loader: an opener thread that assigns batch positions to pinned slots, a pool of worker
// threads that fill them sample by sample, and the consumer's next(). See loader.h for the
// design; the invariants that keep it simple:
//  - positions are global, position = epoch * batches_per_epoch + batch; the opener hands them
//    out in increasing order, so outstanding_ (opened, not yet delivered) is in position order
//    and its front is always the batch next() delivers;
//  - every field of a Slot that more than one thread touches is read and written under mu_,
//    except the pixel/label rows, which exactly one worker writes per sample and the consumer
//    reads only after `done` was set under mu_;
//  - a slot leaves outstanding_ either to the consumer or by cancellation; a cancelled slot
//    goes back to free_ once no thread works on it any more (release_if_idle_locked).
#include "stoker/data/loader.h"

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "data/loader_autotune.h"
#include "ops/image.h"
#include "stoker/core/error.h"
#include "stoker/data/decode.h"
#include "stoker/data/lmdb_dataset.h"
#include "util/checksum.h"

namespace stoker::data {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
double since(Clock::time_point t) { return seconds_between(t, Clock::now()); }

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  return buf;
}

// Reasons kept per replacement walk (only Loader::kLoggedSkipsPerEpoch per epoch are printed).
constexpr int64_t kReasonsPerWalk = 8;

constexpr const char* kSkipHint =
    "to replace bad samples by the next valid ones, pass `--on-corrupt skip` (the example "
    "trainers) or set LoaderOptions::on_corrupt = CorruptPolicy::skip; `stoker info --verify DB` "
    "lists every bad record";
constexpr const char* kRepairHint =
    "too many bad records to replace: check the database with `stoker info --verify DB` and "
    "re-pack it (`stoker pack ...`)";
}  // namespace

// ---------------------------------------------------------------------------------------------
// The autotuner's policy.

LoaderTuning autotune_policy(const LoaderWindow& w, LoaderTuning current,
                             const AutotuneLimits& limits, std::string* reason) {
  auto say = [&](const std::string& text) {
    if (reason) *reason = text;
  };
  const double busy = w.seconds - w.consumer_wait_s;
  if (w.samples_made <= 0 || w.samples <= 0 || w.worker_s <= 0 || w.seconds <= 0 || busy <= 0) {
    say("too little measured in this window: unchanged");
    return current;
  }
  const double cost = w.worker_s / static_cast<double>(w.samples_made);  // thread-s per sample
  const double demand = static_cast<double>(w.samples) / busy;           // samples/s wanted
  const double capacity = current.threads / cost;                        // samples/s possible
  const double wait_share = w.consumer_wait_s / w.seconds;
  const int needed = static_cast<int>(
      std::min<double>(std::ceil(demand * cost * Loader::kHeadroom), limits.max_threads));
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "consumer waits %.1f %% of the time, wants %.0f img/s; workers make %.0f img/s "
                "per thread (%.0f with %d), need ~%d",
                100.0 * wait_share, demand, 1.0 / cost, capacity, current.threads, needed);
  const std::string measured = buf;
  LoaderTuning next = current;
  if (wait_share > Loader::kWaitHigh) {
    const bool producer_faster = capacity >= Loader::kFasterMargin * demand;
    if (producer_faster && limits.tune_prefetch && current.prefetch < limits.max_prefetch) {
      next.prefetch = current.prefetch + 1;
      say(measured + ": bursty production, deeper prefetch");
    } else if (limits.tune_threads && current.threads < limits.max_threads) {
      next.threads = std::min(limits.max_threads, std::max(needed, current.threads + 1));
      say(measured + (producer_faster ? ": bursty production at the depth bound, more threads"
                                      : ": workers too slow, more threads"));
    } else {
      say(measured + ": input-bound at the limits, unchanged");
    }
  } else if (wait_share < Loader::kWaitLow && limits.tune_threads && needed < current.threads) {
    const int step = std::max(1, current.threads / 4);
    next.threads = std::max({1, needed, current.threads - step});
    say(measured + ": workers ahead, fewer threads");
  } else {
    say(measured + ": unchanged");
  }
  return next;
}

// ---------------------------------------------------------------------------------------------

// The Loader's state: the slots (pinned batches in flight), the opener and worker threads and the
// autotuner's window. Loader's public methods forward here.
struct Loader::Impl {
  Impl(const LmdbImageDataset& dataset, LoaderOptions options);
  ~Impl();

  void start_epoch(int64_t epoch);
  bool next(Batch& batch);
  int64_t samples_per_epoch() const;
  int64_t batch_index() const;
  void restore(int64_t epoch, int64_t batch_index);
  int64_t epoch_progress() const;
  bool continue_epoch(int64_t epoch, int64_t progress);
  LoaderCounters counters() const;
  LoaderTuning tuning() const;
  int64_t ready_batches() const;
  std::string summary() const;

  struct Slot;
  struct WorkerState;
  void worker_loop(int id);
  void opener_loop();
  void process_sample(Slot& slot, int64_t i, WorkerState& st);
  void finish_batch(Slot& slot);
  // Moves the consumer to (epoch, first_batch) with the continuation (continued_epoch,
  // continued_progress) (-1: none) as the plan.
  void reset_position(int64_t epoch, int64_t first_batch, int64_t continued_epoch,
                      int64_t continued_progress);
  void cancel_locked(Slot* slot);
  void release_if_idle_locked(Slot* slot);
  Slot* find_work_locked() const;
  bool can_open_locked() const;
  void tune_locked(int64_t delivered);
  void count_skipped_locked(const Slot& slot);
  std::unique_ptr<Slot> make_slot() const;
  std::string summary_locked() const;
  SourceIdentity compute_identity() const;

  const LmdbImageDataset& dataset_;
  LoaderOptions options_;
  SourceIdentity identity_;
  int64_t batches_per_epoch_ = 0;
  int64_t samples_per_rank_ = 0;
  size_t batch_bytes_ = 0;        // pinned bytes of one slot
  Sampler plan_;                  // the opener's: indices of the epoch it is preparing
  bool epoch_invariant_ = false;  // batches do not depend on the epoch (no shuffle, eval)
  int max_threads_ = 1;
  int max_prefetch_ = 1;
  AutotuneLimits limits_;

  mutable std::mutex mu_;
  std::condition_variable consumer_cv_, worker_cv_, opener_cv_;
  std::vector<std::unique_ptr<Slot>> slots_;  // every slot ever allocated (grows, never shrinks)
  std::deque<Slot*> free_;
  std::deque<Slot*> outstanding_;  // opened, not yet delivered batches, in position order
  bool started_ = false;           // a start_epoch/restore happened
  int64_t epoch_ = -1;
  int64_t consumer_pos_ = 0;  // position (epoch * batches_per_epoch + batch) next() delivers
  int64_t epoch_end_pos_ = 0;
  int64_t resets_ = 0;        // start_epoch/restore calls: batches opened before are "early"
  int64_t next_to_fill_ = 0;  // position the opener gives the next slot
  // The continuation in force (continue_epoch): its epoch (-1: none) and progress. The opener
  // copies it with each slot it opens and brings plan_ to it outside the lock.
  int64_t continued_epoch_ = -1;
  int64_t continued_progress_ = 0;
  LoaderTuning tuning_;
  std::atomic<bool> stop_{false};
  std::string fatal_error_;  // an error outside any batch (e.g. a failed allocation)
  // Policy skip: per epoch (the consumer's and later ones), the bad samples met so far.
  std::map<int64_t, std::set<int64_t>> bad_seen_;

  // Autotuner state (consumer side, under mu_).
  bool window_open_ = false;
  std::chrono::steady_clock::time_point window_start_;
  LoaderWindow window_;
  double window_worker_s0_ = 0;
  int64_t window_made0_ = 0;
  int64_t tune_windows_ = 0, tune_changes_ = 0;
  std::string last_decision_;

  LoaderCounters counters_;
  std::vector<std::thread> workers_;
  std::thread opener_;
};

// One batch in flight: pinned host pixels/labels, their device copies, the events that order
// the copy (worker -> consumer) and the normalization (consumer -> the slot's next copy), and
// the batch it currently holds.
struct Loader::Impl::Slot {
  Tensor pixels, labels;          // pinned host, u8 [B, S, S, 3] and i64 [B]
  Tensor dev_pixels, dev_labels;  // on the device (GPU loaders only)
  Event copy_start, copied, consumed;
  bool copy_timed = false;  // copy_start/copied recorded, elapsed time not yet counted
  // The batch (set by the opener).
  int64_t position = 0, epoch = 0, batch = 0, count = 0;
  int64_t opened_in_reset = 0;
  std::vector<int64_t> indices;
  // Progress.
  int64_t claimed = 0, finished = 0;
  // Policy skip: the bad samples met while filling it, index -> reason (counted, once per
  // epoch, when it is delivered).
  std::map<int64_t, std::string> bad;
  bool preparing = false;  // the opener is still setting it up
  bool finishing = false;  // a worker is enqueueing its host-to-device copy
  bool done = false;       // ready for next()
  bool cancelled = false;  // dropped by start_epoch/restore; back to free_ once idle
  std::string error;       // policy fail: the first bad sample's key and reason
  std::string error_hint;  // how to fix `error`
};

// A worker's own decoder and LMDB read transaction, and its stage times since it last
// reported them into the counters.
struct Loader::Impl::WorkerState {
  explicit WorkerState(const LmdbImageDataset& ds) : reader(ds) {}
  JpegDecoder decoder;
  LmdbImageDataset::Reader reader;
  double read_s = 0, worker_s = 0;
  DecodeStageTimes reported;                         // decoder.stage_times() at the last report
  std::vector<std::pair<int64_t, std::string>> bad;  // policy skip: bad samples met, and why
  std::string error;
};

namespace {
// Checks the options (before the Sampler sees them, so errors speak of the Loader) and returns
// the Sampler's.
SamplerOptions checked_sampler_options(const LmdbImageDataset& dataset, const LoaderOptions& o) {
  STOKER_CHECK_HINT(o.batch_size > 0, "set LoaderOptions::batch_size to 1 or more",
                    "Loader: LoaderOptions::batch_size is ", o.batch_size, "; it must be >= 1");
  STOKER_CHECK_HINT(o.prefetch >= 0,
                    "set LoaderOptions::prefetch (`--prefetch`) to 0 (autotuned) or more",
                    "Loader: LoaderOptions::prefetch is ", o.prefetch, "; it must be >= 0");
  // Every decode thread holds an LMDB read transaction, hence a reader slot: more threads than
  // slots would fail later (MDB_READERS_FULL), from a worker thread.
  const int slots = dataset.reader_slots();
  const std::string fix = fmt::format(
      "use at most {} threads (0 = autotuned), or open the dataset with more reader slots "
      "(LmdbOptions::max_readers)",
      slots);
  STOKER_CHECK_HINT(o.threads >= 0 && o.threads <= slots, fix,
                    "Loader: LoaderOptions::threads (`--threads`) is ", o.threads,
                    "; it must be in [0, ", slots, "]: ", dataset.path().string(), " has ", slots,
                    " LMDB reader slots and each decode thread holds one");
  STOKER_CHECK_HINT(o.max_threads >= 0 && o.max_threads <= slots, fix,
                    "Loader: LoaderOptions::max_threads is ", o.max_threads, "; it must be in [0, ",
                    slots, "]: ", dataset.path().string(), " has ", slots,
                    " LMDB reader slots and each decode thread holds one");
  STOKER_CHECK(core::is_float(o.dtype), "Loader: output dtype ", dtype_name(o.dtype),
               " must be f32, f16 or bf16");
  STOKER_CHECK_HINT(dataset.size() > 0, "pack images with `stoker pack`",
                    "Loader: ", dataset.path().string(), " holds no samples");
  return SamplerOptions{.shuffle = o.shuffle,
                        .seed = o.seed,
                        .rank = o.rank,
                        .world_size = o.world_size,
                        .tail = ShardTail::pad,
                        .batch_size = o.batch_size,
                        .drop_last = o.drop_last};
}
}  // namespace

Loader::Impl::Impl(const LmdbImageDataset& dataset, LoaderOptions options)
    : dataset_(dataset),
      options_(options),
      plan_(dataset.size(), checked_sampler_options(dataset, options)) {
  batches_per_epoch_ = plan_.num_batches();
  samples_per_rank_ = plan_.num_samples();
  epoch_invariant_ = !options_.shuffle && !options_.transform.train;
  const int64_t s = options_.transform.output_size, b = options_.batch_size;
  batch_bytes_ = static_cast<size_t>(b * s * s * 3);

  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  limits_.tune_threads = options_.threads == 0;
  limits_.tune_prefetch = options_.prefetch == 0;
  max_threads_ = options_.threads > 0
                     ? options_.threads
                     : (options_.max_threads > 0 ? options_.max_threads
                                                 : std::min(hw, dataset.reader_slots()));
  if (limits_.tune_prefetch) {
    const int64_t fit = options_.pinned_budget_bytes / static_cast<int64_t>(batch_bytes_ + 8 * b);
    max_prefetch_ = static_cast<int>(std::clamp<int64_t>(fit, 1, kMaxPrefetch));
  } else {
    max_prefetch_ = options_.prefetch;
  }
  limits_.max_threads = max_threads_;
  limits_.max_prefetch = max_prefetch_;
  tuning_.threads = max_threads_;
  tuning_.prefetch =
      limits_.tune_prefetch ? std::min(kAutoPrefetchStart, max_prefetch_) : options_.prefetch;
  if (options_.verbose) std::fprintf(stderr, "stoker loader: %s\n", summary_locked().c_str());

  identity_ = compute_identity();
  workers_.reserve(static_cast<size_t>(max_threads_));
  try {
    for (int i = 0; i < max_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
    opener_ = std::thread([this] { opener_loop(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    worker_cv_.notify_all();
    for (auto& t : workers_) t.join();
    throw;
  }
}

Loader::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  worker_cv_.notify_all();
  opener_cv_.notify_all();
  consumer_cv_.notify_all();
  if (opener_.joinable()) opener_.join();
  for (auto& t : workers_) t.join();
  // Copies in flight must end before their pinned slots are freed. A destructor must not
  // throw (that ends the process): a device that already failed is reported, not rethrown.
  if (options_.device.is_cuda()) {
    try {
      synchronize_device(options_.device);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "stoker loader: while shutting down: %s\n", e.what());
    }
  }
}

std::unique_ptr<Loader::Impl::Slot> Loader::Impl::make_slot() const {
  const int64_t s = options_.transform.output_size, b = options_.batch_size;
  auto slot = std::make_unique<Slot>();
  slot->pixels = Tensor::empty_pinned({b, s, s, 3}, DType::u8);
  slot->labels = Tensor::empty_pinned({b}, DType::i64);
  if (options_.device.is_cuda()) {
    slot->dev_pixels = Tensor::empty({b, s, s, 3}, DType::u8, options_.device);
    slot->dev_labels = Tensor::empty({b}, DType::i64, options_.device);
    slot->copy_start = Event::create(options_.device, /*timing=*/true);
    slot->copied = Event::create(options_.device, /*timing=*/true);
    slot->consumed = Event::create(options_.device);
  }
  return slot;
}

int64_t Loader::Impl::samples_per_epoch() const {
  return options_.drop_last ? batches_per_epoch_ * options_.batch_size : samples_per_rank_;
}

SourceIdentity Loader::Impl::compute_identity() const {
  util::Checksum64 names, records;
  for (const std::string& c : dataset_.class_names()) names.update(c.data(), c.size() + 1);
  // Two records stand for the content: reading every one would cost an epoch of I/O.
  LmdbImageDataset::Reader reader = dataset_.reader();
  for (const int64_t i : {int64_t{0}, dataset_.size() - 1}) {
    if (i < 0) continue;
    if (const auto s = reader.try_read(i)) {
      records.update(&s->label, sizeof(s->label));
      records.update(s->payload.data(), s->payload.size());
    }
  }
  SourceIdentity id;
  id.batch_size = options_.batch_size;
  if (options_.shuffle || options_.transform.train) id.seed = options_.seed;
  id.samples = dataset_.size();
  id.fingerprint = fmt::format(
      "image database of {} samples, {} classes, xxh3 of the class names {} and of the first and "
      "last records {}",
      dataset_.size(), dataset_.num_classes(), util::checksum_hex(names.value()),
      util::checksum_hex(records.value()));
  id.location = dataset_.path().string();
  return id;
}

int64_t Loader::Impl::batch_index() const {
  std::lock_guard<std::mutex> lock(mu_);
  return consumer_pos_ - (epoch_end_pos_ - batches_per_epoch_);
}

// ---------------------------------------------------------------------------------------------
// Positions: start_epoch / restore.

void Loader::Impl::release_if_idle_locked(Slot* slot) {
  if (slot->cancelled && !slot->preparing && !slot->finishing && slot->finished == slot->claimed) {
    slot->cancelled = false;
    free_.push_back(slot);
    opener_cv_.notify_one();
  }
}

void Loader::Impl::cancel_locked(Slot* slot) {
  slot->cancelled = true;
  counters_.discarded_batches += 1;
  release_if_idle_locked(slot);
}

void Loader::Impl::reset_position(int64_t epoch, int64_t first_batch, int64_t continued_epoch,
                                  int64_t continued_progress) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t nb = batches_per_epoch_;
  STOKER_CHECK(epoch >= 0, "Loader: epoch ", epoch, " must be >= 0");
  STOKER_CHECK(first_batch >= 0 && first_batch <= nb, "Loader::restore: batch ", first_batch,
               " outside an epoch of ", nb, " batches");
  ++resets_;
  const int64_t target = epoch * nb + first_batch;
  // Batches already opened that the new position can use: the same positions, or for an
  // epoch-invariant loader any position with the same batch index (not when a continuation,
  // old or new, makes some epoch differ from the others).
  const bool plan_changed = continued_epoch != continued_epoch_ ||
                            (continued_epoch >= 0 && continued_progress != continued_progress_);
  int64_t keep_from = -1;
  if (started_) {
    if (target >= consumer_pos_ && target <= next_to_fill_) {
      keep_from = target;
    } else if (epoch_invariant_ && first_batch < nb && continued_epoch < 0 &&
               continued_epoch_ < 0) {
      for (int64_t q = consumer_pos_; q <= next_to_fill_; ++q) {
        if (q % nb == first_batch) {
          keep_from = q;
          break;
        }
      }
    }
  }
  // Batches opened under the old plan of an epoch whose plan changes do not fit.
  if (keep_from >= 0 && plan_changed) {
    for (const int64_t e : {continued_epoch_, continued_epoch}) {
      if (e >= 0 && e * nb < next_to_fill_ && (e + 1) * nb > keep_from) keep_from = -1;
    }
  }
  if (keep_from >= 0) {
    while (!outstanding_.empty() && outstanding_.front()->position < keep_from) {
      Slot* slot = outstanding_.front();
      outstanding_.pop_front();
      cancel_locked(slot);
    }
    consumer_pos_ = keep_from;
  } else {
    while (!outstanding_.empty()) {
      Slot* slot = outstanding_.front();
      outstanding_.pop_front();
      cancel_locked(slot);
    }
    consumer_pos_ = next_to_fill_ = target;
  }
  epoch_end_pos_ = consumer_pos_ - first_batch + nb;
  epoch_ = epoch;
  continued_epoch_ = continued_epoch;
  continued_progress_ = continued_epoch >= 0 ? continued_progress : 0;
  started_ = true;
  window_open_ = false;  // tuning windows never span an epoch boundary
  opener_cv_.notify_all();
  worker_cv_.notify_all();
}

void Loader::Impl::start_epoch(int64_t epoch) { reset_position(epoch, 0, -1, 0); }
void Loader::Impl::restore(int64_t epoch, int64_t batch_index) {
  reset_position(epoch, batch_index, -1, 0);
}

int64_t Loader::Impl::epoch_progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_) return 0;
  const int64_t start = epoch_ == continued_epoch_ ? continued_progress_ : 0;
  // plan_'s arithmetic reads only its constructor's values: safe beside the opener.
  return plan_.progress_after(start, consumer_pos_ - (epoch_end_pos_ - batches_per_epoch_));
}

bool Loader::Impl::continue_epoch(int64_t epoch, int64_t progress) {
  STOKER_CHECK(epoch >= 0, "Loader::continue_epoch: epoch ", epoch, " must be >= 0");
  const int64_t first = plan_.first_batch_at(progress);  // checks progress
  reset_position(epoch, first, epoch, progress);
  return true;
}

// ---------------------------------------------------------------------------------------------
// The opener.

bool Loader::Impl::can_open_locked() const {
  if (!started_ || static_cast<int>(outstanding_.size()) >= tuning_.prefetch) return false;
  const int64_t horizon =
      epoch_end_pos_ + (options_.prefetch_next_epoch ? batches_per_epoch_ : int64_t{0});
  if (next_to_fill_ >= horizon) return false;
  return !free_.empty() || static_cast<int>(slots_.size()) < max_prefetch_ + 1;
}

void Loader::Impl::opener_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    opener_cv_.wait(lock, [&] { return stop_ || can_open_locked(); });
    if (stop_) return;
    if (free_.empty()) {
      lock.unlock();
      std::unique_ptr<Slot> fresh;
      try {
        fresh = make_slot();
      } catch (const std::exception& e) {
        lock.lock();
        fatal_error_ = std::string("Loader: could not allocate a batch slot: ") + e.what();
        consumer_cv_.notify_all();
        return;
      }
      lock.lock();
      free_.push_back(fresh.get());
      slots_.push_back(std::move(fresh));
      continue;
    }
    Slot* slot = free_.front();
    free_.pop_front();
    const int64_t pos = next_to_fill_++;
    slot->position = pos;
    slot->epoch = pos / batches_per_epoch_;
    slot->batch = pos % batches_per_epoch_;
    slot->opened_in_reset = resets_;
    slot->count = slot->claimed = slot->finished = 0;
    slot->bad.clear();
    slot->preparing = true;
    slot->done = slot->finishing = slot->cancelled = false;
    slot->error.clear();
    slot->error_hint.clear();
    outstanding_.push_back(slot);
    const int64_t continued_epoch = continued_epoch_, continued_progress = continued_progress_;
    lock.unlock();

    // Outside the lock: this batch's indices (the opener alone uses plan_) and, on the GPU,
    // the end of the slot's previous host-to-device copy before its pinned rows are rewritten.
    std::string error;
    double slot_wait = 0, copy_device = 0;
    try {
      // The plan this slot was opened under (a slot of an older plan is cancelled, not read).
      if (continued_epoch < 0) {
        if (plan_.continued_epoch() >= 0) plan_.clear_continuation();
      } else if (plan_.continued_epoch() != continued_epoch ||
                 plan_.continued_progress() != continued_progress) {
        plan_.set_continuation(continued_epoch, continued_progress);
      }
      if (plan_.epoch() != slot->epoch) plan_.set_epoch(slot->epoch);
      const auto span = plan_.batch(slot->batch);
      slot->indices.assign(span.begin(), span.end());
      if (slot->copy_timed) {
        const auto t0 = Clock::now();
        while (!slot->copied.query() && !stop_) {
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
        slot_wait = since(t0);
        if (!stop_) copy_device = Event::elapsed_ms(slot->copy_start, slot->copied) / 1e3;
        slot->copy_timed = false;
      }
    } catch (const std::exception& e) {
      error = e.what();
    }

    lock.lock();
    counters_.slot_wait_s += slot_wait;
    counters_.copy_device_s += copy_device;
    slot->preparing = false;
    if (slot->cancelled) {
      release_if_idle_locked(slot);
      continue;
    }
    if (!error.empty()) {
      slot->error = error;
      slot->done = true;
      consumer_cv_.notify_all();
      continue;
    }
    slot->count = static_cast<int64_t>(slot->indices.size());
    worker_cv_.notify_all();
  }
}

// ---------------------------------------------------------------------------------------------
// The workers.

Loader::Impl::Slot* Loader::Impl::find_work_locked() const {
  for (Slot* slot : outstanding_) {
    if (!slot->preparing && slot->claimed < slot->count) return slot;
  }
  return nullptr;
}

void Loader::Impl::worker_loop(int id) {
  std::unique_ptr<WorkerState> st;
  std::string init_error;
  try {
    st = std::make_unique<WorkerState>(dataset_);
  } catch (const std::exception& e) {
    init_error = e.what();
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!st) {
    if (fatal_error_.empty()) fatal_error_ = "Loader: a worker could not start: " + init_error;
    consumer_cv_.notify_all();
    return;
  }
  for (;;) {
    Slot* slot = nullptr;
    worker_cv_.wait(lock, [&] {
      if (stop_) return true;
      if (id >= tuning_.threads) return false;
      slot = find_work_locked();
      return slot != nullptr;
    });
    if (stop_) return;
    const int64_t i = slot->claimed++;
    lock.unlock();
    process_sample(*slot, i, *st);
    lock.lock();

    const DecodeStageTimes& t = st->decoder.stage_times();
    counters_.read_s += st->read_s;
    counters_.worker_s += st->worker_s;
    counters_.header_s += t.header_s - st->reported.header_s;
    counters_.decode_s += t.decode_s - st->reported.decode_s;
    counters_.resize_s += t.resize_s - st->reported.resize_s;
    for (auto& [index, why] : st->bad) {
      std::string& kept = slot->bad[index];
      if (kept.empty()) kept = std::move(why);
    }
    st->bad.clear();
    counters_.samples_decoded += 1;
    st->reported = t;
    st->read_s = st->worker_s = 0;
    if (!st->error.empty()) {
      if (slot->error.empty()) {
        slot->error = std::move(st->error);
        slot->error_hint = options_.on_corrupt == CorruptPolicy::fail ? kSkipHint : kRepairHint;
      }
      st->error.clear();
    }
    slot->finished += 1;
    if (slot->cancelled) {
      release_if_idle_locked(slot);
      continue;
    }
    if (slot->finished < slot->count) continue;
    // This worker finished the batch: copy it to the device, then hand it to the consumer.
    if (options_.device.is_cuda() && slot->error.empty()) {
      slot->finishing = true;
      lock.unlock();
      finish_batch(*slot);
      lock.lock();
      slot->finishing = false;
      if (slot->cancelled) {
        release_if_idle_locked(slot);
        continue;
      }
    }
    slot->done = true;
    consumer_cv_.notify_all();
  }
}

void Loader::Impl::process_sample(Slot& slot, int64_t i, WorkerState& st) {
  const auto t0 = Clock::now();
  const int64_t s = options_.transform.output_size;
  const size_t image_bytes = static_cast<size_t>(s * s * 3);
  uint8_t* pixels =
      static_cast<uint8_t*>(slot.pixels.data()) + static_cast<size_t>(i) * image_bytes;
  int64_t* labels = static_cast<int64_t*>(slot.labels.data());
  const int64_t n = dataset_.size();
  // Policy skip: walk forward from the sampled index to the next sample that decodes; every bad
  // one met is reported with its reason (counted once per epoch when the batch is delivered).
  const bool skip = options_.on_corrupt == CorruptPolicy::skip;
  const int64_t tries = skip ? n : 1;
  const int64_t first = slot.indices[static_cast<size_t>(i)];
  std::string reason;
  for (int64_t k = 0; k < tries; ++k) {
    const int64_t idx = (first + k) % n;
    std::string err;  // "<database> key <key>: why"
    const auto r0 = Clock::now();
    const auto sample = st.reader.try_read(idx, &err);
    st.read_s += since(r0);
    if (sample) {
      try {
        augment_into(st.decoder, sample->payload, sample_key(idx),
                     static_cast<uint64_t>(slot.epoch), static_cast<uint64_t>(idx),
                     options_.transform, pixels);
        labels[i] = sample->label;
        st.worker_s += since(t0);
        return;
      } catch (const Error& e) {
        err = fmt::format("{} key {}: {}", dataset_.path().string(), sample_key(idx), e.message());
      } catch (const std::exception& e) {
        err = fmt::format("{} key {}: {}", dataset_.path().string(), sample_key(idx), e.what());
      }
    }
    // Reasons are kept only for the first few of a walk (only the first few are printed):
    // a long run of bad samples costs 8 bytes each, not a string each.
    if (skip) st.bad.emplace_back(idx, k < kReasonsPerWalk ? err : std::string());
    if (reason.empty()) reason = std::move(err);
  }
  st.worker_s += since(t0);
  st.error =
      fmt::format("Loader ({}, epoch {}, batch {}): {}{}", dataset_.path().string(), slot.epoch,
                  slot.batch, skip ? "no valid sample left to replace a bad one: " : "", reason);
}

void Loader::Impl::finish_batch(Slot& slot) {
  const auto t0 = Clock::now();
  try {
    const Stream copy = core::copy_stream(options_.device);
    const core::StreamGuard guard(copy);
    slot.consumed.block(copy);  // the consumer's last read of dev_pixels, on the device
    slot.copy_start.record(copy);
    core::detail::copy_bytes(slot.dev_pixels, slot.pixels);
    core::detail::copy_bytes(slot.dev_labels, slot.labels);
    slot.copied.record(copy);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    slot.error = std::string("Loader: host-to-device copy failed: ") + e.what();
  }
  std::lock_guard<std::mutex> lock(mu_);
  slot.copy_timed = slot.error.empty();
  counters_.copy_s += since(t0);
}

// ---------------------------------------------------------------------------------------------
// The consumer.

bool Loader::Impl::next(Batch& batch) {
  std::unique_lock<std::mutex> lock(mu_);
  STOKER_CHECK(started_, "Loader::next called before start_epoch");
  if (consumer_pos_ >= epoch_end_pos_) return false;
  const auto t0 = Clock::now();
  const bool window_was_open = window_open_;
  const bool ok =
      consumer_cv_.wait_for(lock, std::chrono::duration<double>(options_.stall_timeout_s), [&] {
        return !fatal_error_.empty() || (!outstanding_.empty() && outstanding_.front()->done);
      });
  const double waited = since(t0);
  counters_.consumer_wait_s += waited;
  if (window_was_open && window_open_) window_.consumer_wait_s += waited;
  if (!fatal_error_.empty()) throw Error(fatal_error_, "loader.cpp", "");
  STOKER_CHECK_HINT(ok, "raise LoaderOptions::stall_timeout_s for very slow storage", "Loader (",
                    dataset_.path().string(), "): no batch for ", options_.stall_timeout_s,
                    " s (epoch ", epoch_, ", batch ",
                    consumer_pos_ - (epoch_end_pos_ - batches_per_epoch_),
                    "): the decode threads made no progress");
  Slot* slot = outstanding_.front();
  outstanding_.pop_front();
  if (slot->position != consumer_pos_) {
    std::fprintf(stderr, "stoker: Loader invariant broken: batch %lld delivered at %lld\n",
                 static_cast<long long>(slot->position), static_cast<long long>(consumer_pos_));
    std::abort();
  }
  ++consumer_pos_;
  const bool early = slot->opened_in_reset != resets_;
  count_skipped_locked(*slot);
  opener_cv_.notify_one();
  lock.unlock();

  auto give_back = [&] {
    std::lock_guard<std::mutex> guard(mu_);
    free_.push_back(slot);
    opener_cv_.notify_one();
  };
  if (!slot->error.empty()) {
    const std::string error = slot->error, hint = slot->error_hint;
    give_back();
    throw Error(error, "loader.cpp (decode thread)", hint);
  }
  const auto n0 = Clock::now();
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
  } else {
    ops::normalize_images(input, slot->pixels.slice(0, b), options_.mean, options_.std,
                          options_.layout);
    core::detail::copy_bytes(target, slot->labels.slice(0, b));
  }
  const double normalize = since(n0);
  give_back();
  {
    std::lock_guard<std::mutex> guard(mu_);
    counters_.normalize_s += normalize;
    counters_.batches += 1;
    counters_.samples += b;
    counters_.early_batches += early ? 1 : 0;
    tune_locked(b);
  }
  batch.input = input;
  batch.target = target;
  batch.size = b;
  return true;
}

// Policy skip: counts the bad samples of a delivered batch not yet met in its epoch (so a bad
// sample counts once per epoch, however many replacement walks meet it) and names the first few.
// Keyed by the batch's position epoch (an evaluation loader's reused batches belong to one pass);
// messages say the consumer's epoch, the number start_epoch was given.
void Loader::Impl::count_skipped_locked(const Slot& slot) {
  auto it = bad_seen_.find(slot.epoch);
  if (slot.bad.empty() && it == bad_seen_.end()) return;
  bad_seen_.erase(bad_seen_.begin(), bad_seen_.lower_bound(slot.epoch));  // older epochs
  if (it == bad_seen_.end()) it = bad_seen_.emplace(slot.epoch, std::set<int64_t>()).first;
  std::set<int64_t>& seen = it->second;
  const std::string who =
      options_.world_size > 1 ? fmt::format(" [rank {}]", options_.rank) : std::string();
  for (const auto& [index, why] : slot.bad) {
    if (!seen.insert(index).second) continue;
    counters_.skipped += 1;
    if (seen.size() <= static_cast<size_t>(kLoggedSkipsPerEpoch)) {
      std::fprintf(stderr, "stoker loader%s: epoch %lld: skipped %s\n", who.c_str(),
                   static_cast<long long>(epoch_),
                   why.empty() ? sample_key(index).c_str() : why.c_str());
    }
  }
  if (slot.batch == batches_per_epoch_ - 1 &&
      seen.size() > static_cast<size_t>(kLoggedSkipsPerEpoch)) {
    std::fprintf(stderr, "stoker loader%s: epoch %lld: %zu more skipped this epoch (%zu in all)\n",
                 who.c_str(), static_cast<long long>(epoch_),
                 seen.size() - static_cast<size_t>(kLoggedSkipsPerEpoch), seen.size());
  }
}

// Called after each delivered batch: opens, extends or closes the measurement window and applies
// the policy at its end.
void Loader::Impl::tune_locked(int64_t delivered) {
  if (!limits_.tune_threads && !limits_.tune_prefetch) return;
  const auto now = Clock::now();
  if (!window_open_) {
    // The first batch after a start (or an epoch boundary) opens the window: the cold start
    // before it is not steady state.
    window_open_ = true;
    window_start_ = now;
    window_ = LoaderWindow{};
    window_worker_s0_ = counters_.worker_s;
    window_made0_ = counters_.samples_decoded;
    return;
  }
  window_.samples += delivered;
  const double elapsed = seconds_between(window_start_, now);
  if (window_.samples < kTuneWindowBatches * options_.batch_size || elapsed < kTuneWindowSeconds)
    return;
  window_.seconds = elapsed;
  window_.worker_s = counters_.worker_s - window_worker_s0_;
  window_.samples_made = counters_.samples_decoded - window_made0_;
  std::string reason;
  const LoaderTuning next = autotune_policy(window_, tuning_, limits_, &reason);
  ++tune_windows_;
  last_decision_ = reason;
  if (next.threads != tuning_.threads || next.prefetch != tuning_.prefetch) {
    ++tune_changes_;
    if (options_.verbose) {
      std::fprintf(stderr, "stoker loader: threads %d -> %d, prefetch %d -> %d (%s)\n",
                   tuning_.threads, next.threads, tuning_.prefetch, next.prefetch, reason.c_str());
    }
    tuning_ = next;
    worker_cv_.notify_all();
    opener_cv_.notify_all();
  }
  window_start_ = now;
  window_ = LoaderWindow{};
  window_worker_s0_ = counters_.worker_s;
  window_made0_ = counters_.samples_decoded;
}

// ---------------------------------------------------------------------------------------------
// Reports.

LoaderCounters Loader::Impl::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

LoaderTuning Loader::Impl::tuning() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tuning_;
}

int64_t Loader::Impl::ready_batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const Slot* slot : outstanding_) n += slot->done ? 1 : 0;
  return n;
}

std::string Loader::Impl::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return summary_locked();
}

std::string Loader::Impl::summary_locked() const {
  return fmt::format(
      "{} threads ({}, at most {}), prefetch {} batches ({}, at most {}, {} pinned each); {} "
      "tuning windows, {} changes{}",
      tuning_.threads, limits_.tune_threads ? "auto" : "fixed", max_threads_, tuning_.prefetch,
      limits_.tune_prefetch ? "auto" : "fixed", max_prefetch_,
      mib(static_cast<double>(batch_bytes_)), tune_windows_, tune_changes_,
      last_decision_.empty() ? std::string() : "; last: " + last_decision_);
}

Loader::Loader(const LmdbImageDataset& dataset, LoaderOptions options)
    : impl_(std::make_unique<Impl>(dataset, std::move(options))) {}
Loader::~Loader() = default;

void Loader::start_epoch(int64_t epoch) { impl_->start_epoch(epoch); }
bool Loader::next(Batch& batch) { return impl_->next(batch); }
int64_t Loader::batches_per_epoch() const { return impl_->batches_per_epoch_; }
int64_t Loader::samples_per_epoch() const { return impl_->samples_per_epoch(); }
int64_t Loader::epoch() const { return impl_->epoch_; }
int64_t Loader::batch_index() const { return impl_->batch_index(); }
void Loader::restore(int64_t epoch, int64_t batch_index) { impl_->restore(epoch, batch_index); }
int64_t Loader::epoch_progress() const { return impl_->epoch_progress(); }
bool Loader::continue_epoch(int64_t epoch, int64_t progress) {
  return impl_->continue_epoch(epoch, progress);
}
SourceIdentity Loader::identity() const { return impl_->identity_; }
LoaderCounters Loader::counters() const { return impl_->counters(); }
LoaderTuning Loader::tuning() const { return impl_->tuning(); }
int Loader::max_threads() const { return impl_->max_threads_; }
bool Loader::threads_fixed() const { return impl_->options_.threads > 0; }
int64_t Loader::ready_batches() const { return impl_->ready_batches(); }
int Loader::output_size() const { return impl_->options_.transform.output_size; }
std::string Loader::summary() const { return impl_->summary(); }
const LoaderOptions& Loader::options() const { return impl_->options_; }

}  // namespace stoker::data
