// rcclx/multinode/registration.hpp: buffers registered with an inter-node engine (ncclCommRegister
// and the like), cached by allocation so that repeated calls on the same memory register nothing.
//
//   struct my_registrar {                                // how the engine registers memory
//     void* register_memory(void* base, std::size_t bytes);   // returns the engine's handle
//     void deregister_memory(void* handle);
//   };
//   rcclx::multinode::registration_cache<my_registrar> cache(64, my_registrar{...});
//   rcclx::multinode::registration r = cache.acquire(ptr, bytes);   // the allocation holding ptr:
//                                                                    // registered (miss) or reused (hit)
//   ...                                                              // engine calls on [ptr, ptr + bytes)
//   r.reset();                       // unpinned: stays registered, deregistered when evicted
//   cache.forget(ptr);               // deregistered now (before the memory is freed)
//
// Key: the allocation, not the pointer: its base, size and the runtime's identity
// (gpu::allocation_id), so buffers inside one allocation share one registration and a freed
// allocation whose address range comes back with a new one is a miss, never a stale hit. The host
// backend has no allocation query: the key is the range [ptr, ptr + bytes) itself (identity 0).
// The LRU is host::detail::pinned_lru (the one behind host::ipc_cache): a pinned entry (a live
// registration object) is never evicted; unpinned ones stay registered until more than `capacity`
// of them exist, then the least recently used one is deregistered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "../config.hpp"
#include "../core/error.hpp"
#include "../gpu/runtime.hpp"
#include "../host/detail/pinned_lru.hpp"

RCCLX_NAMESPACE_BEGIN
namespace multinode {

// The allocation that holds a buffer, as the registration cache keys it.
struct allocation_key {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::uint64_t id = 0;  // the runtime's identity of the allocation (0: none)

  bool contains(const void* p) const {
    const auto x = reinterpret_cast<std::uintptr_t>(p);
    return x >= base && x - base < size;
  }
  friend bool operator==(const allocation_key& a, const allocation_key& b) {
    return a.base == b.base && a.size == b.size && a.id == b.id;
  }
};

struct allocation_key_hash {
  std::size_t operator()(const allocation_key& k) const {
    std::uint64_t h = k.base * 0x9E3779B97F4A7C15ull;
    h ^= (k.size + 0x632BE59BD9B4E019ull) + (h << 6) + (h >> 2);
    h ^= (k.id + 0x85EBCA77C2B2AE63ull) + (h << 6) + (h >> 2);
    return static_cast<std::size_t>(h);
  }
};

// Finds the allocation holding [p, p + bytes): GPU backends ask the runtime (base, size, identity);
// the host backend has no such query and keys the range itself.
struct device_allocation_locator {
  allocation_key operator()(const void* p, std::size_t bytes) const {
    allocation_key k;
#if RCCLX_BACKEND_GPU
    (void)bytes;
    const gpu::allocation_range r = gpu::find_allocation(p);
    k.base = reinterpret_cast<std::uintptr_t>(r.base);
    k.size = r.size;
    k.id = gpu::allocation_id(r.base);
#else
    k.base = reinterpret_cast<std::uintptr_t>(p);
    k.size = bytes;
#endif
    return k;
  }
};

using registration_stats = host::cache_stats;  // opens = registrations, closes = deregistrations

namespace detail {
// What a registration object gives back its pin to.
class registration_owner {
 public:
  virtual void unpin(const allocation_key& k) noexcept = 0;

 protected:
  ~registration_owner() = default;
};
}  // namespace detail

// A pinned registration of one allocation (move-only). Empty when nothing was registered (an engine
// that registers nothing, or registration turned off). Destroying it unpins the cache entry: the
// allocation stays registered, for the next call.
class registration {
 public:
  registration() = default;
  registration(detail::registration_owner* owner, const allocation_key& key, void* handle)
      : owner_(owner), key_(key), handle_(handle) {}
  registration(registration&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), key_(o.key_), handle_(o.handle_) {}
  registration& operator=(registration&& o) noexcept {
    if (this != &o) {
      reset();
      owner_ = std::exchange(o.owner_, nullptr);
      key_ = o.key_;
      handle_ = o.handle_;
    }
    return *this;
  }
  registration(const registration&) = delete;
  registration& operator=(const registration&) = delete;
  ~registration() { reset(); }

