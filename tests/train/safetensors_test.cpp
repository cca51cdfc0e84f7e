#include "stoker/train/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "stoker/nn/linear.h"
#include "test_util.h"

namespace fs = std::filesystem;
using stoker::Device;
using stoker::DType;
using stoker::Tensor;
using stoker::train::NamedTensor;
using stoker::train::SafetensorsReader;

namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes raw bytes: an 8-byte header length, the header, then `data`.
  fs::path raw_file(const std::string& name, const std::string& header, const std::string& data,
                    uint64_t header_len_override = UINT64_MAX) {
    const fs::path p = dir_ / name;
    std::ofstream f(p, std::ios::binary);
    const uint64_t n = header_len_override == UINT64_MAX ? header.size() : header_len_override;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header << data;
    return p;
  }

  // The error thrown when opening `p`; fails the test when none is thrown.
  std::string open_error(const fs::path& p) {
    try {
      SafetensorsReader r(p);
    } catch (const stoker::Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error for " << p;
    return {};
  }

  fs::path dir_;
};

// Element i of the shared test pattern, as safetensors_interop.py computes it.
double pattern(int64_t i, double scale, double offset) {
  return static_cast<double>(i % 251) * scale - offset;
}

Tensor pattern_tensor(DType dt, const stoker::Shape& shape, double scale, double offset) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(pattern(i, scale, offset));
  if (dt == DType::i64) {
    std::vector<int64_t> iv(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      iv[i] = static_cast<int64_t>(i % 251) * static_cast<int64_t>(scale) -
              static_cast<int64_t>(offset);
    return Tensor::from_vector(iv, shape);
  }
  return Tensor::from_floats(v, shape, dt);
}

std::vector<NamedTensor> interop_tensors() {
  return {{"w_f32", pattern_tensor(DType::f32, {3, 5}, 0.25, 7.0)},
          {"w_f16", pattern_tensor(DType::f16, {4, 2, 3}, 0.5, 3.0)},
          {"ids_i64", pattern_tensor(DType::i64, {6}, 1000003, 0)},
          {"ids_i32", pattern_tensor(DType::i32, {2, 2}, 17, 5)},
          {"img_u8", pattern_tensor(DType::u8, {2, 3, 4}, 1, 0)}};
}

void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(0, std::memcmp(a.to(Device::cpu()).data(), b.to(Device::cpu()).data(), a.nbytes()));
}

