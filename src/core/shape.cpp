#include "stoker/core/tensor.h"

#include <ostream>

#include "stoker/core/error.h"

namespace stoker::core {

Shape::Shape(std::initializer_list<int64_t> dims)
    : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  STOKER_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), "Shape: ", dims.size(),
               " dimensions given, at most ", kMaxDims, " are supported");
  for (size_t i = 0; i < dims.size(); ++i) {
    STOKER_CHECK(dims[i] >= 0 || dims[i] == -1, "Shape: extent ", dims[i], " at dim ", i,
                 " is negative");
    dims_[i] = dims[i];
  }
  rank_ = static_cast<int>(dims.size());
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

}  // namespace stoker::core
