// rcclx/fused/allreduce_rmsnorm.hpp: AllReduce + residual add + RMSNorm (+ optional FP8 output) in
// one kernel, for decode and prefill shapes: the device template (usable inside your kernel) and
// the host launcher for one rank.
//
//   // rank r, its table t (symmetric buffers + signal pads with room for the tile slots):
//   rcclx::fused::rmsnorm_args<rcclx::bf16> a{x, residual, weight, out, tokens, hidden, 1e-6f};
//   rcclx::fused::allreduce_rmsnorm(t, a, rcclx::fused::tile_slots{64, max_tokens});   // automatic
//   rcclx::fused::allreduce_rmsnorm(t, a, slots, rcclx::algorithm::tree, stream);
//
// Result (fused/rmsnorm_args.hpp): residual <- T(allreduce(x) + residual) and
// out <- rmsnorm(residual) * weight, on every rank, bit-identical across ranks, across algorithms,
// and to the unfused dda::allreduce followed by fused::add_rmsnorm. The residual and the weight are
// the same on every rank (as in tensor parallelism): tree uses the owner's copy of a row's residual.
//
// Built on fused::tile_allreduce with one tile per row (no block barrier; rows flagged as they are
// ready). Row i belongs to block i % num_blocks on every rank, in every phase. A block's rows of x
// are copied with loads batched across rows; every kernel runs the one epilogue of
// fused/rmsnorm_epilogue.hpp, a row's residual and weight loaded before its flags are awaited
// (operand_loads::preloaded, rows of up to 2 vectors per thread); the tree's owners publish each
// row's new residual and sum of squares, and every rank computes the row's output from them (loads
// of four rows of one vector per thread, or two of two, issued first).
//   (On CUDA sm_90+, a flat call with one thread-block cluster per row runs the cluster kernel of
//   allreduce_rmsnorm_cluster.hpp instead: the same bits, no fence; RCCLX_RMSNORM_CLUSTER=0 turns
//   it off. See try_launch_rmsnorm_cluster for when it applies.)
//   flat (one-shot, decode): each block copies its rows of x into the symmetric buffer and flags
//     them for every rank, then, per row, waits for the row of every rank, sums it in rank order in
//     FP32, adds the residual, block-reduces the sum of squares, normalises and writes. Steps: 1.
//     Traffic per rank, S = tokens * hidden * sizeof(T): reads S + N*S (N-1 of it from peers), writes
//     S (copy) + S (residual) + S_out; flags: (N-1) per row.
//   tree (two-shot, prefill): rows split into N contiguous chunks; rank c reduces chunk c, adds the
//     residual, and publishes in its buffer the new residual rows and each row's sum of squares (the
//     RMSNorm's block reduction); every rank then loads every row's new residual and sum from its
//     owner and computes the output itself (the owner's arithmetic on the owner's sum: the same
//     bits). Steps: 2. Traffic per rank: reads S + S (own chunk from N ranks) + S (gather, (N-1)/N
//     of it from peers) + the weight, writes S (copy) + S/N (results) + S + S_out (outputs); flags:
//     2(N-1) per row, spread over the owners.
// Symmetric buffer needed per rank: 2 * S (flat), 2 * (S + round16(S) + round16(4 * tokens)) (tree):
// two halves, alternating between calls. Signal-pad slots: 1 + tokens from slots.first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../core/barrier.hpp"
#include "../core/error.hpp"
#include "../core/ll.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../core/region.hpp"
#include "../dda/select.hpp"
#include "../gpu/group.hpp"
#include "../gpu/host_blocks.hpp"
#include "../gpu/runtime.hpp"
#include "../kernel/checks.hpp"
#include "../kernel/launch.hpp"
#include "allreduce_rmsnorm_cluster.hpp"
#include "detail/rmsnorm_rows.hpp"
#include "detail/row_copy.hpp"
#include "rmsnorm_args.hpp"
#include "rmsnorm_epilogue.hpp"
#include "tile_allreduce.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

