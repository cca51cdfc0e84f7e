#include "stoker/core/tensor.h"

#include <fmt/format.h>
#include <cstring>
#include <ostream>

#include "core/cuda_util.h"
#include "core/tensor_copy.h"
#include "stoker/core/stream.h"

namespace stoker::core {

namespace {
template <typename T>
float element_to_float(const void* p, int64_t i) {
  const T v = static_cast<const T*>(p)[i];
  return static_cast<float>(v);
}

float host_element(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return element_to_float<float>(p, i);
    case DType::f16:
      return element_to_float<Half>(p, i);
    case DType::bf16:
      return element_to_float<BFloat16>(p, i);
    case DType::i32:
      return element_to_float<int32_t>(p, i);
    case DType::i64:
      return element_to_float<int64_t>(p, i);
    case DType::u8:
      return element_to_float<uint8_t>(p, i);
  }
  return 0.0f;
}

double host_element_exact(const void* p, DType t) {
  switch (t) {
    case DType::i32:
      return static_cast<const int32_t*>(p)[0];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(p)[0]);
    default:
      return host_element(p, t, 0);
  }
}

#if STOKER_WITH_CUDA
void keep_alive_until_stream_passes(cudaStream_t stream, std::shared_ptr<Storage> a,
                                    std::shared_ptr<Storage> b) {
  auto* held =
      new std::pair<std::shared_ptr<Storage>, std::shared_ptr<Storage>>(std::move(a), std::move(b));
  STOKER_CUDA_CHECK(cudaLaunchHostFunc(
      stream,
      [](void* p) {
        delete static_cast<std::pair<std::shared_ptr<Storage>, std::shared_ptr<Storage>>*>(p);
      },
      held));
}
#endif
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int i = 0; i < shape.rank(); ++i)
    STOKER_CHECK(shape[i] >= 0, "Tensor::empty: shape ", shape, " has a negative extent");
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = Storage::allocate(t.nbytes(), device);
  return t;
}

Tensor Tensor::empty_pinned(const Shape& shape, DType dtype) {
  for (int i = 0; i < shape.rank(); ++i)
    STOKER_CHECK(shape[i] >= 0, "Tensor::empty_pinned: shape ", shape, " has a negative extent");
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = Device::cpu();
  t.storage_ = Storage::allocate(t.nbytes(), Device::cpu(), /*pinned=*/true);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu()) {
    std::memset(t.data(), 0, t.nbytes());
  } else {
#if STOKER_WITH_CUDA
    DeviceScope scope(device.index);
    STOKER_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.nbytes(), cuda_stream(device)));
#endif
  }
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, const Shape& shape, DType dtype,
                           Device device) {
  STOKER_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
               "Tensor::from_floats: ", values.size(), " values given for shape ", shape, " (",
               shape.numel(), " elements)");
  Tensor host = empty(shape, dtype, Device::cpu());
  void* p = host.data();
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    switch (dtype) {
      case DType::f32:
        static_cast<float*>(p)[i] = v;
        break;
      case DType::f16:
        static_cast<Half*>(p)[i] = Half(v);
        break;
      case DType::bf16:
        static_cast<BFloat16*>(p)[i] = BFloat16(v);
        break;
      case DType::i32:
        static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
        break;
      case DType::i64:
        static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
        break;
      case DType::u8:
        static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
        break;
    }
  }
  return device.is_cpu() ? host : host.to(device);
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  STOKER_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
               "Tensor::from_vector: ", values.size(), " values given for shape ", shape, " (",
               shape.numel(), " elements)");
  Tensor host = empty(shape, dtype_of<T>(), Device::cpu());
  if (!values.empty()) std::memcpy(host.data(), values.data(), values.size() * sizeof(T));
  return device.is_cpu() ? host : host.to(device);
}

int64_t Tensor::size(int dim) const {
  const int d = dim < 0 ? dim + rank() : dim;
  STOKER_CHECK(d >= 0 && d < rank(), "Tensor::size(", dim, ") out of range for ", str());
  return shape_[d];
}

bool Tensor::is_pinned() const { return storage_ && storage_->pinned(); }

