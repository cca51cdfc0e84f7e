// Private to `stoker doctor` (doctor.h): what its parts share. One file per job:
//   doctor.cpp       the options, the `--` split, run_doctor (the order of the parts)
//   checks.cpp       the static checks of the machine
//   model.cpp        the bundled model, its fixed batches and its diagnosed training run
//   measurement.cpp  a Measurement from a report, in JSON and on the terminal
//   ablations.cpp    the ablations on the bundled model
//   worker.cpp       1 vs N ranks: this program re-run as the ranks (--worker-json)
//   program.cpp      the ablations on the user's own program (after `--`)
//   overhead.cpp     the cost of diagnostics (--overhead)
// The rules they apply (the static checks, the conclusions) are the diag library's
// (diag/doctor.h), which also renders them in its health-check page.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "diag/diagnostics.h"
#include "diag/doctor.h"
#include "doctor.h"
#include "stoker/amp/precision.h"
#include "stoker/core/device.h"
#include "stoker/data/batch_source.h"
#include "stoker/diag/report.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/nn/containers.h"

namespace stoker::cli::doctor {

namespace fs = std::filesystem;
using diag::Measurement;
using nlohmann::json;

constexpr int kClasses = 8;  // labels of the bundled model's data

// What the options resolve to on this machine.
struct Setup {
  Device device;
  amp::Precision precision;
  int64_t width;
};

// ---- the bundled model (model.cpp)

// A batch held on the device, handed out `batches` times per epoch: the model without any
// input pipeline (the sweep, the ranks, the overhead runs).
class FixedBatches : public data::BatchSource {
 public:
  FixedBatches(data::Batch batch, int64_t batches) : batch_(std::move(batch)), n_(batches) {}
  void start_epoch(int64_t epoch) override {
    epoch_ = epoch;
    i_ = 0;
  }
  bool next(data::Batch& b) override {
    if (i_ >= n_) return false;
    ++i_;
    b = batch_;
    return true;
  }
  int64_t batches_per_epoch() const override { return n_; }
  int64_t samples_per_epoch() const override { return n_ * batch_.size; }
  int64_t epoch() const override { return epoch_; }
  int64_t batch_index() const override { return i_; }
  void restore(int64_t epoch, int64_t index) override {
    epoch_ = epoch;
    i_ = index;
  }

 private:
  data::Batch batch_;
  int64_t n_;
  int64_t epoch_ = -1, i_ = 0;
};

// --model mlp or cnn, seeded, on s.device.
std::unique_ptr<nn::Sequential> make_model(const DoctorOptions& o, const Setup& s);
// Normal random images [batch, 3, size, size] in the compute dtype, labels i % kClasses.
data::Batch random_batch(const DoctorOptions& o, const Setup& s, int64_t batch);
// Trains the bundled model (`model`, or a fresh one) on `source` for warmup + steps optimizer
// steps with diagnostics `d` on; the report.
// `html`: filled with the run's health-check page (its verdict, op table and curves).
// cuda_graph: the steps captured and replayed as a CUDA graph (TrainerOptions::cuda_graph).
diag::Report train(const DoctorOptions& o, const Setup& s, data::BatchSource& source,
                   diag::DiagnosticsOptions d, dist::GradSync* grad_sync = nullptr,
                   nn::Sequential* model = nullptr, diag::HtmlReport* html = nullptr,
                   bool cuda_graph = false);

// ---- measurements (measurement.cpp)

// One rank's measurement from its diagnostics report (samples/s: the report's).
Measurement to_measurement(const std::string& name, const std::string& kind, int64_t batch,
                           const diag::Report& r);
// A measurement that did not run: `error` says why.
Measurement failed_measurement(const std::string& name, const std::string& kind, int64_t batch,
                               int ranks, std::string error);
// "1 GPU", "4 GPUs", "2 ranks" (on the CPU).
std::string ranks_name(int ranks, Device device);
// The one JSON layout of a measurement: the elements of --json's "measurements" and what a
// rank of the 1-vs-N ablation writes to --worker-json. measurement_from_json reads it back.
json measurement_json(const Measurement& m);
Measurement measurement_from_json(const json& j);
// The measurement as a line of the terminal report ("  real data   1.2k samples/s ...").
void print_measurement(const Measurement& m);
// The batch sizes of the sweep: --sweep, else batch/4 .. batch*2.
std::vector<int64_t> sweep_sizes(const DoctorOptions& o);

// ---- the parts run_doctor calls

// The static checks, printed; their JSON ("static" of --json), and the checks themselves in
// `checks` when given (the HTML report). checks.cpp
json run_static(const DoctorOptions& o, std::vector<diag::Check>* checks = nullptr);
// The ablations on the bundled model, printed as they go; `ranks` > 1 adds 1 vs N ranks;
// scratch files go to `tmp`; `html` gets the real-data run's page. ablations.cpp
std::vector<Measurement> run_bundled_ablations(const DoctorOptions& o, const Setup& s, int ranks,
                                               const fs::path& tmp,
                                               diag::HtmlReport* html = nullptr);
// The bundled model under `stoker launch` with `ranks` ranks (each runs run_worker).
// worker.cpp
Measurement run_ranks(const DoctorOptions& o, const Setup& s, int ranks, const fs::path& tmp);
// One rank of run_ranks: trains, and rank 0 writes the measurement to o.worker_json.
int run_worker(const DoctorOptions& o);
// The same ablations on o.program. program.cpp
std::vector<Measurement> run_program_ablations(const DoctorOptions& o, int ranks,
                                               const fs::path& tmp);
// Diagnostics off vs on, interleaved; printed, and its JSON ("overhead" of --json).
// overhead.cpp
json run_overhead(const DoctorOptions& o, const Setup& s);

}  // namespace stoker::cli::doctor
