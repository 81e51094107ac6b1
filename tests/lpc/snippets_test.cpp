// The usage snippets at the top of the LPC headers and of the plain dda collectives, compiled and
// run: the device templates inside a user's kernel (emulated_peers::run), the host launchers once
// per rank, workspace sizing and selection.
#include <rcclx/dda/allgather.hpp>
#include <rcclx/dda/alltoall.hpp>
#include <rcclx/dda/reduce_scatter.hpp>
#include <rcclx/lpc/allgather.hpp>
#include <rcclx/lpc/allreduce.hpp>
#include <rcclx/lpc/alltoall.hpp>
#include <rcclx/lpc/config.hpp>
#include <rcclx/lpc/reduce_scatter.hpp>
#include <rcclx/lpc/select.hpp>
#include <rcclx/lpc/workspace.hpp>
#include <rcclx/testing/emulated_peers.hpp>
#include <rcclx/testing/emulated_world.hpp>

#include <cmath>
#include <vector>

#include "../support/catch.hpp"
#include "../support/launchers.hpp"
#include "../support/rank_runner.hpp"
#include "common.hpp"

namespace {

using namespace lpc_test;

// A user's kernel: every collective's device template, as in the header snippets (g and the launch
// index instead of blockIdx / gridDim). One collective per launch: different collectives in one
// kernel would need a grid-wide sync between them (docs/lpc.md).
template <int Which>
struct user_kernel {
  const rcclx::core::peer_table<float, max_r>* tables;
  rcclx::testing::rank_buffers<float, max_r> buf;
  std::size_t count;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    const auto& table = tables[ix.rank];
    const float* in = buf.in[ix.rank];
    float* out = buf.out[ix.rank];
    const int block = ix.block, num_blocks = ix.num_blocks;
    bool ok = true;
    if constexpr (Which == 0) ok = rcclx::lpc::fp8_allreduce<rcclx::core::op_sum>(g, table, in, out, count, block, num_blocks);
    if constexpr (Which == 1) ok = rcclx::lpc::fp8_allgather(g, table, in, out, count, block, num_blocks);
    if constexpr (Which == 2)
      ok = rcclx::lpc::fp8_reduce_scatter<rcclx::core::op_sum>(g, table, in, out, count, block, num_blocks);
    if constexpr (Which == 3) ok = rcclx::lpc::fp8_alltoall(g, table, in, out, count, block, num_blocks);
    if constexpr (Which == 4) ok = rcclx::dda::flat_allgather(g, table, in, out, count, block, num_blocks);
    if constexpr (Which == 5) ok = rcclx::dda::flat_alltoall(g, table, in, out, count, block, num_blocks);
    if constexpr (Which == 6)
      ok = rcclx::dda::flat_reduce_scatter<rcclx::core::op_sum>(g, table, in, out, count, block, num_blocks);
    if (!ok) return;  // a peer never arrived: the error is recorded in table.signals, leave
  }
};

template <int Which>
void run_user_kernel(peers_t<float>& peers, std::size_t out_count) {
  // run() downloads count elements per rank; an AllGather writes n * count: read the rest directly.
  peers.run(2, peers.options().threads, user_kernel<Which>{peers.device_tables(), peers.device_buffers(), peers.count()});
  std::vector<float> out(out_count);
  rcclx::gpu::copy(out.data(), peers.device_output(0), out_count * sizeof(float));
  const auto in = inputs_of(peers);
  std::vector<expect> want;
  const quant_model m = model_of<lpc::default_config>();
  if (Which == 0) want = allreduce(in, m, reduce_op::sum);
  if (Which == 1) want = allgather(in, m);
  if (Which == 2) want = reduce_scatter(in, 0, m, reduce_op::sum);
  if (Which == 3) want = alltoall(in, 0, m);
  if (Which == 4 || Which == 5) {
    want = Which == 4 ? allgather(in, m) : alltoall(in, 0, m);
    for (auto& e : want) e.tol = 0;  // plain: exact copies
  }
  if (Which == 6) {
    want = reduce_scatter(in, 0, m, reduce_op::sum);
    for (auto& e : want) e.tol = 1e-5 * (1 + std::fabs(e.value));
  }
  const std::string first = first_violation(out, want);
  CAPTURE(Which, first);
  REQUIRE(first.empty());
}

}  // namespace

TEST_CASE("lpc header snippets: device templates in a user's kernel", "[lpc][snippets]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 4;
  const std::size_t count = 4 * 1000;
  peers_t<float> peers(n, count);
  fill_all(peers, 0, 8);
  run_user_kernel<0>(peers, count);
  run_user_kernel<1>(peers, count * n);
  run_user_kernel<2>(peers, count / n);
  run_user_kernel<3>(peers, count);
  run_user_kernel<4>(peers, count * n);
  run_user_kernel<5>(peers, count);
  run_user_kernel<6>(peers, count / n);
}

