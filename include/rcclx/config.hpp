// rcclx/config.hpp: backend detection, RCCLX_* macros, version and the versioned inline namespace.
// Every rcclx header includes this first; it includes no vendor header itself (gpu/ does that).
//
//   #include <rcclx/config.hpp>
//   static_assert(rcclx::version_major == 0);
//   #if RCCLX_BACKEND_HIP ... #elif RCCLX_BACKEND_CUDA ... #else /* host */ #endif
#pragma once

#define RCCLX_VERSION_MAJOR 0
#define RCCLX_VERSION_MINOR 1
#define RCCLX_VERSION_PATCH 0

// ---------------------------------------------------------------------------------------------
// Backend. Exactly one of RCCLX_BACKEND_{HIP,CUDA,HOST} is 1.
//  - HIP:  compiled by hipcc / clang -x hip for AMD (the home platform).
//  - CUDA: compiled by nvcc (or clang -x cuda).
//  - HOST: any other C++17 compiler; every RCCLX_HOST_DEVICE algorithm runs as plain C++,
//          a rank is a std::thread and "device memory" is host (or POSIX shared) memory.
// A translation unit may force the host backend with -DRCCLX_FORCE_HOST=1 (e.g. a .cpp file
// compiled by nvcc that wants the threaded reference implementation).
// ---------------------------------------------------------------------------------------------
#if defined(RCCLX_FORCE_HOST) && RCCLX_FORCE_HOST
#  define RCCLX_BACKEND_HIP 0
#  define RCCLX_BACKEND_CUDA 0
#  define RCCLX_BACKEND_HOST 1
#elif defined(__HIP__) || defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
#  define RCCLX_BACKEND_HIP 1
#  define RCCLX_BACKEND_CUDA 0
#  define RCCLX_BACKEND_HOST 0
#elif defined(__CUDACC__)
#  define RCCLX_BACKEND_HIP 0
#  define RCCLX_BACKEND_CUDA 1
#  define RCCLX_BACKEND_HOST 0
#else
#  define RCCLX_BACKEND_HIP 0
#  define RCCLX_BACKEND_CUDA 0
#  define RCCLX_BACKEND_HOST 1
#endif

#define RCCLX_BACKEND_GPU (RCCLX_BACKEND_HIP || RCCLX_BACKEND_CUDA)

// True while compiling device code (the device pass of a GPU compiler).
#if (RCCLX_BACKEND_HIP && defined(__HIP_DEVICE_COMPILE__)) || (RCCLX_BACKEND_CUDA && defined(__CUDA_ARCH__))
#  define RCCLX_DEVICE_COMPILE 1
#else
#  define RCCLX_DEVICE_COMPILE 0
#endif

#if RCCLX_BACKEND_GPU
#  define RCCLX_HOST_DEVICE __host__ __device__
#  define RCCLX_DEVICE __device__
#  define RCCLX_GLOBAL __global__
#  define RCCLX_SHARED __shared__
#else
#  define RCCLX_HOST_DEVICE
#  define RCCLX_DEVICE
#  define RCCLX_GLOBAL
#  if defined(RCCLX_EMULATE_THREADS) && RCCLX_EMULATE_THREADS
// Emulated threads: one object per OS thread, which runs one block at a time (its threads are
// fibers), so one per block, as __shared__ memory (gpu::block_shared is the portable spelling).
#    define RCCLX_SHARED static thread_local
#  else
#    define RCCLX_SHARED
#  endif
#endif

#if defined(_MSC_VER)
#  define RCCLX_FORCEINLINE __forceinline
#  define RCCLX_NOINLINE __declspec(noinline)
#else
#  if RCCLX_BACKEND_HOST
// The host backend runs the algorithms for correctness (ranks as threads): the compiler's own
// inlining is enough there, and forcing every device helper inline multiplies host compile time.
#    define RCCLX_FORCEINLINE inline
#  else
#    define RCCLX_FORCEINLINE inline __attribute__((always_inline))
#  endif
// A real call: the callee's registers are allocated on their own, so a phase of a kernel (e.g. the
// reduction after a GEMM main loop) cannot make the other spill.
#  define RCCLX_NOINLINE __attribute__((noinline))
#endif

