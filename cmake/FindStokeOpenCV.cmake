# FindStokeOpenCV: OpenCV's modules as imported targets StokeOpenCV::core, ::imgproc and, when
# present, ::imgcodecs.
#
# Debian ships OpenCVConfig.cmake only in libopencv-dev, which pulls in every module (GDAL, Qt,
# ~140 libraries); libopencv-core-dev and libopencv-imgproc-dev bring headers and libraries but no
# CMake config. So use OpenCV's config when it is installed, and otherwise find the headers and
# libraries directly.
#
#   find_package(StokeOpenCV REQUIRED COMPONENTS core imgproc OPTIONAL_COMPONENTS imgcodecs)
# Sets StokeOpenCV_FOUND, StokeOpenCV_<module>_FOUND and StokeOpenCV_VERSION (when known).
include(FindPackageHandleStandardArgs)

set(_stoke_cv_modules core imgproc imgcodecs)

find_package(OpenCV CONFIG QUIET)
if(OpenCV_FOUND)
  foreach(_module IN LISTS _stoke_cv_modules)
    if(TARGET opencv_${_module} AND NOT TARGET StokeOpenCV::${_module})
      add_library(StokeOpenCV::${_module} INTERFACE IMPORTED)
      set_target_properties(StokeOpenCV::${_module} PROPERTIES INTERFACE_LINK_LIBRARIES opencv_${_module})
    endif()
    if(TARGET StokeOpenCV::${_module})
      set(StokeOpenCV_${_module}_FOUND TRUE)
    endif()
  endforeach()
  set(StokeOpenCV_VERSION "${OpenCV_VERSION}")
  set(StokeOpenCV_INCLUDE_DIR "${OpenCV_INCLUDE_DIRS}")
else()
  find_path(StokeOpenCV_INCLUDE_DIR opencv2/core.hpp PATH_SUFFIXES opencv4)
  foreach(_module IN LISTS _stoke_cv_modules)
    find_library(StokeOpenCV_${_module}_LIBRARY opencv_${_module})
    find_path(StokeOpenCV_${_module}_HEADER opencv2/${_module}.hpp PATH_SUFFIXES opencv4)
    if(StokeOpenCV_INCLUDE_DIR AND StokeOpenCV_${_module}_LIBRARY AND StokeOpenCV_${_module}_HEADER)
      set(StokeOpenCV_${_module}_FOUND TRUE)
      if(NOT TARGET StokeOpenCV::${_module})
        add_library(StokeOpenCV::${_module} UNKNOWN IMPORTED)
        set_target_properties(StokeOpenCV::${_module} PROPERTIES
          IMPORTED_LOCATION "${StokeOpenCV_${_module}_LIBRARY}"
          INTERFACE_INCLUDE_DIRECTORIES "${StokeOpenCV_INCLUDE_DIR}")
        if(NOT _module STREQUAL "core")
          set_target_properties(StokeOpenCV::${_module} PROPERTIES INTERFACE_LINK_LIBRARIES StokeOpenCV::core)
        endif()
      endif()
    endif()
    mark_as_advanced(StokeOpenCV_${_module}_LIBRARY StokeOpenCV_${_module}_HEADER)
  endforeach()
  mark_as_advanced(StokeOpenCV_INCLUDE_DIR)
  if(StokeOpenCV_INCLUDE_DIR AND EXISTS "${StokeOpenCV_INCLUDE_DIR}/opencv2/core/version.hpp")
    file(STRINGS "${StokeOpenCV_INCLUDE_DIR}/opencv2/core/version.hpp" _stoke_cv_version_lines
      REGEX "#define CV_VERSION_(MAJOR|MINOR|REVISION) ")
    foreach(_part MAJOR MINOR REVISION)
      string(REGEX REPLACE ".*#define CV_VERSION_${_part} +([0-9]+).*" "\\1" _stoke_cv_${_part}
        "${_stoke_cv_version_lines}")
    endforeach()
    set(StokeOpenCV_VERSION "${_stoke_cv_MAJOR}.${_stoke_cv_MINOR}.${_stoke_cv_REVISION}")
  endif()
endif()

find_package_handle_standard_args(StokeOpenCV
  REQUIRED_VARS StokeOpenCV_INCLUDE_DIR
  VERSION_VAR StokeOpenCV_VERSION
  HANDLE_COMPONENTS)
