// The fused ops' kernels (fused.hpp), in a translation unit of their own so that they compile in
// parallel with engine.cpp (nvcc compiles this file as fused.cu for CUDA).
#include "fused.hpp"

#include <rcclx/fp8/format.hpp>
#include <rcclx/fused/allreduce_rmsnorm.hpp>

#include <type_traits>

namespace rcclx_torch {
namespace {


// f(T{}, Out{}) for the call's element type and output format.
template <class F>
void dispatch(const rmsnorm_call& c, F&& f) {
  auto with_out = [&](auto tag) {
    using T = decltype(tag);
    switch (c.out) {
      case out_format::same: f(T{}, T{}); break;
      case out_format::e4m3: f(T{}, rcclx::fp8::e4m3{}); break;
      case out_format::e5m2: f(T{}, rcclx::fp8::e5m2{}); break;
    }
  };
  switch (c.type) {
    case element::f32: with_out(float{}); break;
    case element::bf16: with_out(rcclx::bf16{}); break;
    case element::f16: with_out(rcclx::fp16{}); break;
    default: break;  // the other types: refused by ops.cpp
  }
}

template <class T, class Out>
rcclx::fused::rmsnorm_args<T, Out> args_of(const rmsnorm_call& c) {
  return {static_cast<const T*>(c.x),
          static_cast<T*>(c.residual),
          static_cast<const T*>(c.weight),
          static_cast<rcclx::fused::output_t<T, Out>*>(c.output),
          c.tokens,
          c.hidden,
          c.eps,
          c.scale};
}

}  // namespace

std::string rmsnorm_errors(const rmsnorm_call& c, rcclx::algorithm algo, int max_tiles) {
  const char* who = "all_reduce_rmsnorm";
  std::string err;
  try {
    dispatch(c, [&](auto t, auto o) {
      using T = decltype(t);
      using Out = decltype(o);
      rcclx::fused::detail::check_rmsnorm_call<T, max_ranks>(who, algo, 0);
      rcclx::fused::detail::check_rmsnorm_args(who, args_of<T, Out>(c));
    });
    if (c.tokens > static_cast<std::size_t>(max_tiles))
      throw rcclx::error(rcclx::errc::invalid_argument,
                         std::string(who) + ": " + std::to_string(c.tokens) + " tokens exceed the communicator's " +
                             std::to_string(max_tiles) + " (rcclx.Communicator(max_tiles=...))");
  } catch (const rcclx::error& x) {
    err = x.what();
  }
  return err;
}

rcclx::algorithm rmsnorm_algorithm(const rmsnorm_call& c, rcclx::algorithm algo, int num_ranks) {
  rcclx::algorithm a = algo;
  dispatch(c, [&](auto t, auto) {
    a = rcclx::fused::resolve_rmsnorm_algorithm<decltype(t)>(algo, c.tokens, c.hidden, num_ranks);
  });
  return a;
}

std::size_t rmsnorm_workspace_bytes(const rmsnorm_call& c, rcclx::algorithm resolved) {
  std::size_t b = 0;
  dispatch(c, [&](auto t, auto o) {
    b = rcclx::fused::allreduce_rmsnorm_workspace_bytes<decltype(t), decltype(o)>(c.tokens, c.hidden, resolved);
  });
  return b;
}

void rmsnorm_launch(const rmsnorm_call& c, const byte_table& table, rcclx::fused::tile_slots slots,
                    rcclx::algorithm resolved, rcclx::gpu::stream_t stream) {
  dispatch(c, [&](auto t, auto o) {
    using T = decltype(t);
    using Out = decltype(o);
    rcclx::fused::allreduce_rmsnorm(table.template as<T>(), args_of<T, Out>(c), slots, resolved, stream);
  });
}

}  // namespace rcclx_torch
