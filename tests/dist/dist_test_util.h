// Helpers shared by the dist tests: a learnable toy problem, models, weights, free ports.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cstring>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stoker/core/error.h"
#include "stoker/core/tensor.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/random.h"

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
