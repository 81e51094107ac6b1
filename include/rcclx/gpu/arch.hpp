// rcclx/gpu/arch.hpp: the GPU architecture families rcclx tunes for, and run-time queries of the
// current device's family and name (host code). Tuning tables (dda/select.hpp) are keyed on the family.
//
//   rcclx::gpu::arch a = rcclx::gpu::current_arch();   // e.g. arch::gfx942 on MI300X, arch::sm_90 on H100/H200
//   std::printf("%s on %s\n", rcclx::gpu::to_string(a), rcclx::gpu::device_name().c_str());
#pragma once

#include <cstring>
#include <string>

#include "runtime.hpp"

RCCLX_NAMESPACE_BEGIN
namespace gpu {

enum class arch {
  unknown,
  host,    // the host backend (ranks are threads)
  gfx90a,  // MI200 (MI210/MI250/MI250X)
  gfx942,  // MI300 (gfx940/gfx941/gfx942: MI300A/MI300X/MI325X)
  gfx950,  // MI350 (MI350X/MI355X)
  sm_80,   // A100
  sm_90,   // H100/H200
  sm_100,  // B200 and later
};

inline const char* to_string(arch a) {
  switch (a) {
    case arch::unknown: return "unknown";
    case arch::host: return "host";
    case arch::gfx90a: return "gfx90a";
    case arch::gfx942: return "gfx942";
    case arch::gfx950: return "gfx950";
    case arch::sm_80: return "sm_80";
    case arch::sm_90: return "sm_90";
    case arch::sm_100: return "sm_100";
  }
  return "unknown";
}

// Family of an AMD target name as the runtime reports it ("gfx942:sramecc+:xnack-").
inline arch arch_from_gfx_name(const char* name) {
  auto starts = [&](const char* p) { return std::strncmp(name, p, std::strlen(p)) == 0; };
  if (starts("gfx90a")) return arch::gfx90a;
  if (starts("gfx940") || starts("gfx941") || starts("gfx942")) return arch::gfx942;
  if (starts("gfx950")) return arch::gfx950;
  return arch::unknown;
}

// Family of a CUDA compute capability.
inline arch arch_from_compute_capability(int major, int minor) {
  (void)minor;
  if (major == 8) return arch::sm_80;
  if (major == 9) return arch::sm_90;
  if (major >= 10) return arch::sm_100;
  return arch::unknown;
}

namespace detail {
RCCLX_HOST_DEVICE constexpr arch arch_from_cuda_arch(int cuda_arch) {  // 900 -> sm_90
  return cuda_arch >= 1000 ? arch::sm_100 : cuda_arch >= 900 ? arch::sm_90 : cuda_arch >= 800 ? arch::sm_80 : arch::unknown;
}
template <class... More>
RCCLX_HOST_DEVICE constexpr int first_of(int a, More...) {
  return a;
}
}  // namespace detail

// This build's architecture, at compile time, and the same in every compilation pass (host and
// device passes of one file must agree on anything a template depends on): the host backend:
// arch::host; CUDA: the first of nvcc's targets (__CUDA_ARCH_LIST__, e.g. -arch=sm_90 -> sm_90);
// HIP: RCCLX_BUILD_ARCH when defined (rcclx_add_kernel_sources defines it for a build with one
// target: gfx90a, gfx942 or gfx950), else gfx942, the home platform. Compile-time tuning choices
// (dda::select_algorithm_v) default to it; current_arch() is the run-time query.
#if RCCLX_BACKEND_HOST
inline constexpr arch build_arch = arch::host;
#elif defined(RCCLX_BUILD_ARCH)
inline constexpr arch build_arch = arch::RCCLX_BUILD_ARCH;
#elif RCCLX_BACKEND_CUDA && defined(__CUDA_ARCH_LIST__)
inline constexpr arch build_arch = detail::arch_from_cuda_arch(detail::first_of(__CUDA_ARCH_LIST__));
#elif RCCLX_BACKEND_CUDA
inline constexpr arch build_arch = arch::sm_90;
#else
inline constexpr arch build_arch = arch::gfx942;
#endif

// Family of the current device (host code; one runtime query per call).
inline arch current_arch() {
#if RCCLX_BACKEND_HIP
  hipDeviceProp_t prop;
  check(hipGetDeviceProperties(&prop, current_device()), "hipGetDeviceProperties");
  return arch_from_gfx_name(prop.gcnArchName);
#elif RCCLX_BACKEND_CUDA
  const int d = current_device();
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d), "cudaDeviceGetAttribute");
  return arch_from_compute_capability(major, minor);
#else
  return arch::host;
#endif
}

// The current device's name (host code), e.g. for a report: "NVIDIA H100 80GB HBM3"; the host
// backend: "host CPU (threads as ranks)".
inline std::string device_name() {
#if RCCLX_BACKEND_HIP
  hipDeviceProp_t prop;
  check(hipGetDeviceProperties(&prop, current_device()), "hipGetDeviceProperties");
  return prop.name;
#elif RCCLX_BACKEND_CUDA
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, current_device()), "cudaGetDeviceProperties");
  return prop.name;
#else
  return "host CPU (threads as ranks)";
#endif
}

}  // namespace gpu
RCCLX_NAMESPACE_END
