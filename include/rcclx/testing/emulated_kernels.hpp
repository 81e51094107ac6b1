// rcclx/testing/emulated_kernels.hpp: the device functors emulated_peers launches, public for code
// that launches and times them itself on emulated ranks (a benchmark, a profiler): every collective
// and algorithm one block of one rank at a time, and baselines of a grid (an empty kernel: the
// launch floor; a 16-byte copy of every rank's input: the bandwidth roofline; the LL packets of a
// one-shot without data: the exchange floor). Adding a collective = adding a functor here and a
// method to emulated_peers.
//
//   namespace rt = rcclx::testing;
//   using flat = rt::emulated_allreduce<rcclx::core::op_sum, rcclx::algorithm::flat, float, 8>;
//   rt::launch_emulated(n, blocks, threads, flat{world.device_tables<float>(), buffers, count}, stream);
//   rt::launch_emulated(n, blocks, threads, rt::emulated_copy<float, 8>{buffers, count}, stream);
#pragma once

#include <cstddef>
#include <type_traits>

#include "../core/ll.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../dda/allgather.hpp"
#include "../dda/allreduce.hpp"
#include "../dda/alltoall.hpp"
#include "../dda/reduce_scatter.hpp"
#include "../kernel/layout.hpp"
#include "../kernel/reduce.hpp"
#include "../kernel/vector_io.hpp"
#include "../lpc/allgather.hpp"
#include "../lpc/allreduce.hpp"
#include "../lpc/alltoall.hpp"
#include "../lpc/reduce_scatter.hpp"
#include "emulated_launch_config.hpp"
#include "launch.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

// DDA AllReduce (flat or tree, chosen at compile time) on every emulated rank.
template <class ReduceOp, algorithm Algo, class T, int MaxRanks>
struct emulated_allreduce {
  // The ready-made kernels' register budget (__launch_bounds__(512)): without it the compiler may
  // give the flat/tree body more registers than a 512-thread block can have, and it cannot launch.
  static constexpr int max_threads_per_block = kernel::default_max_threads;
  const core::peer_table<T, MaxRanks>* tables;  // device memory, indexed by rank
  rank_buffers<T, MaxRanks> buf;
  std::size_t count;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    const core::peer_table<T, MaxRanks>& t = tables[ix.rank];
    (void)dda::dispatch_allreduce<ReduceOp, Algo>(g, t, buf.in[ix.rank], buf.out[ix.rank], count, ix.block,
                                                  ix.num_blocks);
  }
};

// The other collectives: Algo flat = the one-shot direct algorithm (dda::flat_allgather etc.),
// low_precision = the LPC device template with Config. ReduceOp is ignored where there is none.
template <lpc::collective Coll, algorithm Algo, class Config, class ReduceOp, class T, int MaxRanks>
struct emulated_collective {
  static_assert(Algo == algorithm::flat || Algo == algorithm::low_precision, "flat or low_precision");
  // At most 128 registers per thread, as in the ready-made kernels: blocks of up to 512 threads
  // always launch (an unbounded LPC kernel can ask for more registers than that).
  static constexpr int max_threads_per_block = kernel::default_max_threads;
  const core::peer_table<T, MaxRanks>* tables;  // device memory, indexed by rank
  rank_buffers<T, MaxRanks> buf;
  std::size_t count;  // input elements per rank

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    const core::peer_table<T, MaxRanks>& t = tables[ix.rank];
    const T* in = buf.in[ix.rank];
    T* out = buf.out[ix.rank];
    if constexpr (Algo == algorithm::low_precision) {
      if constexpr (Coll == lpc::collective::allreduce)
        (void)lpc::fp8_allreduce<ReduceOp, Config>(g, t, in, out, count, ix.block, ix.num_blocks);
      else if constexpr (Coll == lpc::collective::allgather)
        (void)lpc::fp8_allgather<Config>(g, t, in, out, count, ix.block, ix.num_blocks);
      else if constexpr (Coll == lpc::collective::reduce_scatter)
        (void)lpc::fp8_reduce_scatter<ReduceOp, Config>(g, t, in, out, count, ix.block, ix.num_blocks);
      else
        (void)lpc::fp8_alltoall<Config>(g, t, in, out, count, ix.block, ix.num_blocks);
    } else {
      static_assert(Coll != lpc::collective::allreduce, "plain AllReduce: emulated_allreduce");
      using schedule = typename Config::schedule;
      if constexpr (Coll == lpc::collective::allgather)
        (void)dda::flat_allgather<schedule>(g, t, in, out, count, ix.block, ix.num_blocks);
      else if constexpr (Coll == lpc::collective::reduce_scatter)
        (void)dda::flat_reduce_scatter<ReduceOp>(g, t, in, out, count, ix.block, ix.num_blocks);
      else
        (void)dda::flat_alltoall<schedule>(g, t, in, out, count, ix.block, ix.num_blocks);
    }
  }
};

