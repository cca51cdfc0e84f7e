#include "ops/image.h"

#include "ops/image_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

void normalize_images(const Tensor& out, const Tensor& in, const std::array<float, 3>& mean,
                      const std::array<float, 3>& std, Layout layout) {
  detail::check_float("normalize_images", "out", out);
  detail::check_defined("normalize_images", "in", in);
  detail::check_backend("normalize_images", out);
  detail::check_same_device("normalize_images", "out", out, "in", in);
  STOKER_CHECK(in.dtype() == DType::u8 && in.rank() == 4 && in.size(3) == 3,
               "ops::normalize_images: in is ", in.str(), "; expected u8 [N, H, W, 3]");
  const int64_t n = in.size(0), h = in.size(1), w = in.size(2);
  const Shape want = layout == Layout::nchw ? Shape{n, 3, h, w} : Shape{n, h, w, 3};
  STOKER_CHECK(out.shape() == want, "ops::normalize_images: out is ", out.str(), "; expected ",
               want, " (", layout_name(layout), ") for in ", in.str());
  for (int c = 0; c < 3; ++c)
    STOKER_CHECK(std[c] > 0.0f, "ops::normalize_images: std[", c, "] = ", std[c],
                 " must be positive");
  if (in.numel() == 0) return;
  normalize_images_stub(out.device(), out, in, mean, std, layout);
}

}  // namespace stoker::ops