namespace detail {
// Tree: what an owner publishes per call: the new residual rows, then one float (the row's sum of
// squares) per row.
template <class T>
RCCLX_HOST_DEVICE constexpr std::size_t tree_results_bytes(std::size_t tokens, std::size_t hidden) {
  return round16(tokens * hidden * sizeof(T)) + round16(tokens * sizeof(float));
}
}  // namespace detail

// Bytes of symmetric buffer one rank needs for a call (both halves). Rows are padded to whole
// vectors (padded_cols<T>(hidden): the same for rows of whole vectors).
template <class T, class Out = T>
RCCLX_HOST_DEVICE constexpr std::size_t allreduce_rmsnorm_workspace_bytes(std::size_t tokens, std::size_t hidden,
                                                                          algorithm algo) {
  const std::size_t padded = padded_cols<T>(hidden);
  const std::size_t s = detail::round16(tokens * padded * sizeof(T));
  return algo == algorithm::tree ? 2 * (s + detail::tree_results_bytes<T>(tokens, padded)) : 2 * s;
}

// A call's share of a region plan (fused/region_plan.hpp): the workspace of up to max_tokens rows of
// `hidden` elements for `algo` (automatic: the tree's, which also covers flat), one tile per row.
template <class T, class Out = T>
inline core::region_need allreduce_rmsnorm_need(std::size_t max_tokens, std::size_t hidden, algorithm algo) {
  const bool flat = algo == algorithm::flat;
  return core::region_need{
      allreduce_rmsnorm_workspace_bytes<T, Out>(max_tokens, hidden, flat ? algorithm::flat : algorithm::tree),
      static_cast<int>(max_tokens),
      flat ? core::sized_for_flat : (algo == algorithm::tree ? core::sized_for_tree : core::sized_for_any)};
}

namespace detail {
// A block's thread `tid` of `gs` holds vectors tid, tid + gs, ... of a row (its k-th: vec(k)).
struct strided_vectors {
  std::size_t tid, gs;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::size_t operator()(int k) const { return static_cast<std::size_t>(k) * gs + tid; }
};

// The epilogue of the tile-flag kernels: the operands preloaded for rows of up to 2 vectors per
// thread (rmsnorm_operand_loads).
template <int VecsPerThread, class T, class Out, int BlockThreads>
using tile_rmsnorm_epilogue =
    rmsnorm_epilogue<T, Out, BlockThreads, rmsnorm_operand_loads<VecsPerThread>, VecsPerThread>;

// The tree owner's epilogue: stage 1 (the new residual rows to the owner's results) and the row's
// sum, published as one float per row; no output. Every rank then finishes the row with
// tree_row_finisher: the same epilogue's second half, the same bits.
template <int VecsPerThread, class T, class Out, int BlockThreads>
struct tree_owner_epilogue {
  static constexpr int e = gpu::elems_per_vec16<T>;
  tile_rmsnorm_epilogue<VecsPerThread, T, Out, BlockThreads> stages;
  float* totals;  // [tokens]: the owner's row sums

  template <class Group, class Map>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const Group& g, float (&v)[VecsPerThread][e],
                                                      const held_vectors<Map, e>& h) const {
    const float total = stages.add_residual_and_sum(g, v, h);
    if (g.thread_rank() == 0) totals[h.tile] = total;
  }
  // Checked mode: the stages' verdict (the output stage's too: every rank runs it after).
  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const { return stages.check(ctx); }
};

// The tree's last step for a block's rows: each row's new residual and sum of squares loaded from
// its owner (all loads of Rows rows issued before any use: one latency), the residual stored, and
// the epilogue finished as the owner would have (on the owner's sum): the same bits as
// add_rmsnorm. The weight is loaded once per block.
template <int VecsPerThread, class T, class Out, int BlockThreads>
struct tree_row_finisher {
  static constexpr int e = gpu::elems_per_vec16<T>;
  tile_rmsnorm_epilogue<VecsPerThread, T, Out, BlockThreads> stages;
  T* residual;
  std::size_t hidden, vecs;
  strided_vectors vec;

