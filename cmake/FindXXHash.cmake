# Finds xxHash's header and defines XXHash::XXHash. stoker compiles xxHash inline
# (XXH_INLINE_ALL in src/util/checksum.cpp), so only the header is needed: nothing is linked and
# programs that use the library do not depend on libxxhash. Debian/Ubuntu: libxxhash-dev.
find_path(XXHASH_INCLUDE_DIR xxhash.h)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(XXHash REQUIRED_VARS XXHASH_INCLUDE_DIR)
if(XXHash_FOUND AND NOT TARGET XXHash::XXHash)
  add_library(XXHash::XXHash INTERFACE IMPORTED)
  set_target_properties(XXHash::XXHash PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${XXHASH_INCLUDE_DIR}")
endif()
mark_as_advanced(XXHASH_INCLUDE_DIR)
