// rcclx/fused/shard_scan.hpp: a rank's half of vocabulary-parallel sampling: a block scans one
// row of its rank's shard of the logits, x[0, len) with global indices begin + j, into the record
// of fused::argmax or fused::topk<K> that fused::combine then merges across ranks.
//
//   namespace fz = rcclx::fused;
//   using scan = fz::shard_scan<fz::topk<50>, 128>;            // blocks of 128 threads
//   fz::combine<fz::topk<50>::record, fz::topk<50>, 8> c(table, slots, 1, rows);
//   for (int t = block; t < c.num_tiles(); t += num_blocks) {   // a tile per row
//     scan::run(g, logits + t * len, len, shard_begin, c.input(t));
//     c.publish(g, t);                                          // (syncs the group first)
//   }
//
// The record is the exact one of the row (the combine's order of (value, index): NaN first, then
// larger values, ties and NaNs by the lower index; -0 equals +0; fewer than K elements: empty
// entries after them), whatever the thread count and the data, so a fused kernel and an unfused
// one, or two grids, get the same bits. The row is read once with 16-byte loads (the 16-byte
// aligned middle of x; the elements before and after it one by one), Policy::unroll of them per
// thread in flight together.
//   argmax: four running bests per thread (one per lane of its vectors: a compare and a select per
//     element), then the block's best by a pairwise tree in shared memory; G / 2 log2 G steps.
//   topk<K>: one pass keeping in shared memory every element at or above a threshold value (NaN
//     above all) below which at least K elements are known to lie, so the row's K best are all
//     kept: a compare per element. On GPUs the threshold comes from the first chunk, every
//     thread's largest value sorted across its warp (gpu::warp_sort; the warp's q-th, q =
//     ceil(K / warps) - 1, has q + 1 at or above it, the smallest of the warps' q-th has K), and
//     is raised each time the kept ones pass half the slots (a compaction, the same way from the
//     kept values); the host backend (a block is one thread) takes exact thresholds instead. At
//     the end each kept element's rank among them is its place. Random logits, K = 50, 128
//     threads: some 80 kept per 4096-element chunk, one compaction. A chunk that overflows the
//     slots (a row ascending along its index, or all equal) sends the row to a safe mode: again
//     from its start, one element per thread between checks, exact (value, index) thresholds, so
//     no step can overflow; slower, the same record.
// BlockThreads: the threads of the calling block (ignored on the host backend, where a block is
// one thread); for topk on GPUs a multiple of the warp and at least K, with Policy::slots a
// multiple of it, twice it at least, and enough for K (a static_assert says so). run() is
// block-collective and writes *dst with several threads (topk) or
// thread 0 (argmax): the caller's next group sync orders those writes (combine::publish does).
// Shared memory: storage_type (topk<50>, 128 threads, the default 2048 slots: 32.8 KiB; argmax:
// 4 bytes a thread), given to run() or taken from gpu::block_shared.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../config.hpp"
#include "../gpu/shared.hpp"
#include "combine_ops.hpp"
#include "detail/topk_scan.hpp"
#include "shard_walk.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// Tuning of shard_scan. Unroll: 16-byte vectors per thread in flight together (topk: at most 16,
// its chunk's passing elements are marked in a 64-bit mask). topk only: Slots, entries kept in
// shared memory (at least twice the block's threads); CheckEvery, chunks between the block's
// checks of the slots (a group sync): random rows keep few per chunk, so a check at half the slots
// leaves room for CheckEvery more chunks, and a row that overflows them takes the safe mode.
template <int Unroll, int Slots = 2048, int CheckEvery = 4>
struct shard_scan_policy {
  static_assert(Unroll >= 1 && Slots >= 2 && CheckEvery >= 1, "rcclx::fused::shard_scan_policy: bad tuning");
  static constexpr int unroll = Unroll, slots = Slots, check_every = CheckEvery;
};

