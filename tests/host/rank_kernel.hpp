// tests/host/rank_kernel.hpp: a minimal flat AllReduce written against the peer table alone, used
// to check the communicator's buffer resolution (workspace, registered, graph-captured) without
// depending on rcclx::dda. Block b of every rank owns the same slice: copy own input in (workspace
// path only), start barrier, sum every rank's slice in rank order, end barrier.
#pragma once

#include <cstddef>
#include <thread>
#include <type_traits>
#include <vector>

#include <rcclx/core/barrier.hpp>
#include <rcclx/core/peer_table.hpp>
#include <rcclx/gpu/group.hpp>
#include <rcclx/gpu/runtime.hpp>

namespace rcclx_test {

#if RCCLX_BACKEND_GPU
template <class F>
RCCLX_GLOBAL void rank_kernel(F f) {
  f(rcclx::gpu::block_group{}, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}
#endif

// One rank's launch: a kernel of `blocks` blocks on GPUs, one std::thread per block on the host.
template <class F>
inline void launch_rank(int blocks, int threads, const F& f, rcclx::gpu::stream_t stream) {
#if RCCLX_BACKEND_GPU
  rank_kernel<F><<<blocks, threads, 0, stream>>>(f);
  rcclx::gpu::check_launch("rank_kernel");
#else
  (void)threads;
  (void)stream;
  std::vector<std::thread> ts;
  for (int b = 0; b < blocks; ++b) ts.emplace_back([&f, b, blocks] { f(rcclx::gpu::thread_group{}, b, blocks); });
  for (auto& t : ts) t.join();
#endif
}

template <class T, int MaxRanks>
struct naive_allreduce {
  rcclx::core::peer_table<T, MaxRanks> table;               // used when device_table is null
  const rcclx::core::peer_table<T, MaxRanks>* device_table;  // graph capture: read at run time
  const T* input;
  T* output;
  std::size_t count;
  bool copy_in;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, int block, int num_blocks) const {
    const rcclx::core::peer_table<T, MaxRanks> t = device_table ? *device_table : table;
    const std::size_t per = (count + static_cast<std::size_t>(num_blocks) - 1) / static_cast<std::size_t>(num_blocks);
    std::size_t lo = per * static_cast<std::size_t>(block);
    if (lo > count) lo = count;
    std::size_t hi = lo + per;
    if (hi > count) hi = count;
    T* mine = t.data[t.rank()];
    if (copy_in)
      for (std::size_t i = lo + static_cast<std::size_t>(g.thread_rank()); i < hi; i += static_cast<std::size_t>(g.size()))
        mine[i] = input[i];
    if (!rcclx::core::barrier(g, t.signals, block, rcclx::core::barrier_kind::start)) return;
    for (std::size_t i = lo + static_cast<std::size_t>(g.thread_rank()); i < hi; i += static_cast<std::size_t>(g.size())) {
      T acc = t.data[0][i];
      for (int p = 1; p < t.num_ranks(); ++p) acc += t.data[p][i];
      output[i] = acc;
    }
    (void)rcclx::core::barrier(g, t.signals, block, rcclx::core::barrier_kind::end);
  }
};

// The communicator launch callable for naive_allreduce (captures by value, as launch() requires).
template <class T, int MaxRanks>
struct naive_launcher {
  const T* input;
  T* output;
  std::size_t count;
  int blocks;
  rcclx::gpu::stream_t stream;

  template <class Table>
  void operator()(const Table& t, bool uses_workspace) const {
    naive_allreduce<T, MaxRanks> k{};
    if constexpr (std::is_pointer<Table>::value) {
      k.device_table = t;
    } else {
      k.table = t;
      k.device_table = nullptr;
    }
    k.input = input;
    k.output = output;
    k.count = count;
    k.copy_in = uses_workspace;
    launch_rank(blocks, 128, k, stream);
  }
};

}  // namespace rcclx_test
