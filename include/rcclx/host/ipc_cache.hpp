// rcclx/host/ipc_cache.hpp: an LRU cache of peers' allocations opened in this process, keyed by
// (peer, IPC handle). Opening a handle is expensive (a driver call and a new mapping; registration
// can cost more than the transfer it enables), and frameworks re-register the same allocations
// again and again (a caching allocator hands out the same segments), so opened handles are kept
// after their last user is gone and closed only when evicted or at teardown.
//
//   rcclx::host::ipc_cache<> cache(64);                 // keep at most 64 opened handles
//   void* base = cache.acquire(peer, handle);           // open (miss) or reuse (hit); pinned
//   ...
//   cache.release(peer, handle);                        // unpinned: stays open, may be evicted
//   auto s = cache.stats();                             // opens, closes, hits, evictions, open_now
//
// Pinned entries (acquired and not yet released) are never evicted; when only pinned entries are
// left the cache may hold more than `capacity` of them (registered buffers must stay mapped). The
// LRU itself is detail::pinned_lru, shared with multinode::registration_cache.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>

#include "../gpu/runtime.hpp"
#include "detail/pinned_lru.hpp"
#include "shareable_memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

using ipc_cache_stats = cache_stats;  // opens, closes, hits, evictions, open_now, pinned

// Mapper: `void* open(const gpu::ipc_handle&)` and `void close(void* base, const gpu::ipc_handle&)`.
template <class Mapper = detail::ipc_mapper>
class ipc_cache {
 public:
  explicit ipc_cache(std::size_t capacity, Mapper mapper = Mapper{})
      : mapper_(mapper), lru_(capacity, [this](const std::string&, opened& o) { mapper_.close(o.base, o.handle); }, "ipc_cache") {}
  ipc_cache(const ipc_cache&) = delete;
  ipc_cache& operator=(const ipc_cache&) = delete;
  ~ipc_cache() { clear(); }

  // The base of peer `peer`'s allocation `h` in this process; the entry stays pinned until release().
  void* acquire(int peer, const gpu::ipc_handle& h) {
    return lru_.acquire(key(peer, h), [&] { return opened{mapper_.open(h), h}; }).base;  // a failed open changes nothing
  }

  // Drops one user of the entry; an unused entry becomes the most recently used evictable one.
  void release(int peer, const gpu::ipc_handle& h) {
    if (!lru_.release(key(peer, h)))
      throw error(errc::invalid_argument, "ipc_cache::release: handle of peer " + std::to_string(peer) +
                                              " is not acquired");
  }

  // Closes every entry (teardown). Pinned entries are closed too: their users are going away.
  void clear() noexcept { lru_.clear(); }

  // Closes every unpinned entry now.
  void trim() { lru_.trim(); }

  std::size_t capacity() const { return lru_.capacity(); }
  std::size_t size() const { return lru_.size(); }
  ipc_cache_stats stats() const { return lru_.stats(); }

 private:
  struct opened {
    void* base;
    gpu::ipc_handle handle;
  };

  static std::string key(int peer, const gpu::ipc_handle& h) {
    std::string k(sizeof(int) + sizeof(h.bytes), '\0');
    std::memcpy(&k[0], &peer, sizeof(int));
    std::memcpy(&k[sizeof(int)], h.bytes, sizeof(h.bytes));
    return k;
  }

  Mapper mapper_;
  detail::pinned_lru<std::string, opened> lru_;
};

}  // namespace host
RCCLX_NAMESPACE_END
