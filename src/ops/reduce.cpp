#include "stoker/ops/elementwise.h"

#include "ops/reduce_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

Tensor reduce(const Tensor& x, Reduction r) { return reduce(std::span<const Tensor>(&x, 1), r); }

Tensor reduce(std::span<const Tensor> xs, Reduction r) {
  STOKER_CHECK(!xs.empty(),
               "ops::reduce: empty tensor list; pass at least one tensor (the "
               "device of the result comes from it)");
  const char* op = r == Reduction::sum ? "sum" : r == Reduction::max_abs ? "max_abs" : "l2_norm";
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string name = "xs[" + std::to_string(i) + "]";
    detail::check_float(op, name, xs[i]);
    detail::check_same_device(op, "xs[0]", xs[0], name, xs[i]);
  }
  detail::check_backend(op, xs[0]);
  Tensor out = Tensor::empty({}, DType::f32, xs[0].device());
  reduce_stub(out.device(), xs, r, out);
  return out;
}

}  // namespace stoker::ops
