#include "stoker/nn/loss.h"

#include <fmt/format.h>
#include <algorithm>
#include <limits>

#include "stoker/core/error.h"
#include "stoker/nn/module.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/loss.h"

namespace stoker::nn {

namespace {
constexpr int64_t kChunkBytes = int64_t{1} << 30;  // see the header: fewer dW passes
constexpr int64_t kRowAlign = 64;  // chunk heights in multiples of this (GEMM tiles)
// pad_classes_to = 0 on CUDA. A 16-bit row of V elements starts on 16 bytes only when V is a
// multiple of 8, and cuBLASLt's tensor-core kernels (Hopper's TMA loads above all) need
// 16-byte-aligned leading dimensions: GPT-2's 50,257 classes made its training step 1.84x slower
// than 50,304. 64 rather than 8 also makes the dX GEMM's reduction over the classes whole 64-wide
// K tiles (128 bytes in bf16) and every logits row start a 128-byte line; 128 would add
// nothing those do not already give, and pads up to twice as many rows.
constexpr int64_t kCudaPad = 64;
}  // namespace

LinearCrossEntropyLoss::LinearCrossEntropyLoss(Parameter& weight, LinearCrossEntropyOptions options)
    : weight_(weight), options_(options) {
  STOKER_CHECK(weight.value().defined() && weight.value().rank() == 2,
               "LinearCrossEntropyLoss: the weight must be [classes, features], got ",
               weight.value().defined() ? weight.value().str() : std::string("undefined"));
  STOKER_CHECK(options.chunk_rows >= 0, "LinearCrossEntropyLoss: chunk_rows ", options.chunk_rows,
               " must be >= 0 (0: chunks of up to 1 GiB of logits)");
  STOKER_CHECK(options.label_smoothing >= 0.0f && options.label_smoothing <= 1.0f,
               "LinearCrossEntropyLoss: label_smoothing ", options.label_smoothing,
               " must be in [0, 1]");
  STOKER_CHECK(options.pad_classes_to >= 0, "LinearCrossEntropyLoss: pad_classes_to ",
               options.pad_classes_to,
               " must be >= 0 (0: automatic, 1: no padding, n: a multiple of n)");
}

int64_t LinearCrossEntropyLoss::padded_classes() const {
  const int64_t classes = weight_.value().size(0);
  int64_t to = options_.pad_classes_to;
  if (to == 0) to = weight_.device().is_cuda() ? kCudaPad : 1;
  return (classes + to - 1) / to * to;
}

int64_t LinearCrossEntropyLoss::chunk_rows(int64_t n, DType dtype) const {
  if (n <= 0) return 1;
  if (options_.chunk_rows > 0) return std::min(options_.chunk_rows, n);
  const int64_t row_bytes = padded_classes() * static_cast<int64_t>(core::dtype_size(dtype));
  const int64_t most = std::max<int64_t>(kRowAlign, kChunkBytes / std::max<int64_t>(1, row_bytes));
  // Equal chunks (the last one is not a sliver), rounded up to whole tiles.
  const int64_t chunks = (n + most - 1) / most;
  const int64_t rows = (n + chunks - 1) / chunks;
  return std::min(n, (rows + kRowAlign - 1) / kRowAlign * kRowAlign);
}

Loss::ForwardBackward LinearCrossEntropyLoss::run(const Tensor& x, const Tensor& target,
                                                  bool want_grad, float scale) {
  const Tensor& w_master = weight_.value();
  STOKER_CHECK(x.defined() && x.rank() == 2 && core::is_float(x.dtype()),
               "LinearCrossEntropyLoss: input must be [N, ", w_master.size(1),
               "] float features, got ", x.defined() ? x.str() : std::string("undefined"));
  STOKER_CHECK(x.size(1) == w_master.size(1), "LinearCrossEntropyLoss: input ", x.str(), " has ",
               x.size(1), " features but the weight ", w_master.str(), " takes ", w_master.size(1));
  STOKER_CHECK(x.device() == w_master.device(), "LinearCrossEntropyLoss: input on ",
               x.device().str(), " but the weight on ", w_master.device().str(),
               "; move the model (and so the weight) to the input's device");
  STOKER_CHECK(target.defined() && (target.dtype() == DType::i32 || target.dtype() == DType::i64) &&
                   target.numel() == x.size(0),
               "LinearCrossEntropyLoss: targets must be ", x.size(0),
               " class indices (i32 or i64), got ",
               target.defined() ? target.str() : std::string("undefined"));
  STOKER_CHECK(target.device() == x.device(), "LinearCrossEntropyLoss: input on ", x.device().str(),
               " but targets on ", target.device().str());
  const Device device = x.device();
  const int64_t n = x.size(0), k = x.size(1), classes = w_master.size(0);
  const Tensor t = target.reshape({n});
  Tensor loss = Tensor::zeros({}, DType::f32, device);
  if (n == 0) {  // mean over no rows: NaN, as CrossEntropyLoss
    ops::fill(loss, std::numeric_limits<double>::quiet_NaN());
    return {loss, want_grad ? Tensor::zeros({0, k}, x.dtype(), device) : Tensor()};
  }
  // The head's width: `classes`, or padded (see pad_classes_to) to `width` rows of W' = [W; 0].
  // Rows are the outer dimension, so W is the contiguous prefix of W', and the first `classes`
  // rows of dW' are dW. The padding's logits are 0 (zero rows) and the loss ops leave those columns
  // out, so their gradient is 0 and adds nothing to dX.
  const int64_t width = padded_classes();
  const bool padded = width != classes;
  Tensor w = weight_.compute_value(x.dtype());
  if (padded) {
    const Tensor wp = Tensor::empty({width, k}, x.dtype(), device);
    ops::copy(wp.slice(0, classes), w);
    ops::fill(wp.slice(classes, width), 0.0);
    w = wp;
  }
  const Tensor count = Tensor::empty({}, DType::f32, device);
  ops::count_targets(count, t, options_.ignore_index);
  const Tensor lse = Tensor::empty({n}, DType::f32, device);
  const int64_t rows = chunk_rows(n, x.dtype());
  const Tensor logits_buffer = Tensor::empty({rows * width}, x.dtype(), device);
  Tensor dx;
  const Tensor* dw = nullptr;
  float beta = 1.0f;
  Tensor dw_out;  // where the dW GEMMs write: the gradient itself, or the padded scratch
  float dw_beta = 1.0f;
  if (want_grad) {
    dx = Tensor::empty({n, k}, x.dtype(), device);
    if (weight_.requires_grad) {
      dw = &weight_.grad_for_write(beta);
      dw_out = padded ? Tensor::empty({width, k}, DType::f32, device) : *dw;
      dw_beta = padded ? 0.0f : beta;
    }
  }
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t r1 = std::min(n, r0 + rows);
    const Tensor xc = x.slice(r0, r1), tc = t.slice(r0, r1), lc = lse.slice(r0, r1);
    const Tensor logits = logits_buffer.slice(0, (r1 - r0) * width).reshape({r1 - r0, width});
    ops::gemm(logits, xc, w, {.trans_b = true});
    ops::cross_entropy_forward_chunk(loss, lc, logits, tc, count, options_.ignore_index,
                                     options_.label_smoothing, classes);
    if (!want_grad) continue;
    // The chunk's logits become its gradient in place.
    ops::cross_entropy_backward(logits, logits, tc, lc, count, options_.ignore_index,
                                options_.label_smoothing, scale, grad_scale_, classes);
    ops::gemm(dx.slice(r0, r1), logits, w);
    if (dw != nullptr) {
      ops::gemm(dw_out, logits, xc, {.trans_a = true, .beta = dw_beta});
      dw_beta = 1.0f;  // later chunks add to what the first wrote
    }
  }
  if (dw != nullptr && padded) {  // once: dW's rows of the scratch into the gradient
    const Tensor rows_of_w = dw_out.slice(0, classes);
    if (beta == 0.0f) {
      ops::copy(*dw, rows_of_w);
    } else {
      ops::add(*dw, *dw, rows_of_w);
    }
  }
  if (dw != nullptr && !options_.weight_shared) weight_.grad_ready();
  return {loss, dx};
}

