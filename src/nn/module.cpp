#include "stoker/nn/module.h"

#include <mutex>

#include "stoker/core/error.h"
#include "stoker/ops/random.h"

namespace stoker::nn {

void Module::collect_parameters(std::vector<Parameter*>& out) {
  visit_parameters("", [&](const std::string&, Parameter& p) { out.push_back(&p); });
}

void Module::visit_parameters(const std::string&,
                              const std::function<void(const std::string&, Parameter&)>&) {}

void Module::visit_buffers(const std::string&,
                           const std::function<void(const std::string&, Tensor&)>&) {}

void Module::visit_generators(const std::string&,
                              const std::function<void(const std::string&, Generator&)>&) {}

void Module::set_training(bool training) {
  training_ = training;
  visit_children([training](Module& child) { child.set_training(training); });
}

void Module::visit_children(const std::function<void(Module&)>&) {}

Tensor Module::recompute_output(const Tensor&) {
  STOKER_THROW(describe(), " cannot recompute its output (output_recompute() is none)");
}

void Module::restore_saved_input(const Tensor&) {
  STOKER_THROW(describe(), " does not release its saved input, so none can be restored");
}

namespace {
thread_local bool t_saving = true;
thread_local bool t_recomputing = false;
}  // namespace

bool saving_activations() { return t_saving; }
bool recomputing() { return t_recomputing; }

NoSaveScope::NoSaveScope() : saving_(t_saving), recomputing_(t_recomputing) { t_saving = false; }
NoSaveScope::~NoSaveScope() {
  t_saving = saving_;
  t_recomputing = recomputing_;
}

RecomputeScope::RecomputeScope() : saving_(t_saving), recomputing_(t_recomputing) {
  t_saving = true;
  t_recomputing = true;
}
RecomputeScope::~RecomputeScope() {
  t_saving = saving_;
  t_recomputing = recomputing_;
}

void Module::to(Device device) {
  // A container moves its children (their parameters and buffers are theirs); a layer moves
  // its own.
  bool container = false;
  visit_children([&](Module& child) {
    container = true;
    child.to(device);
  });
  if (!container) {
    visit_parameters("", [&](const std::string&, Parameter& p) { p.to(device); });
    visit_buffers("", [&](const std::string&, Tensor& t) { t = t.to(device); });
  }
  device_ = device;
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  collect_parameters(out);
  return out;
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Parameter*>> out;
  visit_parameters("", [&](const std::string& n, Parameter& p) { out.emplace_back(n, &p); });
  return out;
}

int64_t Module::parameter_count() {
  int64_t n = 0;
  for (Parameter* p : parameters()) n += p->numel();
  return n;
}

namespace {
std::mutex g_init_mu;
Generator g_init_generator(0);
}  // namespace

Generator& init_generator() { return g_init_generator; }

Tensor init_uniform(const Shape& shape, float bound) {
  Tensor t = Tensor::empty(shape, DType::f32, Device::cpu());
  ops::random_uniform(t, -bound, bound, init_generator());
  return t;
}

Tensor init_normal(const Shape& shape, float std) {
  Tensor t = Tensor::empty(shape, DType::f32, Device::cpu());
  ops::random_normal(t, 0.0f, std, init_generator());
  return t;
}

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  g_init_generator = Generator(seed);
}

void set_compute_dtype(Module& root, DType dtype) {
  root.set_compute_dtype(dtype);
  root.visit_children([dtype](Module& child) { set_compute_dtype(child, dtype); });
}

}  // namespace stoker::nn
