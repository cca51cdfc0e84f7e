// Tensor: a typed, shaped view of reference-counted contiguous storage on one device (no general
// strides; NCHW/NHWC are op conventions). Copies, `slice` (dim 0) and `reshape` share storage;
// the host syncs only in `to(Device)`, `item()` and `to_vector()`.
// Thread-safety: like shared_ptr; writing one tensor's data from two threads is a race.
// Details: docs/architecture.md#tensors-and-memory.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoker/core/allocator.h"
#include "stoker/core/device.h"
#include "stoker/core/dtype.h"
#include "stoker/core/error.h"

// Shape: up to 8 extents, stored inline (no heap allocation per tensor).
namespace stoker::core {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t numel() const;
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }

  bool operator==(const Shape& o) const;
  std::string str() const;  // "[2, 3]"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

}  // namespace stoker::core

namespace stoker {
using core::Shape;
}  // namespace stoker

namespace stoker::core {

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  // Uninitialized memory (fill it before reading).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Page-locked host memory from the pinned pool (fast, asynchronous host<->device copies).
  static Tensor empty_pinned(const Shape& shape, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Host values converted to `dtype` (rounded to nearest even for f16/bf16), then moved to
  // `device`.
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape,
                            DType dtype = DType::f32, Device device = Device::cpu());
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_pinned() const;

  void* data() const;
  // Typed pointer; throws when T does not match dtype().
  template <typename T>
  T* data() const {
    STOKER_CHECK(dtype_of<T>() == dtype_, "Tensor::data<", dtype_name(dtype_of<T>()),
                 ">() called on a ", str(), " tensor");
    return static_cast<T*>(data());
  }

  // Rows [begin, end) along dim 0, sharing storage.
  Tensor slice(int64_t begin, int64_t end) const;
  // Same elements, another shape (one extent may be -1 to be inferred), sharing storage.
  Tensor reshape(const Shape& shape) const;

  // A copy on `device` (same dtype). From a GPU to the host this waits for the copy (a host
  // sync); to a GPU it is queued on the device's current stream. (Dtype changes: ops::cast.)
  Tensor to(Device device) const;
  Tensor clone() const;

  // The single element as a double. Waits for the device when on a GPU (a host sync).
  double item() const;
  // All elements converted to float on the host. Waits for the device when on a GPU.
  std::vector<float> to_floats() const;
  template <typename T>
  std::vector<T> to_vector() const;

  // "f32[2, 3] on cuda:0"
  std::string str() const;

  // True when both views share one storage block.
  bool same_storage(const Tensor& o) const { return storage_ == o.storage_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes into storage_
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_{};
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

namespace detail {
// Copies src's bytes into dst (same nbytes; any devices) on the current stream of the GPU side.
// Pinned host buffers are kept alive until the copy has run; a copy into pageable host memory
// waits for the device (and counts as a host sync).
void copy_bytes(const Tensor& dst, const Tensor& src);
}  // namespace detail

}  // namespace stoker::core

namespace stoker {
using core::Tensor;
}  // namespace stoker
