// CPU reference convolution: im2col + BLAS GEMM (cpu::gemm), fp32 throughout (half inputs are
// widened once, a half output is rounded once).
//
// The column matrix is laid out so that each group's GEMM operand is one contiguous block and
// its inner order matches the filter's, so the filter is used in place:
//   NCHW (KCRS filter): per image, [G][Cg*R*S][OH*OW] — rows (c, r, s). y[n, group] is the
//     contiguous [Kg, OH*OW] block of y, written directly by W_g [Kg, D] x col_g [D, P].
//   NHWC (KRSC filter): per chunk of images, [G][B*OH*OW][R*S*Cg] — rows are output pixels of
//     all B images. With one group, y's [B*OH*OW, K] rows are written directly by
//     col_g x W_g^T; with several, a [B*P, Kg] block is computed and scattered into y's columns.
// Images are processed in chunks whose column matrix fits kColumnBudget floats. Within a chunk
// im2col / col2im run oneTBB-parallel over the images (each image's pixels belong to one task,
// so col2im's scatter-adds never race) and the GEMMs run one after another, each parallel inside
// BLAS: BLAS is never called from several threads at once.
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ops/conv_stubs.h"
#include "ops/copy_stubs.h"
#include "ops/cpu/f32.h"
#include "ops/cpu/parallel.h"
#include "ops/gemm_stubs.h"
#include "ops/geometry.h"
#include "stoker/ops/elementwise.h"

namespace stoker::ops::cpu {

namespace {

using detail::ConvGeometry;

constexpr int64_t kColumnBudget = int64_t{1} << 24;  // floats (64 MiB) per column buffer

// Elements [offset, offset + shape.numel()) of a 1-D tensor, viewed with `shape`.
Tensor view(const Tensor& flat, int64_t offset, const Shape& shape) {
  return flat.slice(offset, offset + shape.numel()).reshape(shape);
}

Tensor flat(const Tensor& t) { return t.reshape({t.numel()}); }

const float* fptr(const Tensor& t) { return static_cast<const float*>(t.data()); }
float* fptr_mut(const Tensor& t) { return static_cast<float*>(t.data()); }

struct Chunking {
  int64_t images;     // images per chunk
  int64_t per_image;  // column floats per image = C * R * S * OH * OW
};

Chunking chunking(const ConvGeometry& g) {
  const int64_t per_image = g.c * g.r * g.s * g.oh * g.ow;
  const int64_t images =
      std::clamp<int64_t>(kColumnBudget / std::max<int64_t>(1, per_image), 1, g.n);
  return {images, per_image};
}

// ---- NCHW: col per image [C*R*S, P], rows (c, r, s) ----

void im2col_nchw(const float* x, float* col, const ConvGeometry& g) {
  const int64_t p = g.oh * g.ow;
  for (int64_t c = 0; c < g.c; ++c) {
    for (int64_t r = 0; r < g.r; ++r) {
      for (int64_t s = 0; s < g.s; ++s) {
        float* dst = col + ((c * g.r + r) * g.s + s) * p;
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + r * g.dh;
          float* row = dst + oh * g.ow;
          if (ih < 0 || ih >= g.h) {
            std::fill(row, row + g.ow, 0.0f);
            continue;
          }
          const float* src = x + (c * g.h + ih) * g.w;
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + s * g.dw;
            row[ow] = (iw >= 0 && iw < g.w) ? src[iw] : 0.0f;
          }
        }
      }
    }
  }
}

// dx (one image, [C, H, W]) = the adjoint of im2col applied to col.
void col2im_nchw(const float* col, float* dx, const ConvGeometry& g) {
  const int64_t p = g.oh * g.ow;
  std::fill(dx, dx + g.c * g.h * g.w, 0.0f);
  for (int64_t c = 0; c < g.c; ++c) {
    for (int64_t r = 0; r < g.r; ++r) {
      for (int64_t s = 0; s < g.s; ++s) {
        const float* src = col + ((c * g.r + r) * g.s + s) * p;
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + r * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          float* dst = dx + (c * g.h + ih) * g.w;
          const float* row = src + oh * g.ow;
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + s * g.dw;
            if (iw >= 0 && iw < g.w) dst[iw] += row[ow];
          }
        }
      }
    }
  }
}

