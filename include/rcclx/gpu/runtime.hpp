// rcclx/gpu/runtime.hpp: the host-side runtime calls rcclx needs, for HIP, CUDA and the host
// backend, behind one set of names in rcclx::gpu. Host code only (never call from a kernel).
//
//   void* buf = rcclx::gpu::device_malloc(bytes);
//   void* pad = rcclx::gpu::signal_malloc(bytes);   // uncached on AMD, zero-filled
//   rcclx::gpu::copy(dst, src, bytes);              // any direction (unified addressing)
//   rcclx::gpu::device_free(buf);
//   auto range = rcclx::gpu::find_allocation(ptr);  // GPU: allocation base + size, for IPC handles
//   auto id = rcclx::gpu::allocation_id(ptr);       // GPU: the allocation's identity (never reused)
//
// Errors become rcclx::error(errc::runtime) with the call and the vendor's message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "../core/error.hpp"
#include "vendor.hpp"

RCCLX_NAMESPACE_BEGIN
namespace gpu {

#if RCCLX_BACKEND_HIP
using stream_t = hipStream_t;
using runtime_result = hipError_t;
#elif RCCLX_BACKEND_CUDA
using stream_t = cudaStream_t;
using runtime_result = cudaError_t;
#else
using stream_t = void*;  // host backend: work runs synchronously on the calling thread
using runtime_result = int;
#endif

// Opaque, fixed-size, trivially-copyable IPC handle (64 bytes on both vendors).
struct ipc_handle {
  char bytes[64];
};

inline void check(runtime_result r, const char* what) {
#if RCCLX_BACKEND_HIP
  if (r != hipSuccess) throw error(errc::runtime, std::string(what) + " failed: " + hipGetErrorString(r));
#elif RCCLX_BACKEND_CUDA
  if (r != cudaSuccess) throw error(errc::runtime, std::string(what) + " failed: " + cudaGetErrorString(r));
#else
  if (r != 0) throw error(errc::runtime, std::string(what) + " failed with " + std::to_string(r));
#endif
}

// Checks the last launch (call right after a <<<>>> launch).
inline void check_launch(const char* what) {
#if RCCLX_BACKEND_HIP
  check(hipGetLastError(), what);
#elif RCCLX_BACKEND_CUDA
  check(cudaGetLastError(), what);
#else
  (void)what;
#endif
}

inline void* device_malloc(std::size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) bytes = 16;
#if RCCLX_BACKEND_HIP
  check(hipMalloc(&p, bytes), "hipMalloc");
#elif RCCLX_BACKEND_CUDA
  check(cudaMalloc(&p, bytes), "cudaMalloc");
#else
  p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!p) throw error(errc::runtime, "aligned_alloc of " + std::to_string(bytes) + " bytes failed");
#endif
  return p;
}

inline void device_free(void* p) {
  if (!p) return;
#if RCCLX_BACKEND_HIP
  (void)hipFree(p);
#elif RCCLX_BACKEND_CUDA
  (void)cudaFree(p);
#else
  std::free(p);
#endif
}

inline void memset_zero(void* p, std::size_t bytes) {
#if RCCLX_BACKEND_HIP
  check(hipMemset(p, 0, bytes), "hipMemset");
#elif RCCLX_BACKEND_CUDA
  check(cudaMemset(p, 0, bytes), "cudaMemset");
#else
  std::memset(p, 0, bytes);
#endif
}

// Memory for flags that peers write while a kernel polls it. On AMD it must be uncached
// (hipDeviceMallocUncached): with ordinary coarse-grained memory a running kernel may never see a
// peer's flag write (seen by vLLM on MI200/MI300). Zero-filled. Free with device_free.
inline void* signal_malloc(std::size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) bytes = 16;
#if RCCLX_BACKEND_HIP
#  if defined(hipDeviceMallocUncached)
  check(hipExtMallocWithFlags(&p, bytes, hipDeviceMallocUncached), "hipExtMallocWithFlags(uncached)");
#  else
  // HIP < 5.3 has no uncached flag; fine-grained memory is coherent across devices too.
  check(hipExtMallocWithFlags(&p, bytes, hipDeviceMallocFinegrained), "hipExtMallocWithFlags(fine-grained)");
#  endif
#elif RCCLX_BACKEND_CUDA
  check(cudaMalloc(&p, bytes), "cudaMalloc(signal)");
#else
  p = device_malloc(bytes);
