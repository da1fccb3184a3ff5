# stoke_add_library(<name> SOURCES <file>...)
#
# One layer's library, as every layer of stoke is made: the target stoke_<name> (the file
# libstoke_<name>), its alias and exported name stoke::<name>, position-independent code (plugins
# and shared objects link it), C++20, the public headers under the calling folder's include/
# (installed to the include directory), stoke's warnings for its own sources, and, with
# STOKE_UNITY_BUILD, its sources compiled in batches (each .cpp's file-local names must then be
# unique within its library).
include_guard(GLOBAL)
include(GNUInstallDirs)

function(stoke_add_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_SOURCES)
    message(FATAL_ERROR "stoke_add_library(${name} SOURCES <file>...): got '${ARGN}'")
  endif()
  set(target stoke_${name})
  add_library(${target} ${arg_SOURCES})
  add_library(stoke::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES
    EXPORT_NAME ${name}
    OUTPUT_NAME ${target}
    POSITION_INDEPENDENT_CODE ON
    UNITY_BUILD ${STOKE_UNITY_BUILD})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:stoke_warnings>)
endfunction()
