// tests/support/catch.hpp: one include for Catch2 v2 (Debian bookworm, CI) and v3 (GPU machine).
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
#  include <catch2/catch_approx.hpp>
#  include <catch2/catch_template_test_macros.hpp>
#  include <catch2/catch_test_macros.hpp>
#  include <catch2/generators/catch_generators.hpp>
#  include <catch2/matchers/catch_matchers_string.hpp>
#  define RCCLX_CATCH_V3 1
using Catch::Approx;  // (Catch2 v2 spells it at global scope)
#else
#  include <catch2/catch.hpp>
#  define RCCLX_CATCH_V3 0
#endif
// A matcher of messages that contain `s` (Catch2 v3 renamed Contains to ContainsSubstring).
#if RCCLX_CATCH_V3
#  define RCCLX_CONTAINS(s) Catch::Matchers::ContainsSubstring(s)
#else
#  define RCCLX_CONTAINS(s) Catch::Matchers::Contains(s)
#endif

// Tests that need a GPU call this first: it skips (visibly) when the build is for a GPU but none
// is present. Host-backend builds always run.
#include <rcclx/gpu/runtime.hpp>
#define RCCLX_REQUIRE_DEVICE_OR_SKIP()                                                     \
  do {                                                                                     \
    if (::rcclx::current_backend != ::rcclx::backend::host && ::rcclx::gpu::device_count() == 0) { \
      WARN("no GPU present: skipping " << Catch::getResultCapture().getCurrentTestName()); \
      return;                                                                              \
    }                                                                                      \
  } while (0)

#include <cstdint>
#include <cstdlib>
namespace rcclx_test {
// Barrier bound of the worlds where a test leaves a rank out on purpose: short, so the expected
// timeout is quick, but not so short that the call after reset() times out on a loaded 2-core
// machine under ThreadSanitizer (a rank's thread can wait that long for a core there).
#if defined(__SANITIZE_THREAD__)
inline constexpr bool under_thread_sanitizer = true;
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
inline constexpr bool under_thread_sanitizer = true;
#  else
inline constexpr bool under_thread_sanitizer = false;
#  endif
#else
inline constexpr bool under_thread_sanitizer = false;
#endif
#if defined(__SANITIZE_THREAD__)
inline constexpr std::uint64_t absent_timeout_ns = 2000ull * 1000 * 1000;
#else
inline constexpr std::uint64_t absent_timeout_ns = 200ull * 1000 * 1000;
#endif
#if RCCLX_BACKEND_CUDA
// Every test binary loads its kernels eagerly (unless CUDA_MODULE_LOADING is set already). With
// CUDA's default lazy loading, a rank's first launch of a kernel while another rank's kernel
// spin-waits in the same process waits for that kernel, which waits for the rank: the launcher tests
// (ranks launched one by one, each on its own stream) timed out on an H200 and pass with EAGER.
// Set before main, so before the CUDA runtime starts. docs/emulated_peers.md has the same advice.
inline const bool eager_module_loading = [] {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  return true;
}();
#endif
// Built with ThreadSanitizer (g++ defines __SANITIZE_THREAD__): tests sample their matrices.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool tsan = true;
#else
inline constexpr bool tsan = false;
#endif
// RCCLX_TEST_QUICK=1 (compute-sanitizer runs, which slow kernels by orders of magnitude): smaller
// matrices.
inline bool quick() {
  const char* q = std::getenv("RCCLX_TEST_QUICK");
  return q && q[0] == '1';
}
// Rounds/iterations for a test: `full` normally, full / 100 (at least 1) in quick mode.
inline int scaled(int full) { return quick() ? (full / 100 > 0 ? full / 100 : 1) : full; }
}  // namespace rcclx_test
