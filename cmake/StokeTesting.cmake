# stoke_add_test(NAME <name> SOURCES <file>... [LIBS <target>...] [GPU])
#
# Adds a GoogleTest executable linked to GTest::gtest_main, stoke::stoke and LIBS, built with the
# project's warnings, and registers each of its tests with ctest (gtest_discover_tests). Tests get
# the label "gpu" when GPU is given (they must GTEST_SKIP without a device), else "cpu":
#   ctest -L cpu        ctest -LE gpu
# With STOKE_INSTALL_TESTS=ON, the GPU-labelled executables, and those STOKE_BUNDLE_EXTRA_TESTS
# names, are installed to libexec/stoke/tests for the relocatable bundle (cmake/StokeBundle.cmake);
# the global property STOKE_INSTALLED_TESTS lists them.
include_guard(GLOBAL)
include(GoogleTest)
include(StokeBundle)

function(stoke_add_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "GPU" "NAME" "SOURCES;LIBS")
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

  add_executable(${arg_NAME} ${arg_SOURCES})
  target_link_libraries(${arg_NAME} PRIVATE GTest::gtest_main stoke::stoke ${arg_LIBS}
    $<BUILD_INTERFACE:stoke_warnings>)
  set(properties LABELS "${label}" TIMEOUT 300)
  if(STOKE_TEST_ENVIRONMENT)  # sanitizer options (top-level CMakeLists.txt)
    list(APPEND properties ENVIRONMENT "${STOKE_TEST_ENVIRONMENT}")
  endif()
  gtest_discover_tests(${arg_NAME}
    DISCOVERY_TIMEOUT 60
    PROPERTIES ${properties})

  if(STOKE_INSTALL_TESTS AND (arg_GPU OR arg_NAME IN_LIST STOKE_BUNDLE_EXTRA_TESTS))
    stoke_bundle_install_executable(${arg_NAME} DESTINATION "${CMAKE_INSTALL_LIBEXECDIR}/stoke/tests")
    set_property(GLOBAL APPEND PROPERTY STOKE_INSTALLED_TESTS ${arg_NAME})
  endif()
endfunction()
