// rcclx/multinode/detail/scratch.hpp: the hierarchical collectives' device scratch: three buffers
// grown on demand (never during a graph capture: reserve() first), each registered with the engine
// when registration is on, and the caller's buffers an engine operation will touch, registered for
// the call. A call states what it needs (scratch_needs) and prepares it before its agreement, so a
// failure here is thrown on every rank.
//
//   rcclx::multinode::detail::scratch_buffers scratch(engine, /*register_buffers=*/true);
//   scratch_needs n;
//   n.scratch[0] = bytes;
//   n.user(output, out_bytes);             // handed to the engine: registered
//   std::vector<registration> pins;
//   scratch.prepare(n, stream, pins);      // grown and registered (pins live for the call)
//   void* s0 = scratch.grow(0, bytes, stream);
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "../../core/error.hpp"
#include "../../gpu/runtime.hpp"
#include "../../host/detail/owned_memory.hpp"
#include "../engine.hpp"
#include "../registration.hpp"

RCCLX_NAMESPACE_BEGIN
namespace multinode {
namespace detail {

// What a call needs before it starts: scratch bytes (0 = none) and the caller's buffers that an
// engine operation will read or write (registered when registration is on).
struct scratch_needs {
  std::size_t scratch[3] = {0, 0, 0};
  const void* user_ptr[2] = {nullptr, nullptr};
  std::size_t user_bytes[2] = {0, 0};
  int users = 0;

  void user(const void* p, std::size_t bytes) {
    user_ptr[users] = p;
    user_bytes[users++] = bytes;
  }
  // The FP8 form of a part (scratch 1: `part_bytes`, the wire layout's total_bytes of its
  // elements) and every node's (scratch 2).
  void fp8(std::size_t part_bytes, std::size_t g_n) {
    scratch[1] = part_bytes;
    scratch[2] = g_n * part_bytes;
  }
};

class scratch_buffers {
 public:
  static constexpr int count = 3;

  // `inter` must outlive this object. register_buffers: hierarchical_options::register_buffers.
  scratch_buffers(engine& inter, bool register_buffers) : inter_(inter), register_(register_buffers) {}
  scratch_buffers(const scratch_buffers&) = delete;
  scratch_buffers& operator=(const scratch_buffers&) = delete;
  ~scratch_buffers() { free_all(); }

  // Whether buffers are registered with the engine (the option, and an engine that registers).
  bool registers() const { return register_ && inter_.registers_buffers(); }

  // Grows the scratch a call needs and registers it, and pins the caller's buffers the engine will
  // touch (their registrations appended to `pins`).
  void prepare(const scratch_needs& n, gpu::stream_t stream, std::vector<registration>& pins) {
    for (int i = 0; i < count; ++i)
      if (n.scratch[i]) grow(i, n.scratch[i], stream);
    if (!registers() || gpu::stream_is_capturing(stream)) return;
    for (int i = 0; i < n.users; ++i)
      if (n.user_bytes[i]) pins.push_back(inter_.register_buffer(const_cast<void*>(n.user_ptr[i]), n.user_bytes[i]));
  }

  // Scratch buffer i with at least `bytes` (16-byte aligned), registered with the engine when
  // registration is on (a failed registration is retried by the next call that needs the buffer).
  // Growing waits for `stream` and the device first (earlier calls may still read the old buffer),
  // then deregisters and frees the old one.
  void* grow(int i, std::size_t bytes, gpu::stream_t stream) {
    buffer& b = buffers_[i];
    if (bytes > b.bytes) {
      if (gpu::stream_is_capturing(stream))
        throw error(errc::invalid_argument, "hierarchical: a call during graph capture needs " + std::to_string(bytes) +
                                                " bytes of scratch, more than reserved (" + std::to_string(b.bytes) +
                                                "); call reserve() before the capture");
      const std::size_t want = bytes < 2 * b.bytes ? 2 * b.bytes : bytes;
      gpu::stream_synchronize(stream);
      gpu::device_synchronize();
      release(i);
      b.ptr = gpu::device_malloc(want);
      b.bytes = want;
    }
    if (b.ptr && registers() && !b.reg.active() && !gpu::stream_is_capturing(stream))
      b.reg = inter_.register_buffer(b.ptr, b.bytes);
    return b.ptr;
  }

  // Deregisters and frees every buffer.
  void free_all() noexcept {
    for (int i = 0; i < count; ++i) release(i);
  }

 private:
  struct buffer {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    registration reg;
  };

  // Deregisters (now: the memory is about to be freed) and frees buffer i.
  void release(int i) noexcept {
    buffer& b = buffers_[i];
    const bool was_registered = b.reg.active();
    b.reg.reset();
    if (!b.ptr) return;
    try {
      if (was_registered) inter_.forget_buffer(b.ptr);
    } catch (...) {
    }
    host::detail::device_free_quietly(b.ptr);
    b.ptr = nullptr;
    b.bytes = 0;
  }

  engine& inter_;
  bool register_;
  buffer buffers_[count];
};

}  // namespace detail
}  // namespace multinode
RCCLX_NAMESPACE_END
