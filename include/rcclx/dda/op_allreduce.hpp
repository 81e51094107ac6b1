// rcclx/dda/op_allreduce.hpp: AllReduce and ReduceScatter with the ops that need more than a
// pairwise step (reduce_op::product, avg, premul_sum; core/ops.hpp): the device templates for your
// kernels and the host launchers' path for them. dda::allreduce and dda::reduce_scatter take a
// reduce_spec (an op and, for premul_sum, its factor) and come here for those three ops; sum, min
// and max keep their own kernels (flat.hpp, tree.hpp, reduce_scatter.hpp): these are new kernels of
// the same bodies, which take the op's value (sum, min and max: a default-constructed op).
//
//   bool ok = rcclx::dda::tree_allreduce_op(rcclx::gpu::block_group{}, table, in, out, count, blockIdx.x,
//                                           gridDim.x, rcclx::core::op_premul_sum{{}, 0.25f});
//   rcclx::dda::allreduce(t, in, out, count, rcclx::reduce_spec{rcclx::reduce_op::premul_sum, 0.25f});
//   rcclx::dda::reduce_scatter(t, in, out, count, rcclx::reduce_op::avg, stream);
//
// The algorithms are flat's barrier one-shot and tree's two-shot (flat.hpp, tree.hpp), and the
// one-shot ReduceScatter (reduce_scatter.hpp), with the fold of kernel::reduce_vec_with: each rank's
// value widened (fp32; int32 for int32), through op.pre (premul_sum: times the factor, rounded to
// fp32, gpu::mul_rn), folded in rank order 0..N-1, through op.finish (avg: divided by N) once, then
// rounded to T once. Every rank reduces the same values in the same order: the same bits on every
// rank, flat and tree alike, and a ReduceScatter's block r is that of the AllReduce.
// flat here always runs the barrier protocol (no LL one-shot): count * sizeof(T) must fit the
// symmetric buffer, and the output must not be this rank's symmetric buffer (tree allows it).
// Preconditions and errors are those of dda::allreduce / dda::reduce_scatter, plus: premul_sum with
// an integer T or a factor that is not finite (unsupported / invalid_argument). A device factor
// (reduce_spec::factor_device) is read by the launchers' kernel bodies (resolve_op); a kernel of your
// own calls op.with_device_factor<T>() itself.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "../core/barrier.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../gpu/runtime.hpp"
#include "../kernel/checks.hpp"
#include "../kernel/launch.hpp"
#include "../kernel/layout.hpp"
#include "../kernel/reduce.hpp"
#include "../kernel/vector_io.hpp"
#include "detail/tiles.hpp"
#include "flat.hpp"
#include "launch_config.hpp"
#include "tree.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

namespace detail {

template <class ReduceOp, class T>
RCCLX_HOST_DEVICE constexpr bool op_takes() {
  return core::is_reducible_v<T> && !(std::is_integral<T>::value && core::op_steps<ReduceOp>::pre);
}

// The op a kernel body runs: premul_sum's factor read from the device when the spec gave a device
// factor (core::op_premul_sum::with_device_factor), every other op as it is.
template <class T, class ReduceOp>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE ReduceOp resolve_op(const ReduceOp& op) {
  if constexpr (std::is_same<ReduceOp, core::op_premul_sum>::value && !std::is_integral<T>::value)
    return op.template with_device_factor<T>();
  else
    return op;
}

// Calls f(op functor) for any valid spec (sum, min, max, product, avg, premul_sum).
template <class F>
inline void with_any_op(const reduce_spec& spec, F&& f) {
  if (is_basic(spec.op)) core::with_op(spec.op, f);
  else core::with_extended_op(spec, f);
}

}  // namespace detail

// flat_allreduce's barrier one-shot with an op value (flat_allreduce_barrier). Group-collective;
// false if a peer never arrived or (checked mode) ran another call (recorded: leave the kernel).
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool flat_allreduce_op(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                         T* output, std::size_t count, int block, int num_blocks, ReduceOp op) {
  static_assert(detail::op_takes<ReduceOp, T>(), "dda::flat_allreduce_op: T must be reducible (core::is_reducible_v) "
                                                 "(premul_sum: floating types)");
  return flat_allreduce_barrier(g, t, input, output, count, block, num_blocks, op);
}

