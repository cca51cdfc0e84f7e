#include "stoker/train/training_checkpoint.h"

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "stoker/amp/precision.h"
#include "stoker/core/error.h"
#include "stoker/nn/module.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/safetensors.h"
#include "util/atomic_file.h"
#include "util/checksum.h"

namespace stoker::train {

namespace {

// Version 2 adds the tensors' checksums (kChecksumsKey), "stoker.data" and this key; version 1
// files (without it) still resume, unchecked.
constexpr int kCheckpointVersion = 2;

// "stoker.data": the job's world size and the source's identity (known fields only).
std::string recorded_run_json(int world_size, const data::SourceIdentity& id) {
  nlohmann::json j = {{"world_size", world_size}};
  if (id.batch_size >= 0) j["batch_size"] = id.batch_size;
  if (id.seed) j["seed"] = std::to_string(*id.seed);
  if (id.samples >= 0) j["samples"] = id.samples;
  if (!id.fingerprint.empty()) j["fingerprint"] = id.fingerprint;
  if (!id.location.empty()) j["location"] = id.location;
  return j.dump();
}

void parse_recorded_run(const std::string& file, const std::string& text, int& world_size,
                        data::SourceIdentity& id) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) throw std::invalid_argument("not a JSON object");
    if (j.contains("world_size")) world_size = j.at("world_size").get<int>();
    if (j.contains("batch_size")) id.batch_size = j.at("batch_size").get<int64_t>();
    if (j.contains("seed")) id.seed = std::stoull(j.at("seed").get<std::string>());
    if (j.contains("samples")) id.samples = j.at("samples").get<int64_t>();
    if (j.contains("fingerprint")) id.fingerprint = j.at("fingerprint").get<std::string>();
    if (j.contains("location")) id.location = j.at("location").get<std::string>();
  } catch (const std::exception& e) {
    STOKER_THROW(file, ": metadata stoker.data = '", text, "' is not a valid record of the run (",
                 e.what(), "): the header is damaged");
  }
}

// Removes what killed checkpoint writes left in `dir`, saying so.
void remove_leftover_temporaries(const std::filesystem::path& dir) {
  const auto removed = util::remove_stale_temporaries(dir, ".safetensors");
  if (removed.empty()) return;
  std::string names;
  for (size_t i = 0; i < removed.size() && i < 3; ++i)
    names += (i ? ", " : "") + removed[i].filename().string();
  if (removed.size() > 3) names += fmt::format(" and {} more", removed.size() - 3);
  std::fprintf(stderr,
               "checkpoint: removed %zu temporary file%s in %s left by checkpoint writes of "
               "processes that no longer run (%s)\n",
               removed.size(), removed.size() == 1 ? "" : "s", dir.string().c_str(), names.c_str());
}

}  // namespace

CheckpointPosition CheckpointPosition::of(const data::BatchSource& source) {
  CheckpointPosition p{.epoch = std::max<int64_t>(0, source.epoch()),
                       .batch = source.batch_index(),
                       .progress = source.epoch_progress()};
  if (source.batches_per_epoch() >= 0 && p.batch >= source.batches_per_epoch()) {
    ++p.epoch;
    p.batch = 0;
    p.progress = 0;
  }
  return p;
}

