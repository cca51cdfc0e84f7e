// What this build of stoker is and which libraries it runs with (for the demo, logs, doctor).
#pragma once

#include <string>
#include <vector>

namespace stoker::core {

// "0.1.0"
const char* version();

struct LibraryVersion {
  std::string name;     // "CUDA runtime", "cuBLASLt", "oneTBB", ...
  std::string version;  // as the library reports it at run time; "not built" when absent
};

// Versions reported by the libraries themselves at run time (not the headers compiled against).
std::vector<LibraryVersion> library_versions();

}  // namespace stoker::core
