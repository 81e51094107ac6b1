// rcclx/host/detail/pinned_lru.hpp: the LRU cache behind host::ipc_cache (peers' opened
// allocations) and multinode::registration_cache (allocations registered with an engine): a
// resource is opened on a miss, kept after its last user is gone, and closed only when evicted or
// at teardown, because opening costs more than the use it enables.
//
//   pinned_lru<std::string, void*> c(64, [](const std::string& k, void*& v) { unmap(v); });
//   void*& v = c.acquire(key, [&] { return map(key); });   // open (miss) or reuse (hit); pinned
//   c.release(key);                                        // unpinned: kept, may be evicted
//
// Pinned entries (acquired and not yet released) are never evicted; when only pinned entries are
// left the cache holds more than `capacity` of them (resources in use must stay open). Closing
// must not throw (a failure to close is swallowed: it only happens when the runtime is gone).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>

#include "../../core/error.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

struct cache_stats {
  std::uint64_t opens = 0;      // resources opened (misses)
  std::uint64_t closes = 0;     // resources closed (evictions, erasures and teardown)
  std::uint64_t hits = 0;       // acquisitions served by an open resource
  std::uint64_t evictions = 0;  // closes caused by the capacity
  std::size_t open_now = 0;     // opens - closes
  std::size_t pinned = 0;       // entries with at least one user
};

namespace detail {

template <class Key, class Value, class Hash = std::hash<Key>>
class pinned_lru {
 public:
  using close_fn = std::function<void(const Key&, Value&)>;

  pinned_lru(std::size_t capacity, close_fn close, const char* who) : capacity_(capacity), close_(std::move(close)), who_(who) {
    if (capacity == 0) throw error(errc::invalid_argument, std::string(who_) + ": capacity must be >= 1");
  }
  pinned_lru(const pinned_lru&) = delete;
  pinned_lru& operator=(const pinned_lru&) = delete;
  ~pinned_lru() { clear(); }

  // The value of `k`, pinned until release(k): an open one (a hit) or open() -> Value (a miss; if
  // it throws, nothing has changed).
  template <class Open>
  Value& acquire(const Key& k, Open&& open) {
    auto it = entries_.find(k);
    if (it != entries_.end()) {
      ++stats_.hits;
      entry& e = it->second;
      if (e.users++ == 0) {
        lru_.erase(e.lru_pos);
        ++stats_.pinned;
      }
      return e.value;
    }
    entry e{open(), 1, lru_.end()};
    ++stats_.opens;
    it = entries_.emplace(k, std::move(e)).first;
    ++stats_.pinned;
    evict_to_capacity();
    return it->second.value;
  }

  // Drops one user of `k`; false if `k` is not acquired. An unused entry becomes the most recently
  // used evictable one.
  bool release(const Key& k) {
    auto it = entries_.find(k);
    if (it == entries_.end() || it->second.users == 0) return false;
    entry& e = it->second;
    if (--e.users == 0) {
      --stats_.pinned;
      lru_.push_back(&it->first);
      e.lru_pos = std::prev(lru_.end());
      evict_to_capacity();
    }
    return true;
  }

  // Closes now every unpinned entry whose key satisfies `pred`; returns how many it closed and sets
  // *pinned_left to how many matching entries stayed because they are in use.
  template <class Pred>
  std::size_t erase_if(Pred&& pred, std::size_t* pinned_left = nullptr) {
    std::size_t closed = 0, kept = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (!pred(it->first)) {
        ++it;
      } else if (it->second.users > 0) {
        ++kept;
        ++it;
      } else {
        lru_.erase(it->second.lru_pos);
        close_entry(it->first, it->second);
        it = entries_.erase(it);
        ++closed;
      }
    }
    if (pinned_left) *pinned_left = kept;
    return closed;
  }

  // Closes every unpinned entry now.
  void trim() {
    erase_if([](const Key&) { return true; });
  }

  // Closes every entry (teardown): pinned ones too, their users are going away.
  void clear() noexcept {
    for (auto& kv : entries_) close_entry(kv.first, kv.second);
    entries_.clear();
    lru_.clear();
    stats_.pinned = 0;
  }

  bool contains(const Key& k) const { return entries_.count(k) != 0; }
  template <class Pred>
  bool any_of(Pred&& pred) const {
    for (const auto& kv : entries_)
      if (pred(kv.first)) return true;
    return false;
  }
  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return entries_.size(); }
  cache_stats stats() const {
    cache_stats s = stats_;
    s.open_now = static_cast<std::size_t>(s.opens - s.closes);
    return s;
  }

 private:
  struct entry {
    Value value;
    int users;
    typename std::list<const Key*>::iterator lru_pos;  // valid while users == 0
  };

  void close_entry(const Key& k, entry& e) noexcept {
    try {
      close_(k, e.value);
    } catch (...) {
      // Closing fails only when the runtime is already torn down; the resource goes with the process.
    }
    ++stats_.closes;
  }

  void evict_to_capacity() {
    while (entries_.size() > capacity_ && !lru_.empty()) {
      auto it = entries_.find(*lru_.front());
      lru_.pop_front();
      close_entry(it->first, it->second);
      ++stats_.evictions;
      entries_.erase(it);
    }
  }

  std::size_t capacity_;
  close_fn close_;
  const char* who_;
  std::unordered_map<Key, entry, Hash> entries_;  // node-based: keys keep their address (lru_ points at them)
  std::list<const Key*> lru_;                      // unpinned entries, least recently used first
  cache_stats stats_;
};

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