namespace detail {
// One-thread host blocks (with RCCLX_EMULATE_THREADS=1 a host block has its GPU threads: the GPU's scan).
inline constexpr bool scan_on_host = current_backend == backend::host && !RCCLX_EMULATE_THREADS;
// The defaults: on GPUs 8 vectors a thread, 2048 slots; on the host backend the top-k scan's
// chunks are 64 elements and its slots few (112 for K <= 56), so that a chunk can overflow them
// there too, as GPUs' can.
template <class Combine>
struct default_shard_scan_policy {
  using type = shard_scan_policy<scan_on_host ? 2 : 8>;
};
template <int K>
struct default_shard_scan_policy<topk<K>> {
  using type = std::conditional_t<scan_on_host, shard_scan_policy<16, (2 * K > 112 ? 2 * K : 112), 1>,
                                  shard_scan_policy<8, 2048, 4>>;
};
}  // namespace detail

namespace detail {
template <class Combine, int BlockThreads, class Policy>
struct shard_scan_impl {
  static_assert(!std::is_same<Combine, Combine>::value,
                "rcclx::fused::shard_scan: Combine must be fused::argmax or fused::topk<K>");
};

template <int BlockThreads, class Policy>
struct shard_scan_impl<argmax, BlockThreads, Policy> {
  using record = argmax::record;
  using policy = Policy;
  static constexpr int threads = scan_on_host ? 1 : BlockThreads;
  static constexpr int half = threads / 2 > 0 ? threads / 2 : 1;
  struct storage_type {
    record part[half];  // the tree's upper half
  };

  template <class G>
  RCCLX_HOST_DEVICE static void run(const G& g, storage_type& st, const float* x, std::size_t len, std::size_t begin,
                                    record* dst) {
    const int tid = g.thread_rank();
    record mine = argmax::empty(), lane[4] = {mine, mine, mine, mine};
    for_each_shard_element<Policy::unroll>(
        g, x, len, [&](std::size_t j, float v) { argmax::push(mine, v, static_cast<std::uint32_t>(begin + j)); },
        [&](std::size_t j, const shard_vec4& e) {
          for (int k = 0; k < 4; ++k) push_later(lane[k], e.x[k], static_cast<std::uint32_t>(begin + j + k));
        });
    for (int k = 0; k < 4; ++k) argmax{}.fold(mine, lane[k]);
    // Thread 0 ends with the merge of every thread's `mine`.
    const argmax op{};
    for (int s = g.size() / 2; s >= 1; s /= 2) {
      g.sync();  // the previous level's (or the previous row's) reads of part are done
      if (tid >= s && tid < 2 * s) st.part[tid - s] = mine;
      g.sync();
      if (tid < s) op.fold(mine, st.part[tid]);
    }
    if (tid == 0) *dst = mine;
  }

 private:
  // argmax::push for an index above every index `a` holds (a lane's elements come in increasing
  // index): ties and later NaNs never replace it, so one compare and a select.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static void push_later(record& a, float v, std::uint32_t index) {
    if ((!(v <= a.value) && a.value == a.value) || a.index == 0xFFFFFFFFu) a = {v, index};  // NaN: v <= fails
  }
};

template <int K, int BlockThreads, class Policy>
struct shard_scan_impl<topk<K>, BlockThreads, Policy> : topk_scan<K, BlockThreads, Policy> {};
}  // namespace detail

// Combine: fused::argmax or fused::topk<K>.
template <class Combine, int BlockThreads, class Policy = typename detail::default_shard_scan_policy<Combine>::type>
struct shard_scan : detail::shard_scan_impl<Combine, BlockThreads, Policy> {
  using impl = detail::shard_scan_impl<Combine, BlockThreads, Policy>;
  using typename impl::record;
  using typename impl::storage_type;
  using impl::run;  // run(g, storage, x, len, begin, dst): storage of your own (shared memory)
  template <class G>
  RCCLX_HOST_DEVICE static void run(const G& g, const float* x, std::size_t len, std::size_t begin, record* dst) {
    impl::run(g, gpu::block_shared<storage_type, shard_scan>(), x, len, begin, dst);
  }
};

}  // namespace fused
RCCLX_NAMESPACE_END
