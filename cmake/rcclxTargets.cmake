# rcclx_target_backend(<target> [SOURCES...]): build <target> for RCCLX_BACKEND.
#  host: plain C++ (with -pthread).
#  hip:  the C++ compiler must be hipcc; sources compile as HIP for RCCLX_HIP_ARCHS.
#  cuda: sources compile as CUDA for RCCLX_CUDA_ARCHS.
if(RCCLX_BACKEND STREQUAL "cuda")
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  if(NOT TARGET rcclx::cuda)
    message(FATAL_ERROR "RCCLX_BACKEND=cuda but the CUDA toolkit was not found")
  endif()
elseif(RCCLX_BACKEND STREQUAL "hip")
  if(NOT TARGET rcclx::hip)
    message(FATAL_ERROR "RCCLX_BACKEND=hip needs find_package(hip) and find_package(rocprim) "
                        "(Debian: hipcc librocprim-dev) and CMAKE_CXX_COMPILER=hipcc")
  endif()
elseif(NOT RCCLX_BACKEND STREQUAL "host")
  message(FATAL_ERROR "RCCLX_BACKEND must be host, hip or cuda (got '${RCCLX_BACKEND}')")
endif()

function(rcclx_target_backend target)
  set(sources ${ARGN})
  if(RCCLX_BACKEND STREQUAL "cuda")
    set_source_files_properties(${sources} PROPERTIES LANGUAGE CUDA)
    set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${RCCLX_CUDA_ARCHS}")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
    target_link_libraries(${target} PRIVATE rcclx::cuda)
  elseif(RCCLX_BACKEND STREQUAL "hip")
    foreach(arch IN LISTS RCCLX_HIP_ARCHS)
      target_compile_options(${target} PRIVATE --offload-arch=${arch})
      target_link_options(${target} PRIVATE --offload-arch=${arch})
    endforeach()
    # The LPC wire format follows the build target (include/rcclx/lpc/config.hpp): FNUZ by default on
    # HIP (gfx942 converts it in hardware), OCP e4m3 for builds that target gfx950 and no gfx94x.
    if(RCCLX_HIP_ARCHS MATCHES "gfx950" AND NOT RCCLX_HIP_ARCHS MATCHES "gfx94")
      target_compile_definitions(${target} PRIVATE RCCLX_LPC_DEFAULT_FORMAT=e4m3)
    endif()
    target_link_libraries(${target} PRIVATE rcclx::hip)
  else()
    target_link_libraries(${target} PRIVATE rcclx::rcclx)
    target_compile_options(${target} PRIVATE -Wall -Wextra)
  endif()
endfunction()
