// rcclx/testing/emulated_bench.hpp: a harness to time and check your own kernels (a fused kernel, a
// collective) on N emulated ranks (one GPU, or threads on the host backend): the emulated world of
// symmetric buffers and pads, a stream, device memory freed with the harness, every timing followed
// by the ranks' error check, every rank's output after a call, a device-side check that the ranks'
// outputs are the same bits, and a measurement whose exception becomes its row's error.
//
//   namespace rt = rcclx::testing;
//   rt::emulated_bench<8> b(num_ranks, buffer_bytes, pad_slots);
//   std::vector<float*> out;  for (int r = 0; r < num_ranks; ++r) out.push_back(b.alloc<float>(bytes));
//   b.guard(row, [&] {        // an exception becomes row.error, and the pads are reset for the next row
//     const auto got = b.outputs_after(launch, out, bytes);   // every rank's bytes, from poisoned outputs
//     row.identical = b.ranks_identical(out, count, blocks, threads);
//     bool fell_back = false;
//     row.us = b.time(rt::timing_mode::graph, rt::timing_options{}, launch, fell_back);   // testing/timing.hpp
//   });
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

#include "../gpu/atomic.hpp"
#include "../gpu/runtime.hpp"
#include "emulated_world.hpp"
#include "launch.hpp"
#include "timing.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

// Counts the elements of every rank's output that differ, bit for bit, from rank 0's (an element
// loop over (rank, block, thread)).
template <class T, int MaxRanks>
struct emulated_compare {
  const T* out[MaxRanks];
  std::size_t count;
  std::uint32_t* mismatches;

  RCCLX_HOST_DEVICE static std::uint32_t bits_of(T x) {
    if constexpr (sizeof(T) == 4) {
      std::uint32_t u;
      __builtin_memcpy(&u, &x, 4);
      return u;
    } else {
      std::uint16_t u;
      __builtin_memcpy(&u, &x, 2);
      return u;
    }
  }
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, launch_index ix) const {
    if (ix.rank == 0) return;
    const std::size_t stride = static_cast<std::size_t>(ix.num_blocks) * static_cast<std::size_t>(g.size());
    std::uint32_t bad = 0;
    for (std::size_t i = static_cast<std::size_t>(ix.block) * g.size() + g.thread_rank(); i < count; i += stride)
      bad += bits_of(out[ix.rank][i]) != bits_of(out[0][i]) ? 1u : 0u;
    if (bad) gpu::fetch_add_local(mismatches, bad);
  }
};

template <int MaxRanks = max_ranks>
class emulated_bench {
 public:
  emulated_bench(int num_ranks, std::size_t buffer_bytes, int pad_slots, core::ll_layout ll = core::default_ll_layout(),
                 std::uint64_t timeout_ns = 30ull * 1000 * 1000 * 1000)
      : n_(num_ranks), world_(num_ranks, buffer_bytes, pad_slots, timeout_ns, ll),
        stream_(current_backend == backend::host ? gpu::stream_t{} : gpu::stream_create()) {}
  ~emulated_bench() {
    for (void* p : owned_) gpu::device_free(p);
    gpu::stream_destroy(stream_);
  }
  emulated_bench(const emulated_bench&) = delete;
  emulated_bench& operator=(const emulated_bench&) = delete;

  int num_ranks() const { return n_; }
  emulated_world<MaxRanks>& world() { return world_; }
  const emulated_world<MaxRanks>& world() const { return world_; }
  gpu::stream_t stream() const { return stream_; }

  // Device memory until the harness goes.
  template <class U = unsigned char>
  U* alloc(std::size_t bytes) {
    owned_.push_back(gpu::device_malloc(bytes));
    return static_cast<U*>(owned_.back());
  }

  // time_us (testing/timing.hpp) of f(stream), then the device drained and a rank's recorded error thrown.
  template <class F>
  double time(timing_mode mode, const timing_options& o, F&& f, bool& fell_back) {
    const double us = time_us(mode, o, stream_, f, &fell_back);
    gpu::device_synchronize();
    world_.throw_if_error();
    return us;
  }

  // Every rank's `bytes` at out[q] after f(stream), from outputs poisoned with 0x5A.
  template <class F, class P>
  std::vector<std::vector<unsigned char>> outputs_after(F&& f, const std::vector<P*>& out, std::size_t bytes) {
    const std::vector<unsigned char> poison(bytes, 0x5A);
    for (int q = 0; q < n_; ++q) gpu::copy(out[q], poison.data(), bytes);
    gpu::device_synchronize();
    f(stream_);
    return download(out, bytes);
  }
  // Every rank's `bytes` at out[q], once the device is done and no rank recorded an error.
  template <class P>
  std::vector<std::vector<unsigned char>> download(const std::vector<P*>& out, std::size_t bytes) {
    gpu::device_synchronize();
    world_.throw_if_error();
    std::vector<std::vector<unsigned char>> all;
    for (int q = 0; q < n_; ++q) {
      all.emplace_back(bytes);
      gpu::copy(all.back().data(), out[q], bytes);
    }
    return all;
  }

  // Is every rank's out[q][0, count) the same bits as rank 0's? Checked on the device
  // (emulated_compare on `blocks` blocks of `threads` per rank): nothing leaves it but a count.
  template <class T>
  bool ranks_identical(const std::vector<T*>& out, std::size_t count, int blocks, int threads) {
    if (!counter_) counter_ = alloc<std::uint32_t>(sizeof(std::uint32_t));
    gpu::memset_zero(counter_, sizeof(std::uint32_t));
    emulated_compare<T, MaxRanks> c{};
    for (int p = 0; p < n_; ++p) c.out[p] = out[p];
    c.count = count;
    c.mismatches = counter_;
    launch_emulated(n_, blocks, threads, c, stream_);
    gpu::stream_synchronize(stream_);
    std::uint32_t mismatches = 0;
    gpu::copy(&mismatches, counter_, sizeof(mismatches));
    return mismatches == 0;
  }

  // After a measurement that failed: the device drained and the pads reset for the next one.
  void recover() {
    gpu::device_synchronize();
    world_.reset();
  }
  // A measurement: an exception from f becomes r.error (r: any row with a std::string error), and
  // the next one starts clean.
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
  emulated_world<MaxRanks> world_;
  gpu::stream_t stream_;
  std::vector<void*> owned_;
  std::uint32_t* counter_ = nullptr;
};

}  // namespace testing
RCCLX_NAMESPACE_END
