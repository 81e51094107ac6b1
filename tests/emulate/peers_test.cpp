// Emulated threads (RCCLX_EMULATE_THREADS=1): users' fused kernels with 512-thread blocks, as on a
// GPU: docs/emulated_peers.md's fused kernel (dda::flat_allreduce between two for_each_owned
// loops) through emulated_peers::run, and fused::allreduce_rmsnorm_block with BlockThreads = 512
// and the GPU's VecsPerThread, both against float64.
#include <rcclx/dda/flat.hpp>
#include <rcclx/dda/partition.hpp>
#include <rcclx/fused/allreduce_rmsnorm.hpp>
#include <rcclx/kernel/launch.hpp>
#include <rcclx/testing/emulated_peers.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../support/bits.hpp"
#include "../support/catch.hpp"

static_assert(rcclx::emulate_threads, "tests/emulate is built with RCCLX_EMULATE_THREADS=1");

namespace emulate_peers {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
constexpr int max_r = 8;

// docs/emulated_peers.md's kernel, unchanged (tests/dda/guide_test.cpp).
struct matvec_allreduce_residual {
  static constexpr int max_threads_per_block = 512;
  const rcclx::core::peer_table<float, rcclx::max_ranks>* tables;
  rcclx::testing::rank_buffers<float, rcclx::max_ranks> buf;
  std::size_t count;

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    const auto& t = tables[ix.rank];
    float* partial = t.data[ix.rank];
    rcclx::dda::for_each_owned<float>(g, count, ix.block, ix.num_blocks, [&](std::size_t i, int k) {
      for (int j = 0; j < k; ++j) partial[i + j] = static_cast<float>((ix.rank + 1) * ((i + j) % 7));
    });
    if (!rcclx::dda::flat_allreduce<rcclx::core::op_sum>(g, t, partial, buf.out[ix.rank], count, ix.block,
                                                        ix.num_blocks))
      return;
    rcclx::dda::for_each_owned<float>(g, count, ix.block, ix.num_blocks, [&](std::size_t i, int k) {
      for (int j = 0; j < k; ++j) buf.out[ix.rank][i + j] += buf.in[ix.rank][i + j];
    });
  }
};

// A user's kernel around the block-level AllReduce + residual + RMSNorm, with the GPU's shape:
// 512 threads, 2 vectors a thread (rows of up to 4096 floats).
template <rcclx::algorithm Algo>
struct user_rmsnorm {
  static constexpr int max_threads_per_block = 512;
  const rcclx::core::peer_table<float, max_r>* tables;
  const float* input[max_r];
  float* residual[max_r];
  float* output[max_r];
  const float* weight;
  std::size_t tokens, hidden;
  fz::tile_slots slots;

  template <class G>
  void operator()(const G& g, rt::launch_index ix) const {
    const fz::rmsnorm_args<float, float> a{input[ix.rank], residual[ix.rank], weight, output[ix.rank], tokens, hidden, 1e-6f};
    (void)fz::allreduce_rmsnorm_block<Algo, 2, 512>(g, tables[ix.rank], a, slots, ix.block, ix.num_blocks);
  }
};

// A ready-made kernel's block body (kernel/launch.hpp) that records who ran: every thread of every
// block once, each seeing the launch's block size. divergent: thread 0 alone syncs.
struct who_ran_body {
  static constexpr int max_threads = 256;
  int* seen;  // [blocks][256]
  int* sizes;
  bool divergent;
  template <class Group>
  bool operator()(const Group& g, int block, int) const {
    static_assert(std::is_same<Group, rcclx::gpu::block_group>::value, "a block body gets the whole block");
    const int i = block * max_threads + g.thread_rank();
    seen[i] += 1;
    sizes[i] = g.size();
    if (!divergent || g.thread_rank() == 0) g.sync();
    return true;
  }
};

inline float value(int r, std::size_t i) {
  return static_cast<float>(static_cast<int>(rcclx_test::mix(i * 16 + static_cast<std::uint64_t>(r)) >> 56) - 128) / 64.0f;
}

}  // namespace emulate_peers

using namespace emulate_peers;

TEST_CASE("emulated threads: the guide's fused kernel with 512-thread blocks through emulated_peers::run", "[emulate]") {
  const int n = 4;
  const std::size_t count = 5003;
  rcclx::testing::emulated_peers<float> peers(n, count);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) peers.input(r)[i] = 0.5f;
  peers.run(3, 512, matvec_allreduce_residual{peers.device_tables(), peers.device_buffers(), count});
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) {
      INFO("rank " << r << " element " << i);
      REQUIRE(peers.output(r)[i] == static_cast<float>((1 + 2 + 3 + 4) * (i % 7)) + 0.5f);
    }
}