  RCCLX_HOST_DEVICE tree_row_finisher(const rmsnorm_args<T, Out>& a, strided_vectors v)
      : stages(make_rmsnorm_epilogue<BlockThreads, rmsnorm_operand_loads<VecsPerThread>, VecsPerThread>(
            a, a.residual, a.output)),
        residual(a.residual),
        hidden(a.hidden),
        vecs(a.hidden / e),
        vec(v) {
    stages.preload_shared(vec, vecs);
  }

  // Rows row[0..Rows) (this rank's rows of a block): new residual at res[r] (the owner's copy of
  // the row), the owner's row sum at *total[r].
  template <int Rows>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void finish(const std::size_t (&row)[Rows], const T* const (&res)[Rows],
                                                  const float* const (&total)[Rows]) const {
    using traits = core::value_traits<T>;
    gpu::vec16 v[Rows][VecsPerThread];
    float sum[Rows];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int r = 0; r < Rows; ++r) {
      sum[r] = *total[r];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int k = 0; k < VecsPerThread; ++k)
        if (vec(k) < vecs) v[r][k] = gpu::load16(res[r] + vec(k) * e);
    }
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int r = 0; r < Rows; ++r) {
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int k = 0; k < VecsPerThread; ++k) {
        if (vec(k) >= vecs) continue;
        const position p{row[r], vec(k) * e};
        gpu::store16(residual + p.row * hidden + p.col, v[r][k]);
        float x[e];
        traits::unpack(v[r][k], x);
        stages.finish(k, p, x, sum[r]);
      }
    }
  }
};
}  // namespace detail

