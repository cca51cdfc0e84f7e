// Context printed with every benchmark result: machine, devices and library versions, so a
// number is never separated from the conditions it was measured under.
#pragma once

#include <string>

namespace stoker::bench {

// Adds the context to Google Benchmark's header (benchmark::AddCustomContext) and returns it
// as text.
std::string add_context();

}  // namespace stoker::bench
