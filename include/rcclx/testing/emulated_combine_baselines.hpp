// rcclx/testing/emulated_combine_baselines.hpp: what a cross-rank combine (fused::combine) is
// measured against, on every emulated rank in one launch (testing::launch_emulated): the way an
// engine merges partial results today, rcclx's AllGather of every rank's partial records
// (dda::flat_allgather, as 32-bit words; alone: the exchange floor) then a merge kernel that runs the
// combine's own arithmetic in rank order, bit-identical to fused::combine; and, for vocabulary-
// parallel sampling, the rank's scan of its shard alone (fused::shard_scan) and the memory floor of
// that scan. docs/fusion.md section 12; rcclx-bench-fused times them.
//
//   namespace rt = rcclx::testing;
//   rt::launch_emulated(n, blocks, 512, rt::emulated_record_gather<8>{tables, {parts, gathered}, words}, stream);
//   rt::launch_emulated(n, rows, 128, rt::emulated_sampling_merge<rcclx::fused::topk<50>, 8, 128>{...}, stream);
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../core/peer_table.hpp"
#include "../dda/allgather.hpp"
#include "../fused/combine.hpp"
#include "../fused/combine_ops.hpp"
#include "../fused/shard_scan.hpp"
#include "../gpu/memory.hpp"
#include "../gpu/shared.hpp"
#include "launch.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

// The AllGather moves records as 32-bit words (bitwise copies): records are whole words.
using record_word = std::uint32_t;

// Every rank's `count` words of partial records (buf.in) into every rank's buf.out, rank p's at
// word p * count: dda::flat_allgather.
template <int MaxRanks>
struct emulated_record_gather {
  static constexpr int max_threads_per_block = 512;
  const core::peer_table<record_word, MaxRanks>* tables;  // device memory, indexed by rank
  rank_buffers<record_word, MaxRanks> buf;
  std::size_t count;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    (void)dda::flat_allgather(g, tables[ix.rank], buf.in[ix.rank], buf.out[ix.rank], count, ix.block, ix.num_blocks);
  }
};

// Slice j's part of O (fused::lse_merge's slice) stored at dst, one 16-byte store.
template <class T, class Slice>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_slice_o(T* dst, const Slice& s) {
  gpu::vec16 v;
  __builtin_memcpy(&v, s.o, sizeof(v));
  gpu::store16(dst, v);
}

// The attention merge (fused::lse_merge<T, HeadDim>) of the gathered records: a thread per
// (record, slice), every rank's slice loaded first (the loads in flight together), then folded in
// rank order; O to out_o ([records][HeadDim]), L to out_l ([records]).
template <class T, int HeadDim, int MaxRanks>
struct emulated_attention_merge {
  using merge_op = fused::lse_merge<T, HeadDim>;
  using record = typename merge_op::record;
  static constexpr int max_threads_per_block = 256;
  const record_word* gathered[MaxRanks];  // rank r's AllGather output: rank p's records at word p * count
  T* out_o[MaxRanks];
  float* out_l[MaxRanks];
  std::size_t records, count;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    const merge_op op{};
    constexpr std::size_t parts = merge_op::slices;
    const std::size_t gs = static_cast<std::size_t>(g.size());
    const std::size_t n = records * parts, step = gs * static_cast<std::size_t>(ix.num_blocks);
    const record_word* all = gathered[ix.rank];
    for (std::size_t k = static_cast<std::size_t>(ix.block) * gs + static_cast<std::size_t>(g.thread_rank()); k < n;
         k += step) {
      const std::size_t i = k / parts;
      const int j = static_cast<int>(k % parts);
      typename merge_op::slice x[MaxRanks];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int p = 0; p < MaxRanks; ++p)
        if (p < ix.num_ranks)
          x[p] = op.load_slice(reinterpret_cast<const record*>(all + static_cast<std::size_t>(p) * count)[i], j);
      auto acc = op.init_slice(x[0]);
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int p = 1; p < MaxRanks; ++p)
        if (p < ix.num_ranks) op.fold_slice(acc, x[p]);
      const typename merge_op::slice s = op.finalize_slice(acc);
      store_slice_o(out_o[ix.rank] + i * HeadDim + static_cast<std::size_t>(j) * merge_op::slice_elems, s);
      if (j == 0) out_l[ix.rank][i] = s.lse;
    }
  }
};

// ---- vocabulary-parallel sampling (fused::argmax, fused::topk) -----------------------------------

// Rank r's part of a vocabulary split over n ranks: [vocab_shard_begin(r), vocab_shard_begin(r + 1))
// (uneven when n does not divide it).
RCCLX_HOST_DEVICE inline std::size_t vocab_shard_begin(int r, int n, std::size_t vocab) {
  return vocab * static_cast<std::size_t>(r) / static_cast<std::size_t>(n);
}