// One block of one rank. Group-collective (every thread of g); launch BlockThreads threads per block
// (the row sum is a block reduction over exactly that many; 1 on the host backend) and hold a row:
// VecsPerThread * BlockThreads * (16 / sizeof(T)) >= hidden. Every rank runs the same grid.
// Returns false if a peer never arrived (the error is recorded in t.signals): leave the kernel.
template <algorithm Algo, int VecsPerThread, int BlockThreads, class T, class Out, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool allreduce_rmsnorm_block(const Group& g, const core::peer_table<T, MaxRanks>& t,
                                               const rmsnorm_args<T, Out>& a, tile_slots slots, int block,
                                               int num_blocks) {
  static_assert(Algo == algorithm::flat || Algo == algorithm::tree, "allreduce_rmsnorm_block: flat or tree");
  constexpr int e = gpu::elems_per_vec16<T>;
  const std::size_t tokens = a.tokens, hidden = a.hidden, vecs = hidden / e;
  const int rows = static_cast<int>(tokens);
  const row_tiles map{tokens, hidden};
  tile_allreduce<T, MaxRanks, Algo> ar(t, slots, hidden, rows);
  ar.declare_map(map);  // checked builds: the map's fingerprint goes out with the flags
  ar.inputs_written_by_stages_only();  // this kernel writes nothing after its publish but its checked stages

  // 1. This rank's rows into its symmetric buffer, then all of them flagged at once. Several rows
  //    per block (tokens > blocks): their loads batched across rows (copy_rows); one row:
  //    copy_units, which measured faster there.
  const int my_rows = block < rows ? (rows - 1 - block) / num_blocks + 1 : 0;
  if (my_rows > 1) {
    const auto row = [&](std::size_t k) { return block + static_cast<int>(k) * num_blocks; };
    detail::copy_rows(
        g, static_cast<std::size_t>(my_rows), vecs, [&](std::size_t k) { return ar.input(row(k)); },
        [&](std::size_t k) { return a.input + static_cast<std::size_t>(row(k)) * hidden; });
  } else if (my_rows == 1) {
    detail::copy_units<16>(g, ar.input(block), a.input + static_cast<std::size_t>(block) * hidden, vecs);
  }
  ar.publish_strided(g, block, num_blocks);
  // Counted now, while the flags travel, not as the kernel's last round trip (see finish()).
  ar.finish(g, num_blocks);

  bool ok = true;
  const detail::strided_vectors vec{static_cast<std::size_t>(g.thread_rank()), static_cast<std::size_t>(g.size())};
  if constexpr (Algo == algorithm::flat) {
    // 2. Every row, reduced here: outputs go straight to the caller's arrays.
    auto epi = detail::make_rmsnorm_epilogue<BlockThreads, detail::rmsnorm_operand_loads<VecsPerThread>, VecsPerThread>(
        a, a.residual, a.output);
    for (int i = block; i < rows && ok; i += num_blocks) {
      epi.preload_row(static_cast<std::size_t>(i), vec, vecs);  // in flight while the row's flags arrive
      epi.preload_shared(vec, vecs);
      ok = ar.template reduce<VecsPerThread>(g, i, map, epi);
    }
  } else {
    // 2. This rank's chunk: reduced, residual added, published in its buffer (new residual rows,
    //    then each row's sum of squares); 3. every row finished from its owner's results (this
    //    rank's own rows too).
    const std::size_t res_bytes = detail::round16(tokens * hidden * sizeof(T));
    const auto res_of = [&](int r) { return reinterpret_cast<T*>(ar.results(r)); };
    const auto totals_of = [&](int r) { return reinterpret_cast<float*>(ar.results(r) + res_bytes); };
    const int me = ar.rank();
    detail::tree_owner_epilogue<VecsPerThread, T, Out, BlockThreads> epi{
        detail::make_rmsnorm_epilogue<BlockThreads, detail::rmsnorm_operand_loads<VecsPerThread>, VecsPerThread>(
            a, res_of(me), a.output),
        totals_of(me)};
    // The weight, loaded while this block reduces and waits for the owners.
    const detail::tree_row_finisher<VecsPerThread, T, Out, BlockThreads> fin(a, vec);
    for (int i = block; i < rows && ok; i += num_blocks) {
      if (!ar.owns(i)) continue;
      epi.stages.preload_row(static_cast<std::size_t>(i), vec, vecs);
      ok = ar.template reduce_owned<VecsPerThread>(g, i, map, epi);
      if (ok) ar.publish_result(g, i);
    }
    if (ok) ok = ar.wait_results_strided(g, block, num_blocks);  // all of this block's rows at once
    // Several rows at a time (one load latency for all): four of one vector per thread, two of
    // two; rows of more than two vectors per thread (16384 bf16) one at a time on a GPU (more would
    // not fit the registers).
    constexpr int batch = RCCLX_BACKEND_HOST ? 2 : (VecsPerThread == 1 ? 4 : (VecsPerThread == 2 ? 2 : 1));
    const auto finish = [&](auto rows_tag, int first) {
      constexpr int n_rows = decltype(rows_tag)::value;
      std::size_t row[n_rows];
      const T* res[n_rows];
      const float* total[n_rows];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int r = 0; r < n_rows; ++r) {
        const int i = first + r * num_blocks, o = ar.owner(i);
        row[r] = static_cast<std::size_t>(i);
        res[r] = res_of(o) + row[r] * hidden;
        total[r] = totals_of(o) + i;
      }
      fin.finish(row, res, total);
    };
    int i = block;
    if constexpr (batch >= 4)
      for (; ok && i + 3 * num_blocks < rows; i += 4 * num_blocks) finish(std::integral_constant<int, 4>{}, i);
    if constexpr (batch >= 2)
      for (; ok && i + num_blocks < rows; i += 2 * num_blocks) finish(std::integral_constant<int, 2>{}, i);
    for (; ok && i < rows; i += num_blocks) finish(std::integral_constant<int, 1>{}, i);
  }
  return ok;
}

// Blocks per rank of a call: a function of the arguments only, so every rank launches the same grid.
RCCLX_HOST_DEVICE constexpr int rmsnorm_blocks_for(std::size_t tokens,
                                                   const rmsnorm_launch_config& cfg = default_rmsnorm_launch_config()) {
  return tokens == 0 ? 0 : (tokens < static_cast<std::size_t>(cfg.max_blocks) ? static_cast<int>(tokens) : cfg.max_blocks);
}

