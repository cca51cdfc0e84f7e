# Finds libjpeg-turbo's TurboJPEG and libjpeg APIs; defines TurboJPEG::TurboJPEG and
# TurboJPEG::JPEG. Debian/Ubuntu: libturbojpeg0-dev (+ libjpeg62-turbo-dev for the libjpeg API).
find_path(TurboJPEG_INCLUDE_DIR turbojpeg.h)
find_library(TurboJPEG_LIBRARY NAMES turbojpeg)
find_path(TurboJPEG_JPEGLIB_INCLUDE_DIR jpeglib.h)
find_library(TurboJPEG_JPEG_LIBRARY NAMES jpeg)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(TurboJPEG REQUIRED_VARS TurboJPEG_LIBRARY TurboJPEG_INCLUDE_DIR)
if(TurboJPEG_FOUND AND NOT TARGET TurboJPEG::TurboJPEG)
  add_library(TurboJPEG::TurboJPEG UNKNOWN IMPORTED)
  set_target_properties(TurboJPEG::TurboJPEG PROPERTIES
    IMPORTED_LOCATION "${TurboJPEG_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${TurboJPEG_INCLUDE_DIR}")
  if(TurboJPEG_JPEG_LIBRARY AND TurboJPEG_JPEGLIB_INCLUDE_DIR)
    add_library(TurboJPEG::JPEG UNKNOWN IMPORTED)
    set_target_properties(TurboJPEG::JPEG PROPERTIES
      IMPORTED_LOCATION "${TurboJPEG_JPEG_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${TurboJPEG_JPEGLIB_INCLUDE_DIR}")
  endif()
endif()
mark_as_advanced(TurboJPEG_INCLUDE_DIR TurboJPEG_LIBRARY TurboJPEG_JPEGLIB_INCLUDE_DIR
                 TurboJPEG_JPEG_LIBRARY)
