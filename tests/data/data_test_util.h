// Helpers of the data tests: a temporary folder, file writing, and raw LMDB writes that build
// databases `stoker pack` would never write (to test the readers' checks).
#pragma once

#include <gtest/gtest.h>
#include <lmdb.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace stoker::test {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("stoker_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& path, const void* data, size_t size) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  ASSERT_TRUE(f.good()) << path;
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  write_bytes(path, bytes.data(), bytes.size());
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Writes (or overwrites) key/value pairs into the LMDB environment at `dir` (created if needed).
inline void lmdb_put(const std::filesystem::path& dir,
                     const std::map<std::string, std::string>& entries) {
  std::filesystem::create_directories(dir);
  MDB_env* env = nullptr;
  ASSERT_EQ(mdb_env_create(&env), 0);
  ASSERT_EQ(mdb_env_set_mapsize(env, size_t{64} << 20), 0);
  ASSERT_EQ(mdb_env_open(env, dir.c_str(), 0, 0644), 0);
  MDB_txn* txn = nullptr;
  ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
  MDB_dbi dbi = 0;
  ASSERT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
  for (const auto& [k, v] : entries) {
    MDB_val mk{k.size(), const_cast<char*>(k.data())};
    MDB_val mv{v.size(), const_cast<char*>(v.data())};
    ASSERT_EQ(mdb_put(txn, dbi, &mk, &mv, 0), 0);
  }
  ASSERT_EQ(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

}  // namespace stoker::test
