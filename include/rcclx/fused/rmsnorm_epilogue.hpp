// rcclx/fused/rmsnorm_epilogue.hpp: the residual add + RMSNorm epilogue of the ready-made kernels,
// written once: fused::add_rmsnorm and every AllReduce + RMSNorm kernel (tile flags flat and tree,
// thread-block clusters) run this class, so they give the same bits by construction.
//
//   // 512 threads per block, rows of up to 2 vectors per thread, the operands loaded early:
//   auto epi = rcclx::fused::detail::make_rmsnorm_epilogue<512, rcclx::fused::operand_loads::preloaded, 2>(
//       args, args.residual, args.output);
//   const auto vec = [&](int k) { return std::size_t(k) * 512 + threadIdx.x; };  // a thread's vectors
//   epi.preload_row(row, vec, vecs);      // the row's residual, before the wait for its flags
//   epi.preload_shared(vec, vecs);        // the weight and the FP8 scale
//   ar.reduce<2>(g, row, rcclx::fused::row_tiles{tokens, hidden}, epi);
//
// The chain, per row of `hidden` elements (fused/stages.hpp): residual_add (v += residual in FP32,
// rounded once to T: the new residual), rms_norm (the row's sum of squares, a block reduction over
// BlockThreads threads, then v * 1 / sqrt(sum / hidden + eps) * weight), the output (store: T, or
// fp8_out: FP8 codes of v / scale). The residual, the weight and the FP8 scale are its operands,
// loaded when used or beforehand (Loads, fused/epilogue.hpp); the arithmetic is the stages' loaded
// forms either way. A kernel runs the whole chain (operator(): the tile_allreduce epilogue
// contract) or its halves around a row sum of its own: add_residual + row_partial per vector, then
// finish per vector with the row's total.
#pragma once

#include <cstddef>
#include <type_traits>

#include "../core/ops.hpp"
#include "../gpu/memory.hpp"
#include "../gpu/shared.hpp"
#include "epilogue.hpp"
#include "rmsnorm_args.hpp"
#include "stages.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// BlockThreads: the block the row sum reduces over (1 on the host backend). VecsPerThread: the
// vectors of a row a thread holds, with operands preloaded (4 registers per vector and operand).
template <class T, class Out, int BlockThreads, operand_loads Loads = operand_loads::default_loads,
          int VecsPerThread = 1>
class rmsnorm_epilogue {
 public:
  static constexpr int vec_elems = gpu::elems_per_vec16<T>;
  static constexpr bool row_wide = true;
  // rms_norm, stage 1 (checked-mode records: index | stage_id << 8)
  static constexpr std::uint32_t row_wide_stage = 1u | rms_norm<T, BlockThreads>::stage_id << 8;
  using output_stage = typename detail::output_of<T, Out>::stage;

  rmsnorm_epilogue() = default;
  RCCLX_HOST_DEVICE rmsnorm_epilogue(const residual_add<T>& add, const rms_norm<T, BlockThreads>& norm,
                                     const output_stage& out)
      : add_(add), norm_(norm), out_(out) {}

  // Preloaded operands of the thread's vectors of row `row` (its k-th: vector vec(k) of the row,
  // held where below `vecs`): the residual. Nothing under at_use.
  template <class Vec>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void preload_row(std::size_t row, const Vec& vec, std::size_t vecs) {
    if constexpr (Loads == operand_loads::preloaded) {
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
      for (int k = 0; k < VecsPerThread; ++k)
        if (vec(k) < vecs) residual_.load(k, add_.residual + row * add_.ld + vec(k) * vec_elems);
    }
  }
  // The operands every row shares: the weight of those vectors, and the FP8 output's 1 / scale.
  template <class Vec>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void preload_shared(const Vec& vec, std::size_t vecs) {
    if constexpr (Loads == operand_loads::preloaded) {
      if (norm_.weight) {
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
        for (int k = 0; k < VecsPerThread; ++k)
          if (vec(k) < vecs) weight_.load(k, norm_.weight + vec(k) * vec_elems);
      }
      if constexpr (fp8_output) inv_scale_ = 1.0f / *out_.scale;
    }
  }

