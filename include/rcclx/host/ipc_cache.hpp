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
// left the cache may hold more than `capacity` of them (registered buffers must stay mapped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <list>
#include <string>
#include <unordered_map>

#include "../gpu/runtime.hpp"
#include "shareable_memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

struct ipc_cache_stats {
  std::uint64_t opens = 0;      // handles opened (misses)
  std::uint64_t closes = 0;     // handles closed (evictions + teardown)
  std::uint64_t hits = 0;       // acquisitions served by an already open handle
  std::uint64_t evictions = 0;  // closes caused by the capacity
  std::size_t open_now = 0;     // opens - closes
  std::size_t pinned = 0;       // entries with at least one user
};

// Mapper: `void* open(const gpu::ipc_handle&)` and `void close(void* base, const gpu::ipc_handle&)`.
template <class Mapper = detail::ipc_mapper>
class ipc_cache {
 public:
  explicit ipc_cache(std::size_t capacity, Mapper mapper = Mapper{}) : capacity_(capacity), mapper_(mapper) {
    if (capacity == 0) throw error(errc::invalid_argument, "ipc_cache: capacity must be >= 1");
  }
  ipc_cache(const ipc_cache&) = delete;
  ipc_cache& operator=(const ipc_cache&) = delete;
  ~ipc_cache() { clear(); }

  // The base of peer `peer`'s allocation `h` in this process; the entry stays pinned until release().
  void* acquire(int peer, const gpu::ipc_handle& h) {
    const std::string k = key(peer, h);
    auto it = entries_.find(k);
    if (it != entries_.end()) {
      ++stats_.hits;
      entry& e = it->second;
      if (e.users++ == 0) {
        lru_.erase(e.lru_pos);
        ++stats_.pinned;
      }
      return e.base;
    }
    void* base = mapper_.open(h);  // throws: nothing has been changed yet
    ++stats_.opens;
    entry e{base, h, 1, lru_.end()};
    entries_.emplace(k, e);
    ++stats_.pinned;
    evict_to_capacity();
    return base;
  }

  // Drops one user of the entry; an unused entry becomes the most recently used evictable one.
  void release(int peer, const gpu::ipc_handle& h) {
    auto it = entries_.find(key(peer, h));
    if (it == entries_.end() || it->second.users == 0)
      throw error(errc::invalid_argument, "ipc_cache::release: handle of peer " + std::to_string(peer) +
                                              " is not acquired");
    entry& e = it->second;
    if (--e.users == 0) {
      --stats_.pinned;
      lru_.push_back(it->first);
      e.lru_pos = std::prev(lru_.end());
      evict_to_capacity();
    }
  }

  // Closes every entry (teardown). Pinned entries are closed too: their users are going away.
  void clear() noexcept {
    for (auto& kv : entries_) close_entry(kv.second);
    entries_.clear();
    lru_.clear();
    stats_.pinned = 0;
  }

  // Closes every unpinned entry now.
  void trim() {
    while (!lru_.empty()) {
      auto it = entries_.find(lru_.front());
      lru_.pop_front();
      close_entry(it->second);
      entries_.erase(it);
    }
  }

  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return entries_.size(); }
  ipc_cache_stats stats() const {
    ipc_cache_stats s = stats_;
    s.open_now = static_cast<std::size_t>(s.opens - s.closes);
    return s;
  }

 private:
  struct entry {
    void* base;
    gpu::ipc_handle handle;
    int users;
    std::list<std::string>::iterator lru_pos;  // valid while users == 0
  };

  static std::string key(int peer, const gpu::ipc_handle& h) {
    std::string k(sizeof(int) + sizeof(h.bytes), '\0');
    std::memcpy(&k[0], &peer, sizeof(int));
    std::memcpy(&k[sizeof(int)], h.bytes, sizeof(h.bytes));
    return k;
  }

  void close_entry(entry& e) noexcept {
    try {
      mapper_.close(e.base, e.handle);
    } catch (...) {
      // Closing can only fail if the runtime is already torn down; the mapping goes with the process.
    }
    ++stats_.closes;
  }

  void evict_to_capacity() {
    while (entries_.size() > capacity_ && !lru_.empty()) {
      auto it = entries_.find(lru_.front());
      lru_.pop_front();
      close_entry(it->second);
      ++stats_.evictions;
      entries_.erase(it);
    }
  }

  std::size_t capacity_;
  Mapper mapper_;
  std::unordered_map<std::string, entry> entries_;
  std::list<std::string> lru_;  // unpinned entries, least recently used first
  ipc_cache_stats stats_;
};

}  // namespace host
RCCLX_NAMESPACE_END
