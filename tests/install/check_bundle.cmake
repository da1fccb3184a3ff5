# cmake -P script behind the ctest test install.bundle_relocates.
#
# Installs stoke's build tree with its runtime dependencies (the component stoke_runtime_deps)
# into WORK_DIR/prefix, moves the prefix to WORK_DIR/moved, and checks that
#   - bin/stoke carries the RPATH (tag RPATH_TAG) $ORIGIN/EXPECTED_RPATH_REL, nothing else;
#   - the moved stoke runs `--version` without LD_LIBRARY_PATH;
#   - every library stoke needs directly resolves into the moved lib dir, except those the
#     machine provides (the C library, the CUDA driver, cuDNN, cuBLAS: PROVIDED_FILE), and so does
#     every library it needs at all: without LD_LIBRARY_PATH when the tag is a DT_RPATH
#     (STOKE_BUNDLE_RUNTIME_DEPS=ON), with LD_LIBRARY_PATH=<lib dir> when it is a DT_RUNPATH;
#   - none of the provided libraries was copied.
# Any failing check ends the script with message(FATAL_ERROR).
#
# Variables (-D): STOKE_BINARY_DIR, WORK_DIR, CONFIG (may be empty), BINDIR, LIBDIR (relative
# install dirs), EXPECTED_RPATH_REL, RPATH_TAG (RPATH or RUNPATH), PROVIDED_FILE, VERSION.

cmake_minimum_required(VERSION 3.25)  # policies of this version (IN_LIST) in script mode

set(CHECK_NAME "bundle check")
set(CHECK_SCRIPT "check_bundle.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/check_support.cmake")
require_vars(STOKE_BINARY_DIR WORK_DIR BINDIR LIBDIR EXPECTED_RPATH_REL RPATH_TAG PROVIDED_FILE VERSION)

set(prefix "${WORK_DIR}/prefix")
set(moved "${WORK_DIR}/moved")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

run("install" "${CMAKE_COMMAND}" --install "${STOKE_BINARY_DIR}" --prefix "${prefix}" ${config_args})
run("install of the runtime dependencies" "${CMAKE_COMMAND}" --install "${STOKE_BINARY_DIR}" --prefix "${prefix}"
  --component stoke_runtime_deps ${config_args})
file(RENAME "${prefix}" "${moved}")

set(stoke "${moved}/${BINDIR}/stoke")
file(REAL_PATH "${moved}/${LIBDIR}" lib_dir)
set(no_ld_path "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH)

# ---- the RPATH
run("readelf" readelf -d "${stoke}")
set(dynamic "${last_output}")
string(REGEX MATCHALL "\\((RPATH|RUNPATH)\\)[^\n]*" rpath_lines "${dynamic}")
list(LENGTH rpath_lines rpath_count)
set(expected_value "$ORIGIN/${EXPECTED_RPATH_REL}")
set(tag "")
set(value "")
if(rpath_count EQUAL 1 AND rpath_lines MATCHES "^\\(([A-Z]+)\\) +Library r[a-z]*path: \\[([^]]*)\\]")
  set(tag "${CMAKE_MATCH_1}")
  set(value "${CMAKE_MATCH_2}")
endif()
if(NOT tag STREQUAL RPATH_TAG OR NOT value STREQUAL expected_value)
  message(FATAL_ERROR "bundle check: the installed stoke's dynamic section has '${rpath_lines}' "
    "instead of one ${RPATH_TAG} entry [${expected_value}] (readelf -d ${stoke})")
endif()
message(STATUS "bundle check: ${rpath_lines}")

# ---- it runs from the moved prefix
run("stoke --version from the moved prefix" ${no_ld_path} "${stoke}" --version)
if(NOT last_output MATCHES "${VERSION}")
  message(FATAL_ERROR "bundle check: `stoke --version` printed no ${VERSION}:\n${last_output}")
endif()

# ---- what it needs resolves into the bundle
file(STRINGS "${PROVIDED_FILE}" provided_lines)
set(provided "")
foreach(line IN LISTS provided_lines)
  string(REGEX REPLACE "^[a-z]+ " "" regex "${line}")
  list(APPEND provided "${regex}")
endforeach()
if(provided STREQUAL "")
  message(FATAL_ERROR "bundle check: ${PROVIDED_FILE} lists no provided libraries")
endif()

# is_provided(<out-var> <soname>)
function(is_provided out_var name)
  set(${out_var} FALSE PARENT_SCOPE)
  foreach(regex IN LISTS provided)
    if(name MATCHES "${regex}")
      set(${out_var} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

# check_resolution(<what> <sonames to check, or ALL> <ldd command>...): every non-provided soname
# ldd resolves must lie in lib_dir.
function(check_resolution what sonames)
  run("ldd (${what})" ${ARGN} ldd "${stoke}")
  string(REGEX MATCHALL "[^\n]+" lines "${last_output}")
  set(checked 0)
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^[ \t]*([^ \t]+) => ([^ \t]+)")
      continue()
    endif()
    set(name "${CMAKE_MATCH_1}")
    set(path "${CMAKE_MATCH_2}")
    is_provided(is_provided_lib "${name}")
    if(is_provided_lib OR (NOT sonames STREQUAL "ALL" AND NOT name IN_LIST sonames))
      continue()
    endif()
    if(path STREQUAL "not")
      message(FATAL_ERROR "bundle check (${what}): ${name} is not found:\n${last_output}")
    endif()
    file(REAL_PATH "${path}" real)
    get_filename_component(dir "${real}" DIRECTORY)
    if(NOT dir STREQUAL lib_dir)
      message(FATAL_ERROR "bundle check (${what}): ${name} resolves to ${path}, outside the bundle's "
        "${lib_dir}: the runtime dependencies miss it\n${last_output}")
    endif()
    math(EXPR checked "${checked} + 1")
  endforeach()
  if(checked EQUAL 0)
    message(FATAL_ERROR "bundle check (${what}): ldd showed no library to check:\n${last_output}")
  endif()
  message(STATUS "bundle check (${what}): ${checked} libraries resolve into the bundle")
endfunction()

string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]\n]+\\]" needed_lines "${dynamic}")
set(needed "")
foreach(line IN LISTS needed_lines)
  string(REGEX REPLACE ".*\\[([^]]+)\\]" "\\1" name "${line}")
  list(APPEND needed "${name}")
endforeach()
check_resolution("direct dependencies, no LD_LIBRARY_PATH" "${needed}" ${no_ld_path})
if(RPATH_TAG STREQUAL "RPATH")
  check_resolution("all dependencies, no LD_LIBRARY_PATH" ALL ${no_ld_path})
else()
  check_resolution("all dependencies, LD_LIBRARY_PATH=<lib dir>" ALL
    "${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${lib_dir}")
endif()

# ---- nothing the machine provides was copied
file(GLOB copied RELATIVE "${lib_dir}" "${lib_dir}/*.so*")
set(copied_count 0)
foreach(name IN LISTS copied)
  is_provided(is_provided_lib "${name}")
  if(is_provided_lib)
    message(FATAL_ERROR "bundle check: ${lib_dir} holds ${name}, which the machine provides")
  endif()
  if(NOT IS_SYMLINK "${lib_dir}/${name}")
    math(EXPR copied_count "${copied_count} + 1")
  endif()
endforeach()
message(STATUS "bundle check: passed (${copied_count} libraries in ${LIBDIR})")
