// StepObserver: what watches the training loop from outside it — the log line, the progress
// bar, the metrics file, periodic checkpoints, diagnostics, and a program's own observers all
// attach to Trainer::fit() through this one interface (docs/architecture.md#step-observers).
//
// fit() calls, in this order:
//   on_fit_begin                       before the first step (checks that must not cost a run)
//   per epoch:  on_epoch_begin
//     per step: on_step_begin, on_phase (data, forward, backward, comm, optimizer: each time the
//               step enters a phase), then on_step_end as soon as the step's work is enqueued
//               (nothing of it has been read back: a timing ends here), or on_step_skipped when
//               the epoch had no batch left;
//               on_log on log lines, on_eval after evaluations inside fit(),
//               on_step_done once the step's log line and evaluation are over (the run is at a
//               point where a checkpoint records a consistent position)
//   on_epoch_end
//   on_fit_end                         after the last step, its evaluation and the final
//                                      checkpoint
// Every rank of a data-parallel job calls every observer at the same points (what prints
// checks FitContext::main_rank), so an observer may run a collective on the job's communicator
// at on_log, on_step_done and on_epoch_end. An observer that throws stops fit() with its error.
// Observers are called in the order they were added, the Trainer's own (diagnostics, log line,
// metrics, checkpoints, progress bar) first; the progress bar is erased before on_log, on_eval,
// on_epoch_end and on_fit_end reach a program's observers, so they may print.
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