// The algorithm a call runs: `algo`, or for automatic the DDA table's choice for S bytes per rank
// (dda/select.hpp, with its environment overrides).
template <class T>
inline algorithm resolve_rmsnorm_algorithm(algorithm algo, std::size_t tokens, std::size_t hidden, int num_ranks) {
  return algo == algorithm::automatic ? dda::select_algorithm(tokens * hidden * sizeof(T), num_ranks) : algo;
}

namespace detail {

template <class T, int MaxRanks>
inline void check_rmsnorm_call(const std::string& w, algorithm algo, int num_blocks) {
  kernel::check_algorithm(w, algo);
  if (algo == algorithm::low_precision)
    throw error(errc::unsupported, w + ": algorithm::low_precision is not available for the fused kernels; use flat, "
                                       "tree or automatic");
  kernel::check_num_blocks(w, num_blocks);
}

template <class T, class Out, int MaxRanks>
inline void check_rmsnorm_table(const std::string& w, const core::peer_table<T, MaxRanks>& t,
                                const rmsnorm_args<T, Out>& a, tile_slots slots, algorithm resolved) {
  const std::size_t s = round16(a.tokens * a.hidden * sizeof(T));
  const std::size_t s_out = round16(a.tokens * a.hidden * sizeof(output_t<T, Out>));
  const int rows = static_cast<int>(a.tokens);
  const std::size_t padded = padded_cols<T>(a.hidden);
  if (resolved == algorithm::flat)
    tile_allreduce<T, MaxRanks, algorithm::flat>::check(w.c_str(), t, slots, padded, rows);
  else
    tile_allreduce<T, MaxRanks, algorithm::tree>::check(w.c_str(), t, slots, padded, rows,
                                                        tree_results_bytes<T>(a.tokens, padded));
  const void* own = t.data[t.rank()];
  const std::size_t cap = t.capacity_bytes;
  if (overlap(a.input, s, own, cap) || overlap(a.residual, s, own, cap) || overlap(a.output, s_out, own, cap))
    throw error(errc::invalid_argument, w + ": input, residual and output must not lie in this rank's symmetric "
                                            "buffer (the kernel uses it as its workspace)");
}

// The tile-flag kernels' body (BlockThreads: the ready-made block, one thread on the host backend).
template <algorithm Algo, int VPT, class T, class Out>
struct rmsnorm_body {
  static constexpr int max_threads = RCCLX_GPU_BLOCKS ? default_rmsnorm_launch_config().threads : 1;
  rmsnorm_args<T, Out> a;
  tile_slots slots;
  template <class Group, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    return allreduce_rmsnorm_block<Algo, VPT, max_threads>(g, t, a, slots, block, num_blocks);
  }
};

// The rows kernels' body (rows of any length, per-token output; fused/detail/rmsnorm_rows.hpp).
template <algorithm Algo, int VPT, class T, class Out>
struct rmsnorm_rows_body {
  static constexpr int max_threads = RCCLX_GPU_BLOCKS ? default_rmsnorm_launch_config().threads : 1;
  rmsnorm_args<T, Out> a;
  tile_slots slots;
  template <class Group, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    return allreduce_rmsnorm_rows_block<Algo, VPT, max_threads>(g, t, a, slots, block, num_blocks);
  }
};

// Launches the cluster kernel (allreduce_rmsnorm_cluster.hpp) for this rank if it applies
// (try_rmsnorm_cluster_choices); false if it does not, and nothing was launched. Every rank must decide
// alike (same GPU model, same RCCLX_RMSNORM_CLUSTER): the cluster and tile kernels wait for
// different signals, and a mixed call ends in the bounded timeout error on every rank.
template <class T, class Out, int MaxRanks>
inline bool try_launch_rmsnorm_cluster(const std::string& who, const core::peer_table<T, MaxRanks>& t,
                                       const rmsnorm_args<T, Out>& a, gpu::stream_t stream) {
#if RCCLX_BACKEND_CUDA
  constexpr int bt = default_rmsnorm_launch_config().threads;
  bool launched = false;
  with_vecs_per_thread<T>(vecs_per_thread<T>(a.hidden, bt), [&](auto vpt_tag) {
    constexpr int vpt = decltype(vpt_tag)::value;
    launched = try_rmsnorm_cluster_choices<vpt>([&](auto cb_tag, auto split_tag, int rows) {
      constexpr int cb = decltype(cb_tag)::value, split = decltype(split_tag)::value;
      using body = rmsnorm_cluster_body<vpt, cb, split, T, Out>;
      constexpr auto kernel = kernel::kernel_of<body>(static_cast<const core::peer_table<T, MaxRanks>*>(nullptr));
      const int groups = rmsnorm_cluster_plan<kernel, cb, split, T>(t.signals, a.tokens, a.hidden, 1, rows);
      if (groups == 0) return false;
      kernel::launch_clusters(who, t, {groups * cb, body::max_threads}, cb, body{a}, stream);
      return true;
    });
  });
  return launched;
#else
  (void)who;
  (void)t;
  (void)a;
  (void)stream;
  return false;
#endif
}

