# rcclx_target_backend(<target> [SOURCES...]): build one of rcclx's own tests, examples or benchmarks
# for RCCLX_BACKEND (host, hip or cuda) with the installed helper rcclx_add_kernel_sources
# (cmake/rcclxKernelSources.cmake), plus the project's warning flags.
if(RCCLX_BACKEND STREQUAL "cuda")
  enable_language(CUDA)  # file scope: CMake does not allow it inside a function
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
elseif(NOT RCCLX_BACKEND MATCHES "^(host|hip)$")
  message(FATAL_ERROR "RCCLX_BACKEND must be host, hip or cuda (got '${RCCLX_BACKEND}')")
endif()

function(rcclx_target_backend target)
  if(RCCLX_BACKEND STREQUAL "cuda")
    rcclx_add_kernel_sources(${target} BACKEND cuda SOURCES ${ARGN} ARCHS ${RCCLX_CUDA_ARCHS})
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall>)
  elseif(RCCLX_BACKEND STREQUAL "hip")
    rcclx_add_kernel_sources(${target} BACKEND hip SOURCES ${ARGN} ARCHS ${RCCLX_HIP_ARCHS})
  else()
    rcclx_add_kernel_sources(${target} BACKEND host SOURCES ${ARGN})
    target_compile_options(${target} PRIVATE -Wall -Wextra)
  endif()
endfunction()