void TrainingCheckpoint::write(const std::filesystem::path& path, const TrainingState& state,
                               bool main_rank) const {
  nn::Module& model = state.model;
  optim::Optimizer& optimizer = state.optimizer;
  if (!main_rank && !optimizer.checkpoint_is_collective()) return;  // rank 0 writes
  optimizer.flush();  // weights and optimizer state of the same step
  std::vector<NamedTensor> tensors;
  model.visit_parameters("", [&](const std::string& n, nn::Parameter& p) {
    tensors.push_back({"model." + n, p.value()});
  });
  model.visit_buffers("", [&](const std::string& n, Tensor& t) {
    tensors.push_back({"buffer." + n, t});
  });
  // A sharded (ZeRO-1) optimizer gathers its state here: every rank takes part, rank 0 writes.
  for (auto& [n, t] : optimizer.checkpoint_state()) tensors.push_back({"optim." + n, t});
  if (optimizer.checkpoint_is_collective() && !main_rank) return;
  if (state.scaler)
    for (auto& [n, t] : state.scaler->state()) tensors.push_back({"scaler." + n, t});

  nlohmann::json gens = nlohmann::json::object();
  model.visit_generators("", [&](const std::string& n, Generator& g) {
    gens[n] = {std::to_string(g.seed()), std::to_string(g.offset())};
  });
  nlohmann::json settings_json = nlohmann::json::object();
  for (const auto& [flag, value] : settings) settings_json[flag] = value;
  const std::filesystem::path dir = path.parent_path().empty() ? "." : path.parent_path();
  std::filesystem::create_directories(dir);
  remove_leftover_temporaries(dir);
  // save_safetensors adds the tensors' checksums (kChecksumsKey).
  save_safetensors(path, tensors,
                   {{"stoker.kind", "training-checkpoint"},
                    {"stoker.checkpoint_version", std::to_string(kCheckpointVersion)},
                    {"stoker.data", recorded_run_json(world_size, identity)},
                    {"stoker.step", std::to_string(step)},
                    {"stoker.epoch_progress", std::to_string(position.progress)},
                    {"stoker.epoch", std::to_string(position.epoch)},
                    {"stoker.batch_index", std::to_string(position.batch)},
                    {"stoker.optimizer_steps", std::to_string(optimizer.steps())},
                    {"stoker.evaluated_step", std::to_string(evaluated_step)},
                    {"stoker.generators", gens.dump()},
                    {"stoker.model", model.describe()},
                    {"stoker.optimizer", optimizer.describe()},
                    // The run's progress in samples and the schedule's clock (elastic resume), and
                    // what defines the run (compared by resume(): train/run_settings.h).
                    {"stoker.samples_seen", std::to_string(samples_seen)},
                    {"stoker.schedule", nlohmann::json{{"position", schedule_position},
                                                       {"total_steps", schedule_total_steps},
                                                       {"global_batch", global_batch},
                                                       {"rebased", schedule_rebased}}
                                            .dump()},
                    {"stoker.run", nlohmann::json{{"grad_accum_steps", grad_accum_steps}}.dump()},
                    {"stoker.settings", settings_json.dump()}});
}

TrainingCheckpoint TrainingCheckpoint::read(const SafetensorsReader& reader,
                                            const std::filesystem::path& path) {
  const std::string file = path.string();
  const auto& meta = reader.metadata();
  auto meta_int = [&](const std::string& key) -> int64_t {
    const auto it = meta.find(key);
    STOKER_CHECK(it != meta.end(), file, " is not a stoker training checkpoint (no ", key,
                 " in its metadata); to load weights only, use SafetensorsReader");
    try {
      return std::stoll(it->second);
    } catch (const std::exception&) {
      STOKER_THROW(file, ": metadata ", key, " = '", it->second, "' is not an integer");
    }
  };
  TrainingCheckpoint c;
  c.path = path;
  c.step = meta_int("stoker.step");
  c.position.epoch = meta_int("stoker.epoch");
  c.position.batch = meta_int("stoker.batch_index");
  c.position.progress =
      meta.count("stoker.epoch_progress") ? meta_int("stoker.epoch_progress") : -1;
  c.optimizer_steps = meta_int("stoker.optimizer_steps");
  c.evaluated_step = meta.count("stoker.evaluated_step") ? meta_int("stoker.evaluated_step") : -1;
  const int64_t version =
      meta.count("stoker.checkpoint_version") ? meta_int("stoker.checkpoint_version") : 1;
  STOKER_CHECK_HINT(version >= 1 && version <= kCheckpointVersion,
                    "resume it with the (newer) stoker build that wrote it", "checkpoint ", file,
                    " has version ", version, "; this build reads versions 1 to ",
                    kCheckpointVersion);
  c.version = static_cast<int>(version);
  if (const auto it = meta.find("stoker.data"); it != meta.end())
    parse_recorded_run(file, it->second, c.world_size, c.identity);
  // The run's progress and settings (older checkpoints: derived, or not compared).
  c.samples_seen = meta.count("stoker.samples_seen") ? meta_int("stoker.samples_seen") : -1;
  c.schedule_position = static_cast<double>(c.step);
  try {
    if (const auto it = meta.find("stoker.schedule"); it != meta.end()) {
      const nlohmann::json j = nlohmann::json::parse(it->second);
      c.schedule_position = j.at("position").get<double>();
      c.global_batch = j.at("global_batch").get<int64_t>();
      c.schedule_rebased = j.at("rebased").get<bool>();
    }
    if (const auto it = meta.find("stoker.run"); it != meta.end())
      c.grad_accum_steps = nlohmann::json::parse(it->second).at("grad_accum_steps").get<int>();
  } catch (const std::exception& e) {
    STOKER_THROW(file,
                 ": metadata stoker.schedule or stoker.run is not a valid record of the run (",
                 e.what(), "): the header is damaged");
  }
  if (const auto it = meta.find("stoker.settings"); it != meta.end())
    c.settings = parse_run_settings(file, it->second);
  c.generators = meta.count("stoker.generators") ? meta.at("stoker.generators") : "{}";
  return c;
}