TEST_CASE("lpc header snippets: host launchers, workspace, config, selection", "[lpc][snippets]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!rcclx_test::concurrent_kernels_possible()) {
    WARN("kernels are serialised under compute-sanitizer: per-rank launches cannot meet; skipped");
    return;
  }
  // config.hpp
  using C = rcclx::lpc::config<>;
  using E5 = rcclx::lpc::config<rcclx::fp8::e5m2, 64, rcclx::fp8::scale_kind::e8m0>;
  STATIC_REQUIRE(C::block_size == 32);
  STATIC_REQUIRE(E5::scale == rcclx::fp8::scale_kind::e8m0);
  // workspace.hpp: every rank the same size (a symmetric buffer)
  const int num_ranks = 4;
  const std::size_t count = 4 * 2000;
  std::size_t bytes = 0;
  for (const auto c : all_collectives) {
    bytes = std::max(bytes, rcclx::lpc::workspace_bytes<>(c, count, num_ranks));
    bytes = std::max(bytes, rcclx::lpc::workspace_bytes<E5>(c, count, num_ranks));
  }
  bytes = std::max(bytes, count * sizeof(float));
  rcclx::testing::emulated_world<max_r> world(num_ranks, bytes, 8);
  std::vector<float*> in(num_ranks), out(num_ranks);
  std::vector<std::vector<float>> host(num_ranks, std::vector<float>(count));
  for (int r = 0; r < num_ranks; ++r) {
    for (std::size_t i = 0; i < count; ++i) host[r][i] = std::sin(0.01f * static_cast<float>(i + 97 * r));
    in[r] = static_cast<float*>(rcclx::gpu::device_malloc(count * sizeof(float)));
    out[r] = static_cast<float*>(rcclx::gpu::device_malloc(count * num_ranks * sizeof(float)));
    rcclx::gpu::copy(in[r], host[r].data(), count * sizeof(float));
  }
  rcclx_test::rank_runner runner(num_ranks);
  const int nb = rcclx_test::launcher_blocks_per_rank();
  runner.run([&](int r, rcclx::gpu::stream_t stream) {
    const auto table = world.table<float>(r);
    rcclx::lpc::allreduce(table, in[r], out[r], count, rcclx::reduce_op::sum, stream, nb);
    rcclx::lpc::allreduce<rcclx::lpc::config<rcclx::fp8::e5m2>>(table, in[r], out[r], count, rcclx::reduce_op::max,
                                                               stream, nb);
    rcclx::lpc::allreduce<E5>(table, in[r], out[r], count, rcclx::reduce_op::sum, stream, nb);
    rcclx::lpc::allgather(table, in[r], out[r], count, stream, nb);
    rcclx::lpc::reduce_scatter(table, in[r], out[r], count, rcclx::reduce_op::sum, stream, nb);
    rcclx::lpc::alltoall(table, in[r], out[r], count, stream, nb);
    rcclx::dda::allgather(table, in[r], out[r], count, stream, nb);
    rcclx::dda::reduce_scatter(table, in[r], out[r], count, rcclx::reduce_op::max, stream, nb);
    rcclx::dda::alltoall(table, in[r], out[r], count, stream, nb);  // the last one is checked below
  });
  world.throw_if_error();
  std::vector<float> got(count);
  rcclx::gpu::copy(got.data(), out[1], count * sizeof(float));
  const std::size_t c = count / num_ranks;
  for (int p = 0; p < num_ranks; ++p)
    for (std::size_t i = 0; i < c; ++i) REQUIRE(got[p * c + i] == host[p][1 * c + i]);
  for (int r = 0; r < num_ranks; ++r) {
    rcclx::gpu::device_free(in[r]);
    rcclx::gpu::device_free(out[r]);
  }
  // select.hpp (nothing enabled in the test environment unless a user set it)
  const rcclx::algorithm a = rcclx::lpc::select_algorithm(rcclx::lpc::collective::allreduce, 64u << 20, 8);
  const rcclx::algorithm b = rcclx::lpc::resolve_algorithm<float>(rcclx::lpc::collective::allgather,
                                                                   rcclx::algorithm::automatic, count, num_ranks);
  REQUIRE((a == rcclx::algorithm::low_precision) == rcclx::lpc::use_low_precision(rcclx::lpc::collective::allreduce, 64u << 20));
  REQUIRE((b == rcclx::algorithm::flat || b == rcclx::algorithm::low_precision));
}
