// The examples of docs/emulated_peers.md, compiled and run as tests (host backend and GPU).
#include <rcclx/dda/flat.hpp>
#include <rcclx/dda/partition.hpp>
#include "../support/emulated_peers.hpp"

#include <cmath>
#include <vector>

#include "../support/catch.hpp"

// [guide-basic]
TEST_CASE("guide: AllReduce on 8 emulated ranks", "[guide]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 8;
  const std::size_t count = 1000;
  rcclx::testing::emulated_peers<float> peers(n, count);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) peers.input(r)[i] = 0.25f * static_cast<float>(r) + static_cast<float>(i);

  peers.allreduce(rcclx::algorithm::tree, rcclx::reduce_op::max);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) REQUIRE(peers.output(r)[i] == 1.75f + static_cast<float>(i));

  peers.allreduce();  // automatic, sum
  for (std::size_t i = 0; i < count; ++i) {
    const double expected = 0.25 * (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7) + 8.0 * static_cast<double>(i);
    REQUIRE(std::fabs(peers.output(3)[i] - expected) <= 1e-6 * std::fabs(expected));
  }
}
// [guide-basic]

// [guide-fused]
// A user's fused kernel: each rank computes its partial result straight into its symmetric buffer
// (no copy), AllReduces it with the device template, and applies an epilogue (a residual add).
// Elements are produced and consumed with dda::for_each_owned: the ownership the AllReduce's
// per-block barriers rely on.
struct matvec_allreduce_residual {
  static constexpr int max_threads_per_block = 512;  // compile with __launch_bounds__(512): the block size it runs with
  const rcclx::core::peer_table<float, rcclx::max_ranks>* tables;  // peers.device_tables()
  rcclx::testing::rank_buffers<float, rcclx::max_ranks> buf;  // in[r]: residual, out[r]: result
  std::size_t count;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    const auto& t = tables[ix.rank];
    float* partial = t.data[ix.rank];
    // 1. "GEMM" stand-in: this rank's partial sum of element i.
    rcclx::dda::for_each_owned<float>(g, count, ix.block, ix.num_blocks, [&](std::size_t i, int k) {
      for (int j = 0; j < k; ++j) partial[i + j] = static_cast<float>((ix.rank + 1) * ((i + j) % 7));
    });
    // 2. AllReduce across ranks; the input already is the symmetric buffer, so nothing is copied.
    if (!rcclx::dda::flat_allreduce<rcclx::core::op_sum>(g, t, partial, buf.out[ix.rank], count, ix.block,
                                                        ix.num_blocks))
      return;  // a peer never arrived: peers.run() throws rcclx::error naming it
    // 3. Epilogue on the elements this thread owns (it wrote them itself in step 2).
    rcclx::dda::for_each_owned<float>(g, count, ix.block, ix.num_blocks, [&](std::size_t i, int k) {
      for (int j = 0; j < k; ++j) buf.out[ix.rank][i + j] += buf.in[ix.rank][i + j];
    });
  }
};

TEST_CASE("guide: a fused kernel on emulated ranks", "[guide]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 4;
  const std::size_t count = 5003;
  rcclx::testing::emulated_peers<float> peers(n, count);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) peers.input(r)[i] = 0.5f;  // the residual
  const int threads = rcclx::current_backend == rcclx::backend::host ? 1 : 256;
  peers.run(/*blocks_per_rank=*/3, threads,
            matvec_allreduce_residual{peers.device_tables(), peers.device_buffers(), count});
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i)
      REQUIRE(peers.output(r)[i] == static_cast<float>((1 + 2 + 3 + 4) * (i % 7)) + 0.5f);
}
// [guide-fused]