void TrainingCheckpoint::complete(int grad_accum_now, int world_now) {
  const int64_t b = identity.batch_size;
  const int64_t k_then = grad_accum_steps > 0 ? grad_accum_steps : grad_accum_now;
  const int w_then = world_size > 0 ? world_size : world_now;
  if (samples_seen < 0 && b > 0) samples_seen = step * b * k_then * w_then;
  if (global_batch <= 0 && b > 0) global_batch = b * k_then * w_then;
}

std::vector<std::string> TrainingCheckpoint::check_settings(const std::vector<RunSetting>& now,
                                                            int grad_accum_now,
                                                            int world_now) const {
  const int64_t b = identity.batch_size;
  const int64_t k_then = grad_accum_steps > 0 ? grad_accum_steps : grad_accum_now;
  const int w_then = world_size > 0 ? world_size : world_now;
  // Settings that break the run's meaning are refused before anything is loaded (every
  // checkpoint of the run would refuse the same way: no fallback to an older one).
  const GlobalBatches batches{.then = b > 0 && grad_accum_steps > 0 ? b * k_then * w_then : -1,
                              .now = b > 0 ? b * grad_accum_now * world_now : -1,
                              .world_then = w_then,
                              .world_now = world_now};
  const SettingsComparison changes = compare_run_settings(settings, now, batches);
  if (!changes.refusal.empty())
    throw ChangedRunError(fmt::format("checkpoint {}: {}", path.string(), changes.refusal),
                          core::detail::where(__FILE__, __LINE__), changes.hint);
  return changes.notes;
}