void* Tensor::data() const {
  STOKER_CHECK(defined(), "Tensor::data() called on an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  STOKER_CHECK(defined() && rank() >= 1, "Tensor::slice needs a tensor of rank >= 1, got ", str());
  STOKER_CHECK(0 <= begin && begin <= end && end <= shape_[0], "Tensor::slice(", begin, ", ", end,
               ") out of range for ", str(), ": need 0 <= begin <= end <= ", shape_[0]);
  Tensor t = *this;
  const int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.offset_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.rank(); ++i) {
    if (s[i] == -1) {
      STOKER_CHECK(infer < 0, "Tensor::reshape: ", shape, ": only one extent may be -1");
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    STOKER_CHECK(known > 0 && numel() % known == 0, "Tensor::reshape: cannot infer -1 in ", shape,
                 " for ", str());
    s[infer] = numel() / known;
  }
  STOKER_CHECK(s.numel() == numel(), "Tensor::reshape: ", str(), " has ", numel(),
               " elements, shape ", shape, " has ", s.numel());
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::to(Device device) const {
  STOKER_CHECK(defined(), "Tensor::to(", device.str(), ") called on an undefined tensor");
  Tensor t = empty(shape_, dtype_, device);
  detail::copy_bytes(t, *this);
  return t;
}

Tensor Tensor::clone() const { return to(device_); }

double Tensor::item() const {
  STOKER_CHECK(defined() && numel() == 1, "Tensor::item() needs exactly one element, got ",
               defined() ? str() : std::string("an undefined tensor"));
  if (device_.is_cpu()) return host_element_exact(data(), dtype_);
  const Tensor h = to(Device::cpu());
  return host_element_exact(h.data(), dtype_);
}

std::vector<float> Tensor::to_floats() const {
  STOKER_CHECK(defined(), "Tensor::to_floats() called on an undefined tensor");
  const Tensor h = device_.is_cpu() ? *this : to(Device::cpu());
  std::vector<float> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = host_element(h.data(), dtype_, i);
  return out;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  STOKER_CHECK(dtype_of<T>() == dtype_, "Tensor::to_vector<", dtype_name(dtype_of<T>()),
               "> called on ", str());
  const Tensor h = device_.is_cpu() ? *this : to(Device::cpu());
  std::vector<T> out(static_cast<size_t>(numel()));
  if (!out.empty()) std::memcpy(out.data(), h.data(), nbytes());
  return out;
}

#define STOKER_INSTANTIATE(T)                                                          \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&, Device); \
  template std::vector<T> Tensor::to_vector<T>() const;
STOKER_INSTANTIATE(float)
STOKER_INSTANTIATE(Half)
STOKER_INSTANTIATE(BFloat16)
STOKER_INSTANTIATE(int32_t)
STOKER_INSTANTIATE(int64_t)
STOKER_INSTANTIATE(uint8_t)
#undef STOKER_INSTANTIATE

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return fmt::format("{}{} on {}{}", dtype_name(dtype_), shape_.str(), device_.str(),
                     is_pinned() ? " (pinned)" : "");
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

namespace detail {

namespace {
void copy_bytes_impl(const Tensor& dst, const Tensor& src, bool keep_alive) {
  STOKER_CHECK(dst.nbytes() == src.nbytes(), "copy: ", src.str(), " into ", dst.str(),
               ": byte sizes differ");
  const size_t n = dst.nbytes();
  if (n == 0) return;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    std::memmove(dst.data(), src.data(), n);
    return;
  }
#if STOKER_WITH_CUDA
  const Device gpu = dst.device().is_cuda() ? dst.device() : src.device();
  DeviceScope scope(gpu.index);
  const cudaStream_t stream = cuda_stream(gpu);
  if (dst.device().is_cuda() && src.device().is_cuda() && dst.device() != src.device()) {
    STOKER_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data(), dst.device().index, src.data(),
                                          src.device().index, n, stream));
    return;
  }
  STOKER_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), n, cudaMemcpyDefault, stream));
  if (dst.device().is_cpu() && !dst.is_pinned()) {
    // Pageable destination: the caller will read it right away, so wait for the copy.
    note_host_sync();
    STOKER_CUDA_CHECK(cudaStreamSynchronize(stream));
  } else if (keep_alive && (dst.is_pinned() || src.is_pinned())) {
    // Asynchronous with respect to the host: hold both buffers until the stream gets there, so
    // a pinned block is not handed out again while the DMA still reads or writes it.
    keep_alive_until_stream_passes(stream, dst.storage(), src.storage());
  }
#else
  (void)keep_alive;
  STOKER_THROW("copy between ", src.str(), " and ", dst.str(), ": stoker was built without CUDA");
#endif
}
}  // namespace

void copy_bytes(const Tensor& dst, const Tensor& src) { copy_bytes_impl(dst, src, true); }

void copy_bytes_unowned(const Tensor& dst, const Tensor& src) { copy_bytes_impl(dst, src, false); }

}  // namespace detail
}  // namespace stoker::core
