# rcclx_add_kernel_sources(<target> BACKEND <host|hip|cuda> [SOURCES <file>...] [ARCHS <arch>...]
#                          [CHECKS <ON|OFF>])
#
# Compiles <target>'s kernel sources (SOURCES, default: every source of the target) for one backend
# and links the matching rcclx target. Installed with the package and available after
# find_package(rcclx) or add_subdirectory(rcclx):
#
#   project(my_kernels LANGUAGES CXX CUDA)                        # CUDA: the project enables CUDA
#   find_package(rcclx CONFIG REQUIRED)
#   add_executable(my_app main.cpp my_kernels.cpp)
#   rcclx_add_kernel_sources(my_app BACKEND cuda ARCHS 90)        # .cpp files compile as CUDA
#
#   host: plain C++ (ranks as threads); links rcclx::rcclx.
#   cuda: the sources compile as CUDA (the project must have enabled the CUDA language: CMake only
#         allows that at file scope) for ARCHS (CUDA_ARCHITECTURES; default: the target's, else
#         CMAKE_CUDA_ARCHITECTURES); links rcclx::cuda (CUDA::cudart).
#   hip:  with CMake's HIP language enabled, the sources compile as HIP for ARCHS (HIP_ARCHITECTURES);
#         otherwise the C++ compiler must be hipcc (or a HIP-capable clang) and the sources compile as
#         C++ with --offload-arch=<arch> for each of ARCHS (default gfx942). Links rcclx::hip
#         (hip::device + rocPRIM: find_package(hip) and find_package(rocprim)). With one target, its
#         family is defined as RCCLX_BUILD_ARCH (gpu::build_arch: compile-time tuning choices).
# CHECKS: the checked mode (docs/checks.md) for the whole target: RCCLX_CHECKS=1 (ON) or 0 (OFF).
# Default: the build type decides (on without NDEBUG, as in Debug; off in Release). Turn it ON for
# the unit tests of your kernels on emulated peers. Every rank of a job must use the same setting.
# The vendor packages are looked for only when a target asks for that backend, so a host-only
# consumer's configure never searches for HIP or CUDA.
include_guard(GLOBAL)

