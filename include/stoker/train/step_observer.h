// StepObserver: what watches the training loop from outside it — the log line, the progress
// bar, the metrics file, periodic checkpoints, diagnostics, and a program's own observers all
// attach to Trainer::fit() through this one interface. Every rank calls every observer at the
// same points, in the order they were added; an observer that throws stops fit().
// Details: docs/architecture.md#step-observers, docs/long_runs.md#in-your-own-program.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "stoker/data/batch_source.h"
#include "stoker/diag/report.h"

namespace stoker::dist {
class Communicator;
}  // namespace stoker::dist

namespace stoker::train {

class Trainer;
struct StepStats;
struct EvalRecord;
struct FitResult;

// What an observer knows about the fit that begins.
struct FitContext {
  Trainer& trainer;
  data::BatchSource& train;       // the source fit() reads
  data::BatchSource* validation;  // nullptr: no evaluation inside fit()
  int64_t first_step = 0;         // optimizer steps done before this fit()
  int64_t first_epoch = 0;
  int64_t epochs = 0;        // fit()'s epochs argument
  int64_t total_steps = -1;  // the step fit() ends at (-1: unknown)
  std::string model;         // nn::Module::describe()
  int64_t parameters = 0;
  std::string precision;  // amp::precision_name
  int grad_accum_steps = 1;
  int world_size = 1;
  bool main_rank = true;  // rank 0, or a single process: the one that prints and saves
  dist::Communicator* communicator = nullptr;  // the job's (nullptr: a single process)
  bool quiet = false;                          // TrainerOptions::quiet
  // A resumed run: the checkpoint it resumed, and whether that checkpoint includes the
  // evaluation at first_step.
  bool resumed = false;
  std::filesystem::path resumed_from;
  bool resumed_evaluated = false;
};

// One optimizer step (on_step_end, on_step_done).
struct StepEnd {
  int64_t step = 0;  // optimizer steps done, this one included
  int64_t epoch = 0;
  int64_t samples = 0;      // this rank's samples in the step
  bool epoch_done = false;  // the source's epoch ended with this step
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_fit_begin(const FitContext&) {}
  virtual void on_epoch_begin(int64_t /*epoch*/) {}
  virtual void on_step_begin(int64_t /*step*/) {}
  virtual void on_phase(diag::Phase) {}
  virtual void on_step_end(const StepEnd&) {}
  virtual void on_step_skipped() {}
  virtual void on_log(const StepStats&) {}
  virtual void on_eval(const EvalRecord&) {}
  virtual void on_step_done(const StepEnd&) {}
  virtual void on_epoch_end(int64_t /*epoch*/) {}
  virtual void on_fit_end(FitResult&) {}
};

}  // namespace stoker::train