#endif
  memset_zero(p, bytes);
  return p;
}

// Copy between any two addresses (unified virtual addressing on both vendors).
inline void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
#if RCCLX_BACKEND_HIP
  check(hipMemcpy(dst, src, bytes, hipMemcpyDefault), "hipMemcpy");
#elif RCCLX_BACKEND_CUDA
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
#else
  std::memcpy(dst, src, bytes);
#endif
}

inline void copy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) {
  if (bytes == 0) return;
#if RCCLX_BACKEND_HIP
  check(hipMemcpyAsync(dst, src, bytes, hipMemcpyDefault, stream), "hipMemcpyAsync");
#elif RCCLX_BACKEND_CUDA
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
#else
  (void)stream;
  std::memcpy(dst, src, bytes);
#endif
}

inline void device_synchronize() {
#if RCCLX_BACKEND_HIP
  check(hipDeviceSynchronize(), "hipDeviceSynchronize");
#elif RCCLX_BACKEND_CUDA
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
}

inline stream_t stream_create() {
  stream_t s{};
#if RCCLX_BACKEND_HIP
  check(hipStreamCreateWithFlags(&s, hipStreamNonBlocking), "hipStreamCreateWithFlags");
#elif RCCLX_BACKEND_CUDA
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
#endif
  return s;
}

inline void stream_destroy(stream_t s) {
#if RCCLX_BACKEND_HIP
  if (s) (void)hipStreamDestroy(s);
#elif RCCLX_BACKEND_CUDA
  if (s) (void)cudaStreamDestroy(s);
#else
  (void)s;
#endif
}

inline void stream_synchronize(stream_t s) {
#if RCCLX_BACKEND_HIP
  check(hipStreamSynchronize(s), "hipStreamSynchronize");
#elif RCCLX_BACKEND_CUDA
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
#else
  (void)s;
#endif
}

inline int device_count() {
  int n = 0;
#if RCCLX_BACKEND_HIP
  if (hipGetDeviceCount(&n) != hipSuccess) n = 0;
#elif RCCLX_BACKEND_CUDA
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
#endif
  return n;
}

inline void set_device(int d) {
#if RCCLX_BACKEND_HIP
  check(hipSetDevice(d), "hipSetDevice");
#elif RCCLX_BACKEND_CUDA
  check(cudaSetDevice(d), "cudaSetDevice");
#else
  (void)d;
#endif
}

// The calling thread's current device (0 on the host backend).
inline int current_device() {
  int d = 0;
#if RCCLX_BACKEND_HIP
  check(hipGetDevice(&d), "hipGetDevice");
#elif RCCLX_BACKEND_CUDA
  check(cudaGetDevice(&d), "cudaGetDevice");
#endif
  return d;
}

inline int multiprocessor_count() {
  int n = 1;
#if RCCLX_BACKEND_HIP
  check(hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, current_device()), "hipDeviceGetAttribute");
#elif RCCLX_BACKEND_CUDA
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, current_device()), "cudaDeviceGetAttribute");
#endif
  return n;
}

#if RCCLX_BACKEND_GPU
// How many blocks of `kernel` with `threads` threads and `smem` dynamic shared bytes can be resident
// on the whole device at once: the bound for kernels whose blocks wait on each other.
template <class Kernel>
inline int max_resident_blocks(Kernel kernel, int threads, std::size_t smem = 0) {
  int per_sm = 0;
#  if RCCLX_BACKEND_HIP
  check(hipOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem),
        "hipOccupancyMaxActiveBlocksPerMultiprocessor");
#  else
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
#  endif
  return per_sm * multiprocessor_count();
}
#endif

// ---- stream capture (CUDA/HIP graphs) --------------------------------------------------------
// True while `s` is being captured into a graph: work issued now runs only when the graph is
// launched, so host/ must not rely on pointers it cannot patch later. Always false on the host backend.
inline bool stream_is_capturing(stream_t s) {
#if RCCLX_BACKEND_HIP
  hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
  check(hipStreamIsCapturing(s, &st), "hipStreamIsCapturing");
  return st == hipStreamCaptureStatusActive;
#elif RCCLX_BACKEND_CUDA
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &st), "cudaStreamIsCapturing");
  return st == cudaStreamCaptureStatusActive;
#else
  (void)s;
  return false;
#endif
}

#if RCCLX_BACKEND_GPU
#  if RCCLX_BACKEND_HIP
using graph_exec_t = hipGraphExec_t;
#  else
using graph_exec_t = cudaGraphExec_t;
#  endif

