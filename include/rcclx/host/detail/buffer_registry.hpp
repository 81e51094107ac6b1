// rcclx/host/detail/buffer_registry.hpp: the communicator's zero-copy buffers: registrations (each
// rank's buffer and its peers' copies, opened through the communicator's ipc_cache) and the inputs
// of collectives captured in graphs, whose device peer tables are patched once the capture ends
// (vLLM's scheme: the kernel reads its table from a device slot filled after capture).
//
//   rcclx::host::detail::buffer_registry<8> reg(agree, workspace, cache, options);
//   reg.register_buffer(x, bytes);                             // collective
//   if (const auto* r = reg.find(x + i, n * sizeof(float))) table = reg.table_of(*r, x + i);
//   void* slot = reg.take_capture_slot(x, bytes);              // while capturing
//   reg.register_graph_buffers();                              // collective, after the capture
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../../core/peer_table.hpp"
#include "../../gpu/runtime.hpp"
#include "../ipc_cache.hpp"
#include "../options.hpp"
#include "../shareable_memory.hpp"
#include "agreement.hpp"
#include "workspace.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

struct registration_msg {
  exported_memory mem;
  std::uint64_t bytes;
};

template <int MaxRanks>
class buffer_registry {
  using byte_table = typename workspace<MaxRanks>::byte_table;

 public:
  struct registration {
    char* ptr;
    std::size_t bytes;
    std::uint64_t id;
    char* peer[MaxRanks];
    gpu::ipc_handle handle[MaxRanks];
  };

  // `ws` and `cache` must outlive the registry.
  buffer_registry(agreement& agree, const workspace<MaxRanks>& ws, ipc_cache<>& cache, const communicator_options& opts)
      : agree_(agree),
        ws_(ws),
        cache_(cache),
        rank_(agree.get_bootstrap().rank()),
        n_(agree.get_bootstrap().num_ranks()),
        max_captured_(static_cast<std::size_t>(opts.max_captured_collectives)) {}
  buffer_registry(const buffer_registry&) = delete;
  buffer_registry& operator=(const buffer_registry&) = delete;
  ~buffer_registry() { release_all(); }