  // Stage 1 for the thread's k-th vector v at p: v += residual, rounded to T (the new residual,
  // also stored where residual_add::updated points).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void add_residual(int k, const position& p, float (&v)[vec_elems]) const {
    float r[vec_elems];
    traits::unpack(residual_.get(k, add_.residual + p.row * add_.ld + p.col), r);
    add_.add_loaded(p, r, v);
  }
  // v's share of the row's sum of squares (summed in vector order, then row_total).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_partial(const position& p, const float (&v)[vec_elems]) const {
    return norm_.row_partial(p, v);
  }
  // Group-collective: the row's sum of squares over the block (BlockThreads threads).
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_total(const Group& g, float partial) const {
    return norm_.row_combine(g, partial);
  }
  // Stages 2 and 3 for the thread's k-th vector v (the new residual) at p, given the row's total:
  // the RMSNorm with the weight, then the output.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void finish(int k, const position& p, float (&v)[vec_elems], float total) const {
    normalise(k, p, v, total);
    output(p, v);
  }

  // Group-collective: stage 1 over the vectors of h, and the row's total.
  template <int VPT, class Group, class Map>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float add_residual_and_sum(const Group& g, float (&v)[VPT][vec_elems],
                                                                 const held_vectors<Map, vec_elems>& h) const {
    static_assert(Loads == operand_loads::at_use || VPT <= VecsPerThread,
                  "rcclx::fused::rmsnorm_epilogue: more vectors than the preloaded operands");
    for (int k = 0; k < VPT; ++k)
      if (h.holds(k)) add_residual(k, h.at(k), v[k]);
    float partial = 0.0f;  // in vector order, as fused::epilogue sums it
    for (int k = 0; k < VPT; ++k)
      if (h.holds(k)) partial += row_partial(h.at(k), v[k]);
    return row_total(g, partial);
  }

  // Group-collective: the whole chain over the vectors of h (fused::epilogue's contract).
  template <int VPT, class Group, class Map>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const Group& g, float (&v)[VPT][vec_elems],
                                                      const held_vectors<Map, vec_elems>& h) const {
    const float total = add_residual_and_sum(g, v, h);
    for (int k = 0; k < VPT; ++k)
      if (h.holds(k)) normalise(k, h.at(k), v[k], total);
    for (int k = 0; k < VPT; ++k)
      if (h.holds(k)) output(h.at(k), v[k]);
  }

  // Checked mode (fused/stage_check.hpp): residual_add, rms_norm, the output, as the epilogue
  // <residual_add, rms_norm, output> would check them (stage = index | stage_id << 8).
  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const {
    if (stage_fault f = detail::check_stage(add_, ctx, 0)) return f;
    if (stage_fault f = detail::check_stage(norm_, ctx, 1)) return f;
    return detail::check_stage(out_, ctx, 2);
  }

 private:
  using traits = core::value_traits<T>;

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void normalise(int k, const position& p, float (&v)[vec_elems], float total) const {
    float w[vec_elems];
    if (norm_.weight) traits::unpack(weight_.get(k, norm_.weight + p.col), w);
    else
      for (float& x : w) x = 1.0f;
    norm_.apply_loaded(v, total, w);
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void output(const position& p, float (&v)[vec_elems]) const {
    if constexpr (fp8_output && Loads == operand_loads::preloaded) out_.store_scaled(p, v, inv_scale_);
    else out_(p, v);
  }
  static constexpr bool fp8_output = rmsnorm_args<T, Out>::fp8_output;

  residual_add<T> add_;
  rms_norm<T, BlockThreads> norm_;
  output_stage out_;
  operand_vectors<Loads, VecsPerThread> residual_, weight_;
  float inv_scale_ = 1.0f;  // FP8 output, preloaded: 1 / *scale
};

namespace detail {

struct rmsnorm_storage_tag;

// Rows of up to 2 vectors per thread preload their operands; longer ones (16384 bf16) load at use:
// their registers would spill under the 512-thread bound (ptxas, sm_90).
template <int VecsPerThread>
inline constexpr operand_loads rmsnorm_operand_loads =
    VecsPerThread <= 2 ? operand_loads::preloaded : operand_loads::at_use;

// The RMSNorm stage of the ready-made kernels (its row sum in the block's shared scratch) and
// their output stage (T, or FP8 codes with a.scale), writing to `out`.
template <class T, class Out, int BlockThreads>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE rms_norm<T, BlockThreads> make_rmsnorm_stage(const rmsnorm_args<T, Out>& a) {
  using norm_t = rms_norm<T, BlockThreads>;
  auto& tmp = gpu::block_shared<typename norm_t::storage_type, rmsnorm_storage_tag>();
  return norm_t{a.weight, a.eps, a.hidden, &tmp};
}

template <class T, class Out>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE typename output_of<T, Out>::stage make_output_stage(const rmsnorm_args<T, Out>& a,
                                                                                       output_t<T, Out>* out) {
  using out_stage = typename output_of<T, Out>::stage;
  if constexpr (rmsnorm_args<T, Out>::fp8_output) {
    return out_stage{out, a.hidden, a.scale};
  } else {
    return out_stage{out, a.hidden};
  }
}

// The epilogue of a call: the new residual to residual_out (nullptr: not stored), the output to out.
template <int BlockThreads, operand_loads Loads = operand_loads::default_loads, int VecsPerThread = 1, class T,
          class Out>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE rmsnorm_epilogue<T, Out, BlockThreads, Loads, VecsPerThread> make_rmsnorm_epilogue(
    const rmsnorm_args<T, Out>& a, T* residual_out, output_t<T, Out>* out) {
  return rmsnorm_epilogue<T, Out, BlockThreads, Loads, VecsPerThread>(
      residual_add<T>{a.residual, residual_out, a.hidden}, make_rmsnorm_stage<T, Out, BlockThreads>(a),
      make_output_stage(a, out));
}

}  // namespace detail
}  // namespace fused
RCCLX_NAMESPACE_END
