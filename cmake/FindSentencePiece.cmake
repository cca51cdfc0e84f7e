# Finds SentencePiece (the processor and the trainer libraries) and defines
# SentencePiece::SentencePiece. Used by `stoker pack-text` only (src/data/text). pkg-config's
# sentencepiece.pc first, then the header and libraries where Debian/Ubuntu put them
# (libsentencepiece-dev).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_SENTENCEPIECE QUIET sentencepiece)
endif()
find_path(SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h HINTS ${PC_SENTENCEPIECE_INCLUDE_DIRS})
find_library(SENTENCEPIECE_LIBRARY sentencepiece HINTS ${PC_SENTENCEPIECE_LIBRARY_DIRS})
find_library(SENTENCEPIECE_TRAIN_LIBRARY sentencepiece_train HINTS ${PC_SENTENCEPIECE_LIBRARY_DIRS})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SentencePiece REQUIRED_VARS SENTENCEPIECE_INCLUDE_DIR
                                  SENTENCEPIECE_LIBRARY SENTENCEPIECE_TRAIN_LIBRARY)
if(SentencePiece_FOUND AND NOT TARGET SentencePiece::SentencePiece)
  add_library(SentencePiece::SentencePiece INTERFACE IMPORTED)
  set_target_properties(SentencePiece::SentencePiece PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${SENTENCEPIECE_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${SENTENCEPIECE_TRAIN_LIBRARY};${SENTENCEPIECE_LIBRARY}")
endif()
mark_as_advanced(SENTENCEPIECE_INCLUDE_DIR SENTENCEPIECE_LIBRARY SENTENCEPIECE_TRAIN_LIBRARY)
