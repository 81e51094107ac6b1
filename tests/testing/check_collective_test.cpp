// testing::check_collective (testing/error_bounds.hpp) against the library's own collectives: the
// DDA AllReduce and the direct and LPC AllGather, ReduceScatter and AlltoAll run on emulated ranks,
// every rank's output checked (plain: the default tolerance, copies exact; LPC: the documented
// bound), then one element of it moved and refused; min and max reductions exactly.
#include <rcclx/lpc/workspace.hpp>
#include <rcclx/testing/emulated_bench.hpp>
#include <rcclx/testing/emulated_kernels.hpp>
#include <rcclx/testing/error_bounds.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
namespace lpc = rcclx::lpc;
using lc = lpc::collective;
using cfg = lpc::default_config;
using rcclx::algorithm;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
constexpr int n = 3, max_r = 4, blocks = 2, threads = on_host ? 1 : 64;
constexpr std::size_t count = n * 256;

// Rank p's input element j: in [-1, 1), exact in bf16.
double x(int p, std::size_t j) { return static_cast<double>(static_cast<int>((j * 7 + static_cast<std::size_t>(p) * 13) % 97) - 48) / 64.0; }

template <class T>
struct rig {
  static std::size_t buffer_bytes() {
    std::size_t bytes = count * sizeof(T) * n;
    for (const lc c : {lc::allreduce, lc::allgather, lc::reduce_scatter, lc::alltoall})
      bytes = std::max(bytes, lpc::workspace_bytes<cfg>(c, count, n));
    return bytes;
  }
  rt::emulated_bench<max_r> b{n, buffer_bytes(), 2 * blocks};
  std::vector<T*> in, out;
  rig() {
    for (int p = 0; p < n; ++p) {
      std::vector<T> h(count);
      for (std::size_t j = 0; j < count; ++j) h[j] = T(static_cast<float>(x(p, j)));
      in.push_back(b.template alloc<T>(count * sizeof(T)));
      out.push_back(b.template alloc<T>(count * n * sizeof(T)));
      rcclx::gpu::copy(in.back(), h.data(), count * sizeof(T));
    }
  }
  rt::rank_buffers<T, max_r> buffers() const {
    rt::rank_buffers<T, max_r> r{};
    for (int p = 0; p < n; ++p) r.in[p] = in[p], r.out[p] = out[p];
    return r;
  }
  // Every rank's output after k, checked with `bound`; then rank 1's element 5 moved by 1.
  template <class K>
  void check(lc c, const K& k, double bound, rcclx::reduce_op op = rcclx::reduce_op::sum) {
    const std::size_t elems = c == lc::allgather ? count * n : c == lc::reduce_scatter ? count / n : count;
    const auto got = b.outputs_after([&](rcclx::gpu::stream_t s) { rt::launch_emulated(n, blocks, threads, k, s); }, out,
                                     elems * sizeof(T));
    for (int r = 0; r < n; ++r) {
      std::vector<T> o(elems);
      std::memcpy(o.data(), got[r].data(), elems * sizeof(T));
      CAPTURE(lpc::to_string(c), r, bound);
      CHECK(rt::check_collective(c, o.data(), n, count, r, x, bound, op).within);
      if (r != 1) continue;
      o[5] = T(static_cast<float>(o[5]) + 1.0f);
      const rt::error_summary bad = rt::check_collective(c, o.data(), n, count, r, x, bound, op);
      CHECK_FALSE(bad.within);
      CHECK(bad.max_error >= 0.75);
    }
  }
};

TEMPLATE_TEST_CASE("check_collective: the library's plain and LPC collectives pass, a moved element fails",
                   "[testing][references]", float, rcclx::bf16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  rig<T> g;
  const auto* tables = g.b.world().template device_tables<T>();
  using sum = rcclx::core::op_sum;
  g.check(lc::allreduce, rt::emulated_allreduce<sum, algorithm::flat, T, max_r>{tables, g.buffers(), count}, 0);
  g.check(lc::allreduce, rt::emulated_allreduce<sum, algorithm::tree, T, max_r>{tables, g.buffers(), count}, 0);
  g.check(lc::allreduce, rt::emulated_allreduce<rcclx::core::op_max, algorithm::flat, T, max_r>{tables, g.buffers(), count}, 0,
          rcclx::reduce_op::max);
  g.check(lc::allreduce, rt::emulated_allreduce<rcclx::core::op_min, algorithm::flat, T, max_r>{tables, g.buffers(), count}, 0,
          rcclx::reduce_op::min);
  const auto both = [&](auto cc) {
    constexpr lc c = decltype(cc)::value;
    g.check(c, rt::emulated_collective<c, algorithm::flat, cfg, sum, T, max_r>{tables, g.buffers(), count}, 0);
    g.check(c, rt::emulated_collective<c, algorithm::low_precision, cfg, sum, T, max_r>{tables, g.buffers(), count},
            rt::lpc_error_bound<T>(c, n));
  };
  both(std::integral_constant<lc, lc::allgather>{});
  both(std::integral_constant<lc, lc::reduce_scatter>{});
  both(std::integral_constant<lc, lc::alltoall>{});
  g.check(lc::allreduce,
          rt::emulated_collective<lc::allreduce, algorithm::low_precision, cfg, sum, T, max_r>{tables, g.buffers(), count},
          rt::lpc_error_bound<T>(lc::allreduce, n));
}

}  // namespace
