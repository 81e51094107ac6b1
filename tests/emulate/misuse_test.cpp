// Emulated threads (RCCLX_EMULATE_THREADS=1, RCCLX_CHECKS=1): a user's fused kernel (tile
// AllReduce + residual + RMSNorm, rows of 4096 floats) runs with its GPU block size on the host, and
// the block-level misuses that pass silently with one-thread blocks end in a named error:
// publish() (group-collective) from thread 0 only, a bf16 residual 2 bytes into its allocation,
// rms_norm<T, BlockThreads> in a block of another size. The correct kernel against float64.
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../support/bits.hpp"
#include "../support/catch.hpp"

static_assert(rcclx::emulate_threads, "tests/emulate is built with RCCLX_EMULATE_THREADS=1");

namespace emulate_misuse {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
constexpr int max_r = 8;

// Rank r's value at (row, col): in [-1, 1), exact in bf16 (8 significant bits).
inline float value(int r, std::size_t row, std::size_t col) {
  const std::uint64_t h = rcclx_test::mix((row << 24) ^ (col << 4) ^ static_cast<std::uint64_t>(r));
  return static_cast<float>(static_cast<int>(h >> 56) - 128) / 128.0f;
}

enum class misuse { none, publish_from_thread0 };

// Every block of every rank: rows t = block, block + blocks, ... of its rank's input, published,
// then reduced with residual + RMSNorm into out. NormThreads: rms_norm's BlockThreads.
template <class T, int NormThreads>
struct norm_kernel {
  static constexpr int max_threads_per_block = 512;
  const rcclx::core::peer_table<T, max_r>* tables;
  T* out[max_r];
  const T* residual;  // [rows][cols]
  const T* weight;    // [cols]
  fz::tile_slots slots;
  std::size_t rows, cols;
  misuse what;

  template <class G>
  void operator()(const G& g, rt::launch_index ix) const {
    using norm = fz::rms_norm<T, NormThreads>;
    auto& tmp = rcclx::gpu::block_shared<typename norm::storage_type, struct norm_tag>();
    const fz::row_tiles map{rows, cols};
    fz::tile_allreduce<T, max_r> ar(tables[ix.rank], slots, cols, static_cast<int>(rows));
    const fz::epilogue<fz::residual_add<T>, norm, fz::store<T>> epi{
        {residual, nullptr, cols}, {weight, 1e-6f, cols, &tmp}, {out[ix.rank], cols}};
    for (int t = ix.block; t < static_cast<int>(rows); t += ix.num_blocks) {
      T* in = ar.input(t);
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < cols; e += static_cast<std::size_t>(g.size()))
        in[e] = T(value(ix.rank, static_cast<std::size_t>(t), e));
      if (what == misuse::publish_from_thread0) {
        if (g.thread_rank() == 0) ar.publish(g, t);  // group-collective: every thread must call it
      } else {
        ar.publish(g, t);
      }
    }
    bool ok = true;
    for (int t = ix.block; t < static_cast<int>(rows) && ok; t += ix.num_blocks)
      ok = ar.template reduce<4>(g, t, map, epi);  // 4 x 256 threads x 4 floats: rows of up to 4096
    ar.finish(g, ix.num_blocks);
  }
};

template <class T>
struct problem {
  int n;
  std::size_t rows, cols;
  fz::tile_slots slots;
  rt::emulated_world<max_r> world;
  std::vector<std::vector<T>> out;
  std::vector<T> residual;  // one element more: the misaligned case starts 1 element in
  std::vector<T> weight;

  // timeout_ns: the pads' bound (a rank whose block failed leaves its peers waiting that long).
  problem(int ranks, std::size_t r, std::size_t c, std::uint64_t timeout_ns = rcclx::core::default_timeout_ns)
      : n(ranks), rows(r), cols(c), slots{0, static_cast<int>(r)},
        world(ranks, fz::tile_allreduce<T, max_r>::workspace_bytes(c, r), slots.end(), timeout_ns),
        out(static_cast<std::size_t>(ranks), std::vector<T>(r * c, T(-7.0f))), residual(r * c + 8), weight(c) {
    for (std::size_t i = 0; i < residual.size(); ++i) residual[i] = T(value(99, i / c, i % c));
    for (std::size_t j = 0; j < c; ++j) weight[j] = T(0.5f + value(98, 0, j) * 0.25f);
  }

