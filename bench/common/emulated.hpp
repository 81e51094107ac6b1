// bench/common/emulated.hpp: what every table on N emulated ranks (one GPU, or threads on the host
// backend) stands on: the world of symmetric buffers and pads, a stream, device memory freed at the
// end, a row's timing followed by the ranks' error check, and the outputs of a call on every rank.
//
//   bench::emulated_rig<8> rig(num_ranks, buffer_bytes, pad_slots);
//   T* x = rig.alloc<T>(count * sizeof(T));
//   const double us = rig.time(mode, timing, [&](rcclx::gpu::stream_t s) { launch(..., s); }, fell_back);
//   rig.guard(r, [&] { ... });   // an exception becomes r.error, the pads are reset
#pragma once

#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/timing.hpp>

#include <cstdint>
#include <vector>

namespace bench {
namespace {

template <int MaxR>
class emulated_rig {
 public:
  emulated_rig(int num_ranks, std::size_t buffer_bytes, int pad_slots,
               rcclx::core::ll_layout ll = rcclx::core::default_ll_layout(),
               std::uint64_t timeout_ns = 30ull * 1000 * 1000 * 1000)
      : n_(num_ranks), world_(num_ranks, buffer_bytes, pad_slots, timeout_ns, ll),
        stream_(rcclx::current_backend == rcclx::backend::host ? rcclx::gpu::stream_t{} : rcclx::gpu::stream_create()) {}
  ~emulated_rig() {
    for (void* p : owned_) rcclx::gpu::device_free(p);
    rcclx::gpu::stream_destroy(stream_);
  }
  emulated_rig(const emulated_rig&) = delete;
  emulated_rig& operator=(const emulated_rig&) = delete;

  int num_ranks() const { return n_; }
  rcclx::testing::emulated_world<MaxR>& world() { return world_; }
  const rcclx::testing::emulated_world<MaxR>& world() const { return world_; }
  rcclx::gpu::stream_t stream() const { return stream_; }

  // Device memory until the rig goes.
  template <class U = unsigned char>
  U* alloc(std::size_t bytes) {
    owned_.push_back(rcclx::gpu::device_malloc(bytes));
    return static_cast<U*>(owned_.back());
  }

  // A row's timing (testing/timing.hpp), then the device drained and a rank's recorded error thrown.
  template <class F>
  double time(rcclx::testing::timing_mode mode, const rcclx::testing::timing_options& o, F&& f, bool& fell_back) {
    const double us = rcclx::testing::time_us(mode, o, stream_, f, &fell_back);
    rcclx::gpu::device_synchronize();
    world_.throw_if_error();
    return us;
  }

  // Every rank's `bytes` at out[q] after f(stream), from outputs poisoned with 0x5A.
  template <class F, class P>
  std::vector<std::vector<unsigned char>> outputs_after(F&& f, const std::vector<P*>& out, std::size_t bytes) {
    const std::vector<unsigned char> poison(bytes, 0x5A);
    for (int q = 0; q < n_; ++q) rcclx::gpu::copy(out[q], poison.data(), bytes);
    rcclx::gpu::device_synchronize();
    f(stream_);
    return download(out, bytes);
  }
  // Every rank's `bytes` at out[q], once the device is done and no rank recorded an error.
  template <class P>
  std::vector<std::vector<unsigned char>> download(const std::vector<P*>& out, std::size_t bytes) {
    rcclx::gpu::device_synchronize();
    world_.throw_if_error();
    std::vector<std::vector<unsigned char>> all;
    for (int q = 0; q < n_; ++q) {
      all.emplace_back(bytes);
      rcclx::gpu::copy(all.back().data(), out[q], bytes);
    }
    return all;
  }

  // After a row that failed: the device drained and the pads reset for the next row.
  void recover() {
    rcclx::gpu::device_synchronize();
    world_.reset();
  }
  // Measures a row: an exception from f becomes the row's error, and the next row starts clean.
  template <class Row, class F>
  void guard(Row& r, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      r.error = e.what();
      recover();
    }
  }

 private:
  int n_;
  rcclx::testing::emulated_world<MaxR> world_;
  rcclx::gpu::stream_t stream_;
  std::vector<void*> owned_;
};

}  // namespace
}  // namespace bench
