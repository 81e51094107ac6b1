// rcclx/fused/shard_walk.hpp: the walk of fused::shard_scan over one row of a rank's shard, for
// a scan of your own over the same loads (e.g. softmax_stats, or a scan's read floor): every
// element once, spread over the group, the 16-byte aligned middle of the row as vectors.
//
//   rcclx::fused::for_each_shard_element<8>(g, x, len,
//       [&](std::size_t j, float v) { push(v, begin + j); },                       // edge elements
//       [&](std::size_t j, const rcclx::fused::shard_vec4& e) { push4(e, begin + j); });  // x[j..j+3]
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../gpu/memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// Four consecutive floats of a shard (one 16-byte load).
struct shard_vec4 {
  float x[4];
};

// x[0, len) split at its 16-byte boundaries: elements [0, head) before the first vector, `vecs`
// 16-byte vectors from x + head, elements [tail, len) after the last one.
struct shard_split {
  std::size_t head, vecs, tail;
};
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE shard_split split_shard(const float* x, std::size_t len) {
  const std::size_t mis = (reinterpret_cast<std::uintptr_t>(x) & 15) / sizeof(float);
  const std::size_t head = std::min<std::size_t>(len, mis == 0 ? 0 : 4 - mis), vecs = (len - head) / 4;
  return {head, vecs, head + 4 * vecs};
}

// fe(j, x[j]) for the elements of x[0, len) outside its vectors, spread over the group.
template <class G, class FE>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void for_each_shard_edge(const G& g, const float* x, std::size_t len,
                                                             const shard_split& sp, FE&& fe) {
  const std::size_t gs = static_cast<std::size_t>(g.size()), tid = static_cast<std::size_t>(g.thread_rank());
  for (std::size_t j = tid; j < sp.head; j += gs) fe(j, x[j]);
  for (std::size_t j = sp.tail + tid; j < len; j += gs) fe(j, x[j]);
}

// Every element j below len once, spread over the group: fe(j, x[j]) for those outside x's vectors,
// fv(j, x[j..j+3]) for the rest, a 16-byte vector per load, Unroll vectors of a thread in flight
// together (a block's scan of a 64 KiB row is otherwise bound by one load's latency). A thread's
// fv calls come in increasing j.
template <int Unroll, class G, class FE, class FV>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void for_each_shard_element(const G& g, const float* x, std::size_t len, FE&& fe,
                                                                FV&& fv) {
  const std::size_t gs = static_cast<std::size_t>(g.size()), tid = static_cast<std::size_t>(g.thread_rank());
  const shard_split sp = split_shard(x, len);
  const std::size_t head = sp.head, vecs = sp.vecs;
  for_each_shard_edge(g, x, len, sp, fe);
  const float* xv = x + head;
  std::size_t v = tid;
  for (; v + (Unroll - 1) * gs < vecs; v += Unroll * gs) {
    gpu::vec16 w[Unroll];
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int u = 0; u < Unroll; ++u) w[u] = gpu::load16(xv + 4 * (v + static_cast<std::size_t>(u) * gs));
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int u = 0; u < Unroll; ++u) fv(head + 4 * (v + static_cast<std::size_t>(u) * gs), gpu::bit_cast<shard_vec4>(w[u]));
  }
  for (; v < vecs; v += gs) fv(head + 4 * v, gpu::bit_cast<shard_vec4>(gpu::load16(xv + 4 * v)));
}

}  // namespace fused
RCCLX_NAMESPACE_END