// Starts capturing `s` (relaxed mode: other threads may keep using the runtime meanwhile).
inline void stream_begin_capture(stream_t s) {
#  if RCCLX_BACKEND_HIP
  check(hipStreamBeginCapture(s, hipStreamCaptureModeRelaxed), "hipStreamBeginCapture");
#  else
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
#  endif
}

// Ends the capture of `s` and instantiates the graph (the graph itself is released here).
inline graph_exec_t stream_end_capture(stream_t s) {
  graph_exec_t exec{};
#  if RCCLX_BACKEND_HIP
  hipGraph_t g{};
  check(hipStreamEndCapture(s, &g), "hipStreamEndCapture");
  const hipError_t r = hipGraphInstantiate(&exec, g, nullptr, nullptr, 0);
  (void)hipGraphDestroy(g);
  check(r, "hipGraphInstantiate");
#  else
  cudaGraph_t g{};
  check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  const cudaError_t r = cudaGraphInstantiate(&exec, g, 0);
  (void)cudaGraphDestroy(g);
  check(r, "cudaGraphInstantiate");
#  endif
  return exec;
}

inline void graph_launch(graph_exec_t exec, stream_t s) {
#  if RCCLX_BACKEND_HIP
  check(hipGraphLaunch(exec, s), "hipGraphLaunch");
#  else
  check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
#  endif
}

inline void graph_destroy(graph_exec_t exec) {
#  if RCCLX_BACKEND_HIP
  if (exec) (void)hipGraphExecDestroy(exec);
#  else
  if (exec) (void)cudaGraphExecDestroy(exec);
#  endif
}
#endif

#if RCCLX_BACKEND_GPU
// Loads a kernel's module now. With lazy module loading (the CUDA default since 12.x) the first
// launch of a kernel loads it, and a load can wait for kernels already running: if those spin on a
// peer whose launch is stuck behind the load (emulated ranks launched from several threads of one
// process), nothing moves until the bounded wait expires. The ready-made launchers call it through
// kernel::launch (kernel/launch.hpp), for every kernel a call might use, before the first launch.
template <class Kernel>
inline void preload_kernel(Kernel kernel) {
#  if RCCLX_BACKEND_HIP
  hipFuncAttributes a;
  check(hipFuncGetAttributes(&a, reinterpret_cast<const void*>(kernel)), "hipFuncGetAttributes");
#  else
  cudaFuncAttributes a;
  check(cudaFuncGetAttributes(&a, kernel), "cudaFuncGetAttributes");
#  endif
}
#endif

// ---- IPC (GPU backends). The host backend shares memory through host/ (POSIX shared memory). ----
#if RCCLX_BACKEND_GPU
// The allocation that contains `p`: its base and size. IPC handles must be taken of the base:
// a handle of an interior pointer (a tensor inside a caching allocator's segment) maps the whole
// allocation at the peer, so the peer would read from the wrong offset.
struct allocation_range {
  void* base;
  std::size_t size;
};

#  if RCCLX_BACKEND_CUDA
namespace detail {
// A driver function through the runtime's entry-point lookup (no link against libcuda).
inline void* driver_entry_point(const char* name) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q{};
#    if defined(CUDART_VERSION) && CUDART_VERSION >= 12050
  check(cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q),
        (std::string("cudaGetDriverEntryPointByVersion(") + name + ")").c_str());
#    else
  check(cudaGetDriverEntryPoint(name, &f, cudaEnableDefault, &q), (std::string("cudaGetDriverEntryPoint(") + name + ")").c_str());
#    endif
  if (!f || q != cudaDriverEntryPointSuccess) throw error(errc::runtime, std::string(name) + " is not available from the CUDA driver");
  return f;
}
}  // namespace detail
#  endif

inline allocation_range find_allocation(const void* p) {
  allocation_range r{nullptr, 0};
#  if RCCLX_BACKEND_HIP
  hipDeviceptr_t base = nullptr;
  check(hipMemGetAddressRange(&base, &r.size, const_cast<void*>(p)), "hipMemGetAddressRange");
  r.base = base;
#  else
  // The runtime has no address-range query; take the driver's cuMemGetAddressRange. Its ABI:
  // CUresult (an int-sized enum, 0 = success) f(CUdeviceptr* base, size_t* size, CUdeviceptr p),
  // CUdeviceptr = unsigned long long.
  using get_range_fn = int (*)(unsigned long long*, std::size_t*, unsigned long long);
  static get_range_fn fn = reinterpret_cast<get_range_fn>(detail::driver_entry_point("cuMemGetAddressRange"));
  unsigned long long base = 0;
  const int res = fn(&base, &r.size, reinterpret_cast<unsigned long long>(p));
  if (res != 0)
    throw error(errc::invalid_argument, "cuMemGetAddressRange failed (CUresult " + std::to_string(res) +
                                            "): the pointer is not memory from cudaMalloc on this device");
  r.base = reinterpret_cast<void*>(base);
#  endif
  return r;
}