TEST_F(SafetensorsTest, RoundTripAllDtypesAndMetadata) {
  std::vector<NamedTensor> ts = interop_tensors();
  Tensor bf = Tensor::empty({3, 7}, DType::bf16);
  stoker::ops::random_normal(bf, 0.0f, 3.0f, 42, 0);
  ts.push_back({"w_bf16", bf});
  ts.push_back({"empty", Tensor::empty({0, 4}, DType::f32)});
  ts.push_back({"scalar", Tensor::from_floats({2.5f}, {}, DType::f32)});
  const fs::path p = dir_ / "model.safetensors";
  stoker::train::save_safetensors(p, ts, {{"format", "pt"}, {"step", "10"}});

  SafetensorsReader r(p);
  EXPECT_EQ(r.names().size(), ts.size());
  EXPECT_EQ(r.metadata().at("step"), "10");
  for (const NamedTensor& nt : ts) {
    SCOPED_TRACE(nt.name);
    expect_same(r.load(nt.name), nt.tensor);
  }
  // The data section starts 8-byte aligned (the header is padded with spaces).
  std::ifstream f(p, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  // No temporary file is left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(SafetensorsTest, LoadIntoChecksShapeAndDtype) {
  const fs::path p = dir_ / "w.safetensors";
  const std::vector<NamedTensor> ts = {{"layer.weight", pattern_tensor(DType::f32, {4, 3}, 1, 0)}};
  stoker::train::save_safetensors(p, ts);
  SafetensorsReader r(p);
  Tensor ok = Tensor::empty({4, 3}, DType::f32);
  r.load_into("layer.weight", ok);
  expect_same(ok, ts[0].tensor);
  Tensor wrong = Tensor::empty({3, 4}, DType::f32);
  try {
    r.load_into("layer.weight", wrong);
    FAIL() << "shape mismatch not detected";
  } catch (const stoker::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("w.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layer.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("F32[4, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[3, 4]"), std::string::npos) << msg;
  }
  EXPECT_THROW(r.load("no.such.tensor"), stoker::Error);
  EXPECT_THROW(r.load_into("layer.weight", Tensor::empty({4, 3}, DType::f16)), stoker::Error);
}

TEST_F(SafetensorsTest, TruncatedFilesAreRejectedAtEveryLength) {
  const fs::path p = dir_ / "full.safetensors";
  stoker::train::save_safetensors(p, interop_tensors());
  std::string bytes;
  {
    std::ifstream f(p, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  for (size_t len :
       {size_t{0}, size_t{3}, size_t{8}, size_t{20}, bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE(len);
    const fs::path cut = dir_ / ("cut" + std::to_string(len));
    std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(len));
    const std::string msg = open_error(cut);
    EXPECT_NE(msg.find(cut.string()), std::string::npos) << msg;
  }
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFile) {
  const fs::path p = raw_file("long.safetensors", "{}", "", 1ull << 40);
  const std::string msg = open_error(p);
  EXPECT_NE(msg.find("beyond the end of the file"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, BadJson) {
  const fs::path p = raw_file("json.safetensors", "{\"a\": {\"dtype\": \"F32\",", "");
  const std::string msg = open_error(p);
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("json.safetensors"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, UnknownDtypeNamesTensor) {
  const fs::path p = raw_file("f64.safetensors",
                              R"({"x": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})",
                              std::string(16, '\0'));
  const std::string msg = open_error(p);
  EXPECT_NE(msg.find("'F64'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'x'"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, OffsetsMustMatchShapeAndStayInside) {
  // Byte count does not match the shape.
  std::string msg = open_error(raw_file(
      "count.safetensors", R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
      std::string(8, '\0')));
  EXPECT_NE(msg.find("needs 12"), std::string::npos) << msg;
  // Offsets beyond the data section (an over-read if trusted).
  msg = open_error(raw_file("outside.safetensors",
                            R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                            std::string(8, '\0')));
  EXPECT_NE(msg.find("outside the data section"), std::string::npos) << msg;
  // Overlapping tensors.
  msg = open_error(raw_file("overlap.safetensors",
                            R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
                            std::string(6, '\0')));
  EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
  // Negative extent / malformed entries.
  msg = open_error(raw_file(
      "neg.safetensors", R"({"x": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}})", ""));
  EXPECT_NE(msg.find("non-negative"), std::string::npos) << msg;
  // A zero extent keeps the element count 0 whatever follows: 2^64-1 would wrap to -1 (found by
  // the safetensors fuzz target; tests/fuzz/regressions/safetensors).
  msg = open_error(raw_file(
      "huge.safetensors",
      R"({"x": {"dtype": "U8", "shape": [0, 18446744073709551615], "data_offsets": [0, 0]}})", ""));
  EXPECT_NE(msg.find("impossibly large extent"), std::string::npos) << msg;
  msg = open_error(raw_file("notobj.safetensors", R"([1, 2, 3])", ""));
  EXPECT_NE(msg.find("JSON object"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, MissingFileAndBadNames) {
  const std::string msg = open_error(dir_ / "absent.safetensors");
  EXPECT_NE(msg.find("absent.safetensors"), std::string::npos) << msg;
  const Tensor t = Tensor::zeros({2}, DType::f32);
  const std::vector<NamedTensor> dup = {{"a", t}, {"a", t}};
  EXPECT_THROW(stoker::train::save_safetensors(dir_ / "dup.safetensors", dup), stoker::Error);
  EXPECT_FALSE(fs::exists(dir_ / "dup.safetensors"));
  const std::vector<NamedTensor> ok = {{"a", t}};
  EXPECT_THROW(stoker::train::save_safetensors(dir_ / "no_dir" / "x.safetensors", ok),
               stoker::Error);
}

// Python's safetensors reads what stoker writes and stoker reads what Python writes. Skips
// when python3 with numpy + safetensors is missing (.ci/run installs them).
TEST_F(SafetensorsTest, PythonInterop) {
  if (std::system("python3 -c 'import numpy, safetensors' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with numpy and safetensors not available";
  const std::string script = std::string(STOKER_SOURCE_DIR) + "/tests/train/safetensors_interop.py";
  const fs::path ours = dir_ / "stoker.safetensors";
  stoker::train::save_safetensors(ours, interop_tensors());
  EXPECT_EQ(0, std::system(("python3 " + script + " check " + ours.string()).c_str()));

  const fs::path theirs = dir_ / "python.safetensors";
  ASSERT_EQ(0, std::system(("python3 " + script + " write " + theirs.string()).c_str()));
  SafetensorsReader r(theirs);
  EXPECT_EQ(r.metadata().at("writer"), "python");
  for (const NamedTensor& nt : interop_tensors()) {
    SCOPED_TRACE(nt.name);
    expect_same(r.load(nt.name), nt.tensor);
  }
}

// Flips one bit of byte `k` of tensor `name`'s data in the file.
void damage(const fs::path& p, const std::string& name, size_t k) {
  uint64_t header = 0;
  std::ifstream(p, std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
  size_t at = 0;
  {
    const SafetensorsReader r(p);
    at = 8 + header + r.entry(name).begin + k;
  }
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  f.seekg(static_cast<std::streamoff>(at));
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

// Every tensor's checksum is stored; a flipped bit fails the load of that tensor only, naming
// the file and the tensor.
TEST_F(SafetensorsTest, AFlippedBitFailsTheLoadOfItsTensor) {
  const fs::path p = dir_ / "sums.safetensors";
  stoker::train::save_safetensors(p, interop_tensors(), {{"step", "3"}});
  {
    const SafetensorsReader r(p);
    EXPECT_TRUE(r.has_checksums());
    const std::string& sums = r.metadata().at(stoker::train::kChecksumsKey);
    for (const NamedTensor& nt : interop_tensors()) {
      EXPECT_TRUE(r.entry(nt.name).has_checksum) << nt.name;
      EXPECT_NE(sums.find("\"" + nt.name + "\":\""), std::string::npos) << sums;
      EXPECT_TRUE(r.check_checksum(nt.name).ok()) << nt.name;
    }
  }
  damage(p, "w_f16", 3);
  const SafetensorsReader r(p);
  const stoker::train::SafetensorsReader::ChecksumCheck c = r.check_checksum("w_f16");
  EXPECT_TRUE(c.stored);
  EXPECT_NE(c.expected, c.computed);
  try {
    r.load("w_f16");
    FAIL() << "a damaged tensor loaded";
  } catch (const stoker::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(p.string() + ": tensor 'w_f16' fails its checksum (stored "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("the file is damaged"), std::string::npos) << msg;
  }
  EXPECT_THROW(r.load_into("w_f16", Tensor::empty({4, 2, 3}, DType::f16)), stoker::Error);
  expect_same(r.load("w_f32"), interop_tensors()[0].tensor);  // the others are intact
}

// Files without the key (PyTorch's, or written with checksums off) load unchecked.
TEST_F(SafetensorsTest, FilesWithoutChecksumsLoadUnchecked) {
  const fs::path p = dir_ / "plain.safetensors";
  stoker::train::save_safetensors(p, interop_tensors(), {}, {.checksums = false});
  damage(p, "w_f32", 0);
  const SafetensorsReader r(p);
  EXPECT_FALSE(r.has_checksums());
  EXPECT_EQ(r.metadata().count(stoker::train::kChecksumsKey), 0u);
  EXPECT_FALSE(r.check_checksum("w_f32").stored);
  EXPECT_NO_THROW(r.load("w_f32"));
}

TEST_F(SafetensorsTest, AMalformedChecksumTableIsAnError) {
  const std::string tensor = R"("x": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]})";
  std::string msg = open_error(
      raw_file("json.safetensors",
               "{" + tensor + R"(, "__metadata__": {"stoker.checksums": "{oops"}})", "ab"));
  EXPECT_NE(msg.find("stoker.checksums is not valid JSON"), std::string::npos) << msg;
  msg = open_error(raw_file(
      "hex.safetensors",
      "{" + tensor + R"(, "__metadata__": {"stoker.checksums": "{\"x\": \"12zz\"}"}})", "ab"));
  EXPECT_NE(msg.find("the checksum of 'x' is \"12zz\", not 16 hex digits"), std::string::npos)
      << msg;
}

// Weight files hold checksums too: load_weights refuses a damaged one.
TEST_F(SafetensorsTest, DamagedWeightsFailLoadWeights) {
  stoker::nn::manual_seed(3);
  stoker::nn::Linear a(4, 3), b(4, 3);
  const fs::path p = dir_ / "w.safetensors";
  stoker::train::save_weights(a, p);
  EXPECT_NO_THROW(stoker::train::load_weights(b, p));
  damage(p, "weight", 7);
  try {
    stoker::train::load_weights(b, p);
    FAIL() << "damaged weights loaded";
  } catch (const stoker::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tensor 'weight' fails its checksum"), std::string::npos) << msg;
  }
}

}  // namespace
