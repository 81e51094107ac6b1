// rcclx/fused/detail/rmsnorm_rows.hpp: the residual add + RMSNorm kernels for rows of any length
// and for per-token FP8 output (Out = per_token<F>), on fused::epilogue and ragged_row_tiles: the
// tile of a row is padded to whole vectors (padding lanes zero, never passed to a stage), stages
// are called on whole vectors where every operand is vector-aligned and element by element
// otherwise, and rms_norm divides by the true hidden. allreduce_rmsnorm (flat and tree) and
// add_rmsnorm run the same stages in the same order and association: the same bits.
// Rows of whole vectors with Out = T or a per-tensor FP8 format keep the vector kernels
// (fused/rmsnorm_epilogue.hpp); these are new instantiations.
#pragma once

#include <cstddef>
#include <type_traits>

#include "../../gpu/shared.hpp"
#include "../epilogue.hpp"
#include "../fp8_per_token.hpp"
#include "../rmsnorm_args.hpp"
#include "../rmsnorm_epilogue.hpp"
#include "../tile_allreduce.hpp"
#include "../stages.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {
namespace detail {

struct rows_token_tag;

// Does a call take the rows kernels? Rows that are not whole vectors, or per-token output.
template <class T, class Out>
RCCLX_HOST_DEVICE constexpr bool uses_rows_kernel(std::size_t hidden) {
  return is_per_token<Out>::value || hidden % gpu::elems_per_vec16<T> != 0;
}

// The output stage of the rows kernels, writing rows of `ld` elements at `out`.
template <class T, class Out, int BlockThreads>
struct rows_output {
  using stage = typename output_of<T, Out>::stage;
  static RCCLX_HOST_DEVICE stage make(const rmsnorm_args<T, Out>& a, output_t<T, Out>* out) {
    if constexpr (rmsnorm_args<T, Out>::fp8_output) {
      return stage{out, a.hidden, a.scale};
    } else {
      return stage{out, a.hidden};
    }
  }
};
template <class T, class F, int BlockThreads>
struct rows_output<T, per_token<F>, BlockThreads> {
  using stage = fp8_out_per_token<F, BlockThreads>;
  static RCCLX_HOST_DEVICE stage make(const rmsnorm_args<T, per_token<F>>& a, std::uint8_t* out) {
    auto& tmp = gpu::block_shared<typename stage::storage_type, rows_token_tag>();
    return stage{out, a.hidden, a.token_scales, a.qmax, &tmp};
  }
};

// The whole chain: residual_add (in place), rms_norm, the output.
template <class T, class Out, int BlockThreads>
using rows_epilogue = epilogue<residual_add<T>, rms_norm<T, BlockThreads>, typename rows_output<T, Out, BlockThreads>::stage>;

template <int BlockThreads, class T, class Out>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE rows_epilogue<T, Out, BlockThreads> make_rows_epilogue(const rmsnorm_args<T, Out>& a) {
  return {residual_add<T>{a.residual, a.residual, a.hidden}, make_rmsnorm_stage<T, Out, BlockThreads>(a),
          rows_output<T, Out, BlockThreads>::make(a, a.output)};
}

// Tree owners: the row's sum of squares (rms_norm's partial and block sum), stored from column 0;
// v unchanged.
template <class T, int BlockThreads>
struct row_total_capture {
  static constexpr bool row_wide = true;
  rms_norm<T, BlockThreads> norm;
  float* totals;
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_partial(const position& p, const float (&v)[E]) const {
    return norm.row_partial(p, v);
  }
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_combine(const Group& g, float partial) const {
    return norm.row_combine(g, partial);
  }
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position& p, float (&)[E], float total) const {
    if (p.col == 0) totals[p.row] = total;
  }
};

// Every rank's finish of a tree row: rms_norm with the owner's sum.
template <class T, int BlockThreads>
struct norm_with_total {
  rms_norm<T, BlockThreads> norm;
  float total;
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position& p, float (&v)[E]) const {
    norm(p, v, total);
  }
};

// A row of `hidden` elements at src into v (the thread's vectors of the padded row; lanes past
// hidden zero), element loads.
template <int VPT, int E, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_row(float (&v)[VPT][E], const T* src, std::size_t hidden, std::size_t tid,
                                                  std::size_t gs) {
  using traits = core::value_traits<T>;
  for (int k = 0; k < VPT; ++k) {
    const std::size_t c0 = (static_cast<std::size_t>(k) * gs + tid) * E;
    for (int i = 0; i < E; ++i) v[k][i] = c0 + i < hidden ? traits::load(src[c0 + i]) : 0.0f;
  }
}

}  // namespace detail