// The runtime's identity of the allocation that contains `p` (CUDA: CU_POINTER_ATTRIBUTE_BUFFER_ID,
// unique in the process and never reused; HIP: HIP_POINTER_ATTRIBUTE_BUFFER_ID), so that a freed
// allocation whose address range comes back with a new one is told apart from it. 0 when the runtime
// gives none for this memory.
inline std::uint64_t allocation_id(const void* p) {
  unsigned long long id = 0;
#  if RCCLX_BACKEND_HIP
  if (hipPointerGetAttribute(&id, HIP_POINTER_ATTRIBUTE_BUFFER_ID, reinterpret_cast<hipDeviceptr_t>(const_cast<void*>(p))) !=
      hipSuccess) {
    (void)hipGetLastError();
    id = 0;
  }
#  else
  // CUresult f(void* data, CUpointer_attribute attribute, CUdeviceptr p); CU_POINTER_ATTRIBUTE_BUFFER_ID = 7.
  using get_attribute_fn = int (*)(void*, int, unsigned long long);
  static get_attribute_fn fn = reinterpret_cast<get_attribute_fn>(detail::driver_entry_point("cuPointerGetAttribute"));
  if (fn(&id, 7, reinterpret_cast<unsigned long long>(p)) != 0) id = 0;
#  endif
  return static_cast<std::uint64_t>(id);
}

inline ipc_handle ipc_get_handle(void* base) {
  ipc_handle h{};
#  if RCCLX_BACKEND_HIP
  hipIpcMemHandle_t v;
  static_assert(sizeof(v) <= sizeof(h.bytes), "hipIpcMemHandle_t larger than ipc_handle");
  const runtime_result rc = hipIpcGetMemHandle(&v, base);
  if (rc != hipSuccess) (void)hipGetLastError();
  const char* what = "hipIpcGetMemHandle";
#  else
  cudaIpcMemHandle_t v;
  static_assert(sizeof(v) <= sizeof(h.bytes), "cudaIpcMemHandle_t larger than ipc_handle");
  const runtime_result rc = cudaIpcGetMemHandle(&v, base);
  if (rc != cudaSuccess) (void)cudaGetLastError();
  const char* what = "cudaIpcGetMemHandle";
#  endif
  // Virtual-memory allocations (cuMemCreate / hipMemCreate, PyTorch's expandable_segments:True)
  // have no legacy IPC handle: say so, rather than only the runtime's "invalid argument".
  check(rc, (std::string(what) + " (the allocation at " + core::detail::pointer_text(base) +
             "; only plain device allocations (cudaMalloc / hipMalloc, PyTorch's caching allocator without "
             "expandable_segments) can be shared by IPC handle: allocate this buffer that way or with "
             "rcclx's own allocators)")
                .c_str());
  std::memcpy(h.bytes, &v, sizeof(v));
  return h;
}

// Opens a peer's allocation with lazy peer access; returns its base in this process.
inline void* ipc_open_handle(const ipc_handle& h) {
  void* p = nullptr;
#  if RCCLX_BACKEND_HIP
  hipIpcMemHandle_t v;
  std::memcpy(&v, h.bytes, sizeof(v));
  check(hipIpcOpenMemHandle(&p, v, hipIpcMemLazyEnablePeerAccess), "hipIpcOpenMemHandle");
#  else
  cudaIpcMemHandle_t v;
  std::memcpy(&v, h.bytes, sizeof(v));
  check(cudaIpcOpenMemHandle(&p, v, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
#  endif
  return p;
}

inline void ipc_close_handle(void* p) {
#  if RCCLX_BACKEND_HIP
  check(hipIpcCloseMemHandle(p), "hipIpcCloseMemHandle");
#  else
  check(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle");
#  endif
}
#endif

}  // namespace gpu
RCCLX_NAMESPACE_END
