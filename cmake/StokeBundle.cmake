# StokeBundle: installing stoke's executables so that an install prefix is a relocatable bundle,
# which runs from wherever it is copied (scripts/make-bundle.sh, docs/bundle.md).
#
#   include(StokeBundle)   # in each directory that installs executables
#   stoke_bundle_install_executable(stoke_cli DESTINATION "${CMAKE_INSTALL_BINDIR}")
#
# stoke_bundle_install_executable(<target> DESTINATION <dir>)
#   Installs the executable to <dir> with the install RPATH $ORIGIN/<dir to the lib dir> (build-tree
#   RPATHs are left as CMake makes them), and the shared libraries it needs (found at install time
#   with file(GET_RUNTIME_DEPENDENCIES) on the build-tree file) to the lib dir, except the C
#   library and loader and what a CUDA machine provides (STOKE_BUNDLE_PROVIDED_LIBRARIES). Those
#   libraries are the install component stoke_runtime_deps, which a plain `cmake --install`
#   installs only when STOKE_BUNDLE_RUNTIME_DEPS=ON, and otherwise only when asked for:
#     cmake --install <build> --prefix <dir> --component stoke_runtime_deps
#   With STOKE_BUNDLE_RUNTIME_DEPS=ON the executable is linked with --disable-new-dtags, so that
#   its RPATH is a DT_RPATH, which the loader also uses for the libraries' own dependencies (a
#   DT_RUNPATH serves only the executable's direct ones: OpenCV's liblapack, libGLX, ... would not
#   be found without LD_LIBRARY_PATH).
include_guard(DIRECTORY)  # its variables reach the including directory and those below
include(GNUInstallDirs)

# Sonames the bundle leaves out (regular expressions on the start of the file name): the C library
# and its loader, which belong to the machine and are always there ...
set(STOKE_BUNDLE_SYSTEM_LIBRARIES
  "linux-vdso\\.so" "ld-linux" "libc\\.so" "libm\\.so" "libmvec\\.so" "libdl\\.so" "librt\\.so"
  "libpthread\\.so" "libutil\\.so" "libresolv\\.so")
# ... and the CUDA driver and the CUDA libraries a GPU machine brings: the NVIDIA driver's
# libraries, cuDNN and cuBLAS (e.g. PyTorch's site-packages/nvidia/*/lib, which
# scripts/run-on-device.sh puts on LD_LIBRARY_PATH).
set(STOKE_BUNDLE_GPU_LIBRARIES "libcuda\\.so" "libnvidia-" "libcudnn" "libcublas")
set(STOKE_BUNDLE_PROVIDED_LIBRARIES ${STOKE_BUNDLE_SYSTEM_LIBRARIES} ${STOKE_BUNDLE_GPU_LIBRARIES})

# The same lists for scripts/make-bundle.sh and tests/install/check_bundle.cmake, one per line:
# "system <regex>" or "gpu <regex>"; the regexes are also valid POSIX extended ones.
set(stoke_bundle_provided_lines "")
foreach(kind IN ITEMS system gpu)
  string(TOUPPER "${kind}" kind_upper)
  foreach(name IN LISTS STOKE_BUNDLE_${kind_upper}_LIBRARIES)
    string(APPEND stoke_bundle_provided_lines "${kind} ^${name}\n")
  endforeach()
endforeach()
file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/stoke_bundle_provided.txt"
  CONTENT "${stoke_bundle_provided_lines}" @ONLY)

# stoke_bundle_relative_rpath(<out-var> <install dir of the executable>): "$ORIGIN/<path to lib>".
function(stoke_bundle_relative_rpath out_var destination)
  # Relative install dirs are relative to the prefix; any prefix gives the same relative path.
  set(root "/stoke-install-prefix")
  foreach(dir_var IN ITEMS destination CMAKE_INSTALL_LIBDIR)
    if(IS_ABSOLUTE "${${dir_var}}")
      message(FATAL_ERROR "stoke: a relocatable install needs relative install dirs; "
        "${dir_var} is '${${dir_var}}'. Pass a relative path (e.g. -DCMAKE_INSTALL_LIBDIR=lib).")
    endif()
  endforeach()
  file(RELATIVE_PATH to_lib "${root}/${destination}" "${root}/${CMAKE_INSTALL_LIBDIR}")
  set(${out_var} "$ORIGIN/${to_lib}" PARENT_SCOPE)
endfunction()

function(stoke_bundle_install_executable target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "DESTINATION" "")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_DESTINATION)
    message(FATAL_ERROR "stoke_bundle_install_executable(<target> DESTINATION <dir>): "
      "got '${target} ${ARGN}'")
  endif()
  stoke_bundle_relative_rpath(rpath "${arg_DESTINATION}")
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${rpath}")
  if(STOKE_BUNDLE_RUNTIME_DEPS)
    target_link_options(${target} PRIVATE "LINKER:--disable-new-dtags")
  endif()

  set(pre_exclude "")
  set(post_exclude "")
  foreach(name IN LISTS STOKE_BUNDLE_PROVIDED_LIBRARIES)
    list(APPEND pre_exclude "^${name}")         # the soname, before it is resolved
    list(APPEND post_exclude "/${name}[^/]*$")  # the resolved path
  endforeach()
  set(directories "")
  if(CUDAToolkit_LIBRARY_DIR)
    list(APPEND directories DIRECTORIES "${CUDAToolkit_LIBRARY_DIR}")
  endif()
  if(STOKE_BUNDLE_RUNTIME_DEPS)
    set(exclude_from_all "")
  else()
    set(exclude_from_all EXCLUDE_FROM_ALL)
  endif()
  # One dependency set per executable (install(TARGETS ... RUNTIME_DEPENDENCIES)): CMake 3.25.1
  # rejects the filters in install(RUNTIME_DEPENDENCY_SET <name> ...), which would share one set.
  # A library that several executables need is copied once and then found up to date.
  install(TARGETS ${target}
    RUNTIME_DEPENDENCIES
      PRE_EXCLUDE_REGEXES ${pre_exclude}
      POST_EXCLUDE_REGEXES ${post_exclude}
      ${directories}
    RUNTIME DESTINATION "${arg_DESTINATION}"
    LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT stoke_runtime_deps ${exclude_from_all})
endfunction()