bool TrainingCheckpoint::load(const SafetensorsReader& reader, const TrainingState& state) const {
  const std::string file = path.string();
  const std::string damaged_hint =
      "an earlier step_N.safetensors of the run (TrainerOptions::checkpoint_interval) or a copy "
      "of this file resumes instead";
  STOKER_CHECK_HINT(version < 2 || reader.has_checksums(), damaged_hint, "checkpoint ", file,
                    " is version ", version, " but has no ", kChecksumsKey,
                    ": the header is damaged");
  for (const std::string& name : reader.names()) {
    const SafetensorsReader::ChecksumCheck c = reader.check_checksum(name);
    STOKER_CHECK_HINT(c.ok(), damaged_hint, "checkpoint ", file, ": tensor ", name,
                      " fails its checksum (stored ", util::checksum_hex(c.expected), ", computed ",
                      util::checksum_hex(c.computed),
                      "): the file is damaged; resume from an earlier checkpoint");
  }
  nlohmann::json gens;
  try {
    gens = nlohmann::json::parse(generators);
  } catch (const nlohmann::json::exception& e) {
    STOKER_THROW(file, ": metadata stoker.generators is not valid JSON (", e.what(), ")");
  }
  nn::Module& model = state.model;
  model.visit_generators("", [&](const std::string& n, Generator&) {
    STOKER_CHECK(gens.contains(n) && gens[n].is_array() && gens[n].size() == 2 &&
                     gens[n][0].is_string() && gens[n][1].is_string(),
                 file, ": no saved position for generator '", n, "'");
  });

  state.optimizer.set_steps(optimizer_steps);
  model.visit_parameters("", [&](const std::string& n, nn::Parameter& p) {
    reader.load_into("model." + n, p.value());
    p.value_changed();
  });
  model.visit_buffers("",
                      [&](const std::string& n, Tensor& t) { reader.load_into("buffer." + n, t); });
  state.optimizer.load_checkpoint_state(
      [&](const std::string& n, Device device) { return reader.load("optim." + n, device); });
  const std::vector<std::string> names = reader.names();
  amp::GradScaler* scaler = state.scaler;
  const bool has_scaler = scaler && !scaler->state().empty() &&
                          std::find(names.begin(), names.end(),
                                    "scaler." + scaler->state().front().first) != names.end();
  // A checkpoint of another precision (allowed, with a note) has no loss scale: fp16 starts
  // from the scaler's initial one.
  if (has_scaler) {
    std::vector<std::pair<std::string, Tensor>> sstate;
    for (auto& [n, t] : scaler->state())
      sstate.emplace_back(n, reader.load("scaler." + n, t.device()));
    scaler->load_state(sstate);
  }
  model.visit_generators("", [&](const std::string& n, Generator& g) {
    try {
      g = Generator(std::stoull(gens[n][0].get<std::string>()),
                    std::stoull(gens[n][1].get<std::string>()));
    } catch (const std::exception&) {
      STOKER_THROW(file, ": the saved position of generator '", n, "' is not two integers");
    }
  });
  return !scaler || has_scaler;
}

void TrainingCheckpoint::check_run(const data::BatchSource& source, int world) const {
  const std::string ckpt = "checkpoint " + path.string();
  const std::string new_run = "or start a new run with another checkpoint_dir";
  // Another world size continues the epoch from its progress (position_source), which a
  // checkpoint taken inside an epoch must have recorded.
  STOKER_CHECK_HINT(
      world_size < 0 || world_size == world || position.batch == 0 || position.progress >= 0,
      fmt::format("resume with {} ranks as the run that wrote it (stoker launch --nproc-per-node), "
                  "or from a checkpoint at an epoch's end, {}",
                  world_size, new_run),
      ckpt, " was written by ", world_size, " rank", world_size == 1 ? "" : "s", " inside epoch ",
      position.epoch, " without the epoch's progress (a source that cannot say ",
      "which samples it delivered, or an older build), so ", world, " rank", world == 1 ? "" : "s",
      " cannot continue it");
  const data::SourceIdentity now = source.identity();
  const data::SourceIdentity& then = identity;
  STOKER_CHECK_HINT(
      then.batch_size < 0 || now.batch_size < 0 || then.batch_size == now.batch_size,
      fmt::format(
          "resume with batch size {} as the run that wrote it (--batch {} in the examples), {}",
          then.batch_size, then.batch_size, new_run),
      ckpt, ": the batch size differs: the run that wrote it took batches of ", then.batch_size,
      " samples per rank, this one ", now.batch_size);
  STOKER_CHECK_HINT(
      !then.seed || !now.seed || *then.seed == *now.seed,
      fmt::format("resume with seed {} as the run that wrote it (--seed in the examples), {}",
                  then.seed.value_or(0), new_run),
      ckpt, ": the data seed differs: the run that wrote it drew its order from seed ",
      then.seed.value_or(0), ", this one from seed ", now.seed.value_or(0));
  const auto where = [](const data::SourceIdentity& id) {
    return id.location.empty() ? std::string() : " at " + id.location;
  };
  const std::string same_data = "resume on the data the run was trained on, " + new_run;
  STOKER_CHECK_HINT(then.samples < 0 || now.samples < 0 || then.samples == now.samples, same_data,
                    ckpt, ": the dataset differs: the run that wrote it read ", then.samples,
                    " samples", where(then), ", this one ", now.samples, where(now));
  STOKER_CHECK_HINT(
      then.fingerprint.empty() || now.fingerprint.empty() || then.fingerprint == now.fingerprint,
      same_data, ckpt, ": the dataset differs: the run that wrote it read ", then.fingerprint,
      where(then), ", this one ", now.fingerprint, where(now));
}