TEMPLATE_TEST_CASE_SIG("emulated threads: allreduce_rmsnorm_block<Algo, 2, 512> in a user's 512-thread kernel against float64",
                       "[emulate]", ((rcclx::algorithm Algo), Algo), (rcclx::algorithm::flat), (rcclx::algorithm::tree)) {
  const int n = 4, blocks = 3;
  const std::size_t tokens = 5, hidden = 4000;
  const fz::tile_slots slots{0, static_cast<int>(tokens)};
  rt::emulated_world<max_r> world(n, fz::allreduce_rmsnorm_workspace_bytes<float>(tokens, hidden, rcclx::algorithm::tree),
                                  slots.end());
  std::vector<std::vector<float>> in(n), res(n), out(n, std::vector<float>(tokens * hidden, -7.0f));
  std::vector<float> weight(hidden);
  for (std::size_t j = 0; j < hidden; ++j) weight[j] = 0.75f + value(50, j) / 8.0f;
  user_rmsnorm<Algo> k{};
  k.tables = world.device_tables<float>();
  for (int r = 0; r < n; ++r) {
    in[r].resize(tokens * hidden);
    res[r].resize(tokens * hidden);
    for (std::size_t i = 0; i < tokens * hidden; ++i) {
      in[r][i] = value(r, i);
      res[r][i] = value(40, i);  // the same residual on every rank
    }
    k.input[r] = in[r].data();
    k.residual[r] = res[r].data();
    k.output[r] = out[r].data();
  }
  k.weight = weight.data();
  k.tokens = tokens;
  k.hidden = hidden;
  k.slots = slots;
  rt::launch_emulated(world, blocks, 512, k);
  for (std::size_t t = 0; t < tokens; ++t) {
    std::vector<double> y(hidden);
    double ss = 0.0;
    for (std::size_t j = 0; j < hidden; ++j) {
      double s = 0.0;
      for (int r = 0; r < n; ++r) s += value(r, t * hidden + j);
      y[j] = s + value(40, t * hidden + j);
      ss += y[j] * y[j];
    }
    const double f = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + 1e-6);
    for (int r = 0; r < n; ++r)
      for (std::size_t j = 0; j < hidden; ++j) {
        INFO("rank " << r << " token " << t << " column " << j);
        REQUIRE(std::fabs(out[r][t * hidden + j] - y[j] * f * weight[j]) <= 1e-5 * (1.0 + std::fabs(y[j] * f * weight[j])));
        REQUIRE(res[r][t * hidden + j] == static_cast<float>(y[j]));  // the new residual (exact: few bits)
      }
  }
}

TEST_CASE("emulated threads: emulated_peers' own AllReduce (flat, tree) with 512-thread blocks against float64", "[emulate]") {
  const int n = 4;
  const std::size_t count = 70001;  // several 8 KiB tiles per block, a ragged end
  rcclx::testing::emulated_options opt;
  opt.threads = 512;  // the GPU's block (the default on the host backend is one thread)
  opt.blocks_per_rank = 3;
  rcclx::testing::emulated_peers<float> peers(n, count, opt);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) peers.input(r)[i] = value(r, i);
  const auto check = [&] {
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i) {
        double want = 0.0;
        for (int q = 0; q < n; ++q) want += value(q, i);
        INFO("rank " << r << " element " << i);
        REQUIRE(peers.output(r)[i] == static_cast<float>(want));  // exact: few bits per value
      }
  };
  peers.allreduce<rcclx::algorithm::flat>();
  check();
  peers.allreduce<rcclx::algorithm::tree>();
  check();
}

TEST_CASE("emulated threads: kernel::launch runs every thread of the ready-made kernels' blocks", "[emulate]") {
  const int blocks = 3, threads = who_ran_body::max_threads;
  std::vector<int> seen(blocks * threads, 0), sizes(blocks * threads, 0);
  rcclx::kernel::launch("who_ran", {blocks, threads}, who_ran_body{seen.data(), sizes.data(), false}, {});
  for (int i = 0; i < blocks * threads; ++i) {
    INFO("block " << i / threads << " thread " << i % threads);
    REQUIRE(seen[static_cast<std::size_t>(i)] == 1);
    REQUIRE(sizes[static_cast<std::size_t>(i)] == threads);
  }
  // A group-collective call from thread 0 alone is refused, as in a user's kernel.
  std::string what;
  try {
    rcclx::kernel::launch("who_ran", {blocks, threads}, who_ran_body{seen.data(), sizes.data(), true}, {});
  } catch (const rcclx::error& e) {
    what = e.what();
  }
  CAPTURE(what);
  REQUIRE(what.find("emulated threads") != std::string::npos);
  REQUIRE(what.find("block-wide sync") != std::string::npos);
}