Tensor LinearCrossEntropyLoss::forward(const Tensor& x, const Tensor& target) {
  ForwardBackward r = run(x, target, /*want_grad=*/false, 1.0f);
  if (saving_activations()) {
    x_ = x;
    target_ = target;
  } else {
    x_ = Tensor();
    target_ = Tensor();
  }
  return r.loss;
}

Tensor LinearCrossEntropyLoss::backward(float scale) {
  STOKER_CHECK(x_.defined(),
               "LinearCrossEntropyLoss: backward called before forward (or after a "
               "forward that saved nothing, under nn::NoSaveScope)");
  ForwardBackward r = run(x_, target_, /*want_grad=*/true, scale);
  x_ = Tensor();
  target_ = Tensor();
  return r.grad;
}

Loss::ForwardBackward LinearCrossEntropyLoss::forward_backward(const Tensor& x,
                                                               const Tensor& target, float scale) {
  x_ = Tensor();
  target_ = Tensor();
  return run(x, target, /*want_grad=*/true, scale);
}

std::string LinearCrossEntropyLoss::describe() const {
  return fmt::format(
      "LinearCrossEntropyLoss(classes={}, features={}, ignore_index={}, label_smoothing={:g}, "
      "chunk_rows={}, padded_classes={})",
      weight_.value().size(0), weight_.value().size(1), options_.ignore_index,
      options_.label_smoothing, options_.chunk_rows, padded_classes());
}

}  // namespace stoker::nn