// tree_allreduce with an op value (output may be this rank's symmetric buffer).
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool tree_allreduce_op(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                         T* output, std::size_t count, int block, int num_blocks, ReduceOp op) {
  static_assert(detail::op_takes<ReduceOp, T>(), "dda::tree_allreduce_op: T must be float, bf16, fp16 or int32_t "
                                                 "(premul_sum: floating types)");
  return tree_allreduce(g, t, input, output, count, block, num_blocks, op);
}

// The one-shot ReduceScatter with an op value (count = N * C; rank r gets block r reduced): the body
// of dda::flat_reduce_scatter too (reduce_scatter.hpp), with a default-constructed op.
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool flat_reduce_scatter_op(const Group& g, const core::peer_table<T, MaxRanks>& t,
                                                                const T* input, T* output, std::size_t count, int block,
                                                                int num_blocks, ReduceOp op) {
  static_assert(detail::op_takes<ReduceOp, T>(), "dda::flat_reduce_scatter_op: T must be float, bf16, fp16 or "
                                                 "int32_t (premul_sum: floating types)");
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  const std::size_t c_elems = count / static_cast<std::size_t>(n);
  if (c_elems == 0) return true;
  const kernel::layout<T> l(c_elems, g.size(), block, num_blocks);
  const kernel::tile_range all{0, l.tiles};
  T* own = t.data[r];
  if (input != own) {
    for (int c = 0; c < n; ++c) {
      if (c == r) continue;
      const std::size_t off = static_cast<std::size_t>(c) * c_elems;
      kernel::copy_owned(l, tid, all, input + off, own + off);
    }
  }
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  kernel::peer_ptrs<T, MaxRanks> src(t);
  const std::size_t mine = static_cast<std::size_t>(r) * c_elems;
  for (int p = 0; p < MaxRanks; ++p)
    if (p < n) src.p[p] = (p == r ? input : src.p[p]) + mine;
  const bool src_aligned = (c_elems * sizeof(T)) % 16 == 0 && gpu::is_aligned(input, 16);
  detail::reduce_owned(l, tid, all, src, src_aligned, output, static_cast<T*>(nullptr), op);
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

namespace detail {

// The block bodies: the op travels in the kernel argument (premul_sum: its factor).
template <class ReduceOp, algorithm Algo, class T>
struct allreduce_op_body {
  const T* input;
  T* output;
  std::size_t count;
  ReduceOp op;
  template <class Group, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    if constexpr (Algo == algorithm::flat)
      return flat_allreduce_op(g, t, input, output, count, block, num_blocks, resolve_op<T>(op));
    else
      return tree_allreduce_op(g, t, input, output, count, block, num_blocks, resolve_op<T>(op));
  }
};

template <class ReduceOp, class T>
struct reduce_scatter_op_body {
  const T* input;
  T* output;
  std::size_t count;
  ReduceOp op;
  template <class Group, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    return flat_reduce_scatter_op(g, t, input, output, count, block, num_blocks, resolve_op<T>(op));
  }
};

