# stoke_add_test(NAME <name> SOURCES <file>... [LIBS <target>...] [GPU] [SERIAL]
#                [STOKE_LIBS <target>...] [TEST_PREFIX <prefix>] [TEST_FILTER <gtest filter>] [TIMEOUT <s>])
#
# Adds a GoogleTest executable linked to GTest::gtest_main, stoke::stoke and LIBS, built with the
# project's warnings, and registers each of its tests with ctest (gtest_discover_tests). Tests get
# the label "gpu" when GPU is given (they must GTEST_SKIP without a device), else "cpu":
#   ctest -L cpu        ctest -LE gpu        ctest --test-dir build/ci/tests/graph  (one folder's)
# The target stoke_tests_<folder> builds every test executable of one folder under tests/.
# STOKE_LIBS replaces stoke::stoke (e.g. stoke_gpu_sim, stoke::gpu built on the simulated CUDA
# runtime of tests/gpu/sim); TEST_PREFIX goes before each ctest name (e.g. "sim."); TEST_FILTER
# registers only the tests it matches (gtest's --gtest_filter syntax). SERIAL runs its tests
# alone (RUN_SERIAL): for tests whose subject is how a pipeline reacts to the cores it gets, or that
# need every core to finish in time. TIMEOUT: seconds per test (default 300).
# With STOKE_INSTALL_TESTS=ON, the GPU-labelled executables, and those STOKE_BUNDLE_EXTRA_TESTS
# names, are installed to libexec/stoke/tests for the relocatable bundle (cmake/StokeBundle.cmake);
# the global property STOKE_INSTALLED_TESTS lists them.
#
# With STOKE_TEST_PCH (default ON with GCC and Clang), every test executable reuses one
# precompiled header (stoke_test_pch: GoogleTest, GoogleMock, OpenCV's Mat and the standard headers
# most tests name), parsed once instead of in each of ~150 files. Its target has a test's flags and
# no definitions of its own, so that a test may add macros (GCC and Clang refuse a header whose
# macros are not a subset of the file's).
include_guard(GLOBAL)
include(GoogleTest)
include(StokeBundle)

set(stoke_test_pch_default OFF)
if(CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang)$")
  set(stoke_test_pch_default ON)
endif()
option(STOKE_TEST_PCH "Compile the tests with one shared precompiled header (GCC, Clang)" ${stoke_test_pch_default})
# GCC 12 does not keep libstdc++'s headers quiet when they come from a precompiled header: at -O3
# it then reports -Warray-bounds and -Wstringop-overflow in std::string's own code for innocent
# concatenation such as "t" + std::to_string(n) (GCC bugs 105651 and 105329, fixed in 13). The
# tests built with the header go without those two there; the libraries keep them.
set(stoke_test_pch_options "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  set(stoke_test_pch_options -Wno-array-bounds -Wno-stringop-overflow)
endif()

# The test executables are drivers: what they test is in the libraries, built as the build type
# says. In an optimized build they are compiled at -O1 (STOKE_TEST_O1, default ON with GCC and
# Clang): a third less compile time than -O3 for ~150 files, the larger half of a CI build. The
# shared precompiled header gets the same level (GCC takes a header only with the same -O). GCC's
# -Wmaybe-uninitialized, whose flow analysis is coarser at -O1, then reports std::optional's
# moved-from storage in the graph's templates (GCC bug 105593's kind): off for the tests at -O1,
# on for the libraries.
option(STOKE_TEST_O1 "Compile the test executables at -O1 in optimized builds (not the libraries)" ON)
set(stoke_test_optimization "")
if(STOKE_TEST_O1 AND CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang)$")
  set(stoke_test_optimization "$<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-O1>")
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND stoke_test_optimization "$<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-Wno-maybe-uninitialized>")
  endif()
endif()