  template <int NormThreads>
  void run(int blocks, int threads, misuse what = misuse::none, std::size_t residual_offset = 0) {
    norm_kernel<T, NormThreads> k{};
    k.tables = world.template device_tables<T>();
    for (int r = 0; r < n; ++r) k.out[r] = out[static_cast<std::size_t>(r)].data();
    k.residual = residual.data() + residual_offset;
    k.weight = weight.data();
    k.slots = slots;
    k.rows = rows;
    k.cols = cols;
    k.what = what;
    rt::launch_emulated(world, blocks, threads, k);
  }

  template <int NormThreads>
  std::string error_of(int blocks, int threads, misuse what = misuse::none, std::size_t residual_offset = 0) {
    try {
      run<NormThreads>(blocks, threads, what, residual_offset);
    } catch (const rcclx::error& e) {
      return e.what();
    }
    return "";
  }

  bool untouched() const {
    for (const auto& o : out)
      for (const T& x : o)
        if (static_cast<float>(x) != -7.0f) return false;
    return true;
  }
};

}  // namespace emulate_misuse

using namespace emulate_misuse;

TEST_CASE("emulated threads: AllReduce + residual + RMSNorm with 256-thread blocks against float64", "[emulate]") {
  problem<float> p(4, 6, 4096);
  p.run<256>(3, 256);
  double worst = 0.0;
  for (std::size_t i = 0; i < p.rows; ++i) {
    std::vector<double> y(p.cols);
    double ss = 0.0;
    for (std::size_t j = 0; j < p.cols; ++j) {
      double s = 0.0;
      for (int r = 0; r < p.n; ++r) s += value(r, i, j);
      y[j] = s + static_cast<double>(p.residual[i * p.cols + j]);
      ss += y[j] * y[j];
    }
    const double f = 1.0 / std::sqrt(ss / static_cast<double>(p.cols) + 1e-6);
    for (int r = 0; r < p.n; ++r)
      for (std::size_t j = 0; j < p.cols; ++j) {
        const double want = y[j] * f * static_cast<double>(p.weight[j]);
        const double got = p.out[static_cast<std::size_t>(r)][i * p.cols + j];
        const double err = std::fabs(got - want);
        if (err > worst) worst = err;
        INFO("rank " << r << " row " << i << " col " << j);
        REQUIRE(err <= 1e-5 * (1.0 + std::fabs(want)));
      }
  }
  CAPTURE(worst);
}

TEST_CASE("emulated threads: publish() from thread 0 only is a named error, not a hang", "[emulate]") {
  problem<float> p(2, 4, 1024, 300'000'000ull);  // the peers of the failed block wait 0.3 s
  const std::string e = p.error_of<256>(2, 256, misuse::publish_from_thread0);
  CAPTURE(e);
  REQUIRE_THAT(e, RCCLX_CONTAINS("emulated threads"));
  REQUIRE_THAT(e, RCCLX_CONTAINS("block-wide sync"));
}

TEST_CASE("emulated threads: rms_norm<T, BlockThreads> in a block of another size is refused, outputs untouched", "[emulate]") {
  problem<float> p(2, 4, 1024);
  const std::string e = p.error_of<128>(2, 256);
  CAPTURE(e);
  REQUIRE_THAT(e, RCCLX_CONTAINS("BlockThreads = 128"));
  REQUIRE_THAT(e, RCCLX_CONTAINS("has 256 threads"));
  REQUIRE(p.untouched());
}

TEST_CASE("emulated threads, checked mode: a bf16 residual 2 bytes into its allocation is a named error", "[emulate]") {
  problem<rcclx::bf16> p(2, 4, 1024);
  REQUIRE(p.error_of<256>(2, 256).empty());  // aligned: runs
  problem<rcclx::bf16> q(2, 4, 1024);
  const std::string e = q.error_of<256>(2, 256, misuse::none, 1);
  CAPTURE(e);
  if (rcclx::checks) {
    REQUIRE_THAT(e, RCCLX_CONTAINS("misaligned"));
    REQUIRE(q.untouched());
  }
}

// The speed of this mode (printed, not asserted): a tile AllReduce of 8 ranks x 4 blocks x 256
// threads over 8 rows x 4096 floats per rank.
TEST_CASE("emulated threads: speed of an 8-rank tile AllReduce, 4 blocks x 256 threads, 8 x 4096 floats", "[emulate][speed]") {
  problem<float> p(8, 8, 4096);
  p.run<256>(4, 256);  // warm: the pool's threads and fiber stacks
  const int calls = 5;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < calls; ++c) p.run<256>(4, 256);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
  std::printf("emulated threads: tile AllReduce + residual + RMSNorm, 8 ranks x 4 blocks x 256 threads, 8 x 4096 floats: "
              "%.3f s per call\n", s);
  SUCCEED();
}