#if defined(__clang__) || defined(__GNUC__)
#  define RCCLX_RESTRICT __restrict__
#  define RCCLX_LIKELY(x) __builtin_expect(!!(x), 1)
#  define RCCLX_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#  define RCCLX_RESTRICT
#  define RCCLX_LIKELY(x) (x)
#  define RCCLX_UNLIKELY(x) (x)
#endif

// Architecture of the current device pass (0 on host passes).
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE && (defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__))
#  define RCCLX_ARCH_GFX94X 1
#else
#  define RCCLX_ARCH_GFX94X 0
#endif
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE && defined(__gfx950__)
#  define RCCLX_ARCH_GFX950 1
#else
#  define RCCLX_ARCH_GFX950 0
#endif
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
#  define RCCLX_CUDA_ARCH __CUDA_ARCH__
#else
#  define RCCLX_CUDA_ARCH 0
#endif

// Emulated threads (docs/emulated_peers.md): with RCCLX_EMULATE_THREADS=1 the host backend runs
// every thread of every block (a fiber each, gpu/emulated_block.hpp): a kernel launched through
// testing::launch_emulated with its GPU block size gets a gpu::block_group of that many threads,
// block-wide syncs, warp shuffles and votes over RCCLX_EMULATE_WARP_SIZE lanes (32, or 64 for code
// written for AMD wavefronts), and errors for the misuses a GPU hangs or faults on. Default 0: a
// block is one thread (today's fast tests). No effect on GPU backends. Part of the inline namespace.
#ifndef RCCLX_EMULATE_THREADS
#  define RCCLX_EMULATE_THREADS 0
#endif
#if !RCCLX_BACKEND_HOST
#  undef RCCLX_EMULATE_THREADS
#  define RCCLX_EMULATE_THREADS 0
#endif
// Do blocks have their GPU thread counts? 1 on GPU backends and on the host backend with emulated
// threads (the ready-made kernels' launchers then pick their GPU block sizes, and their bodies get
// a gpu::block_group of that many threads); 0 with the host backend's one-thread blocks.
#define RCCLX_GPU_BLOCKS (RCCLX_BACKEND_GPU || RCCLX_EMULATE_THREADS)
#ifndef RCCLX_EMULATE_WARP_SIZE
#  define RCCLX_EMULATE_WARP_SIZE 32
#endif
#if RCCLX_EMULATE_WARP_SIZE != 32 && RCCLX_EMULATE_WARP_SIZE != 64
#  error "RCCLX_EMULATE_WARP_SIZE must be 32 (NVIDIA warps) or 64 (AMD wavefronts)"
#endif

// Warp (wavefront) width of the current pass. AMD gfx9 (MI200/MI300/MI350) runs 64 lanes; the
// host pass of a HIP build must agree with the device pass, so it assumes 64 too.
#if RCCLX_BACKEND_HIP
#  if defined(__AMDGCN_WAVEFRONT_SIZE)
#    define RCCLX_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#  else
#    define RCCLX_WARP_SIZE 64
#  endif
#elif RCCLX_BACKEND_CUDA
#  define RCCLX_WARP_SIZE 32
#elif RCCLX_EMULATE_THREADS
#  define RCCLX_WARP_SIZE RCCLX_EMULATE_WARP_SIZE
#else
#  define RCCLX_WARP_SIZE 1
#endif

// Scope of the barrier flag accesses on AMD. System scope is required: peers are other GPUs
// (or another process on this one) and their flag writes travel over xGMI/PCIe. This macro
// exists only so the ISA check in tests/compile can prove that it detects a weaker scope;
// never change it in real code.
#ifndef RCCLX_DETAIL_HIP_FLAG_SCOPE
#  define RCCLX_DETAIL_HIP_FLAG_SCOPE __HIP_MEMORY_SCOPE_SYSTEM
#endif