# stoke_test_pch, the target whose precompiled header the tests reuse, made on first use.
function(stoke_add_test_pch)
  if(TARGET stoke_test_pch)
    return()
  endif()
  add_library(stoke_test_pch OBJECT "${PROJECT_SOURCE_DIR}/tests/support/precompiled.cpp")
  find_package(StokeOpenCV REQUIRED COMPONENTS core)  # as stoke::nodes finds it
  # Not stoke::stoke: its definitions (STOKE_HAS_CUDA) would make GCC refuse the header to a test
  # that links one layer only.
  target_link_libraries(stoke_test_pch PRIVATE GTest::gmock GTest::gtest_main StokeOpenCV::core
    $<BUILD_INTERFACE:stoke_warnings>)
  target_compile_options(stoke_test_pch PRIVATE ${stoke_test_pch_options} ${stoke_test_optimization})
  target_precompile_headers(stoke_test_pch PRIVATE
    <gmock/gmock.h> <gtest/gtest.h> <opencv2/core/mat.hpp>
    <algorithm> <atomic> <chrono> <cstdint> <filesystem> <fstream> <functional> <map> <memory>
    <mutex> <optional> <span> <stdexcept> <string> <string_view> <thread> <vector>)
endfunction()

function(stoke_add_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "GPU;SERIAL" "NAME;TEST_PREFIX;TEST_FILTER;TIMEOUT" "SOURCES;LIBS;STOKE_LIBS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "stoke_add_test: unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_NAME OR NOT arg_SOURCES)
    message(FATAL_ERROR "stoke_add_test: NAME and SOURCES are required")
  endif()

  if(arg_GPU)
    set(label gpu)
  else()
    set(label cpu)
  endif()

  if(NOT arg_STOKE_LIBS)
    set(arg_STOKE_LIBS stoke::stoke)
  endif()

  add_executable(${arg_NAME} ${arg_SOURCES})
  if(STOKE_TEST_PCH)
    stoke_add_test_pch()
    target_precompile_headers(${arg_NAME} REUSE_FROM stoke_test_pch)
    target_compile_options(${arg_NAME} PRIVATE ${stoke_test_pch_options})
  endif()
  target_compile_options(${arg_NAME} PRIVATE ${stoke_test_optimization})
  target_link_libraries(${arg_NAME} PRIVATE GTest::gtest_main ${arg_STOKE_LIBS} ${arg_LIBS}
    $<BUILD_INTERFACE:stoke_warnings>)
  target_include_directories(${arg_NAME} PRIVATE "${PROJECT_SOURCE_DIR}/tests/support")  # helpers every folder may use
  # stoke_tests_<folder> builds every test executable of one folder (the sanitizer run's subset).
  cmake_path(GET CMAKE_CURRENT_SOURCE_DIR FILENAME folder)
  if(NOT TARGET stoke_tests_${folder})
    add_custom_target(stoke_tests_${folder})
  endif()
  add_dependencies(stoke_tests_${folder} ${arg_NAME})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 300)
  endif()
  set(properties LABELS "${label}" TIMEOUT ${arg_TIMEOUT})
  if(arg_SERIAL)
    list(APPEND properties RUN_SERIAL TRUE)
  endif()
  if(STOKE_TEST_ENVIRONMENT)  # sanitizer options (top-level CMakeLists.txt)
    list(APPEND properties ENVIRONMENT "${STOKE_TEST_ENVIRONMENT}")
  endif()
  set(discover_args "")
  if(arg_TEST_PREFIX)
    list(APPEND discover_args TEST_PREFIX "${arg_TEST_PREFIX}")
  endif()
  if(arg_TEST_FILTER)
    list(APPEND discover_args TEST_FILTER "${arg_TEST_FILTER}")
  endif()
  gtest_discover_tests(${arg_NAME}
    ${discover_args}
    DISCOVERY_TIMEOUT 60
    PROPERTIES ${properties})

  if(STOKE_INSTALL_TESTS AND (arg_GPU OR arg_NAME IN_LIST STOKE_BUNDLE_EXTRA_TESTS))
    stoke_bundle_install_executable(${arg_NAME} DESTINATION "${CMAKE_INSTALL_LIBEXECDIR}/stoke/tests")
    set_property(GLOBAL APPEND PROPERTY STOKE_INSTALLED_TESTS ${arg_NAME})
  endif()
endfunction()