// ---- NHWC: col per chunk [G][B*P][R*S*Cg]; image b of the chunk owns rows [b*P, (b+1)*P) ----

void im2col_nhwc(const float* x, float* col, int64_t b, int64_t chunk, const ConvGeometry& g) {
  const int64_t p = g.oh * g.ow;
  const int64_t d = g.r * g.s * g.cg;
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        float* dst = col + ((grp * chunk + b) * p + oh * g.ow + ow) * d;
        for (int64_t r = 0; r < g.r; ++r) {
          const int64_t ih = oh * g.sh - g.ph + r * g.dh;
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t iw = ow * g.sw - g.pw + s * g.dw;
            float* out = dst + (r * g.s + s) * g.cg;
            if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) {
              std::fill(out, out + g.cg, 0.0f);
            } else {
              std::memcpy(out, x + (ih * g.w + iw) * g.c + grp * g.cg, g.cg * sizeof(float));
            }
          }
        }
      }
    }
  }
}

void col2im_nhwc(const float* col, float* dx, int64_t b, int64_t chunk, const ConvGeometry& g) {
  const int64_t p = g.oh * g.ow;
  const int64_t d = g.r * g.s * g.cg;
  std::fill(dx, dx + g.h * g.w * g.c, 0.0f);
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const float* src = col + ((grp * chunk + b) * p + oh * g.ow + ow) * d;
        for (int64_t r = 0; r < g.r; ++r) {
          const int64_t ih = oh * g.sh - g.ph + r * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t iw = ow * g.sw - g.pw + s * g.dw;
            if (iw < 0 || iw >= g.w) continue;
            float* out = dx + (ih * g.w + iw) * g.c + grp * g.cg;
            const float* in = src + (r * g.s + s) * g.cg;
            for (int64_t c = 0; c < g.cg; ++c) out[c] += in[c];
          }
        }
      }
    }
  }
}

// Runs im2col for images [b0, b0 + nb) of x32 into col, in parallel over the images.
void im2col_chunk(const Tensor& x32, const Tensor& col, int64_t b0, int64_t nb,
                  const ConvGeometry& g, int64_t per_image) {
  const int64_t image = g.c * g.h * g.w;
  tbb::parallel_for(int64_t{0}, nb, [&](int64_t b) {
    const float* x = fptr(x32) + (b0 + b) * image;
    if (g.layout == Layout::nchw) {
      im2col_nchw(x, fptr_mut(col) + b * per_image, g);
    } else {
      im2col_nhwc(x, fptr_mut(col), b, nb, g);
    }
  });
}

// Columns [grp*Kg, (grp+1)*Kg) of the [rows, K] matrix m, copied into / added from a [rows, Kg]
// block (NHWC with several groups).
void gather_group(const Tensor& block, const float* m, int64_t rows, int64_t grp,
                  const ConvGeometry& g) {
  float* out = fptr_mut(block);
  parallel_range(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q)
          std::memcpy(out + q * g.kg, m + q * g.k + grp * g.kg, g.kg * sizeof(float));
      },
      std::max<int64_t>(1, kGrain / g.kg));
}

void scatter_group(float* m, const Tensor& block, int64_t rows, int64_t grp,
                   const ConvGeometry& g) {
  const float* in = fptr(block);
  parallel_range(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q)
          std::memcpy(m + q * g.k + grp * g.kg, in + q * g.kg, g.kg * sizeof(float));
      },
      std::max<int64_t>(1, kGrain / g.kg));
}

