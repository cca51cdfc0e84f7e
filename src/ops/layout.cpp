// Layout helpers and the checks every image op shares. Messages spell out the layout's order
// ("[N, H, W, C] (NHWC)") because the commonest mistake with image tensors is a tensor in the
// other layout: its shape is valid, only the channel extent lands in the wrong place.
#include "stoker/ops/layout.h"

#include <fmt/format.h>

#include "ops/geometry.h"
#include "ops/layout_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

Dims4 dims4(const Shape& s, Layout layout) {
  STOKER_CHECK(s.rank() == 4, "ops::dims4: shape ", s, " has rank ", s.rank(), "; expected rank 4 ",
               detail::layout_order(layout), " (", layout_name(layout), ")");
  return layout == Layout::nchw ? Dims4{s[0], s[1], s[2], s[3]} : Dims4{s[0], s[3], s[1], s[2]};
}

Shape shape4(const Dims4& d, Layout layout) {
  return layout == Layout::nchw ? Shape{d.n, d.c, d.h, d.w} : Shape{d.n, d.h, d.w, d.c};
}

void convert_layout(const Tensor& dst, const Tensor& src, Layout from, Layout to) {
  constexpr const char* op = "convert_layout";
  detail::check_image(op, "src", src, from);
  detail::check_image(op, "dst", dst, to);
  detail::check_backend(op, dst);
  detail::check_same_device(op, "dst", dst, "src", src);
  const Dims4 d = dims4(src.shape(), from);
  detail::check_shape(op, "dst", dst, shape4(d, to),
                      fmt::format("src {} in {} holds N={}, C={}, H={}, W={}; dst is {}", src.str(),
                                  layout_name(from), d.n, d.c, d.h, d.w, layout_name(to)));
  STOKER_CHECK(!dst.same_storage(src) || dst.numel() == 0, "ops::", op,
               ": dst and src share storage; expected distinct tensors");
  if (dst.numel() == 0) return;
  convert_layout_stub(dst.device(), dst, src, from, to);
}

namespace detail {

std::string_view layout_order(Layout layout) {
  return layout == Layout::nchw ? "[N, C, H, W]" : "[N, H, W, C]";
}

void check_image(std::string_view op, std::string_view name, const Tensor& t, Layout layout) {
  check_float(op, name, t);
  STOKER_CHECK(t.rank() == 4, "ops::", op, ": ", name, " is ", t.str(), "; expected rank 4 ",
               layout_order(layout), " (", layout_name(layout), ")");
}

void check_channel_vector(std::string_view op, std::string_view name, const Tensor& t, int64_t c,
                          std::string_view image_name, const Tensor& image, Layout layout) {
  check_defined(op, name, t);
  STOKER_CHECK(t.dtype() == DType::f32 && t.rank() == 1 && t.size(0) == c, "ops::", op, ": ", name,
               " is ", t.str(), "; expected f32[", c, "], one value per channel of ", image_name,
               " ", image.str(), " (", layout_name(layout), ", C=", c, ")");
  check_same_device(op, name, t, image_name, image);
}

void check_shape(std::string_view op, std::string_view name, const Tensor& t, const Shape& want,
                 std::string_view why) {
  STOKER_CHECK(t.shape() == want, "ops::", op, ": ", name, " is ", t.str(), "; expected ", want,
               " (", why, ")");
}

}  // namespace detail
}  // namespace stoker::ops
