# FindStokeCuDNN: cuDNN (the library and cudnn.h) as the imported target StokeCuDNN::cudnn.
#
# cuDNN ships no CMake config. It is looked for under StokeCuDNN_ROOT (variable or environment),
# CUDNN_ROOT / CUDNN_PATH (environment), next to the CUDA toolkit (call find_package(CUDAToolkit)
# first: CUDAToolkit_LIBRARY_DIR, CUDAToolkit_INCLUDE_DIRS), then in the system's paths.
#
#   find_package(StokeCuDNN REQUIRED)
# Sets StokeCuDNN_FOUND, StokeCuDNN_VERSION, StokeCuDNN_LIBRARY and StokeCuDNN_INCLUDE_DIR.
include(FindPackageHandleStandardArgs)

set(_stoke_cudnn_hints $ENV{CUDNN_ROOT} $ENV{CUDNN_PATH})
find_path(StokeCuDNN_INCLUDE_DIR cudnn.h
  HINTS ${_stoke_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(StokeCuDNN_LIBRARY cudnn
  HINTS ${_stoke_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib64 lib)
mark_as_advanced(StokeCuDNN_INCLUDE_DIR StokeCuDNN_LIBRARY)

if(StokeCuDNN_INCLUDE_DIR AND EXISTS "${StokeCuDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${StokeCuDNN_INCLUDE_DIR}/cudnn_version.h" _stoke_cudnn_version_lines
    REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  foreach(_part MAJOR MINOR PATCHLEVEL)
    string(REGEX REPLACE ".*#define CUDNN_${_part} +([0-9]+).*" "\\1" _stoke_cudnn_${_part}
      "${_stoke_cudnn_version_lines}")
  endforeach()
  set(StokeCuDNN_VERSION "${_stoke_cudnn_MAJOR}.${_stoke_cudnn_MINOR}.${_stoke_cudnn_PATCHLEVEL}")
endif()

find_package_handle_standard_args(StokeCuDNN
  REQUIRED_VARS StokeCuDNN_LIBRARY StokeCuDNN_INCLUDE_DIR
  VERSION_VAR StokeCuDNN_VERSION)

if(StokeCuDNN_FOUND AND NOT TARGET StokeCuDNN::cudnn)
  add_library(StokeCuDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(StokeCuDNN::cudnn PROPERTIES
    IMPORTED_LOCATION "${StokeCuDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${StokeCuDNN_INCLUDE_DIR}")
endif()