// allreduce_rmsnorm_block for rows of any length and per-token output (the launcher takes it when
// detail::uses_rows_kernel): the same arguments and shape rules, with VecsPerThread * BlockThreads
// * E >= padded_cols<T>(hidden); tile_elems of its AllReduce = padded_cols<T>(hidden), the tree's
// results rows padded alike (allreduce_rmsnorm_workspace_bytes).
template <algorithm Algo, int VecsPerThread, int BlockThreads, class T, class Out, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool allreduce_rmsnorm_rows_block(const Group& g, const core::peer_table<T, MaxRanks>& t,
                                                    const rmsnorm_args<T, Out>& a, tile_slots slots, int block,
                                                    int num_blocks) {
  static_assert(Algo == algorithm::flat || Algo == algorithm::tree, "allreduce_rmsnorm_rows_block: flat or tree");
  constexpr int e = gpu::elems_per_vec16<T>;
  const std::size_t tokens = a.tokens, hidden = a.hidden, padded = padded_cols<T>(hidden);
  const std::size_t tid = static_cast<std::size_t>(g.thread_rank()), gs = static_cast<std::size_t>(g.size());
  const int rows = static_cast<int>(tokens);
  const ragged_row_tiles map{tokens, hidden};
  tile_allreduce<T, MaxRanks, Algo> ar(t, slots, padded, rows);
  ar.declare_map(map);  // checked builds: the map's fingerprint goes out with the flags
  for (int i = block; i < rows; i += num_blocks) {  // this rank's rows, padding lanes zero
    T* dst = ar.input(i);
    const T* src = a.input + static_cast<std::size_t>(i) * hidden;
    for (std::size_t j = tid; j < padded; j += gs) dst[j] = j < hidden ? src[j] : T(0.0f);
  }
  ar.publish_strided(g, block, num_blocks);
  ar.finish(g, num_blocks);
  bool ok = true;
  if constexpr (Algo == algorithm::flat) {
    const auto epi = detail::make_rows_epilogue<BlockThreads>(a);
    for (int i = block; i < rows && ok; i += num_blocks) ok = ar.template reduce<VecsPerThread>(g, i, map, epi);
  } else {
    // Owners: the new residual rows (padded) and each row's sum to the results; then every rank
    // finishes every row of its blocks from the owner's results.
    const std::size_t res_bytes = detail::round16(tokens * padded * sizeof(T));
    const auto res_of = [&](int r) { return reinterpret_cast<T*>(ar.results(r)); };
    const auto totals_of = [&](int r) { return reinterpret_cast<float*>(ar.results(r) + res_bytes); };
    const auto norm = detail::make_rmsnorm_stage<T, Out, BlockThreads>(a);
    const epilogue<residual_add<T>, store<T>, detail::row_total_capture<T, BlockThreads>> owner{
        {a.residual, nullptr, hidden}, {res_of(ar.rank()), padded}, {norm, totals_of(ar.rank())}};
    for (int i = block; i < rows && ok; i += num_blocks) {
      if (!ar.owns(i)) continue;
      ok = ar.template reduce_owned<VecsPerThread>(g, i, map, owner);
      if (ok) ar.publish_result(g, i);
    }
    if (ok) ok = ar.wait_results_strided(g, block, num_blocks);
    const auto out = detail::rows_output<T, Out, BlockThreads>::make(a, a.output);
    for (int i = block; i < rows && ok; i += num_blocks) {
      const int o = ar.owner(i);
      float v[VecsPerThread][e];
      detail::load_row(v, res_of(o) + static_cast<std::size_t>(i) * padded, hidden, tid, gs);
      const epilogue<store<T>, detail::norm_with_total<T, BlockThreads>, typename detail::rows_output<T, Out, BlockThreads>::stage>
          fin{{a.residual, hidden}, {norm, totals_of(o)[i]}, out};
      fin(g, v, held_vectors<ragged_row_tiles, e>{map, static_cast<std::size_t>(i), tid, gs, padded / e});
    }
  }
  return ok;
}

// add_rmsnorm_block for rows of any length and per-token output: the rows kernels' stages on the
// sum `a.input` (the same bits as allreduce_rmsnorm_rows_block).
template <int VecsPerThread, int BlockThreads, class T, class Out, class Group>
RCCLX_HOST_DEVICE void add_rmsnorm_rows_block(const Group& g, const rmsnorm_args<T, Out>& a, int block, int num_blocks) {
  constexpr int e = gpu::elems_per_vec16<T>;
  const std::size_t hidden = a.hidden, padded = padded_cols<T>(hidden);
  const std::size_t gs = static_cast<std::size_t>(g.size()), tid = static_cast<std::size_t>(g.thread_rank());
  const ragged_row_tiles map{a.tokens, hidden};
  const auto epi = detail::make_rows_epilogue<BlockThreads>(a);
  for (std::size_t i = static_cast<std::size_t>(block); i < a.tokens; i += static_cast<std::size_t>(num_blocks)) {
    float v[VecsPerThread][e];
    detail::load_row(v, a.input + i * hidden, hidden, tid, gs);
    epi(g, v, held_vectors<ragged_row_tiles, e>{map, i, tid, gs, padded / e});
  }
}

}  // namespace fused
RCCLX_NAMESPACE_END
