#include "stoker/core/op_listener.h"

#include <cstddef>

namespace stoker::core {

namespace {
thread_local OpListener* t_listener = nullptr;
thread_local std::vector<std::string_view> t_modules;
}  // namespace

OpListener* op_listener() { return t_listener; }

OpListener* set_op_listener(OpListener* listener) {
  OpListener* previous = t_listener;
  t_listener = listener;
  if (!listener) t_modules.clear();
  return previous;
}

const std::vector<std::string_view>& module_stack() { return t_modules; }

std::string module_path() {
  std::string out;
  for (std::string_view m : t_modules) {
    if (m.empty()) continue;
    if (!out.empty()) out += '.';
    out += m;
  }
  return out;
}

ModuleScope::ModuleScope(std::string_view name) {
  if (!t_listener) return;
  t_modules.push_back(name);
  pushed_ = true;
}

ModuleScope::~ModuleScope() {
  if (pushed_ && !t_modules.empty()) t_modules.pop_back();
}

ModuleStackTruncate::ModuleStackTruncate(size_t depth) {
  if (!t_listener || depth >= t_modules.size()) return;
  removed_.assign(t_modules.begin() + static_cast<std::ptrdiff_t>(depth), t_modules.end());
  t_modules.resize(depth);
}

ModuleStackTruncate::~ModuleStackTruncate() {
  t_modules.insert(t_modules.end(), removed_.begin(), removed_.end());
}

}  // namespace stoker::core
