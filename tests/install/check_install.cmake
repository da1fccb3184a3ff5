# cmake -P script behind the ctest test install.find_package_example.
#
# Installs stoke's build tree into WORK_DIR/prefix, configures examples/pipeline as an outside
# project against that prefix only, builds it, and runs it on 3000 records. Any failing step ends
# the script with message(FATAL_ERROR) showing the step's output.
#
# Variables (-D): STOKE_BINARY_DIR, STOKE_SOURCE_DIR, WORK_DIR, CONFIG (may be empty), GENERATOR,
# CXX_COMPILER, SANITIZE_FLAGS (compile and link flags the installed library was built with).

set(CHECK_NAME "install check")
set(CHECK_SCRIPT "check_install.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/check_support.cmake")
require_vars(STOKE_BINARY_DIR STOKE_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)

set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

run("install" "${CMAKE_COMMAND}" --install "${STOKE_BINARY_DIR}" --prefix "${prefix}" ${config_args})

set(configure_args
  -S "${STOKE_SOURCE_DIR}/examples/pipeline"
  -B "${build}"
  -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_PREFIX_PATH=${prefix}"
  # Find this prefix's stoke, not one from the user package registry.
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(NOT "${CONFIG}" STREQUAL "")
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
if(NOT "${SANITIZE_FLAGS}" STREQUAL "")
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=${SANITIZE_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${SANITIZE_FLAGS}")
endif()
run("configure" "${CMAKE_COMMAND}" ${configure_args})

# The package must have come from the scratch prefix.
file(STRINGS "${build}/CMakeCache.txt" stoke_dir_line REGEX "^stoke_DIR:")
string(REGEX REPLACE "^stoke_DIR:[A-Z]+=" "" stoke_dir "${stoke_dir_line}")
file(REAL_PATH "${prefix}" real_prefix)
if(EXISTS "${stoke_dir}")
  file(REAL_PATH "${stoke_dir}" stoke_dir)
endif()
string(FIND "${stoke_dir}" "${real_prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "install check: find_package(stoke) used '${stoke_dir}', not the scratch prefix '${prefix}'")
endif()

run("build" "${CMAKE_COMMAND}" --build "${build}" --parallel 2 ${config_args})

set(candidates "${build}/stoke_example_pipeline")
if(NOT "${CONFIG}" STREQUAL "")
  list(APPEND candidates "${build}/${CONFIG}/stoke_example_pipeline")
endif()
set(example "")
foreach(candidate IN LISTS candidates)
  if(EXISTS "${candidate}")
    set(example "${candidate}")
    break()
  endif()
endforeach()
if(example STREQUAL "")
  message(FATAL_ERROR "install check: the build produced no stoke_example_pipeline (looked for ${candidates})")
endif()

run("run" "${example}" 3000)
if(NOT last_output MATCHES "example: [0-9]+ records in [0-9]+ batches, in order")
  message(FATAL_ERROR "install check: the example's output lacks its final line:\n${last_output}")
endif()
message(STATUS "install check: passed\n${last_output}")
