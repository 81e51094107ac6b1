// rcclx/kernel/ll_reduce.hpp: the rank-order reduction of kernel/reduce.hpp over LL packets: one
// 16-byte vector per rank, the own rank's from a register, every peer's from its LL region as it
// lands. Part of rcclx/kernel/: internal but shared by the collectives (the DDA LL one-shot, the
// fused AllReduce + RMSNorm kernels); readable, not a public API.
//
//   const rcclx::core::ll_halves<8> h(s, flag, block);
//   rcclx::gpu::vec16 sum;
//   if (!rcclx::kernel::ll_reduce_vec<rcclx::core::op_sum, float>(s, h, packet, mine, flag, block, sum))
//     return false;   // a peer never arrived: recorded (barrier_kind::ll)
//
// The packets of a batch of peers are all loaded before any is checked (core::ll_packet); a batch
// whose packets have not all landed is polled in one loop (core::ll_wait_batch), then folded in
// rank order like any other source, so the bits equal the barrier protocol's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../core/ll.hpp"
#include "../core/ops.hpp"
#include "reduce.hpp"

RCCLX_NAMESPACE_BEGIN
namespace kernel {

// Packet `index` of every rank's LL half (the own rank: `mine`). `extra` is issued with the first
// batch's loads and polled in the same waits (the checked mode's fingerprint, core::check_poller);
// its failure fails the reduction.
template <class T, int MaxRanks, int Batch, class Extra>
struct ll_source {
  static constexpr bool rank0_untested = true;
  static constexpr bool one_at_a_time = false;
  using traits = core::value_traits<T>;
  using loaded = core::ll_packet;
  static constexpr int elems = gpu::elems_per_vec16<T>;
  const core::signal_pads<MaxRanks>& s;
  const core::ll_halves<MaxRanks>& h;
  std::size_t index;
  const gpu::vec16& mine;
  std::uint32_t flag;
  int block;
  Extra& extra;

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load(int p, core::ll_packet& q) const {
    if (p != h.rank) core::ll_load(h.p[p], index, q, h.split);
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool landed(int p0, int n, core::ll_packet (&q)[Batch]) {
    if (p0 == 0) extra.issue();
    std::uint32_t pending = 0;  // peers of the batch whose packet has not landed yet
    for (int j = 0; j < Batch; ++j) {
      const int p = p0 + j;
      if (p < n && p != h.rank && !core::ll_landed(q[j], flag)) pending |= 1u << j;
    }
    const int x = extra.poll();
    if (x < 0) return false;
    return !(RCCLX_UNLIKELY(pending != 0u || x == 0) &&
             !core::ll_wait_batch<Batch>(s, h, p0, index, flag, block, q, pending, extra));
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void values(int p, const core::ll_packet& q,
                                                  typename traits::acc_type (&x)[elems]) const {
    traits::unpack(p == h.rank ? mine : core::ll_payload(q), x);
  }
};

// Reduces LL packet `index` across ranks in rank order 0..n-1 into `out`: this rank's vector is
// `mine`, every peer's comes from its LL half. False if a wait expired (the error is recorded) or
// `extra` failed.
template <class ReduceOp, class T, int MaxRanks, class Extra = core::ll_no_extra>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool ll_reduce_vec(const core::signal_pads<MaxRanks>& s,
                                                       const core::ll_halves<MaxRanks>& h, std::size_t index,
                                                       const gpu::vec16& mine, std::uint32_t flag, int block,
                                                       gpu::vec16& out, Extra&& extra = Extra{}) {
  using traits = core::value_traits<T>;
  using acc_t = typename traits::acc_type;
  constexpr int e = gpu::elems_per_vec16<T>;
  constexpr int batch = peer_batch<MaxRanks>;
  acc_t acc[e] = {};
  if (!fold_ranks<MaxRanks, batch>(ll_source<T, MaxRanks, batch, std::remove_reference_t<Extra>>{
                                       s, h, index, mine, flag, block, extra},
                                   h.n, rank_order<ReduceOp, acc_t, e>{acc}))
    return false;
  out = traits::pack(acc);
  return true;
}

}  // namespace kernel
RCCLX_NAMESPACE_END
