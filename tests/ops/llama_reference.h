// Test helper: the fixture tests/ops/llama_reference.txt (transformers' numbers for Llama's
// RoPE, RMSNorm and SwiGLU, written by tests/ops/llama_reference.py) as name -> values.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace stoker::test {

// Lines `name count hexfloat...`; an empty map when the file is missing.
inline std::map<std::string, std::vector<float>> load_llama_reference() {
  std::ifstream in(std::string(STOKER_SOURCE_DIR) + "/tests/ops/llama_reference.txt");
  std::map<std::string, std::vector<float>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string name, v;
    size_t count = 0;
    ss >> name >> count;
    std::vector<float>& values = out[name];
    while (ss >> v) values.push_back(std::strtof(v.c_str(), nullptr));
    EXPECT_EQ(values.size(), count) << name;
  }
  return out;
}

}  // namespace stoker::test
