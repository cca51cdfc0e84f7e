# Finds every external library and says which Debian package provides a missing one.
include(FindPackageHandleStandardArgs)

function(stoker_require found name package)
  if(NOT ${found})
    message(FATAL_ERROR "stoker: ${name} not found. On Debian/Ubuntu: apt-get install ${package} "
                        "(or run scripts/setup.sh, which installs everything missing).")
  endif()
endfunction()

find_package(Threads REQUIRED)

find_package(TBB CONFIG QUIET)
stoker_require(TBB_FOUND "oneTBB" "libtbb-dev")

# BLAS for the CPU GEMM. An explicit link line wins (GPU builds use a small static BLAS so the
# binaries travel light); otherwise FindBLAS with the chosen vendor, then any BLAS at all.
if(STOKER_BLAS_LIBRARIES)
  add_library(stoker::blas INTERFACE IMPORTED)
  set_target_properties(stoker::blas PROPERTIES INTERFACE_LINK_LIBRARIES "${STOKER_BLAS_LIBRARIES}")
  set(STOKER_BLAS_LINK "${STOKER_BLAS_LIBRARIES}")
  set(STOKER_BLAS_DESCRIPTION "explicit (${STOKER_BLAS_LIBRARIES})")
else()
  set(BLA_VENDOR ${STOKER_BLAS_VENDOR})
  find_package(BLAS QUIET)
  if(NOT BLAS_FOUND)
    unset(BLA_VENDOR)
    find_package(BLAS QUIET)
  endif()
  stoker_require(BLAS_FOUND "a BLAS library" "libopenblas-dev")
  add_library(stoker::blas INTERFACE IMPORTED)
  set_target_properties(stoker::blas PROPERTIES INTERFACE_LINK_LIBRARIES "${BLAS_LIBRARIES}")
  set(STOKER_BLAS_LINK "${BLAS_LIBRARIES}")
  set(STOKER_BLAS_DESCRIPTION "${STOKER_BLAS_VENDOR}: ${BLAS_LIBRARIES}")
endif()
find_path(STOKER_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
stoker_require(STOKER_CBLAS_INCLUDE_DIR "cblas.h" "libopenblas-dev")

find_package(nlohmann_json CONFIG QUIET)
stoker_require(nlohmann_json_FOUND "nlohmann-json" "nlohmann-json3-dev")

find_package(LMDB)
stoker_require(LMDB_FOUND "LMDB" "liblmdb-dev")
find_package(TurboJPEG)
stoker_require(TurboJPEG_FOUND "libjpeg-turbo (TurboJPEG API)" "libturbojpeg0-dev")
find_package(XXHash)
stoker_require(XXHash_FOUND "xxHash (checksums of records and checkpoints)" "libxxhash-dev")
find_package(SentencePiece)
stoker_require(SentencePiece_FOUND "SentencePiece (tokenizer of `stoker pack-text`)"
               "libsentencepiece-dev")
find_package(CLI11 CONFIG QUIET)
stoker_require(CLI11_FOUND "CLI11 (command-line parser of the `stoker` tool)" "libcli11-dev")
if(TARGET TurboJPEG::JPEG)
  set(STOKER_JPEGLIB_FOUND TRUE)
endif()
stoker_require(STOKER_JPEGLIB_FOUND "libjpeg-turbo (libjpeg API, jpeglib.h)" "libjpeg62-turbo-dev")

if(STOKER_WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)
  find_package(NCCL)
  stoker_require(NCCL_FOUND "NCCL" "libnccl-dev (or the NCCL bundled with the CUDA toolkit)")
  find_package(CUDNN)
  stoker_require(CUDNN_FOUND "cuDNN 9" "cudnn9-cuda-13 (NVIDIA's repository)")
endif()