  bool active() const { return owner_ != nullptr; }
  const allocation_key& allocation() const { return key_; }
  void* handle() const { return handle_; }  // the engine's handle (ncclCommRegister's)

  void reset() noexcept {
    if (owner_) owner_->unpin(key_);
    owner_ = nullptr;
  }

 private:
  detail::registration_owner* owner_ = nullptr;
  allocation_key key_{};
  void* handle_ = nullptr;
};

// Registrar: `void* register_memory(void* base, std::size_t bytes)` (throws on failure) and
// `void deregister_memory(void* handle)`. Locator: allocation_key(const void* p, std::size_t bytes).
template <class Registrar, class Locator = device_allocation_locator>
class registration_cache final : public detail::registration_owner {
 public:
  registration_cache(std::size_t capacity, Registrar registrar, Locator locator = Locator{})
      : registrar_(std::move(registrar)),
        locator_(std::move(locator)),
        lru_(capacity, [this](const allocation_key&, void*& h) { registrar_.deregister_memory(h); }, "registration_cache") {}
  registration_cache(const registration_cache&) = delete;
  registration_cache& operator=(const registration_cache&) = delete;
  ~registration_cache() { clear(); }

  // The registration of the allocation holding [p, p + bytes), pinned while the returned object
  // lives. A failed registration throws and changes nothing.
  registration acquire(void* p, std::size_t bytes) {
    if (p == nullptr || bytes == 0)
      throw error(errc::invalid_argument, "registration_cache::acquire: the buffer is null or empty (" +
                                              std::to_string(bytes) + " bytes)");
    const allocation_key k = locator_(p, bytes);
    if (!k.contains(p) || bytes > k.size - (reinterpret_cast<std::uintptr_t>(p) - k.base))
      throw error(errc::invalid_argument, "registration_cache::acquire: " + std::to_string(bytes) + " bytes at " +
                                              core::detail::pointer_text(p) + " extend past their allocation (" +
                                              std::to_string(k.size) + " bytes at " +
                                              core::detail::pointer_text(reinterpret_cast<void*>(k.base)) + ")");
    void* h = lru_.acquire(k, [&] { return registrar_.register_memory(reinterpret_cast<void*>(k.base), k.size); });
    return registration(this, k, h);
  }

  // Deregisters now every unpinned registration of an allocation holding p (call it before freeing
  // memory the cache may have registered). Throws if one is pinned (in use).
  void forget(const void* p) {
    std::size_t pinned = 0;
    lru_.erase_if([p](const allocation_key& k) { return k.contains(p); }, &pinned);
    if (pinned)
      throw error(errc::invalid_argument, "registration_cache::forget: the allocation holding " +
                                              core::detail::pointer_text(p) + " is still in use (a live registration)");
  }

  // Whether an allocation holding p is registered (pinned or cached).
  bool is_registered(const void* p) const {
    return lru_.any_of([p](const allocation_key& k) { return k.contains(p); });
  }

  void trim() { lru_.trim(); }    // deregisters every unpinned registration now
  void clear() noexcept { lru_.clear(); }  // deregisters everything (teardown)
  registration_stats stats() const { return lru_.stats(); }
  std::size_t size() const { return lru_.size(); }
  Registrar& registrar() { return registrar_; }

 private:
  using lru_type = host::detail::pinned_lru<allocation_key, void*, allocation_key_hash>;

  void unpin(const allocation_key& k) noexcept override { (void)lru_.release(k); }

  Registrar registrar_;
  Locator locator_;
  lru_type lru_;
};

}  // namespace multinode
RCCLX_NAMESPACE_END
