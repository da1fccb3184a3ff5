# FindStokeOpenBLAS: OpenBLAS (its CBLAS interface: cblas.h and the library) as the imported
# target StokeOpenBLAS::openblas. nn's CPU kernels call cblas_sgemm and
# openblas_set_num_threads, so it must be OpenBLAS itself, not the reference BLAS behind
# Debian's alternatives.
#
# Looked for under StokeOpenBLAS_ROOT / OpenBLAS_HOME (variable or environment), then in the
# system's paths, Debian's openblas-pthread folders included (apt-get install libopenblas-dev).
#
#   find_package(StokeOpenBLAS REQUIRED)
# Sets StokeOpenBLAS_FOUND, StokeOpenBLAS_LIBRARY and StokeOpenBLAS_INCLUDE_DIR.
include(FindPackageHandleStandardArgs)

set(_stoke_openblas_hints ${OpenBLAS_HOME} $ENV{OpenBLAS_HOME})
find_path(StokeOpenBLAS_INCLUDE_DIR openblas_config.h
  HINTS ${_stoke_openblas_hints}
  PATH_SUFFIXES include include/openblas openblas x86_64-linux-gnu/openblas-pthread
    aarch64-linux-gnu/openblas-pthread openblas-pthread)
find_library(StokeOpenBLAS_LIBRARY openblas
  HINTS ${_stoke_openblas_hints}
  PATH_SUFFIXES lib lib64 x86_64-linux-gnu/openblas-pthread aarch64-linux-gnu/openblas-pthread openblas-pthread)
mark_as_advanced(StokeOpenBLAS_INCLUDE_DIR StokeOpenBLAS_LIBRARY)

find_package_handle_standard_args(StokeOpenBLAS
  REQUIRED_VARS StokeOpenBLAS_LIBRARY StokeOpenBLAS_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "install it (Debian: apt-get install libopenblas-dev, or run scripts/install-deps.sh) or point OpenBLAS_HOME at it")

if(StokeOpenBLAS_FOUND AND NOT TARGET StokeOpenBLAS::openblas)
  add_library(StokeOpenBLAS::openblas UNKNOWN IMPORTED)
  set_target_properties(StokeOpenBLAS::openblas PROPERTIES
    IMPORTED_LOCATION "${StokeOpenBLAS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${StokeOpenBLAS_INCLUDE_DIR}")
endif()
