// Private: the collectives the host-side communicators (thread, TCP) implement, and their names
// for error messages. The values are also the TCP backend's wire codes.
#pragma once

#include <cstdint>

namespace stoker::dist::detail {

enum class CollectiveKind : uint8_t {
  all_reduce = 1,
  broadcast,
  all_gather,
  reduce_scatter,
  barrier
};

inline const char* kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::broadcast:
      return "broadcast";
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::barrier:
      return "barrier";
  }
  return "?";
}

}  // namespace stoker::dist::detail
