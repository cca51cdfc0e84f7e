#include "stoker/nn/module.h"

#include <mutex>

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

void Module::set_training(bool training) { training_ = training; }

void Module::to(Device device) {
  visit_parameters("", [&](const std::string&, Parameter& p) { p.to(device); });
  visit_buffers("", [&](const std::string&, Tensor& t) { t = t.to(device); });
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

}  // namespace stoker::nn
