#include "stoker/dist/sharded_optimizer.h"

#include <fmt/format.h>
#include <algorithm>

#include "stoker/core/error.h"
#include "stoker/ops/layout.h"

namespace stoker::dist {

namespace {

constexpr const char* kShardPrefix = "zero1.bucket";

// "zero1.bucket<b>.<suffix>" -> b and suffix; false for names that are not per shard (AdamW's
// step_state, the same on every rank).
bool parse_shard_name(const std::string& name, int& bucket, std::string& suffix) {
  const std::string prefix = kShardPrefix;
  if (name.rfind(prefix, 0) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  bucket = std::stoi(name.substr(prefix.size(), dot - prefix.size()));
  suffix = name.substr(dot + 1);
  return true;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// 8-bit state: codes and absmax describe blocks of the slice, not elements of parameters.
bool stored_per_bucket(const std::string& suffix) {
  return ends_with(suffix, ".codes") || ends_with(suffix, ".absmax");
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(ShardedGradSync& sync, const Factory& make)
    : optim::Optimizer(sync.parameters()), sync_(sync) {
  STOKER_CHECK(make != nullptr, "ShardedOptimizer: no factory for the inner optimizer");
  inner_ = make(sync.shard_parameters());
  STOKER_CHECK(inner_ != nullptr, "ShardedOptimizer: the factory returned no optimizer");
  STOKER_CHECK_HINT(!inner_->needs_whole_parameters(),
                    "use a ReplicatedGradSync (plain data parallelism) with this optimizer",
                    "ShardedOptimizer: ", inner_->describe(),
                    " needs each parameter whole (norms over a tensor), but ZeRO-1 gives its "
                    "inner optimizer slices of gradient buckets");
  set_state_format(inner_->state_format());
  lr_ = inner_->lr();
}

std::string ShardedOptimizer::describe() const {
  return fmt::format("ZeRO-1({}, {} shards)", inner_->describe(), sync_.world_size());
}

std::vector<std::pair<std::string, Tensor>> ShardedOptimizer::state() { return inner_->state(); }

void ShardedOptimizer::update() {
  inner_->set_lr(lr_);
  inner_->set_found_inf(found_inf_);
  inner_->set_steps(steps_);
  inner_->step();  // the slices have no compute copies: nothing refreshed here
  sync_.gather_parameters();
  ++steps_;
}

std::vector<std::pair<std::string, Tensor>> ShardedOptimizer::checkpoint_state() {
  Communicator& comm = *sync_.communicator();
  const int64_t world = comm.world_size();
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : inner_->state()) {
    int b = 0;
    std::string suffix;
    if (!parse_shard_name(name, b, suffix)) {
      out.emplace_back(name, t);
      continue;
    }
    const Tensor full = Tensor::empty({world * t.numel()}, t.dtype(), t.device());
    comm.all_gather(t.reshape({t.numel()}), full);
    if (stored_per_bucket(suffix)) {
      out.emplace_back(name, full);
      continue;
    }
    // Element-wise state has the bucket's layout: cut it back into the parameters' tensors.
    const BucketInfo& info = sync_.bucket(b);
    for (size_t i = 0; i < info.parameters.size(); ++i) {
      const int64_t off = info.offsets[i], n = info.shapes[i].numel();
      out.emplace_back(info.parameters[i] + "." + suffix,
                       full.slice(off, off + n).reshape(info.shapes[i]));
    }
  }
  return out;
}

void ShardedOptimizer::load_checkpoint_state(const TensorLoader& load) {
  if (state_format().dtype != optim::StateDType::int8_blockwise) return load_slices(load);
  // Which slices are 8-bit depends on the slice sizes: at another world size a tensor the file
  // lacks is the likely symptom.
  try {
    load_slices(load);
  } catch (const Error& e) {
    STOKER_THROW(e.what(),
                 "; a ZeRO-1 checkpoint with 8-bit state resumes only at the world size and "
                 "bucket sizes it was saved with");
  }
}

void ShardedOptimizer::load_slices(const TensorLoader& load) {
  const Communicator& comm = *sync_.communicator();
  const int64_t world = comm.world_size(), r = comm.rank();
  std::vector<std::pair<std::string, Tensor>> loaded;
  for (auto& [name, t] : inner_->state()) {
    int b = 0;
    std::string suffix;
    if (!parse_shard_name(name, b, suffix)) {
      loaded.emplace_back(name, load(name, t.device()));
      continue;
    }
    const int64_t n = t.numel();
    if (stored_per_bucket(suffix)) {
      const Tensor full = load(name, t.device());
      STOKER_CHECK_HINT(full.dtype() == t.dtype() && full.numel() == world * n,
                        "resume 8-bit ZeRO-1 state with the world size and bucket sizes it was "
                        "saved with (or save with f32/bf16 state, which is stored unsharded)",
                        describe(), ": checkpoint tensor '", name, "' is ", full.str(),
                        ", expected ", world, " slices of ", n, " ", dtype_name(t.dtype()),
                        " values");
      loaded.emplace_back(name, full.reshape({world * n}).slice(r * n, (r + 1) * n));
      continue;
    }
    // This rank's slice [r n, (r + 1) n) of the bucket, from the parameters it overlaps; the
    // padding between parameters keeps zero state, as in training.
    const Tensor slice = Tensor::zeros(t.shape(), t.dtype(), t.device());
    const BucketInfo& info = sync_.bucket(b);
    for (size_t i = 0; i < info.parameters.size(); ++i) {
      const int64_t off = info.offsets[i], pn = info.shapes[i].numel();
      const int64_t lo = std::max(off, r * n), hi = std::min(off + pn, (r + 1) * n);
      if (lo >= hi) continue;
      const std::string pname = info.parameters[i] + "." + suffix;
      const Tensor saved = load(pname, t.device());
      STOKER_CHECK(saved.shape() == info.shapes[i] && saved.dtype() == t.dtype(), describe(),
                   ": optimizer state '", pname, "' is ", saved.str(),
                   " in the checkpoint, expected ", dtype_name(t.dtype()), info.shapes[i]);
      ops::copy(slice.slice(lo - r * n, hi - r * n), saved.reshape({pn}).slice(lo - off, hi - off));
    }
    loaded.emplace_back(name, slice);
  }
  inner_->load_state(loaded);
}

}  // namespace stoker::dist
