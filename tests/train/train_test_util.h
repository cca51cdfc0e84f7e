// What the train tests share: a learnable toy problem and ways to damage a safetensors file.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "stoker/core/tensor.h"
#include "stoker/ops/elementwise.h"
#include "stoker/train/safetensors.h"

namespace stoker::train_test {

// 3 classes of Gaussian blobs in 8 dimensions: class c is shifted along axis c.
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
    px[i * 8 + labels[static_cast<size_t>(i)]] += 2.0f;
  }
  return {x, Tensor::from_vector(labels, {n})};
}

// The file offset of byte k of tensor `name`'s data.
inline size_t byte_of_tensor(const std::filesystem::path& file, const std::string& name, size_t k) {
  uint64_t header = 0;
  std::ifstream(file, std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
  const train::SafetensorsReader r(file);
  const auto& e = r.entry(name);
  EXPECT_LT(k, e.end - e.begin) << name;
  return 8 + header + e.begin + k;
}

// Flips one bit of the byte at `offset` (twice restores it).
inline void flip_byte(const std::filesystem::path& file, size_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace stoker::train_test
