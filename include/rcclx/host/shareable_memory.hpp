// rcclx/host/shareable_memory.hpp: memory that peer processes can map, and the IPC handle of the
// allocation that contains a pointer. GPU backends: any device allocation is shareable; the handle
// is the vendor IPC handle of the allocation *base* (an interior pointer's handle would map the
// wrong bytes). Host backend: POSIX shared memory from shareable_malloc.
//
//   void* p = rcclx::host::shareable_malloc(bytes);        // cudaMalloc / hipMalloc / shm_open+mmap
//   rcclx::host::exported_memory e = rcclx::host::export_memory(static_cast<char*>(p) + 64);
//   // e.handle: of the allocation containing p; e.offset == 64 (relative to that allocation's base)
//   rcclx::host::shareable_free(p);
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>

#include "../gpu/runtime.hpp"
#include "detail/shm.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

// Allocates `bytes` of device memory a peer process can map (zero-filled on the host backend).
inline void* shareable_malloc(std::size_t bytes) {
#if RCCLX_BACKEND_GPU
  return gpu::device_malloc(bytes);
#else
  return detail::shm_registry::instance().create(bytes);
#endif
}

inline void shareable_free(void* p) {
  if (!p) return;
#if RCCLX_BACKEND_GPU
  gpu::device_free(p);
#else
  detail::shm_registry::instance().destroy(p);
#endif
}

// What a peer needs to map the memory at a pointer: the handle of its allocation and where the
// pointer lies in it.
struct exported_memory {
  gpu::ipc_handle handle;
  std::uint64_t offset;  // pointer - allocation base
  std::uint64_t size;    // bytes of the whole allocation
};

inline exported_memory export_memory(const void* p) {
  exported_memory e{};
#if RCCLX_BACKEND_GPU
  const gpu::allocation_range r = gpu::find_allocation(p);
  e.handle = gpu::ipc_get_handle(r.base);
  e.offset = static_cast<std::uint64_t>(static_cast<const char*>(p) - static_cast<const char*>(r.base));
  e.size = r.size;
#else
  detail::shm_handle h{};
  std::uint64_t offset = 0;
  if (!detail::shm_registry::instance().find(p, h, offset)) {
    std::ostringstream os;
    if (detail::shm_registry::instance().unlinked(p)) {
      os << "pointer " << p
         << " is in a shared segment whose /dev/shm name was removed once every peer had mapped it "
            "(unlink_when_mapped): no further peer can map it";
      throw error(errc::invalid_argument, os.str());
    }
    os << "pointer " << p
       << " is not in memory from rcclx::host::shareable_malloc: on the host backend only such memory "
          "can be shared with peer processes";
    throw error(errc::invalid_argument, os.str());
  }
  std::memcpy(e.handle.bytes, &h, sizeof(h));
  e.offset = offset;
  e.size = h.size;
#endif
  return e;
}

namespace detail {

// Signal pads: uncached device memory on AMD (gpu::signal_malloc), shared memory on the host.
inline void* shareable_signal_malloc(std::size_t bytes) {
#if RCCLX_BACKEND_GPU
  return gpu::signal_malloc(bytes);
#else
  return shm_registry::instance().create(bytes);  // the kernel zero-fills new segments
#endif
}

// Opens and closes peers' allocations: what ipc_cache calls on a miss and on eviction.
struct ipc_mapper {
  void* open(const gpu::ipc_handle& h) const {
#if RCCLX_BACKEND_GPU
    return gpu::ipc_open_handle(h);
#else
    shm_handle s;
    std::memcpy(&s, h.bytes, sizeof(s));
    return shm_map(s);
#endif
  }
  void close(void* base, const gpu::ipc_handle& h) const {
#if RCCLX_BACKEND_GPU
    (void)h;
    gpu::ipc_close_handle(base);
#else
    shm_handle s;
    std::memcpy(&s, h.bytes, sizeof(s));
    shm_unmap(base, s);
#endif
  }
};

}  // namespace detail

// Host backend: removes the /dev/shm name of the segment holding `p` (from shareable_malloc) once
// every peer has mapped it, e.g. on every rank after communicator::register_buffer of memory that
// is registered only once. The mappings stay valid and the memory is freed when the last process
// holding it unmaps it or exits, so nothing is left in /dev/shm whatever happens next (SIGKILL
// included); but no further peer can map it (export_memory throws: register it again elsewhere
// before). shareable_free still frees it. A no-op on GPUs and for other pointers.
inline void unlink_when_mapped(void* p) {
#if RCCLX_BACKEND_HOST
  detail::shm_registry::instance().unlink_early(p);
#else
  (void)p;
#endif
}

// Host backend: unlinks the rcclx segments in /dev/shm ("rcclx.<pid>.*") whose creating process no
// longer exists: what a process killed between shareable_malloc and unlink_when_mapped /
// shareable_free (e.g. during a communicator's set-up) left. Segments of live processes are kept.
// Returns how many were removed; 0 on GPUs. Processes in another pid namespace sharing /dev/shm
// look dead here: do not call it across containers that share /dev/shm but not their pids.
inline int reclaim_stale_segments() {
#if RCCLX_BACKEND_HOST
  return detail::sweep_stale_segments();
#else
  return 0;
#endif
}

}  // namespace host
RCCLX_NAMESPACE_END
