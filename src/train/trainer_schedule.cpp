// The Trainer's learning-rate schedule and step budget over the run's samples
// (TrainerOptions::schedule, max_steps): by step in an uninterrupted run, rebased on the samples
// seen after an elastic resume (another world size), and planned at each fit()'s start.
#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "stoker/core/error.h"
#include "stoker/train/trainer.h"
#include "train/trainer_impl.h"

namespace stoker::train {

float Trainer::Impl::scheduled_lr() const {
  if (!schedule_rebased_) return options_.schedule->lr_at(step_);
  // The step's learning rate is the schedule's at the step its end reaches (rounded up): an
  // uninterrupted run's step s ends at position s + 1 and takes lr_at(s); the last step of a
  // rebased run ends at the schedule's end and takes lr_at(total_steps - 1), as the
  // uninterrupted run's last step does. The small margin keeps rounding from moving a step.
  const double end =
      schedule_pos0_ +
      static_cast<double>(samples_seen_ + step_samples_ - schedule_samples0_) * schedule_rate_;
  int64_t at = static_cast<int64_t>(std::ceil(end - 1e-6)) - 1;
  const int64_t total = options_.schedule->total_steps;
  if (total > 0) at = std::min(at, total - 1);
  return options_.schedule->lr_at(std::max<int64_t>(0, at));
}

double Trainer::Impl::schedule_position() const {
  if (!schedule_rebased_) return static_cast<double>(step_);
  return schedule_pos0_ + static_cast<double>(samples_seen_ - schedule_samples0_) * schedule_rate_;
}

bool Trainer::Impl::max_steps_reached() const {
  if (options_.max_steps < 0) return false;
  // Rebased: the samples of max_steps steps of the run's first global batch.
  if (schedule_rebased_ && schedule_batch_ > 0)
    return samples_seen_ >= options_.max_steps * schedule_batch_;
  return step_ >= options_.max_steps;
}

void Trainer::Impl::plan_fit(const data::BatchSource& train, int64_t epochs,
                             bool positioned_first) {
  const int world = world_size();
  const int64_t k = options_.grad_accum_steps;
  const int64_t b = train.identity().batch_size;
  const int64_t global = b > 0 ? b * k * world : -1;
  if (schedule_batch_ <= 0 && global > 0) schedule_batch_ = global;
  if (!schedule_rebased_) return;  // fit_total_steps_ as fit() counted it: by step
  // Every rank's samples left until the epochs end (the resumed epoch from where it now stands,
  // then whole epochs of this world size), and the steps they make.
  const int64_t bpe = train.batches_per_epoch();
  const int64_t first = positioned_first ? resumed_->position.epoch : 0;
  int64_t left = -1, steps_left = -1;
  if (bpe >= 0 && b > 0) {
    const int64_t first_left =
        positioned_first ? std::max<int64_t>(0, bpe - train.batch_index()) : bpe;
    const int64_t after = std::max<int64_t>(0, epochs - first - 1);
    const bool any = first < epochs;
    left = any ? (first_left + after * bpe) * b * world : 0;
    steps_left = any ? (first_left + k - 1) / k + after * ((bpe + k - 1) / k) : 0;
  }
  if (options_.max_steps >= 0 && schedule_batch_ > 0) {
    const int64_t to_max =
        std::max<int64_t>(0, options_.max_steps * schedule_batch_ - samples_seen_);
    if (left < 0 || to_max < left) {
      left = to_max;
      steps_left = global > 0 ? (to_max + global - 1) / global : -1;
    }
  }
  fit_total_steps_ = steps_left >= 0 ? step_ + steps_left : -1;
  // The schedule spans the run's samples: a step that ends at s of the run's S samples takes
  // it at total_steps * s / S (whatever the world size, and however the program spans it:
  // over its steps at this world size, or over steps of the first segment's batch). A schedule
  // without an end goes on at one of its steps per global batch of the run's first segment.
  schedule_pos0_ = schedule_position();
  schedule_samples0_ = samples_seen_;
  const int64_t total = options_.schedule ? options_.schedule->total_steps : -1;
  const bool spread = total > 0 && left > 0;
  if (spread) {
    const double run_samples = static_cast<double>(samples_seen_ + left);
    schedule_pos0_ = static_cast<double>(total) * static_cast<double>(samples_seen_) / run_samples;
    schedule_rate_ = static_cast<double>(total) / run_samples;
  } else {
    schedule_rate_ = schedule_batch_ > 0 ? 1.0 / static_cast<double>(schedule_batch_) : 0.0;
  }
  if (!main_rank() || options_.quiet) return;
  std::printf("resume: the run has seen %lld samples; %s, so this job ends at step %s%s.\n",
              static_cast<long long>(samples_seen_),
              left >= 0
                  ? fmt::format("{} are left ({} steps of {})", left, steps_left, global).c_str()
                  : "the samples left are not known",
              fit_total_steps_ >= 0 ? std::to_string(fit_total_steps_).c_str() : "(unknown)",
              !options_.schedule ? ""
              : spread ? fmt::format("; the learning-rate schedule continues from its step {:g} of "
                                     "{} and reaches its end there",
                                     schedule_pos0_, total)
                             .c_str()
                       : fmt::format("; the learning-rate schedule continues from its step {:g}, "
                                     "one step per {} samples",
                                     schedule_pos0_, schedule_batch_)
                             .c_str());
  std::fflush(stdout);
}

}  // namespace stoker::train