// The AllReduce launcher's path for product, avg and premul_sum (both table forms): checks, shape,
// launch. `a`: flat or tree (resolved by the caller).
template <class T, int MaxRanks, class Table>
inline void allreduce_extended(const std::string& who, const Table& table, const T* input, T* output,
                               std::size_t count, const reduce_spec& spec, algorithm a, gpu::stream_t stream,
                               int num_blocks, int threads) {
  kernel::check_spec<T>(who, spec);
  const int n = kernel::num_ranks_of(table);
  const core::peer_table<T, MaxRanks>* t = kernel::readable(who, table);
  const launch_config cfg =
      launch_config_for(who, count * sizeof(T), a, t ? t->signals.max_blocks : default_max_blocks, threads);
  const kernel::grid_shape shape{num_blocks > 0 ? num_blocks : num_blocks_for<T>(count, a, n, cfg), cfg.threads};
  const std::size_t bytes = count * sizeof(T);
  if (t) {
    kernel::check_table_buffers(who, *t);
    kernel::check_capacity(who, count, bytes, t->capacity_bytes, "the input");
    kernel::check_blocks_fit(who, shape.blocks, t->signals);
    const T* own = t->data[t->rank()];
    if (count > 0 && input != own && kernel::overlaps(input, own, bytes))
      throw error(errc::invalid_argument, who + ": input overlaps this rank's symmetric buffer without being it "
                                              "(pass the buffer itself, or disjoint memory)");
    if (count > 0 && output != own && kernel::overlaps(output, own, bytes))
      throw error(errc::invalid_argument, who + ": output overlaps this rank's symmetric buffer without being it");
    if (count > 0 && a == algorithm::flat && output == own)
      throw error(errc::invalid_argument, who + ": op = " + to_string(spec.op) + " with algorithm::flat: the output "
                                              "must not be this rank's symmetric buffer (peers read it while the "
                                              "result is written): use algorithm::tree, or another output");
  }
  if (count == 0) return;
  if constexpr (std::is_integral<T>::value) {
    if (spec.op == reduce_op::premul_sum) return;  // refused by check_spec
  }
  const kernel::table_need need{n, bytes};
  core::with_extended_op(spec, [&](auto op) {
    using Op = decltype(op);
    if constexpr (op_takes<Op, T>()) {
      using flat_body = allreduce_op_body<Op, algorithm::flat, T>;
      using tree_body = allreduce_op_body<Op, algorithm::tree, T>;
      if (a == algorithm::flat)
        kernel::launch(who, table, need, shape, flat_body{input, output, count, op}, stream, kernel::also_preload<tree_body>{});
      else
        kernel::launch(who, table, need, shape, tree_body{input, output, count, op}, stream, kernel::also_preload<flat_body>{});
    }
  });
}

// The ReduceScatter launcher's path for product, avg and premul_sum (both table forms).
template <class T, int MaxRanks, class Table>
inline void reduce_scatter_extended(const std::string& who, const Table& table, const T* input, T* output,
                                    std::size_t count, const reduce_spec& spec_in, gpu::stream_t stream,
                                    int num_blocks) {
  kernel::check_spec<T>(who, spec_in);
  const reduce_spec spec{core::effective_op<T>(spec_in.op), spec_in.factor, spec_in.factor_device};
  const int n = kernel::num_ranks_of(table);
  kernel::check_call<T>(who, kernel::io_kind::scatter, n, MaxRanks, input, output, count, num_blocks);
  const core::peer_table<T, MaxRanks>* t = kernel::readable(who, table);
  const launch_config cfg = one_shot_launch_config();
  const std::size_t c_elems = count / static_cast<std::size_t>(n);
  const kernel::grid_shape shape{
      num_blocks > 0 ? num_blocks : kernel::blocks_for_elems<T>(c_elems, cfg.threads, cfg.flat_max_blocks), cfg.threads};
  const std::size_t bytes = count * sizeof(T);
  if (t) {
    kernel::check_table(who, *t, count, bytes, "the input", shape.blocks);
    const T* own = t->data[t->rank()];
    if (count > 0 && input != own && kernel::overlaps(input, bytes, own, t->capacity_bytes))
      throw error(errc::invalid_argument, who + ": input overlaps this rank's symmetric buffer without being it");
    if (count > 0 && kernel::overlaps(output, c_elems * sizeof(T), own, t->capacity_bytes))
      throw error(errc::invalid_argument, who + ": output overlaps this rank's symmetric buffer (peers read it)");
  }
  if (count == 0) return;
  const kernel::table_need need{n, bytes};
  core::with_extended_op(spec, [&](auto op) {
    using Op = decltype(op);
    if constexpr (op_takes<Op, T>())
      kernel::launch(who, table, need, shape, reduce_scatter_op_body<Op, T>{input, output, count, op}, stream);
  });
}

}  // namespace detail
}  // namespace dda
RCCLX_NAMESPACE_END
