# cmake -P script behind the ctest test install.find_package_example.
#
# Installs stoke's build tree into WORK_DIR/prefix, then builds two examples as outside projects
# against that prefix only and runs them:
#   examples/pipeline  a graph of its own on 3000 records;
#   examples/train     the small CNN trained for one epoch on a tiny image folder written by the
#                      installed `stoke gen-shapes`; the installed `stoke evaluate` then reads the
#                      checkpoint it wrote.
# Any failing step ends the script with message(FATAL_ERROR) showing the step's output.
#
# Variables (-D): STOKE_BINARY_DIR, STOKE_SOURCE_DIR, WORK_DIR, CONFIG (may be empty), GENERATOR,
# CXX_COMPILER, SANITIZE_FLAGS (compile and link flags the installed library was built with).

set(CHECK_NAME "install check")
set(CHECK_SCRIPT "check_install.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/check_support.cmake")
require_vars(STOKE_BINARY_DIR STOKE_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

run("install" "${CMAKE_COMMAND}" --install "${STOKE_BINARY_DIR}" --prefix "${prefix}" ${config_args})
file(REAL_PATH "${prefix}" real_prefix)

# build_example(<name>): configures examples/<name> against the prefix, checks that find_package
# found the prefix's stoke, builds it; sets `example` to the executable stoke_example_<name>.
function(build_example name)
  set(build "${WORK_DIR}/build-${name}")
  set(configure_args
    -S "${STOKE_SOURCE_DIR}/examples/${name}"
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
  run("configure ${name}" "${CMAKE_COMMAND}" ${configure_args})

  # The package must have come from the scratch prefix.
  file(STRINGS "${build}/CMakeCache.txt" stoke_dir_line REGEX "^stoke_DIR:")
  string(REGEX REPLACE "^stoke_DIR:[A-Z]+=" "" stoke_dir "${stoke_dir_line}")
  if(EXISTS "${stoke_dir}")
    file(REAL_PATH "${stoke_dir}" stoke_dir)
  endif()
  string(FIND "${stoke_dir}" "${real_prefix}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "install check: find_package(stoke) used '${stoke_dir}', not the scratch prefix '${prefix}'")
  endif()

  run("build ${name}" "${CMAKE_COMMAND}" --build "${build}" --parallel 2 ${config_args})
  set(candidates "${build}/stoke_example_${name}")
  if(NOT "${CONFIG}" STREQUAL "")
    list(APPEND candidates "${build}/${CONFIG}/stoke_example_${name}")
  endif()
  foreach(candidate IN LISTS candidates)
    if(EXISTS "${candidate}")
      set(example "${candidate}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "install check: the build produced no stoke_example_${name} (looked for ${candidates})")
endfunction()

build_example(pipeline)
run("run pipeline" "${example}" 3000)
if(NOT last_output MATCHES "example: [0-9]+ records in [0-9]+ batches, in order")
  message(FATAL_ERROR "install check: the pipeline example's output lacks its final line:\n${last_output}")
endif()
set(pipeline_output "${last_output}")

build_example(train)
set(stoke "${prefix}/bin/stoke")
set(shapes "${WORK_DIR}/shapes")
run("write a dataset" "${stoke}" gen-shapes --out "${shapes}" --classes 2 --train 64 --val 16 --size 32 --quiet)
run("run train" "${example}" "${shapes}/train" 1 "${WORK_DIR}/checkpoints")
if(NOT last_output MATCHES "epoch 1: train loss [0-9.]+, val top-1 [0-9.]+"
   OR NOT last_output MATCHES "example: done after epoch 1; checkpoint [^\n]*last.safetensors")
  message(FATAL_ERROR "install check: the train example's output lacks its epoch and final lines:\n${last_output}")
endif()
set(train_output "${last_output}")
run("evaluate the train example's checkpoint" "${stoke}" evaluate --checkpoint "${WORK_DIR}/checkpoints/last.safetensors"
  --data "${shapes}/val" --device cpu --json)
if(NOT last_output MATCHES "\"images\":32")
  message(FATAL_ERROR "install check: stoke evaluate did not read the train example's checkpoint:\n${last_output}")
endif()
message(STATUS "install check: passed\n${pipeline_output}\n${train_output}")
