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

#include "ops/backend.h"
#include "ops/cpu/parallel.h"
#include "ops/geometry.h"

namespace stoker::ops::cpu {

namespace {

using detail::ConvGeometry;

constexpr int64_t kColumnBudget = int64_t{1} << 24;  // floats (64 MiB) per column buffer

Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor f = Tensor::empty(t.shape(), DType::f32, Device::cpu());
  cast(f, t);
  return f;
}

// An f32 tensor to compute an output into: `t` itself when it is f32, else a scratch tensor.
Tensor f32_target(const Tensor& t) {
  return t.dtype() == DType::f32 ? t : Tensor::empty(t.shape(), DType::f32, Device::cpu());
}

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

}  // namespace

void conv2d_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  const ConvGeometry g = detail::conv_geometry(x.shape(), w.shape(), p);
  const Tensor x32 = as_f32(x);
  const Tensor w2 = as_f32(w).reshape({g.k, g.cg * g.r * g.s});
  const Tensor y32 = f32_target(y);
  const int64_t d = g.cg * g.r * g.s;
  const int64_t pix = g.oh * g.ow;
  const Chunking ch = chunking(g);
  const Tensor col = Tensor::empty({ch.images * ch.per_image}, DType::f32, Device::cpu());
  const Tensor yflat = flat(y32);
  for (int64_t b0 = 0; b0 < g.n; b0 += ch.images) {
    const int64_t nb = std::min(ch.images, g.n - b0);
    im2col_chunk(x32, col, b0, nb, g, ch.per_image);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const Tensor wg = w2.slice(grp * g.kg, (grp + 1) * g.kg);  // [Kg, D]
      if (g.layout == Layout::nchw) {
        for (int64_t b = 0; b < nb; ++b) {
          const Tensor colg = view(col, b * ch.per_image + grp * d * pix, {d, pix});
          const Tensor yg = view(yflat, ((b0 + b) * g.k + grp * g.kg) * pix, {g.kg, pix});
          gemm(yg, wg, colg, {});
        }
      } else {
        const Tensor colg = view(col, grp * nb * pix * d, {nb * pix, d});
        if (g.groups == 1) {
          gemm(view(yflat, b0 * pix * g.k, {nb * pix, g.k}), colg, wg, {.trans_b = true});
        } else {
          const Tensor block = Tensor::empty({nb * pix, g.kg}, DType::f32, Device::cpu());
          gemm(block, colg, wg, {.trans_b = true});
          scatter_group(fptr_mut(y32) + b0 * pix * g.k, block, nb * pix, grp, g);
        }
      }
    }
  }
  if (!y32.same_storage(y)) cast(y, y32);
}

void conv2d_backward_data(const Tensor& dx, const Tensor& dy, const Tensor& w,
                          const Conv2dParams& p) {
  const ConvGeometry g = detail::conv_geometry(dx.shape(), w.shape(), p);
  const Tensor dy32 = as_f32(dy);
  const Tensor w2 = as_f32(w).reshape({g.k, g.cg * g.r * g.s});
  const Tensor dx32 = f32_target(dx);
  const int64_t d = g.cg * g.r * g.s;
  const int64_t pix = g.oh * g.ow;
  const int64_t image = g.c * g.h * g.w;
  const Chunking ch = chunking(g);
  const Tensor col = Tensor::empty({ch.images * ch.per_image}, DType::f32, Device::cpu());
  const Tensor dyflat = flat(dy32);
  for (int64_t b0 = 0; b0 < g.n; b0 += ch.images) {
    const int64_t nb = std::min(ch.images, g.n - b0);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const Tensor wg = w2.slice(grp * g.kg, (grp + 1) * g.kg);  // [Kg, D]
      if (g.layout == Layout::nchw) {
        for (int64_t b = 0; b < nb; ++b) {
          const Tensor colg = view(col, b * ch.per_image + grp * d * pix, {d, pix});
          const Tensor dyg = view(dyflat, ((b0 + b) * g.k + grp * g.kg) * pix, {g.kg, pix});
          gemm(colg, wg, dyg, {.trans_a = true});  // [D, P] = W_g^T dy_g
        }
      } else {
        const Tensor colg = view(col, grp * nb * pix * d, {nb * pix, d});
        Tensor dyg;
        if (g.groups == 1) {
          dyg = view(dyflat, b0 * pix * g.k, {nb * pix, g.k});
        } else {
          dyg = Tensor::empty({nb * pix, g.kg}, DType::f32, Device::cpu());
          gather_group(dyg, fptr(dy32) + b0 * pix * g.k, nb * pix, grp, g);
        }
        gemm(colg, dyg, wg, {});  // [B*P, D] = dy_g W_g
      }
    }
    tbb::parallel_for(int64_t{0}, nb, [&](int64_t b) {
      float* out = fptr_mut(dx32) + (b0 + b) * image;
      if (g.layout == Layout::nchw) {
        col2im_nchw(fptr(col) + b * ch.per_image, out, g);
      } else {
        col2im_nhwc(fptr(col), out, b, nb, g);
      }
    });
  }
  if (!dx32.same_storage(dx)) cast(dx, dx32);
}

void conv2d_backward_filter(const Tensor& dw, const Tensor& dy, const Tensor& x,
                            const Conv2dParams& p) {
  const ConvGeometry g = detail::conv_geometry(x.shape(), dw.shape(), p);
  const Tensor x32 = as_f32(x);
  const Tensor dy32 = as_f32(dy);
  const Tensor dw32 = as_f32(dw);  // dw itself when f32 (accumulated in place)
  const Tensor dw2 = dw32.reshape({g.k, g.cg * g.r * g.s});
  const int64_t d = g.cg * g.r * g.s;
  const int64_t pix = g.oh * g.ow;
  const Chunking ch = chunking(g);
  const Tensor col = Tensor::empty({ch.images * ch.per_image}, DType::f32, Device::cpu());
  const Tensor dyflat = flat(dy32);
  for (int64_t b0 = 0; b0 < g.n; b0 += ch.images) {
    const int64_t nb = std::min(ch.images, g.n - b0);
    im2col_chunk(x32, col, b0, nb, g, ch.per_image);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const Tensor dwg = dw2.slice(grp * g.kg, (grp + 1) * g.kg);  // [Kg, D]
      if (g.layout == Layout::nchw) {
        for (int64_t b = 0; b < nb; ++b) {
          const Tensor colg = view(col, b * ch.per_image + grp * d * pix, {d, pix});
          const Tensor dyg = view(dyflat, ((b0 + b) * g.k + grp * g.kg) * pix, {g.kg, pix});
          gemm(dwg, dyg, colg, {.trans_b = true, .beta = 1.0f});  // += dy_g col_g^T
        }
      } else {
        const Tensor colg = view(col, grp * nb * pix * d, {nb * pix, d});
        Tensor dyg;
        if (g.groups == 1) {
          dyg = view(dyflat, b0 * pix * g.k, {nb * pix, g.k});
        } else {
          dyg = Tensor::empty({nb * pix, g.kg}, DType::f32, Device::cpu());
          gather_group(dyg, fptr(dy32) + b0 * pix * g.k, nb * pix, grp, g);
        }
        gemm(dwg, dyg, colg, {.trans_a = true, .beta = 1.0f});  // += dy_g^T col_g
      }
    }
  }
  if (!dw32.same_storage(dw)) cast(dw, dw32);
}

}  // namespace stoker::ops::cpu
