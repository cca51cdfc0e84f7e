// Learning-rate schedules: the learning rate as a pure function of the optimizer step, so a
// resumed run continues the same curve. Steps are 0-based (the lr used for the first update is
// lr_at(0)).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace stoker::optim {

struct LrSchedule {
  std::function<float(int64_t step)> lr_at;
  std::string description;
  // The step at which the schedule has reached its end (cosine_with_warmup's and
  // polynomial_with_warmup's total_steps); -1: a schedule without an end. The Trainer needs it to
  // rebase the schedule when an elastic resume changes the steps left (train/trainer.h).
  int64_t total_steps = -1;
};

// Always `lr`.
LrSchedule constant_lr(float lr);
// lr * gamma^(step / step_size) (PyTorch's StepLR).
LrSchedule step_lr(float lr, int64_t step_size, float gamma = 0.1f);
// Linear ramp from lr/warmup_steps... to lr over `warmup_steps`, then constant:
// lr * min(1, (step + 1) / warmup_steps).
LrSchedule linear_warmup(float lr, int64_t warmup_steps);
// Linear warmup as above, then cosine decay from lr to min_lr at total_steps (held after).
LrSchedule cosine_with_warmup(float lr, int64_t warmup_steps, int64_t total_steps,
                              float min_lr = 0.0f);

// Linear warmup as above, then polynomial decay from lr to end_lr at total_steps, held at end_lr
// after (MLPerf ResNet-50's LARS schedule: power 2, end_lr 1e-4):
//   step <  warmup_steps:                lr * (step + 1) / warmup_steps
//   warmup_steps <= step < total_steps:  end_lr + (lr - end_lr) * (1 - t)^power,
//                                        t = (step - warmup_steps) / (total_steps - warmup_steps)
//   step >= total_steps:                 end_lr
// Needs 0 <= warmup_steps <= total_steps, total_steps > 0, 0 <= end_lr <= lr and power > 0;
// otherwise throws naming the argument.
LrSchedule polynomial_with_warmup(float lr, int64_t warmup_steps, int64_t total_steps,
                                  float end_lr = 1e-4f, float power = 2.0f);

// The linear scaling rule (Goyal et al. 2017): lr for `batch_size` given a reference lr tuned
// at `base_batch_size`.
float scale_lr_for_batch(float base_lr, int64_t base_batch_size, int64_t batch_size);

}  // namespace stoker::optim
