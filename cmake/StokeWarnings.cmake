# stoke_warnings: the project's warning flags, per language, as an INTERFACE target.
#
# Every stoke target links it PRIVATE, wrapped as $<BUILD_INTERFACE:stoke_warnings>, so the flags
# apply to stoke's own sources and never leak to users of the installed package.
# STOKE_WARNINGS_AS_ERRORS adds -Werror.

add_library(stoke_warnings INTERFACE)

set(stoke_cxx_warnings
  -Wall
  -Wextra
  -Wpedantic
  -Wshadow
  -Wnon-virtual-dtor
  -Wcast-align
  -Wunused
  -Woverloaded-virtual
  -Wnull-dereference
  -Wdouble-promotion
  -Wformat=2
  -Wimplicit-fallthrough)
# nvcc passes host-compiler warnings through -Xcompiler; the C++-only ones above are not all
# meaningful for the code nvcc generates, so device code gets the basic set.
set(stoke_cuda_warnings -Xcompiler=-Wall,-Wextra)

# GCC 12 at -O3 reports -Wrestrict in libstdc++'s own std::string code (GCC bug 105651, fixed in
# 13), from innocent string concatenation; it is off there.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND stoke_cxx_warnings -Wno-restrict)
endif()

# Sanitizer instrumentation changes GCC's flow analysis: GCC 12 then reports -Wmaybe-uninitialized
# inside std::optional in code that is fine in the plain build (e.g. Completion<Computed<R>>).
if(STOKE_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND stoke_cxx_warnings -Wno-maybe-uninitialized)
endif()

# GCC warns (-Wsubobject-linkage) when a class with linkage has a member of a file-local type and
# is defined outside the main source file, as a header's class would be -- and as a .cpp's Impl is
# inside a unity batch (STOKE_UNITY_BUILD), although each .cpp is still compiled once there and the
# warning's premise (one class defined in many files) does not hold. So it is off in unity builds.
if(STOKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND stoke_cxx_warnings -Wno-subobject-linkage)
endif()

if(STOKE_WARNINGS_AS_ERRORS)
  list(APPEND stoke_cxx_warnings -Werror)
  list(APPEND stoke_cuda_warnings -Werror=all-warnings -Xcompiler=-Werror)
endif()

target_compile_options(stoke_warnings INTERFACE
  "$<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang,AppleClang>:${stoke_cxx_warnings}>"
  "$<$<COMPILE_LANG_AND_ID:CUDA,NVIDIA>:${stoke_cuda_warnings}>")