// The three passes walk the images in the same chunks and cut the column matrix, the filter and
// y / dy into the same per-group GEMM operands; they differ only in the GEMM run on them and in
// whether x is unfolded into the columns first (forward, backward filter) or dx folded back from
// them after (backward data).
enum class Pass { forward, backward_data, backward_filter };

// One GEMM of `pass` in NCHW, per image and group: col_g [D, P], W_g [Kg, D], y_g / dy_g [Kg, P].
void gemm_nchw(Pass pass, const Tensor& colg, const Tensor& wg, const Tensor& yg) {
  switch (pass) {
    case Pass::forward:
      return gemm_impl(yg, wg, colg, {});  // y_g = W_g col_g
    case Pass::backward_data:
      return gemm_impl(colg, wg, yg, {.trans_a = true});  // col_g = W_g^T dy_g
    case Pass::backward_filter:
      return gemm_impl(wg, yg, colg, {.trans_b = true, .beta = 1.0f});  // dW_g += dy_g col_g^T
  }
}

// The same in NHWC, per chunk and group: col_g [B*P, D], W_g [Kg, D], y_g / dy_g [B*P, Kg].
void gemm_nhwc(Pass pass, const Tensor& colg, const Tensor& wg, const Tensor& yg) {
  switch (pass) {
    case Pass::forward:
      return gemm_impl(yg, colg, wg, {.trans_b = true});  // y_g = col_g W_g^T
    case Pass::backward_data:
      return gemm_impl(colg, yg, wg, {});  // col_g = dy_g W_g
    case Pass::backward_filter:
      return gemm_impl(wg, yg, colg, {.trans_a = true, .beta = 1.0f});  // dW_g += dy_g^T col_g
  }
}

// Runs `pass` over f32 tensors: x32 the input image (dx for the backward data pass), w32 the
// filter (dw for the backward filter pass, accumulated into), y32 the output (dy for the
// backward passes).
void run_pass(Pass pass, const ConvGeometry& g, const Tensor& x32, const Tensor& w32,
              const Tensor& y32) {
  const int64_t d = g.cg * g.r * g.s;
  const int64_t pix = g.oh * g.ow;
  const int64_t image = g.c * g.h * g.w;
  const Chunking ch = chunking(g);
  const Tensor col = Tensor::empty({ch.images * ch.per_image}, DType::f32, Device::cpu());
  const Tensor w2 = w32.reshape({g.k, d});
  const Tensor yflat = flat(y32);
  for (int64_t b0 = 0; b0 < g.n; b0 += ch.images) {
    const int64_t nb = std::min(ch.images, g.n - b0);
    if (pass != Pass::backward_data) im2col_chunk(x32, col, b0, nb, g, ch.per_image);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const Tensor wg = w2.slice(grp * g.kg, (grp + 1) * g.kg);  // [Kg, D]
      if (g.layout == Layout::nchw) {
        for (int64_t b = 0; b < nb; ++b) {
          gemm_nchw(pass, view(col, b * ch.per_image + grp * d * pix, {d, pix}), wg,
                    view(yflat, ((b0 + b) * g.k + grp * g.kg) * pix, {g.kg, pix}));
        }
        continue;
      }
      const Tensor colg = view(col, grp * nb * pix * d, {nb * pix, d});
      float* const rows = fptr_mut(y32) + b0 * pix * g.k;  // the chunk's [B*P, K] rows of y / dy
      if (g.groups == 1) {
        gemm_nhwc(pass, colg, wg, view(yflat, b0 * pix * g.k, {nb * pix, g.k}));
        continue;
      }
      // Several groups: group grp's columns of y / dy go through a [B*P, Kg] block.
      const Tensor block = Tensor::empty({nb * pix, g.kg}, DType::f32, Device::cpu());
      if (pass != Pass::forward) gather_group(block, rows, nb * pix, grp, g);
      gemm_nhwc(pass, colg, wg, block);
      if (pass == Pass::forward) scatter_group(rows, block, nb * pix, grp, g);
    }
    if (pass != Pass::backward_data) continue;
    tbb::parallel_for(int64_t{0}, nb, [&](int64_t b) {
      float* out = fptr_mut(x32) + (b0 + b) * image;
      if (g.layout == Layout::nchw) {
        col2im_nchw(fptr(col) + b * ch.per_image, out, g);
      } else {
        col2im_nhwc(fptr(col), out, b, nb, g);
      }
    });
  }
}

}  // namespace