  // Collective: every rank registers its own buffer of the same size, in the same order (see
  // communicator::register_buffer).
  void register_buffer(void* ptr, std::size_t bytes) {
    registration_msg mine{};
    std::string err;
    if (!ptr || bytes == 0) {
      err = "register_buffer: ptr must be non-null and bytes > 0 (bytes = " + std::to_string(bytes) + ")";
    } else if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) {
      err = "register_buffer: ptr is not 16-byte aligned (collectives read peers' buffers in 16-byte vectors)";
    } else if (const registration* o = overlapping(ptr, bytes)) {
      err = "register_buffer: [ptr, ptr + " + std::to_string(bytes) + ") overlaps registered buffer #" +
            std::to_string(o->id) + " (" + std::to_string(o->bytes) + " bytes); unregister it first";
    } else {
      try {
        mine.mem = export_memory(ptr);
        if (mine.mem.offset + bytes > mine.mem.size)
          err = "register_buffer: " + std::to_string(bytes) + " bytes at offset " + std::to_string(mine.mem.offset) +
                " extend past the end of the allocation (" + std::to_string(mine.mem.size) + " bytes)";
      } catch (const std::exception& e) {
        err = "register_buffer: " + strip_prefix(e.what());
      }
    }
    mine.bytes = bytes;
    const auto all = agree_.exchange(mine, err, errc::invalid_argument);
    agreement::require_equal("register_buffer: ranks disagree on bytes:", all,
                             [](const registration_msg& m) { return m.bytes; });
    registration reg{};
    reg.ptr = static_cast<char*>(ptr);
    reg.bytes = bytes;
    reg.id = ++registrations_;
    err.clear();
    int opened = 0;
    try {
      for (int p = 0; p < n_; ++p, opened = p) {
        if (p == rank_) {
          reg.peer[p] = reg.ptr;
          continue;
        }
        const auto& m = all[static_cast<std::size_t>(p)].mem;
        reg.peer[p] = static_cast<char*>(cache_.acquire(p, m.handle)) + m.offset;
        reg.handle[p] = m.handle;
      }
    } catch (const std::exception& e) {
      err = "register_buffer: opening a peer's buffer failed: " + strip_prefix(e.what());
      for (int p = 0; p < opened; ++p)
        if (p != rank_) cache_.release(p, reg.handle[p]);
    }
    try {
      agree_.exchange(0, err, errc::runtime);
    } catch (...) {
      if (err.empty()) release(reg);
      throw;
    }
    regs_.emplace(reinterpret_cast<std::uintptr_t>(ptr), reg);
  }

  // Local: forgets a registration (its peers' handles stay cached, closed only on eviction).
  void unregister_buffer(void* ptr) {
    auto it = regs_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == regs_.end())
      throw error(errc::invalid_argument, "unregister_buffer: ptr is not the start of a registered buffer");
    release(it->second);
    regs_.erase(it);
  }

  // Releases every registration's peer handles (teardown).
  void release_all() noexcept {
    for (auto& kv : regs_) {
      try {
        release(kv.second);
      } catch (...) {
      }
    }
    regs_.clear();
  }

  std::size_t size() const { return regs_.size(); }

  // The registration holding [ptr, ptr + bytes), or null.
  const registration* find(const void* ptr, std::size_t bytes) const {
    const auto a = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = regs_.upper_bound(a);
    if (it == regs_.begin()) return nullptr;
    --it;
    const registration& r = it->second;
    if (a + bytes > it->first + r.bytes) return nullptr;
    return &r;
  }

  // The workspace's table with data[p] = peer p's copy of `input` (inside `reg`).
  template <class T>
  core::peer_table<T, MaxRanks> table_of(const registration& reg, const T* input) const {
    const std::size_t offset = static_cast<std::size_t>(reinterpret_cast<const char*>(input) - reg.ptr);
    core::peer_table<T, MaxRanks> t = ws_.table().template as<T>();
    for (int p = 0; p < n_; ++p) t.data[p] = reinterpret_cast<T*>(reg.peer[p] + offset);
    t.capacity_bytes = reg.bytes - offset;
    return t;
  }

  // ---- graph capture ---------------------------------------------------------------------------

  // The device table a captured collective reading `bytes` at `input` launches with; filled by the
  // next register_graph_buffers. Slots are never reused: an earlier graph may still be launched
  // with its tables.
  const void* take_capture_slot(const void* input, std::size_t bytes) {
    if (slots_used_ >= max_captured_)
      throw error(errc::invalid_argument, "graph capture: all max_captured_collectives = " + std::to_string(max_captured_) +
                                              " zero-copy peer tables of this communicator are used; raise the "
                                              "option or set zero_copy_capture = false");
    void* slot = static_cast<char*>(ws_.capture_slots()) + slots_used_ * sizeof(byte_table);
    ++slots_used_;
    captured_.push_back(captured_buffer{slot, input, bytes});
    return slot;
  }

  // Collective: opens the peers' copies of every input captured since the last call and writes
  // the captured collectives' device tables (see communicator::register_graph_buffers).
  void register_graph_buffers() {
    const std::uint64_t count = captured_.size();
    const auto counts = agree_.exchange(count, std::string(), errc::runtime);
    const std::string differ = agreement::differing(
        "register_graph_buffers: ranks captured different numbers of zero-copy collectives:", counts,
        [](std::uint64_t c) { return c; });
    if (!differ.empty()) {
      captured_.clear();
      throw error(errc::mismatch, differ);
    }
    if (count == 0) return;
    std::string err;
    std::vector<exported_memory> mine(count);
    for (std::size_t i = 0; i < count && err.empty(); ++i) {
      try {
        mine[i] = export_memory(captured_[i].ptr);
      } catch (const std::exception& e) {
        err = "register_graph_buffers: the input of captured collective #" + std::to_string(i) + " (" +
              std::to_string(captured_[i].bytes) + " bytes at " + core::detail::pointer_text(captured_[i].ptr) +
              ") cannot be shared: " + strip_prefix(e.what());
      }
    }
    agree_.exchange(0, err, errc::invalid_argument);
    std::vector<exported_memory> all(count * static_cast<std::size_t>(n_));
    agree_.get_bootstrap().allgather(mine.data(), all.data(), count * sizeof(exported_memory));
    try {
      for (std::size_t i = 0; i < count; ++i) {
        byte_table t = ws_.table();
        for (int p = 0; p < MaxRanks; ++p) t.data[p] = nullptr;
        for (int p = 0; p < n_; ++p) {
          if (p == rank_) {
            t.data[p] = static_cast<unsigned char*>(const_cast<void*>(captured_[i].ptr));
            continue;
          }
          const exported_memory& m = all[static_cast<std::size_t>(p) * count + i];
          // Pinned until the cache's clear() at teardown: graphs may be launched until then.
          t.data[p] = static_cast<unsigned char*>(cache_.acquire(p, m.handle)) + m.offset;
        }
        t.capacity_bytes = captured_[i].bytes;
        gpu::copy(captured_[i].slot, &t, sizeof(t));
      }
    } catch (const std::exception& e) {
      err = "register_graph_buffers: opening a peer's buffer failed: " + strip_prefix(e.what());
    }
    captured_.clear();
    agree_.exchange(0, err, errc::runtime);
  }

 private:
  struct captured_buffer {
    void* slot;
    const void* ptr;
    std::size_t bytes;
  };

  void release(const registration& reg) {
    for (int p = 0; p < n_; ++p)
      if (p != rank_) cache_.release(p, reg.handle[p]);
  }

  const registration* overlapping(const void* ptr, std::size_t bytes) const {
    const auto a = reinterpret_cast<std::uintptr_t>(ptr);
    for (const auto& kv : regs_)
      if (a < kv.first + kv.second.bytes && kv.first < a + bytes) return &kv.second;
    return nullptr;
  }

  agreement& agree_;
  const workspace<MaxRanks>& ws_;
  ipc_cache<>& cache_;
  int rank_;
  int n_;
  std::size_t max_captured_;
  std::map<std::uintptr_t, registration> regs_;
  std::uint64_t registrations_ = 0;
  std::vector<captured_buffer> captured_;
  std::size_t slots_used_ = 0;
};

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
