// Replays fuzz inputs without libFuzzer: runs the target's LLVMFuzzerTestOneInput once over every
// regular file below the folders (or the files) given on the command line, in sorted order.
// Built with each target in every build that has the tests, so the seed corpus and the inputs
// that once crashed (regressions/) are checked by CTest with any compiler.
//
// Each input is copied into a heap buffer of exactly its size (an over-read runs off the end, as
// under libFuzzer). Exit status: 0 when every input ran; 1 when an argument does not exist or
// nothing was found at all; a finding ends the process as it would under the fuzzer (abort, an
// uncaught exception, a sanitizer report), after "replaying <file>" names the input.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

bool read_file(const fs::path& path, std::vector<char>& bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return !f.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <folder or file>...\n", argv[0]);
    return 1;
  }
  std::vector<fs::path> inputs;
  for (int a = 1; a < argc; ++a) {
    const fs::path arg = argv[a];
    std::error_code ec;
    if (fs::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
      continue;
    }
    if (!fs::is_directory(arg, ec)) {
      std::fprintf(stderr, "replay: %s is neither a file nor a folder\n", arg.c_str());
      return 1;
    }
    std::vector<fs::path> found;
    for (const auto& e : fs::recursive_directory_iterator(arg)) {
      if (e.is_regular_file()) found.push_back(e.path());
    }
    std::sort(found.begin(), found.end());
    std::printf("replay: %zu inputs in %s\n", found.size(), arg.c_str());
    inputs.insert(inputs.end(), found.begin(), found.end());
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs found\n");
    return 1;
  }
  std::vector<char> bytes;
  for (const fs::path& p : inputs) {
    if (!read_file(p, bytes)) {
      std::fprintf(stderr, "replay: cannot read %s\n", p.c_str());
      return 1;
    }
    std::fprintf(stderr, "replaying %s (%zu bytes)\n", p.c_str(), bytes.size());
    // Exactly-sized copy: an over-read by one byte leaves the allocation.
    const auto copy = std::make_unique<uint8_t[]>(std::max<size_t>(bytes.size(), 1));
    std::copy(bytes.begin(), bytes.end(), copy.get());
    LLVMFuzzerTestOneInput(copy.get(), bytes.size());
  }
  std::printf("replay: %zu inputs ran without a finding\n", inputs.size());
  return 0;
}
