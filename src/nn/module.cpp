#include "stoker/nn/module.h"

#include <mutex>

#include "stoker/core/error.h"
#include "stoker/ops/elementwise.h"

namespace stoker::nn {

namespace {
// "<prefix>.<name>"; an empty name adds no level, an empty prefix none either.
std::string join(const std::string& prefix, const std::string& name) {
  if (name.empty()) return prefix;
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

Tensor Module::backward_accumulate(const Tensor& dy, const std::function<Tensor()>& target) {
  const Tensor dx = backward(dy);
  const Tensor sum = target();
  STOKER_CHECK(dx.defined(), describe(),
               ": backward_accumulate needs an input gradient, and this backward returns none");
  STOKER_CHECK(sum.defined() && sum.shape() == dx.shape() && sum.dtype() == dx.dtype(), describe(),
               ": backward_accumulate's target is ", sum.str(), "; expected ", dx.str(),
               "'s shape and dtype (the input's gradient)");
  ops::add(sum, sum, dx);
  return sum;
}

// No describe() in these messages: registration runs in constructors, before the module can
// describe itself.
void Module::check_new_name(const std::string& name, bool generator) const {
  const char* kind = generator ? "generator" : "parameter or buffer";
  STOKER_CHECK(!name.empty(), "nn::Module: a ", kind, " was registered without a name");
  const auto taken = [&](const auto& entries) {
    for (const auto& e : entries)
      if (e.first == name) return true;
    return false;
  };
  STOKER_CHECK(generator ? !taken(generators_) : !taken(parameters_) && !taken(buffers_),
               "nn::Module: a second ", kind, " was registered as '", name,
               "'; names must be unique within a module");
}

void Module::register_parameter(std::string name, Parameter& parameter) {
  check_new_name(name, false);
  parameters_.emplace_back(std::move(name), &parameter);
}

void Module::register_buffer(std::string name, Tensor& buffer) {
  check_new_name(name, false);
  buffers_.emplace_back(std::move(name), &buffer);
}

void Module::register_generator(std::string name, Generator& generator) {
  check_new_name(name, true);
  generators_.emplace_back(std::move(name), &generator);
}

Module& Module::add_child(std::string name, std::unique_ptr<Module> child) {
  STOKER_CHECK(child != nullptr, "nn::Module: a null child module was registered as '", name, "'");
  if (!name.empty())
    for (const auto& c : children_)
      STOKER_CHECK(c.first != name, "nn::Module: a second child was registered as '", name,
                   "'; names must be unique within a module");
  if (child->device() != device_) child->to(device_);
  children_.emplace_back(std::move(name), std::move(child));
  return *children_.back().second;
}

const std::string& Module::child_name(size_t i) const {
  STOKER_CHECK(i < children_.size(), "Module::child_name: index ", i, " out of range (",
               children_.size(), " children)");
  return children_[i].first;
}

Module& Module::child(size_t i) const {
  STOKER_CHECK(i < children_.size(), describe(), ": child ", i, " out of range (", children_.size(),
               " children)");
  return *children_[i].second;
}

void Module::wrap_child_at(
    size_t i, const std::function<std::unique_ptr<Module>(std::unique_ptr<Module>)>& wrap) {
  child(i);  // range check
  std::unique_ptr<Module> wrapped = wrap(std::move(children_[i].second));
  STOKER_CHECK(wrapped != nullptr, describe(), ": the wrapper of child ", i, " returned no module");
  if (wrapped->device() != device_) wrapped->to(device_);
  children_[i].second = std::move(wrapped);
}

void Module::visit_parameters(const std::string& prefix,
                              const std::function<void(const std::string&, Parameter&)>& fn) {
  for (auto& [name, p] : parameters_) fn(join(prefix, name), *p);
  for (auto& [name, c] : children_) c->visit_parameters(join(prefix, name), fn);
}

void Module::visit_buffers(const std::string& prefix,
                           const std::function<void(const std::string&, Tensor&)>& fn) {
  for (auto& [name, t] : buffers_) fn(join(prefix, name), *t);
  for (auto& [name, c] : children_) c->visit_buffers(join(prefix, name), fn);
}

void Module::visit_generators(const std::string& prefix,
                              const std::function<void(const std::string&, Generator&)>& fn) {
  for (auto& [name, g] : generators_) fn(join(prefix, name), *g);
  for (auto& [name, c] : children_) c->visit_generators(join(prefix, name), fn);
}

void Module::visit_children(const std::function<void(Module&)>& fn) {
  for (auto& [name, c] : children_) fn(*c);
}

void Module::collect_parameters(std::vector<Parameter*>& out) {
  visit_parameters("", [&](const std::string&, Parameter& p) { out.push_back(&p); });
}

void Module::set_training(bool training) {
  training_ = training;
  for (auto& [name, c] : children_) c->set_training(training);
}

void Module::to(Device device) {
  for (auto& [name, p] : parameters_) p->to(device);
  for (auto& [name, t] : buffers_) *t = t->to(device);
  for (auto& [name, c] : children_) c->to(device);
  device_ = device;
}

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