# rcclx_backend_target(<hip|cuda> <out-var>): rcclx::hip / rcclx::cuda, found on first use; sets
# <out-var> to the target name, or to "" when its runtime is not found.
function(rcclx_backend_target backend out)
  # The vendor targets must be visible from every directory that links rcclx::hip / rcclx::cuda,
  # not only from the one that happened to look first (CMake 3.24+).
  set(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL ON)
  if(backend STREQUAL "cuda")
    if(NOT TARGET rcclx::cuda)
      find_package(CUDAToolkit QUIET)
      if(TARGET CUDA::cudart)
        add_library(rcclx_cuda INTERFACE IMPORTED GLOBAL)
        target_link_libraries(rcclx_cuda INTERFACE rcclx::rcclx CUDA::cudart)
        add_library(rcclx::cuda ALIAS rcclx_cuda)
      endif()
    endif()
    set(name rcclx::cuda)
  elseif(backend STREQUAL "hip")
    if(NOT TARGET rcclx::hip)
      find_package(hip CONFIG QUIET)
      find_package(rocprim CONFIG QUIET)
      if(TARGET hip::device AND TARGET roc::rocprim_hip)
        add_library(rcclx_hip INTERFACE IMPORTED GLOBAL)
        target_link_libraries(rcclx_hip INTERFACE rcclx::rcclx hip::device roc::rocprim_hip)
        add_library(rcclx::hip ALIAS rcclx_hip)
      endif()
    endif()
    set(name rcclx::hip)
  else()
    message(FATAL_ERROR "rcclx_backend_target: backend must be hip or cuda (got '${backend}')")
  endif()
  if(TARGET ${name})
    set(${out} ${name} PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

function(rcclx_add_kernel_sources target)
  cmake_parse_arguments(A "" "BACKEND;CHECKS" "SOURCES;ARCHS" ${ARGN})
  if(A_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "rcclx_add_kernel_sources(${target}): unknown arguments '${A_UNPARSED_ARGUMENTS}'")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "rcclx_add_kernel_sources: '${target}' is not a target")
  endif()
  if(NOT A_BACKEND)
    message(FATAL_ERROR "rcclx_add_kernel_sources(${target}): BACKEND host, hip or cuda is required")
  endif()
  if(DEFINED A_CHECKS)
    if(A_CHECKS)
      target_compile_definitions(${target} PRIVATE RCCLX_CHECKS=1)
    else()
      target_compile_definitions(${target} PRIVATE RCCLX_CHECKS=0)
    endif()
  endif()
  set(sources ${A_SOURCES})
  if(NOT sources)
    get_target_property(sources ${target} SOURCES)
  endif()
  list(FILTER sources INCLUDE REGEX "\\.(c|cc|cpp|cxx|cu|hip)$")  # headers keep their language (none)
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)

  if(A_BACKEND STREQUAL "host")
    target_link_libraries(${target} PRIVATE rcclx::rcclx)
  elseif(A_BACKEND STREQUAL "cuda")
    if(NOT "CUDA" IN_LIST languages)
      message(FATAL_ERROR "rcclx_add_kernel_sources(${target} BACKEND cuda): the CUDA language is not enabled; "
                          "add CUDA to project(... LANGUAGES CXX CUDA) or call enable_language(CUDA) first")
    endif()
    rcclx_backend_target(cuda lib)
    if(NOT lib)
      message(FATAL_ERROR "rcclx_add_kernel_sources(${target} BACKEND cuda): the CUDA toolkit (CUDA::cudart) was "
                          "not found")
    endif()
    set_source_files_properties(${sources} PROPERTIES LANGUAGE CUDA)
    if(A_ARCHS)
      set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${A_ARCHS}")
    endif()
    set_property(TARGET ${target} PROPERTY CUDA_STANDARD 17)
    # rcclx's HOST_DEVICE templates call constexpr helpers from device code.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
    target_link_libraries(${target} PRIVATE ${lib})
  elseif(A_BACKEND STREQUAL "hip")
    rcclx_backend_target(hip lib)
    if(NOT lib)
      message(FATAL_ERROR "rcclx_add_kernel_sources(${target} BACKEND hip): HIP and rocPRIM were not found "
                          "(find_package(hip) and find_package(rocprim); Debian: hipcc librocprim-dev)")
    endif()
    set(archs ${A_ARCHS})
    if("HIP" IN_LIST languages)
      set_source_files_properties(${sources} PROPERTIES LANGUAGE HIP)
      if(archs)
        set_target_properties(${target} PROPERTIES HIP_ARCHITECTURES "${archs}")
      endif()
    else()
      if(NOT CMAKE_CXX_COMPILER MATCHES "(hipcc|clang)")
        message(FATAL_ERROR "rcclx_add_kernel_sources(${target} BACKEND hip): the C++ compiler is "
                            "'${CMAKE_CXX_COMPILER}'; configure with -DCMAKE_CXX_COMPILER=hipcc or enable the HIP "
                            "language")
      endif()
      if(NOT archs)
        set(archs gfx942)
      endif()
      foreach(arch IN LISTS archs)
        target_compile_options(${target} PRIVATE --offload-arch=${arch})
        target_link_options(${target} PRIVATE --offload-arch=${arch})
      endforeach()
    endif()
    # One target: its family is this build's architecture at compile time (gpu::build_arch, the
    # default of dda::select_algorithm_v); with several, gfx942 (the home platform).
    list(LENGTH archs n_archs)
    if(n_archs EQUAL 1)
      if(archs MATCHES "^gfx94[0-2]")
        target_compile_definitions(${target} PRIVATE RCCLX_BUILD_ARCH=gfx942)
      elseif(archs MATCHES "^gfx90a")
        target_compile_definitions(${target} PRIVATE RCCLX_BUILD_ARCH=gfx90a)
      elseif(archs MATCHES "^gfx950")
        target_compile_definitions(${target} PRIVATE RCCLX_BUILD_ARCH=gfx950)
      endif()
    endif()
    # The LPC wire format follows the build target (lpc/config.hpp): FNUZ by default on HIP (gfx942
    # converts it in hardware), OCP e4m3 for builds that target gfx950 and no gfx94x.
    if(archs MATCHES "gfx950" AND NOT archs MATCHES "gfx94")
      target_compile_definitions(${target} PRIVATE RCCLX_LPC_DEFAULT_FORMAT=e4m3)
    endif()
    target_link_libraries(${target} PRIVATE ${lib})
  else()
    message(FATAL_ERROR "rcclx_add_kernel_sources(${target}): BACKEND must be host, hip or cuda (got "
                        "'${A_BACKEND}')")
  endif()
endfunction()
