# stoke_default_cuda_architectures(<out-var>)
#
# The CUDA architectures a build makes device code for when the user names none
# (CMAKE_CUDA_ARCHITECTURES or CUDAARCHS): the machine's own GPUs, as nvidia-smi reports their
# compute capabilities (machine code for each, plus PTX for the newest); with no GPU to be seen,
# one architecture as PTX only (compute_80: Ampere and every later GPU compile it at load time),
# which is the cheapest build that still compiles every kernel. Builds meant for other machines
# name their architectures (scripts/make-bundle.sh: 90).
include_guard(GLOBAL)

function(stoke_default_cuda_architectures out_var)
  set(architectures "")
  find_program(stoke_nvidia_smi nvidia-smi NO_CACHE)
  if(stoke_nvidia_smi)
    execute_process(COMMAND "${stoke_nvidia_smi}" --query-gpu=compute_cap --format=csv,noheader
      RESULT_VARIABLE result OUTPUT_VARIABLE capabilities ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 30)
    if(result EQUAL 0)
      string(REPLACE "\n" ";" capabilities "${capabilities}")
      foreach(capability IN LISTS capabilities)
        string(REGEX REPLACE "[^0-9]" "" capability "${capability}")
        if(capability MATCHES "^[0-9]+$" AND NOT "${capability}-real" IN_LIST architectures)
          list(APPEND architectures "${capability}-real")
        endif()
      endforeach()
    endif()
  endif()
  if(architectures)
    list(SORT architectures COMPARE NATURAL)
    list(POP_BACK architectures newest)
    string(REPLACE "-real" "" newest "${newest}")
    list(APPEND architectures "${newest}")  # machine code and PTX
    message(STATUS "stoke: CUDA device code for this machine's GPUs (${architectures}); "
      "-DCMAKE_CUDA_ARCHITECTURES=... builds for others")
  else()
    set(architectures "80-virtual")
    message(STATUS "stoke: no GPU seen (nvidia-smi); CUDA device code as compute_80 PTX only, "
      "which GPUs from Ampere on compile when they load it (-DCMAKE_CUDA_ARCHITECTURES=... to choose)")
  endif()
  set(${out_var} "${architectures}" PARENT_SCOPE)
endfunction()