// Checked mode (docs/checks.md): every collective's arguments that must agree across ranks travel
// with its first flags and are compared; a missing tile_allreduce::finish() and a tile map that does
// not fit its tiles are caught too. Each turns into an error record instead of wrong results.
// Default: on without NDEBUG (Debug builds), off with it (Release). Define RCCLX_CHECKS=0 or 1 to
// choose. It is part of the inline namespace, so checked and unchecked code can share a program
// (each with its own copy of rcclx) but never mix types: all ranks of a job must use one setting.
#ifndef RCCLX_CHECKS
#  if defined(NDEBUG)
#    define RCCLX_CHECKS 0
#  else
#    define RCCLX_CHECKS 1
#  endif
#endif

#define RCCLX_DETAIL_CAT2(a, b) a##b
#define RCCLX_DETAIL_CAT(a, b) RCCLX_DETAIL_CAT2(a, b)

// The inline namespace carries the version, the backend and the checked mode, so two copies of rcclx (or one TU
// built for CUDA and another for the host backend) can live in one program without ODR clashes.
#if RCCLX_BACKEND_HIP
#  define RCCLX_DETAIL_BACKEND_TAG hip
#elif RCCLX_BACKEND_CUDA
#  define RCCLX_DETAIL_BACKEND_TAG cuda
#else
#  define RCCLX_DETAIL_BACKEND_TAG host
#endif
#if RCCLX_CHECKS
#  define RCCLX_DETAIL_CHECKS_TAG _checked
#else
#  define RCCLX_DETAIL_CHECKS_TAG
#endif
#if RCCLX_EMULATE_THREADS && RCCLX_EMULATE_WARP_SIZE == 64
#  define RCCLX_DETAIL_THREADS_TAG _threads64
#elif RCCLX_EMULATE_THREADS
#  define RCCLX_DETAIL_THREADS_TAG _threads
#else
#  define RCCLX_DETAIL_THREADS_TAG
#endif
#define RCCLX_ABI_NAMESPACE                                                                      \
  RCCLX_DETAIL_CAT(RCCLX_DETAIL_CAT(RCCLX_DETAIL_CAT(RCCLX_DETAIL_CAT(RCCLX_DETAIL_CAT(v, RCCLX_VERSION_MAJOR), \
                                                                      RCCLX_DETAIL_CAT(_, RCCLX_VERSION_MINOR)), \
                                                     RCCLX_DETAIL_CAT(_, RCCLX_DETAIL_BACKEND_TAG)),             \
                                    RCCLX_DETAIL_CHECKS_TAG),                                                    \
                   RCCLX_DETAIL_THREADS_TAG)

#define RCCLX_NAMESPACE_BEGIN                                                                    \
  namespace rcclx {                                                                              \
  inline namespace RCCLX_ABI_NAMESPACE {
#define RCCLX_NAMESPACE_END                                                                      \
  }                                                                                              \
  }

RCCLX_NAMESPACE_BEGIN

inline constexpr int version_major = RCCLX_VERSION_MAJOR;
inline constexpr int version_minor = RCCLX_VERSION_MINOR;
inline constexpr int version_patch = RCCLX_VERSION_PATCH;

enum class backend { hip, cuda, host };

#if RCCLX_BACKEND_HIP
inline constexpr backend current_backend = backend::hip;
#elif RCCLX_BACKEND_CUDA
inline constexpr backend current_backend = backend::cuda;
#else
inline constexpr backend current_backend = backend::host;
#endif

// "HIP", "CUDA" or "host (threads)": for messages.
constexpr const char* backend_name(backend b = current_backend) {
  return b == backend::hip ? "HIP" : b == backend::cuda ? "CUDA" : "host (threads)";
}

// Is this translation unit built in checked mode (RCCLX_CHECKS)?
inline constexpr bool checks = RCCLX_CHECKS != 0;

// Does the host backend run every thread of a block (RCCLX_EMULATE_THREADS)? False on GPU backends.
inline constexpr bool emulate_threads = RCCLX_EMULATE_THREADS != 0;

// Largest rank count any rcclx collective supports (one node of MI300X/MI350 or H100/H200 is 8;
// 16 covers two-socket and future parts).
inline constexpr int max_ranks = 16;

RCCLX_NAMESPACE_END