void conv2d_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  const ConvGeometry g = detail::conv_geometry(x.shape(), w.shape(), p);
  const Tensor y32 = f32_target(y);
  run_pass(Pass::forward, g, as_f32(x), as_f32(w), y32);
  if (!y32.same_storage(y)) cast_impl(y, y32);
}

void conv2d_backward_data(const Tensor& dx, const Tensor& dy, const Tensor& w,
                          const Conv2dParams& p, bool accumulate) {
  if (accumulate) {  // the gradient in dx's dtype, then added: ops::add's rounding
    const Tensor part = Tensor::empty(dx.shape(), dx.dtype(), dx.device());
    conv2d_backward_data_impl(part, dy, w, p, false);
    ops::add(dx, dx, part);
    return;
  }
  const ConvGeometry g = detail::conv_geometry(dx.shape(), w.shape(), p);
  const Tensor dx32 = f32_target(dx);
  run_pass(Pass::backward_data, g, dx32, as_f32(w), as_f32(dy));
  if (!dx32.same_storage(dx)) cast_impl(dx, dx32);
}

void conv2d_backward_filter(const Tensor& dw, const Tensor& dy, const Tensor& x,
                            const Conv2dParams& p, bool accumulate) {
  const ConvGeometry g = detail::conv_geometry(x.shape(), dw.shape(), p);
  if (!accumulate) fill_impl(dw, 0.0);
  const Tensor dw32 = as_f32(dw);  // dw itself when f32 (accumulated in place)
  run_pass(Pass::backward_filter, g, as_f32(x), dw32, as_f32(dy));
  if (!dw32.same_storage(dw)) cast_impl(dw, dw32);
}

void conv2d_forward_stats(const Tensor& y, const Tensor& sum, const Tensor& sum_sq, const Tensor& x,
                          const Tensor& w, const Conv2dParams& p) {
  conv2d_forward_impl(y, x, w, p);
  const Dims4 d = dims4(y.shape(), p.layout);
  const std::vector<float> v = y.to_floats();  // y as stored (rounded to its dtype)
  std::vector<double> s(static_cast<size_t>(d.c), 0.0), q(static_cast<size_t>(d.c), 0.0);
  const int64_t hw = d.h * d.w;
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    const int64_t c = p.layout == Layout::nchw ? (i / hw) % d.c : i % d.c;
    const double e = v[static_cast<size_t>(i)];
    s[static_cast<size_t>(c)] += e;
    q[static_cast<size_t>(c)] += e * e;
  }
  float* ps = static_cast<float*>(sum.data());
  float* pq = static_cast<float*>(sum_sq.data());
  for (int64_t c = 0; c < d.c; ++c) {
    ps[c] = static_cast<float>(s[static_cast<size_t>(c)]);
    pq[c] = static_cast<float>(q[static_cast<size_t>(c)]);
  }
}

std::string conv2d_forward_stats_unsupported(const Tensor&, const Tensor&, const Conv2dParams&) {
  return {};
}

STOKER_REGISTER_STUB(conv2d_forward, conv2d_forward);
STOKER_REGISTER_STUB(conv2d_backward_data, conv2d_backward_data);
STOKER_REGISTER_STUB(conv2d_backward_filter, conv2d_backward_filter);
STOKER_REGISTER_STUB(conv2d_forward_stats, conv2d_forward_stats);
STOKER_REGISTER_STUB(conv2d_forward_stats_unsupported, conv2d_forward_stats_unsupported);

}  // namespace stoker::ops::cpu
