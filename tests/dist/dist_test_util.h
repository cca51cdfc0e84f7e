// Helpers shared by the dist tests: a learnable toy problem, models, weights, free ports.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstring>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stoker/core/error.h"
#include "stoker/core/tensor.h"
#include "stoker/data/batch_source.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/elementwise.h"

namespace stoker::test {

// 3 classes of Gaussian blobs in 8 dimensions (class c shifted along axis c).
struct Blobs {
  Tensor x, y;
};
inline Blobs make_blobs(int64_t n, uint64_t seed) {
  Tensor x = Tensor::empty({n, 8}, DType::f32);
  ops::random_normal(x, 0.0f, 0.5f, seed, 0);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  float* px = x.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    labels[static_cast<size_t>(i)] = i % 3;
    px[i * 8 + i % 3] += 2.0f;
  }
  return {x, Tensor::from_vector(labels, {n})};
}

// Linear(8, 16) ReLU Linear(16, 16) ReLU Linear(16, 3), initialized from `seed` (touches the
// global init generator: build models on one thread).
inline std::unique_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  nn::manual_seed(seed);
  auto m = std::make_unique<nn::Sequential>();
  m->add(nn::make<nn::Linear>(8, 16));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Linear>(16, 16));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Linear>(16, 3));
  return m;
}

inline std::vector<std::vector<float>> weights_of(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (auto* p : m.parameters()) out.push_back(p->value().to_vector<float>());
  return out;
}

// Rows `rows` of a host tensor, as a new host tensor.
inline Tensor take_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  Shape shape = t.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(shape, t.dtype());
  const size_t row = t.nbytes() / static_cast<size_t>(t.size(0));
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(static_cast<char*>(out.data()) + i * row,
                static_cast<const char*>(t.data()) + rows[i] * row, row);
  return out;
}

// n batches of 128 blobs (make_blobs(n * 128, seed)) with their 8 features in the first 8 of 64
// input columns (the rest zeros), on `device`: the input of the dist GPU tests' 64-wide MLPs.
inline std::vector<data::Batch> blob_batches(int n, uint64_t seed, Device device) {
  const Blobs d = make_blobs(n * 128, seed);
  std::vector<data::Batch> out;
  for (int i = 0; i < n; ++i) {
    Tensor x = Tensor::zeros({128, 64}, DType::f32);
    std::vector<int64_t> rows;
    for (int64_t j = 0; j < 128; ++j) rows.push_back(i * 128 + j);
    const Tensor x8 = take_rows(d.x, rows);
    for (int64_t j = 0; j < 128; ++j)
      std::memcpy(x.data<float>() + j * 64, x8.data<float>() + j * 8, 8 * sizeof(float));
    out.push_back({x.to(device), take_rows(d.y, rows).to(device), 128});
  }
  return out;
}

// Largest |a - b| / max(1, |b|) over the elements of two weights_of() results.
inline double max_rel_diff(const std::vector<std::vector<float>>& a,
                           const std::vector<std::vector<float>>& b) {
  double worst = 0.0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t i = 0; i < a[t].size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(a[t][i]) - b[t][i]) /
                                  std::max(1.0, std::abs(static_cast<double>(b[t][i]))));
  return worst;
}

// The message of the stoker::Error fn throws ("(no error)" when it returns).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A TCP port that was free a moment ago.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace stoker::test
