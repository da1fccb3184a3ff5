# What the install checks (cmake -P scripts) share. Include it after setting CHECK_NAME (used in
# messages, e.g. "install check") and CHECK_SCRIPT (the script's file name).

# require_vars(<var>...): each must be given with -D and not be empty.
function(require_vars)
  foreach(var IN LISTS ARGN)
    if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
      message(FATAL_ERROR "${CHECK_SCRIPT}: -D${var}=... is required")
    endif()
  endforeach()
endfunction()

# run(<step> <command>...): runs the command, stops with its output if it fails; the output is in
# last_output.
function(run step)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE result
    OUTPUT_VARIABLE output
    ERROR_VARIABLE output)
  if(NOT result STREQUAL "0")
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "${CHECK_NAME}: ${step} failed (${result})\n  command: ${command}\n${output}")
  endif()
  set(last_output "${output}" PARENT_SCOPE)
endfunction()

# `--config CONFIG` for cmake --build/--install when a configuration was given.
set(config_args "")
if(NOT "${CONFIG}" STREQUAL "")
  set(config_args --config "${CONFIG}")
endif()