// The functor emulated_peers launches for (Coll, Algo, Config, ReduceOp): its template arguments
// reduced to what the body reads, so that calls which run the same code share one kernel. The
// plain collectives read only Config's schedule (ReduceScatter not even that), and AllGather and
// AlltoAll read no operator. Without this, every LPC config of a test and every runtime operator
// compiled its own copy of the plain kernels.
template <lpc::collective Coll, algorithm Algo, class Config>
using emulated_config_t = std::conditional_t<
    Algo == algorithm::low_precision, Config,
    std::conditional_t<Coll == lpc::collective::reduce_scatter, lpc::default_config,
                       lpc::config<lpc::default_format, lpc::default_config::block_size,
                                   lpc::default_config::scale, typename Config::schedule>>>;
template <lpc::collective Coll, class ReduceOp>
using emulated_op_t = std::conditional_t<Coll == lpc::collective::allgather || Coll == lpc::collective::alltoall,
                                         core::op_sum, ReduceOp>;
template <lpc::collective Coll, algorithm Algo, class Config, class ReduceOp, class T, int MaxRanks>
using emulated_collective_t = emulated_collective<Coll, Algo, emulated_config_t<Coll, Algo, Config>,
                                                  emulated_op_t<Coll, ReduceOp>, T, MaxRanks>;

// Does nothing: the launch-latency floor of a grid (rcclx-bench's empty-kernel baseline).
struct emulated_empty {
  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group&, launch_index) const {}
};

// Copies each rank's input to its output with the same 16-byte loop as the collectives: the
// bandwidth roofline of the same grid (rcclx-bench's kernel-copy baseline).
template <class T, int MaxRanks>
struct emulated_copy {
  rank_buffers<T, MaxRanks> buf;
  std::size_t count;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    const kernel::layout<T> l(count, g.size(), ix.block, ix.num_blocks);
    kernel::copy_owned(l, g.thread_rank(), kernel::tile_range{0, l.tiles}, buf.in[ix.rank], buf.out[ix.rank]);
  }
};

// The floor under any cross-rank exchange on this device: each rank's block publishes one LL packet
// (core/ll.hpp) and waits for every peer's: no input, no reduction, no output.
template <int MaxRanks>
struct emulated_ll_probe {
  const core::peer_table<unsigned char, MaxRanks>* tables;  // device memory, indexed by rank

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    const core::signal_pads<MaxRanks>& s = tables[ix.rank].signals;
    const std::uint32_t flag = core::ll_begin(g, s, ix.block);
    if (g.thread_rank() == 0)
      core::ll_write(s.ll_region(s.rank, flag, ix.block), 0, gpu::vec16{}, flag, s.ll_block_bytes);
    const core::ll_halves<MaxRanks> h(s, flag, ix.block);
    bool failed = false;
    for (int p = g.thread_rank(); p < s.num_ranks && !failed; p += g.size()) {
      gpu::vec16 v;
      if (!core::ll_try_read(h.pick(p), 0, flag, v, h.split))
        failed = !core::ll_wait_from(s, h.pick(p), p, 0, flag, ix.block, v);
    }
    (void)g.sync_or(failed);
  }
};

// The exchange floor of a one-shot AllReduce of `count` elements with the launch's grid: every
// thread publishes the LL packet of its vector (the same packets, regions and flags as the LL
// one-shot, dda::flat_allreduce_ll's latency path) and waits until it has loaded every peer's packet
// of that vector. No input load, no reduction, no output store: what any one-shot must do.
template <class T, int MaxRanks>
struct emulated_ll_exchange {
  const core::peer_table<T, MaxRanks>* tables;  // device memory, indexed by rank
  std::size_t count;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    const core::signal_pads<MaxRanks>& s = tables[ix.rank].signals;
    const kernel::layout<T> l(count, g.size(), ix.block, ix.num_blocks);
    const int tid = g.thread_rank();
    const std::size_t vi = static_cast<std::size_t>(ix.block) * static_cast<std::size_t>(l.tile_vecs) + tid;
    const bool mine = vi < l.full_vecs || (vi == l.full_vecs && l.has_partial());
    const std::uint32_t flag = core::ll_begin(g, s, ix.block);
    bool failed = false;
    if (mine) {
      core::ll_write(s.ll_region(s.rank, flag, ix.block), static_cast<std::size_t>(tid), gpu::vec16{}, flag,
                     s.ll_block_bytes);
      const core::ll_halves<MaxRanks> h(s, flag, ix.block);
      // Batches of peers over constant bounds, as the one-shot (kernel/ll_reduce.hpp): h.p is
      // indexed with constants only, so it stays in registers.
      constexpr int batch = kernel::peer_batch<MaxRanks>;
      for (int p0 = 0; p0 < MaxRanks; p0 += batch) {
        if (p0 >= h.n || failed) break;
        core::ll_packet q[batch] = {};
        for (int j = 0; j < batch; ++j)
          if (p0 + j < h.n && p0 + j != h.rank)
            core::ll_load(h.p[p0 + j], static_cast<std::size_t>(tid), q[j], h.split);
        std::uint32_t pending = 0;
        for (int j = 0; j < batch; ++j)
          if (p0 + j < h.n && p0 + j != h.rank && !core::ll_landed(q[j], flag)) pending |= 1u << j;
        if (pending != 0u)
          failed = !core::ll_wait_batch<batch>(s, h, p0, static_cast<std::size_t>(tid), flag, ix.block, q, pending);
      }
    }
    (void)g.sync_or(failed);
  }
};

}  // namespace testing
RCCLX_NAMESPACE_END