template <class T, class Out, int MaxRanks, bool by_value, class Table>
inline void launch_vector_rows(const std::string& who, const Table& table, const rmsnorm_args<T, Out>& args,
                               tile_slots slots, algorithm a, gpu::stream_t stream, int num_blocks,
                               const kernel::grid_shape& shape, const kernel::table_need& need);

// Both table forms: checks, then the rows kernels (rows of any length, per-token output) or the
// vector kernels (the cluster kernel where it applies, else the tile-flag kernel).
template <class T, class Out, int MaxRanks, class Table>
inline void allreduce_rmsnorm(const Table& table, const rmsnorm_args<T, Out>& args, tile_slots slots, algorithm algo,
                              gpu::stream_t stream, int num_blocks) {
  const std::string who = kernel::name_of("rcclx::fused::allreduce_rmsnorm", table);
  check_rmsnorm_call<T, MaxRanks>(who, algo, num_blocks);
  check_rmsnorm_args(who.c_str(), args);
  const int n = kernel::num_ranks_of(table);
  kernel::check_num_ranks(who, n, MaxRanks);
  constexpr bool by_value = std::is_same<Table, core::peer_table<T, MaxRanks>>::value;
  if (!by_value && (args.tokens > static_cast<std::size_t>(slots.max_tiles) || slots.first < 0))
    throw error(errc::invalid_argument, who + ": tokens = " + std::to_string(args.tokens) +
                                            " exceeds tile_slots.max_tiles = " + std::to_string(slots.max_tiles));
  const algorithm a = resolve_rmsnorm_algorithm<T>(algo, args.tokens, args.hidden, n);
  if (const core::peer_table<T, MaxRanks>* t = kernel::readable(who, table)) check_rmsnorm_table(who, *t, args, slots, a);
  if (args.tokens == 0) return;
  const rmsnorm_launch_config cfg = default_rmsnorm_launch_config();
  const kernel::grid_shape shape{num_blocks > 0 ? num_blocks : rmsnorm_blocks_for(args.tokens, cfg), cfg.threads};
  const kernel::table_need need{n, allreduce_rmsnorm_workspace_bytes<T, Out>(args.tokens, args.hidden, a), slots.end()};
  if (uses_rows_kernel<T, Out>(args.hidden)) {  // rows of any length, per-token output
    with_vecs_per_thread<T>(vecs_per_thread<T>(args.hidden, cfg.threads), [&](auto vpt_tag) {
      constexpr int vpt = decltype(vpt_tag)::value;
      using flat_body = rmsnorm_rows_body<algorithm::flat, vpt, T, Out>;
      using tree_body = rmsnorm_rows_body<algorithm::tree, vpt, T, Out>;
      if (a == algorithm::flat)
        kernel::launch(who, table, need, shape, flat_body{args, slots}, stream, kernel::also_preload<tree_body>{});
      else
        kernel::launch(who, table, need, shape, tree_body{args, slots}, stream, kernel::also_preload<flat_body>{});
    });
    return;
  }
  if constexpr (!is_per_token<Out>::value) launch_vector_rows<T, Out, MaxRanks, by_value>(who, table, args, slots, a, stream,
                                                                                          num_blocks, shape, need);
}

