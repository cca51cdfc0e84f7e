#include "stoker/ops/elementwise.h"

#include "ops/random_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

void random_uniform(const Tensor& out, float lo, float hi, uint64_t seed, uint64_t offset) {
  detail::check_float("random_uniform", "out", out);
  detail::check_backend("random_uniform", out);
  STOKER_CHECK(lo <= hi, "ops::random_uniform: lo ", lo, " > hi ", hi);
  if (out.numel() > 0) random_uniform_stub(out.device(), out, lo, hi, seed, offset);
}

void random_uniform(const Tensor& out, float lo, float hi, Generator& gen) {
  const auto d = gen.reserve(static_cast<uint64_t>(out.numel()));
  random_uniform(out, lo, hi, d.seed, d.offset);
}

void random_normal(const Tensor& out, float mean, float std, uint64_t seed, uint64_t offset) {
  detail::check_float("random_normal", "out", out);
  detail::check_backend("random_normal", out);
  STOKER_CHECK(std >= 0.0f, "ops::random_normal: std ", std, " is negative");
  if (out.numel() > 0) random_normal_stub(out.device(), out, mean, std, seed, offset);
}

void random_normal(const Tensor& out, float mean, float std, Generator& gen) {
  const auto d = gen.reserve(static_cast<uint64_t>(out.numel()));
  random_normal(out, mean, std, d.seed, d.offset);
}

}  // namespace stoker::ops
