#include "stoker/optim/optimizer.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <numbers>

#include "stoker/core/error.h"

namespace stoker::optim {

LrSchedule constant_lr(float lr) {
  return {[lr](int64_t) { return lr; }, fmt::format("constant({:g})", lr)};
}

LrSchedule step_lr(float lr, int64_t step_size, float gamma) {
  STOKER_CHECK(step_size > 0, "step_lr: step_size ", step_size, " must be positive");
  return {[=](int64_t s) {
            return static_cast<float>(lr * std::pow(static_cast<double>(gamma), s / step_size));
          },
          fmt::format("step({:g}, every {} x{:g})", lr, step_size, gamma)};
}

LrSchedule linear_warmup(float lr, int64_t warmup_steps) {
  STOKER_CHECK(warmup_steps >= 0, "linear_warmup: warmup_steps must be >= 0");
  return {[=](int64_t s) {
            if (warmup_steps == 0 || s >= warmup_steps) return lr;
            return static_cast<float>(lr * static_cast<double>(s + 1) / warmup_steps);
          },
          fmt::format("linear warmup({:g}, {} steps)", lr, warmup_steps)};
}

LrSchedule cosine_with_warmup(float lr, int64_t warmup_steps, int64_t total_steps, float min_lr) {
  STOKER_CHECK(warmup_steps >= 0 && total_steps > warmup_steps,
               "cosine_with_warmup: need 0 <= "
               "warmup_steps (",
               warmup_steps, ") < total_steps (", total_steps, ")");
  return {[=](int64_t s) {
            if (s < warmup_steps)
              return static_cast<float>(lr * static_cast<double>(s + 1) / warmup_steps);
            const double t = std::min(1.0, static_cast<double>(s - warmup_steps) /
                                               static_cast<double>(total_steps - warmup_steps));
            return static_cast<float>(min_lr +
                                      0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * t)));
          },
          fmt::format("cosine({:g} -> {:g}, warmup {}, total {})", lr, min_lr, warmup_steps,
                      total_steps),
          total_steps};
}

LrSchedule polynomial_with_warmup(float lr, int64_t warmup_steps, int64_t total_steps, float end_lr,
                                  float power) {
  STOKER_CHECK(warmup_steps >= 0, "polynomial_with_warmup: warmup_steps ", warmup_steps,
               " is negative; pass 0 for no warm-up");
  STOKER_CHECK(total_steps > 0, "polynomial_with_warmup: total_steps ", total_steps,
               " must be positive (the step at which the decay reaches end_lr)");
  STOKER_CHECK(total_steps >= warmup_steps, "polynomial_with_warmup: total_steps (", total_steps,
               ") is below warmup_steps (", warmup_steps,
               "); the decay ends at total_steps, so give total_steps >= warmup_steps");
  STOKER_CHECK(std::isfinite(lr) && lr >= 0.0f, "polynomial_with_warmup: lr ", lr,
               " must be a finite number >= 0");
  STOKER_CHECK(std::isfinite(end_lr) && end_lr >= 0.0f && end_lr <= lr,
               "polynomial_with_warmup: end_lr ", end_lr, " must be in [0, lr = ", lr,
               "]; lower end_lr (MLPerf's is 1e-4) or raise lr");
  STOKER_CHECK(std::isfinite(power) && power > 0.0f, "polynomial_with_warmup: power ", power,
               " must be a finite number > 0 (2 is MLPerf's; 1 is a linear decay)");
  return {[=](int64_t s) {
            if (s < warmup_steps)
              return static_cast<float>(lr * static_cast<double>(s + 1) / warmup_steps);
            if (s >= total_steps) return end_lr;
            const double t = static_cast<double>(s - warmup_steps) /
                             static_cast<double>(total_steps - warmup_steps);
            return static_cast<float>(end_lr + (static_cast<double>(lr) - end_lr) *
                                                   std::pow(1.0 - t, static_cast<double>(power)));
          },
          fmt::format("poly({:g} -> {:g}, power {:g}, warmup {}, total {})", lr, end_lr, power,
                      warmup_steps, total_steps),
          total_steps};
}

float scale_lr_for_batch(float base_lr, int64_t base_batch_size, int64_t batch_size) {
  STOKER_CHECK(base_batch_size > 0 && batch_size > 0,
               "scale_lr_for_batch: batch sizes must be "
               "positive, got ",
               base_batch_size, " and ", batch_size);
  return static_cast<float>(static_cast<double>(base_lr) * batch_size / base_batch_size);
}

}  // namespace stoker::optim
