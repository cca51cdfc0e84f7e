#include "stoker/dist/grad_sync.h"

#include "stoker/core/error.h"
#include "stoker/ops/layout.h"

namespace stoker::dist {

namespace {

// The bucket travels as it is.
class NoCompression final : public GradCompression {
 public:
  std::string name() const override { return "none"; }
  DType wire_dtype() const override { return DType::f32; }
  Tensor make_wire(const Tensor& grads) const override { return grads; }
  void encode(const Tensor&, const Tensor&) const override {}
  void decode(const Tensor&, const Tensor&) const override {}
};

// The bucket travels cast to a half dtype (bf16 or f16, round to nearest even).
class HalfCompression final : public GradCompression {
 public:
  explicit HalfCompression(DType wire) : wire_(wire) {}
  std::string name() const override { return wire_ == DType::bf16 ? "bf16" : "fp16"; }
  DType wire_dtype() const override { return wire_; }
  Tensor make_wire(const Tensor& grads) const override {
    return Tensor::empty({grads.numel()}, wire_, grads.device());
  }
  void encode(const Tensor& grads, const Tensor& wire) const override { ops::cast(wire, grads); }
  void decode(const Tensor& wire, const Tensor& grads) const override { ops::cast(grads, wire); }

 private:
  DType wire_;
};

}  // namespace

namespace compression {

std::shared_ptr<const GradCompression> none() {
  static const auto c = std::make_shared<const NoCompression>();
  return c;
}

std::shared_ptr<const GradCompression> bf16() {
  static const auto c = std::make_shared<const HalfCompression>(DType::bf16);
  return c;
}

std::shared_ptr<const GradCompression> fp16() {
  static const auto c = std::make_shared<const HalfCompression>(DType::f16);
  return c;
}

}  // namespace compression

std::shared_ptr<const GradCompression> parse_compression(const std::string& name) {
  for (auto make : {compression::none, compression::bf16, compression::fp16}) {
    auto c = make();
    if (c->name() == name) return c;
  }
  STOKER_THROW("unknown gradient compression '", name, "': choose none, bf16 or fp16");
}

}  // namespace stoker::dist
