// rcclx/host/detail/owned_memory.hpp: owning pointers to device and shareable memory, and the quiet
// teardown steps of the host objects' destructors. A destructor reports nothing: an error of the
// device work it waits for was reported, or will be, by the call that checks it.
//
//   rcclx::host::detail::device_ptr table(rcclx::gpu::device_malloc(bytes));   // freed on scope exit
//   ~my_object() { rcclx::host::detail::synchronize_quietly(); }               // then free
#pragma once

#include <memory>

#include "../../gpu/runtime.hpp"
#include "../shareable_memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

// Waits for this process's device work (destructors: peers or kernels may still use the memory).
inline void synchronize_quietly() noexcept {
  try {
    gpu::device_synchronize();
  } catch (...) {
  }
}

inline void device_free_quietly(void* p) noexcept {
  try {
    gpu::device_free(p);
  } catch (...) {
  }
}

struct device_deleter {
  void operator()(void* p) const noexcept { device_free_quietly(p); }
};
struct shareable_deleter {
  void operator()(void* p) const noexcept {
    try {
      shareable_free(p);
    } catch (...) {
    }
  }
};
using device_ptr = std::unique_ptr<void, device_deleter>;
using shareable_ptr = std::unique_ptr<void, shareable_deleter>;

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