// The sampling kernels' bounds: 128 threads, 4 blocks per SM, so that a batch of 64 rows on 8 ranks
// (512 blocks) is resident at once on a 132-SM GPU (the fused top-k kernel fits 128 registers and
// 39 KiB of shared memory a block). Threads: the block size the scan is compiled for.
inline constexpr int sampling_max_threads = 128;
inline constexpr int sampling_blocks_per_sm = 4;

// The rank's scan of each row of its shard (fused::shard_scan, a block per row), the partial
// records to part ([rows]): the unfused path's first kernel.
template <class Op, int MaxRanks, int Threads>
struct emulated_shard_scan {
  static constexpr int max_threads_per_block = sampling_max_threads;
  static constexpr int min_blocks_per_multiprocessor = sampling_blocks_per_sm;
  using rec = typename Op::record;
  const float* logits[MaxRanks];  // [rows][shard length]
  rec* part[MaxRanks];
  std::size_t rows, vocab;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    const std::size_t b = vocab_shard_begin(ix.rank, ix.num_ranks, vocab);
    const std::size_t len = vocab_shard_begin(ix.rank + 1, ix.num_ranks, vocab) - b;
    for (std::size_t t = static_cast<std::size_t>(ix.block); t < rows; t += static_cast<std::size_t>(ix.num_blocks))
      fused::shard_scan<Op, Threads>::run(g, logits[ix.rank] + t * len, len, b, part[ix.rank] + t);
  }
};

// The scan's memory floor: the same blocks read the same logits with the same loads, and keep
// nothing (a thread's sum is stored to sink only if it is a value random logits never sum to).
template <int MaxRanks, int Threads>
struct emulated_shard_read {
  static constexpr int max_threads_per_block = sampling_max_threads;
  static constexpr int min_blocks_per_multiprocessor = sampling_blocks_per_sm;
  static constexpr int unroll = fused::shard_scan<fused::argmax, Threads>::policy::unroll;
  const float* logits[MaxRanks];
  float* sink[MaxRanks];
  std::size_t rows, vocab;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    const std::size_t len = vocab_shard_begin(ix.rank + 1, ix.num_ranks, vocab) - vocab_shard_begin(ix.rank, ix.num_ranks, vocab);
    for (std::size_t t = static_cast<std::size_t>(ix.block); t < rows; t += static_cast<std::size_t>(ix.num_blocks)) {
      float acc[4] = {0, 0, 0, 0};
      fused::for_each_shard_element<unroll>(
          g, logits[ix.rank] + t * len, len, [&](std::size_t, float v) { acc[0] += v; },
          [&](std::size_t, const fused::shard_vec4& e) {
            for (int k = 0; k < 4; ++k) acc[k] += e.x[k];
          });
      if (acc[0] + acc[1] + acc[2] + acc[3] == 0x1p100f) sink[ix.rank][g.thread_rank()] = acc[0];
    }
  }
};

// The gathered records merged as the combine merges them: argmax, a thread per row folding in rank
// order; top-k (a selection), a block per row staging the ranks' lists in shared memory and placing
// every entry by its own thread (fused::merge_entries, what reduce_entries runs). out: [rows].
template <class Op, int MaxRanks, int Threads>
struct emulated_sampling_merge {
  static constexpr int max_threads_per_block = sampling_max_threads;
  static constexpr bool selection = !std::is_same<Op, fused::argmax>::value;
  using rec = typename Op::record;
  const record_word* gathered[MaxRanks];
  rec* out[MaxRanks];
  std::size_t rows, count;  // count: words of one rank's records

  // Blocks per rank the merge of `rows` rows wants.
  static int blocks(std::size_t rows) { return static_cast<int>(selection ? rows : (rows + Threads - 1) / Threads); }

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    const Op op{};
    const record_word* all = gathered[ix.rank];
    const auto list = [&](std::size_t i, int p) -> const rec& {
      return reinterpret_cast<const rec*>(all + static_cast<std::size_t>(p) * count)[i];
    };
    if constexpr (selection) {
      auto& st = gpu::block_shared<fused::entries_storage<Op, MaxRanks>, struct merge_entries_tag>();
      for (std::size_t i = static_cast<std::size_t>(ix.block); i < rows; i += static_cast<std::size_t>(ix.num_blocks))
        fused::merge_entries<Op, MaxRanks>(g, op, ix.num_ranks, st, [&](int s) -> const rec& { return list(i, s); },
                                           [&](int place, const typename Op::entry& e) { op.store_entry(out[ix.rank][i], place, e); });
    } else {
      const std::size_t gs = static_cast<std::size_t>(g.size()), step = gs * static_cast<std::size_t>(ix.num_blocks);
      for (std::size_t i = static_cast<std::size_t>(ix.block) * gs + static_cast<std::size_t>(g.thread_rank()); i < rows;
           i += step) {
        auto acc = op.init(list(i, 0));
        for (int p = 1; p < ix.num_ranks; ++p) op.fold(acc, list(i, p));
        out[ix.rank][i] = op.finalize(acc);
      }
    }
  }
};

}  // namespace testing
RCCLX_NAMESPACE_END