// Rows of whole vectors, Out = T or a per-tensor FP8 format: the cluster kernel where it applies,
// else the tile-flag kernel.
template <class T, class Out, int MaxRanks, bool by_value, class Table>
inline void launch_vector_rows(const std::string& who, const Table& table, const rmsnorm_args<T, Out>& args,
                               tile_slots slots, algorithm a, gpu::stream_t stream, int num_blocks,
                               const kernel::grid_shape& shape, const kernel::table_need& need) {
  if constexpr (by_value)
    if (a == algorithm::flat && num_blocks == 0 && try_launch_rmsnorm_cluster(who, table, args, stream)) return;
  const rmsnorm_launch_config cfg = default_rmsnorm_launch_config();
  with_vecs_per_thread<T>(vecs_per_thread<T>(args.hidden, cfg.threads), [&](auto vpt_tag) {
    constexpr int vpt = decltype(vpt_tag)::value;
    using flat_body = rmsnorm_body<algorithm::flat, vpt, T, Out>;
    using tree_body = rmsnorm_body<algorithm::tree, vpt, T, Out>;
    if (a == algorithm::flat)
      kernel::launch(who, table, need, shape, flat_body{args, slots}, stream, kernel::also_preload<tree_body>{});
    else
      kernel::launch(who, table, need, shape, tree_body{args, slots}, stream, kernel::also_preload<flat_body>{});
  });
}

}  // namespace detail

// AllReduce + residual add + RMSNorm for this rank (table.rank()). Out: T, an rcclx::fp8 format
// (then args.output holds codes and args.scale the scale), or per_token<F> (codes, and each row's
// scale in args.token_scales: fused/fp8_per_token.hpp). hidden: any in [1, max_hidden]; rows of
// whole 16-byte vectors run the vector kernels, others (and per-token output) the rows kernels of
// fused/detail/rmsnorm_rows.hpp (RMS over the true hidden). slots: the signal-pad slots of the tile
// flags, slots.max_tiles >= args.tokens, apart from barrier blocks used on the same pads.
// GPU backends: enqueues one kernel on `stream`; a peer that never arrives is recorded in the rank's
// pad. Host backend: runs this rank's blocks as threads and throws rcclx::error(timeout) naming the
// missing rank. Errors before launch: invalid algorithm (invalid_argument) or low_precision
// (unsupported); hidden 0 (invalid_argument) or above max_hidden (unsupported); eps negative or
// not finite; a null pointer or one not aligned to 16 bytes (rows of whole vectors) or to an
// element (invalid_argument / misaligned); per-token: token_scales null, qmax not finite and > 0; input, residual and output overlapping each other or the
// symmetric buffer; tokens above slots.max_tiles; slots beyond the pads' max_blocks; a symmetric
// buffer too small for the call (allreduce_rmsnorm_workspace_bytes). tokens == 0 does nothing.
template <class T, class Out, int MaxRanks>
void allreduce_rmsnorm(const core::peer_table<T, MaxRanks>& table, const rmsnorm_args<T, Out>& args, tile_slots slots,
                       algorithm algo = algorithm::automatic, gpu::stream_t stream = {}, int num_blocks = 0) {
  detail::allreduce_rmsnorm<T, Out, MaxRanks>(table, args, slots, algo, stream, num_blocks);
}

// The same with the table in device memory (a captured graph whose table is patched later). The
// kernel checks the rank count, the buffer capacity and the pad slots, and records errc::mismatch
// in the rank's error record instead of running when they do not fit.
template <class T, class Out, int MaxRanks>
void allreduce_rmsnorm(const core::peer_table<T, MaxRanks>* device_table, int num_ranks,
                       const rmsnorm_args<T, Out>& args, tile_slots slots, algorithm algo = algorithm::automatic,
                       gpu::stream_t stream = {}, int num_blocks = 0) {
  detail::allreduce_rmsnorm<T, Out, MaxRanks>(kernel::device_table<T, MaxRanks>{device_table, num_ranks}, args, slots,
                                              algo, stream, num_blocks);
}

}  // namespace fused
RCCLX_NAMESPACE_END