void TrainingCheckpoint::position_source(data::BatchSource& train, int world, int grad_accum_now,
                                         bool say) const {
  const bool elastic = world_size >= 0 && world_size != world;
  const int64_t epoch = position.epoch, batch = position.batch, progress = position.progress;
  // Inside an epoch, continue from its progress whenever it was recorded: at the same world size
  // that is the exact position too, and an epoch that was itself continued (after an earlier
  // elastic resume) is not the plain epoch restore() would give.
  if (batch == 0 || progress < 0) {
    train.restore(epoch, batch);  // same world size: check_run said so
  } else if (!elastic && !train.continue_epoch(epoch, progress)) {
    train.restore(epoch, batch);  // a source that cannot continue epochs
  } else if (elastic) {
    STOKER_CHECK_HINT(
        train.continue_epoch(epoch, progress),
        fmt::format(
            "resume with {} ranks as the run that wrote it, or from a checkpoint at an epoch's end",
            world_size),
        "checkpoint ", path.string(), ": the data source (", train.kind(),
        ") cannot continue epoch ", epoch, " of a run of ", world_size, " ranks on ", world,
        " ranks (BatchSource::continue_epoch)");
  }
  if (!elastic || !say) return;
  const int64_t b = train.identity().batch_size;
  const int64_t k = grad_accum_now;
  const int64_t k_then = grad_accum_steps > 0 ? grad_accum_steps : k;
  std::printf(
      "resume: %s was written by %d rank%s, this job has %d. %s; the epochs after it are those "
      "of a %d-rank run. The per-rank batch%s is kept and grad_accum_steps is %lld, so the global "
      "batch is %s (the learning-rate schedule follows the samples seen, see below).\n",
      path.string().c_str(), world_size, world_size == 1 ? "" : "s", world,
      batch == 0 ? fmt::format("It starts at the beginning of epoch {}", epoch).c_str()
                 : fmt::format("Epoch {} continues with the samples the old ranks had not "
                               "delivered ({} of its order were), shared by {} ranks",
                               epoch, progress, world)
                       .c_str(),
      world, b >= 0 ? fmt::format(" ({})", b).c_str() : "", static_cast<long long>(k),
      b >= 0 ? fmt::format("{} (was {})", world * b * k, world_size * b * k_then).c_str()
             : fmt::format("{}/{} of the old one", world * k, world_size * k_then).c_str());
  std::fflush(stdout);
}

std::optional<std::filesystem::path> resume_newest(
    const std::filesystem::path& dir,
    const std::function<void(const std::filesystem::path&)>& resume) {
  std::vector<std::string> unreadable;
  const std::vector<CheckpointFile> files = list_checkpoints(dir, &unreadable);
  for (const std::string& u : unreadable)
    std::fprintf(stderr, "checkpoint: left out, its header cannot be read: %s\n", u.c_str());
  STOKER_CHECK_HINT(!files.empty() || unreadable.empty(),
                    "copy the folder again from where it was written, or start a new run in an "
                    "empty folder",
                    "no checkpoint of ", dir.string(), " can be resumed: ", unreadable.size(),
                    " file", unreadable.size() == 1 ? " has" : "s have",
                    " a checkpoint's name but no readable header (named above)");
  std::string failures;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      resume(it->path);
      return it->path;
    } catch (const ChangedRunError&) {
      throw;  // the run's settings changed: an older checkpoint would refuse the same way
    } catch (const Error& e) {
      std::fprintf(stderr, "checkpoint: %s does not resume (%s)%s\n", it->path.string().c_str(),
                   e.what(), std::next(it) != files.rend() ? "; trying the one before it" : "");
      failures += fmt::format("\n  {}: {}", it->path.string(), e.what());
    }
  }
  if (files.empty()) return std::nullopt;
  STOKER_CHECK_HINT(false, "start a new run in another folder, or copy the checkpoints again",
                    "none of the ", files.size(), " checkpoints of ", dir.string(),
                    " resumes:", failures);
  return std::nullopt;
}

}  // namespace stoker::train
