# stoke_check_layers(<target> FORBID <name>...)
#
# Fails the configure when <target> links any of the named targets or libraries, directly or
# through what it links (its LINK_LIBRARIES and, recursively, their INTERFACE_LINK_LIBRARIES:
# what a static library drags into every executable that links it). Aliases count as the target
# they name; $<LINK_ONLY:x> and $<BUILD_INTERFACE:x>, nested too, count as x. This is how the layering of
# docs/architecture.md ("arrows point down only") is kept: e.g. stoke::nn must not reach stoke::nodes or OpenCV.
include_guard(GLOBAL)

# The names <item> resolves to: the real target name for an alias, the wrapped name for the two
# generator expressions above, nothing for other generator expressions and link flags.
function(_stoke_layers_unwrap item out)
  while(item MATCHES "^\\$<(LINK_ONLY|BUILD_INTERFACE):(.*)>$")
    set(item "${CMAKE_MATCH_2}")
  endwhile()
  if(item MATCHES "^\\$<" OR item MATCHES "^-")
    set(${out} "" PARENT_SCOPE)
    return()
  endif()
  if(TARGET "${item}")
    get_target_property(aliased "${item}" ALIASED_TARGET)
    if(aliased)
      set(item "${aliased}")
    endif()
  endif()
  set(${out} "${item}" PARENT_SCOPE)
endfunction()

function(stoke_check_layers target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "FORBID")
  set(forbidden "")
  foreach(name IN LISTS arg_FORBID)
    _stoke_layers_unwrap("${name}" name)
    list(APPEND forbidden "${name}")
  endforeach()

  # Breadth-first over the link graph, remembering how each name was reached for the message.
  set(seen "${target}")
  set(queue "${target}")
  set(via_${target} "${target}")
  while(queue)
    list(POP_FRONT queue current)
    if(NOT TARGET "${current}")
      continue()
    endif()
    set(links "")
    get_target_property(type "${current}" TYPE)
    if(current STREQUAL target AND NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(direct "${current}" LINK_LIBRARIES)
      if(direct)
        list(APPEND links ${direct})
      endif()
    endif()
    get_target_property(interface "${current}" INTERFACE_LINK_LIBRARIES)
    if(interface)
      list(APPEND links ${interface})
    endif()
    foreach(link IN LISTS links)
      _stoke_layers_unwrap("${link}" name)
      if(name STREQUAL "" OR name IN_LIST seen)
        continue()
      endif()
      list(APPEND seen "${name}")
      set(via_${name} "${via_${current}} -> ${name}")
      if(name IN_LIST forbidden)
        message(FATAL_ERROR "stoke: layering: ${target} must not link ${name}, but does: ${via_${name}}. "
          "See docs/architecture.md for what each layer may use.")
      endif()
      list(APPEND queue "${name}")
    endforeach()
  endwhile()
endfunction()

# stoke_check_sources(<what> DIRECTORY <dir> FORBID <layer>...)
#
# Fails the configure when a source file directly in <dir> (.cpp, .hpp, .h, .cu) includes a header
# of a forbidden layer (<stoke/<layer>/...>) or names its namespace (<layer>::), naming the file and
# the line. For code that links a layer through another and must speak only the other's API: the
# Python module links stoke::train, which links stoke::nodes, so the link check alone cannot see
# python/ reach past train into nodes.
function(stoke_check_sources what)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "DIRECTORY" "FORBID")
  file(GLOB sources CONFIGURE_DEPENDS "${arg_DIRECTORY}/*.cpp" "${arg_DIRECTORY}/*.hpp" "${arg_DIRECTORY}/*.h"
       "${arg_DIRECTORY}/*.cu")
  foreach(layer IN LISTS arg_FORBID)
    foreach(source IN LISTS sources)
      file(STRINGS "${source}" hits REGEX "stoke/${layer}/|(^|[^A-Za-z0-9_])${layer}::")
      if(hits)
        list(GET hits 0 first)
        string(STRIP "${first}" first)
        message(FATAL_ERROR "stoke: layering: ${what} must not use ${layer} directly, but ${source} does: "
          "'${first}'. See docs/architecture.md for what each layer may use.")
      endif()
    endforeach()
  endforeach()
endfunction()
