// The bundled model of `stoker doctor`: an MLP over the flattened image or a small CNN, its
// random batches, and the training run that every ablation on it diagnoses.
#include <algorithm>

#include "parts.h"
#include "stoker/core/error.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/nn/pool.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"

namespace stoker::cli::doctor {

std::unique_ptr<nn::Sequential> make_model(const DoctorOptions& o, const Setup& s) {
  nn::manual_seed(1);
  auto m = std::make_unique<nn::Sequential>();
  if (o.model == "cnn") {
    m->add(nn::make<nn::Conv2d>(3, 64, 3, 1, 1));
    m->add(nn::make<nn::BatchNorm2d>(64));
    m->add(nn::make<nn::ReLU>());
    m->add(nn::make<nn::MaxPool2d>(2));
    m->add(nn::make<nn::Conv2d>(64, 128, 3, 1, 1));
    m->add(nn::make<nn::BatchNorm2d>(128));
    m->add(nn::make<nn::ReLU>());
    m->add(nn::make<nn::MaxPool2d>(2));
    m->add(nn::make<nn::Conv2d>(128, 256, 3, 1, 1));
    m->add(nn::make<nn::BatchNorm2d>(256));
    m->add(nn::make<nn::ReLU>());
    m->add(nn::make<nn::GlobalAvgPool>());
    m->add(nn::make<nn::Flatten>());
    m->add(nn::make<nn::Linear>(256, kClasses));
  } else {
    STOKER_CHECK(o.model == "mlp", "--model ", o.model, ": use mlp or cnn");
    m->add(nn::make<nn::Flatten>());
    int64_t in = 3 * int64_t{o.size} * o.size;
    for (int i = 0; i < o.layers; ++i) {
      m->add(nn::make<nn::Linear>(in, s.width));
      m->add(nn::make<nn::ReLU>());
      in = s.width;
    }
    m->add(nn::make<nn::Linear>(in, kClasses));
  }
  m->to(s.device);
  return m;
}

data::Batch random_batch(const DoctorOptions& o, const Setup& s, int64_t batch) {
  data::Batch b;
  b.input = Tensor::empty({batch, 3, o.size, o.size}, amp::compute_dtype(s.precision), s.device);
  ops::random_normal(b.input, 0.0f, 1.0f, 7, 0);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = i % kClasses;
  b.target = Tensor::from_vector(labels, {batch}, s.device);
  b.size = batch;
  return b;
}

diag::Report train(const DoctorOptions& o, const Setup& s, data::BatchSource& source,
                   diag::DiagnosticsOptions d, dist::GradSync* grad_sync, nn::Sequential* model_in,
                   diag::HtmlReport* html, bool cuda_graph) {
  std::unique_ptr<nn::Sequential> owned;
  nn::Sequential* model = model_in;
  if (!model) {
    owned = make_model(o, s);
    model = owned.get();
  }
  optim::AdamW opt(model->named_parameters(), {.lr = 1e-4f});
  nn::CrossEntropyLoss loss;
  train::TrainerOptions t;
  t.precision = s.precision;
  t.log_interval = 1000000;
  t.progress_bar = false;
  t.max_steps = o.warmup + o.steps;
  t.quiet = true;
  t.grad_sync = grad_sync;
  t.cuda_graph = cuda_graph;
  d.enabled = true;
  d.warmup_steps = o.warmup;
  d.print = false;
  d.nvml_library = o.nvml;
  t.diagnostics = d;
  // The worker (doctor --worker-json) is the user's program of the user-program mode: steered
  // through STOKER_DIAG* as a program built on the Trainer is (train/environment.h).
  train::Trainer trainer(*model, loss, opt, train::apply_environment(t));
  const int64_t per_epoch = std::max<int64_t>(1, source.batches_per_epoch());
  const auto r = trainer.fit(source, (o.warmup + o.steps) / per_epoch + 2);
  if (html) *html = trainer.diagnostics()->html(r.diagnosis, {});
  return r.diagnosis;
}

}  // namespace stoker::cli::doctor
