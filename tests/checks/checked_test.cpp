// The checked mode (RCCLX_CHECKS=1, docs/checks.md): each per-rank misuse that corrupts results
// without it fails the call on every rank with an error that names the cause, and no output is
// written. Built with RCCLX_CHECKS=1 whatever the build type (tests/checks/CMakeLists.txt).
//   - per-rank dda::allreduce with counts that differ (1000 / 2000 / 1000), ops that differ, flat
//     on one rank and tree on another (LL one-shot, barrier one-shot, two-shot);
//   - a tile AllReduce whose ranks agree on the tile count but not on the tile shape (the map's,
//     or the elements per tile), or not on the tile count;
//   - a tile map whose columns are not whole vectors;
//   - a tile AllReduce call whose blocks skip finish(): the next call fails.
// After each error the world is reset and a matching call gives the right sums (the pads work).
#include <rcclx/dda/allreduce.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../support/catch.hpp"
#include "../support/rank_runner.hpp"
#include "tile_runs.hpp"

// The pad layout does not depend on the checked mode: the same bytes as tests/core/pad_layout_test.cpp.
static_assert(rcclx::core::signal_pad_bytes<8>(4, rcclx::core::ll_layout{2, 256}) == 4352,
              "the signal pad's layout must not depend on RCCLX_CHECKS");

static_assert(rcclx::checks, "this test is built with RCCLX_CHECKS=1");

namespace {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using rcclx::algorithm;
using rcclx::errc;
constexpr int max_r = 8;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
using checks_test::all_errors;
using checks_test::first_error;
using checks_test::sentinel;
using checks_test::tile_setup;

// ---- per-rank dda::allreduce ---------------------------------------------------------------------

struct ar_case {
  const char* what;
  std::size_t count[3];
  rcclx::reduce_op op[3];
  algorithm algo[3];
  const char* field;     // in the message
  const char* values;    // "passed X" of the odd rank
};

// Runs one per-rank call per rank at once; returns each rank's output (count[r] elements).
std::vector<std::vector<float>> run_per_rank(rt::emulated_world<max_r>& world, const ar_case& c,
                                             std::vector<std::string>& thrown) {
  const int n = 3;
  std::vector<float*> in(n), out(n);
  std::vector<std::vector<float>> result(n);
  for (int r = 0; r < n; ++r) {
    std::vector<float> x(c.count[r]);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r + 1) + static_cast<float>(i % 7);
    in[r] = static_cast<float*>(rcclx::gpu::device_malloc(x.size() * sizeof(float)));
    out[r] = static_cast<float*>(rcclx::gpu::device_malloc(x.size() * sizeof(float)));
    rcclx::gpu::copy(in[r], x.data(), x.size() * sizeof(float));
    std::vector<float> s(x.size(), sentinel);
    rcclx::gpu::copy(out[r], s.data(), s.size() * sizeof(float));
  }
  thrown.assign(n, "");
  rcclx_test::rank_runner runner(n);
  std::vector<std::string> msgs(n);
  runner.run([&](int r, rcclx::gpu::stream_t st) {
    try {
      rcclx::dda::allreduce(world.table<float>(r), in[r], out[r], c.count[r], c.op[r], c.algo[r], st,
                            rcclx_test::launcher_blocks_per_rank());
    } catch (const rcclx::error& e) {
      msgs[r] = e.what();
    }
  });
  thrown = msgs;
  for (int r = 0; r < n; ++r) {
    result[r].resize(c.count[r]);
    rcclx::gpu::copy(result[r].data(), out[r], c.count[r] * sizeof(float));
    rcclx::gpu::device_free(in[r]);
    rcclx::gpu::device_free(out[r]);
  }
  return result;
}

}  // namespace

TEST_CASE("checked mode: per-rank AllReduce calls that disagree fail on every rank, outputs untouched", "[checks]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  if (!rcclx_test::concurrent_kernels_possible()) return;
  using rcclx::reduce_op;
  const ar_case cases[] = {
      {"counts 1000 / 2000 / 1000, flat", {1000, 2000, 1000}, {reduce_op::sum, reduce_op::sum, reduce_op::sum},
       {algorithm::flat, algorithm::flat, algorithm::flat}, "different count", "rank 1 passed 2000"},
      {"counts 1000 / 2000 / 1000, tree", {1000, 2000, 1000}, {reduce_op::sum, reduce_op::sum, reduce_op::sum},
       {algorithm::tree, algorithm::tree, algorithm::tree}, "different count", "rank 1 passed 2000"},
      {"counts 1000 / 2000 / 1000, automatic", {1000, 2000, 1000}, {reduce_op::sum, reduce_op::sum, reduce_op::sum},
       {algorithm::automatic, algorithm::automatic, algorithm::automatic}, "different count", "rank 1 passed 2000"},
      {"LL one-shot on two ranks, barrier protocol on one (counts 64 / 300000 / 64)", {64, 300000, 64},
       {reduce_op::sum, reduce_op::sum, reduce_op::sum}, {algorithm::flat, algorithm::flat, algorithm::flat},
       "different count", "rank 1 passed 300000"},
      {"op max on one rank", {4096, 4096, 4096}, {reduce_op::sum, reduce_op::max, reduce_op::sum},
       {algorithm::flat, algorithm::flat, algorithm::flat}, "different reduce op", "rank 1 passed max"},
      {"tree on one rank, flat on the others", {4096, 4096, 4096}, {reduce_op::sum, reduce_op::sum, reduce_op::sum},
       {algorithm::flat, algorithm::tree, algorithm::flat}, "different algorithm", "rank 1 passed tree"},
  };
  rt::emulated_world<max_r> world(3, 300000 * sizeof(float), 32);
  for (const ar_case& c : cases) {
    INFO(c.what);
    world.reset();
    std::vector<std::string> thrown;
    const auto out = run_per_rank(world, c, thrown);
    // Every rank failed: on the host backend each launcher threw; on a GPU each rank's record holds it.
    const std::vector<std::string> errs = on_host ? thrown : all_errors(world);
    for (int r = 0; r < 3; ++r) {
      INFO("rank " << r << ": " << errs[r]);
      CHECK((errs[r].find("mismatch") != std::string::npos || errs[r].find("called AllReduce") != std::string::npos));
      CHECK(errs[r].find(c.field) != std::string::npos);
      CHECK(errs[r].find("no output was written") != std::string::npos);
    }
    CHECK(errs[0].find(c.values) != std::string::npos);  // rank 0 compared itself with rank 1
    std::size_t touched = 0;
    for (int r = 0; r < 3; ++r)
      for (float v : out[r]) touched += v != sentinel;
    CHECK(touched == 0);
    // The pads work again after a reset: a matching call.
    world.reset();
    ar_case ok = c;
    for (int r = 0; r < 3; ++r) {
      ok.count[r] = c.count[0];
      ok.op[r] = reduce_op::sum;
      ok.algo[r] = c.algo[0];
    }
    const auto good = run_per_rank(world, ok, thrown);
    for (int r = 0; r < 3; ++r) CHECK(thrown[r].empty());
    CHECK(first_error(world).empty());
    std::size_t wrong = 0;
    for (int r = 0; r < 3; ++r)
      for (std::size_t i = 0; i < good[r].size(); ++i)
        wrong += good[r][i] != 6.0f + 3.0f * static_cast<float>(i % 7);
    CHECK(wrong == 0);
  }
}

namespace {

// A matching call after a reset gives 1 + 2 + 3 everywhere in the output.
void check_recovers(tile_setup& s, const fz::tile_map& m) {
  s.reset();
  const std::size_t touched = s.run({m, m, m});
  CHECK(s.first_error().empty());
  CHECK(touched == static_cast<std::size_t>(s.n) * m.rows * m.cols);
  std::size_t wrong = 0;
  for (int r = 0; r < s.n; ++r) {
    const std::vector<float> h = s.output(r);
    for (std::size_t i = 0; i < m.rows * m.cols; ++i) wrong += h[i] != 6.0f;
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("checked mode: tile AllReduce ranks that disagree on the tile shape or count fail, outputs untouched",
          "[checks]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  tile_setup s;
  const fz::tile_map wide{64, 64, 8, 32}, tall{64, 64, 32, 8};  // 256 elements per tile, 16 tiles each
  errc code{};

  SECTION("the same tile count and size, another tile shape, the maps declared (declare_map) or not") {
    for (const bool declared : {false, true}) {
      s.reset();
      CHECK((declared ? s.run_declared({wide, tall, wide}, {wide, tall, wide}) : s.run({wide, tall, wide})) == 0);
      const std::string e = s.first_error(&code);
      INFO(e);
      CHECK(code == errc::mismatch);
      CHECK(e.find("different tile map's tile rows") != std::string::npos);
      for (const std::string& m : s.all_errors()) CHECK(m.find("called tile AllReduce with different") != std::string::npos);
      check_recovers(s, wide);
    }
  }
  SECTION("the same tile count, another number of elements per tile") {
    s.reset();
    const fz::tile_map small{32, 64, 8, 16};  // 16 tiles of 128 elements
    CHECK(s.run({wide, small, wide}) == 0);
    const std::string e = s.first_error(&code);
    INFO(e);
    CHECK(code == errc::mismatch);
    CHECK(e.find("different elements per tile") != std::string::npos);
    CHECK(e.find("passed 256") != std::string::npos);
    CHECK(e.find("passed 128") != std::string::npos);
    check_recovers(s, wide);
  }
  SECTION("a reduce with another map than the one declared: that rank refuses, the others are right") {
    s.reset();
    CHECK(s.run_declared({wide, wide, wide}, {wide, tall, wide}) == 2u * 64 * 64);
    const std::vector<std::string> all = s.all_errors();
    INFO(all[1]);
    CHECK(all[0].empty());
    CHECK(all[2].empty());
    CHECK(all[1].find("different tile map's tile rows") != std::string::npos);
    CHECK(all[1].find("rank 1 and rank 1") != std::string::npos);  // the declared map against the reduce's
    for (float v : s.output(1)) CHECK(v == sentinel);
    for (int r : {0, 2}) {
      const std::vector<float> h = s.output(r);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < 64 * 64; ++i) wrong += h[i] != 6.0f;
      CHECK(wrong == 0);
    }
    check_recovers(s, wide);
  }
  SECTION("another tile count: a mismatch, not a timeout that blames a rank that ran") {
    s.reset();
    const fz::tile_map fewer{32, 64, 8, 32};  // 8 tiles of 256
    CHECK(s.run({wide, fewer, wide}) == 0);
    const std::string e = s.first_error(&code);
    INFO(e);
    CHECK(code == errc::mismatch);
    CHECK(e.find("different tile count") != std::string::npos);
    for (const std::string& m : s.all_errors()) CHECK(m.find("never arrived") == std::string::npos);
    check_recovers(s, wide);
  }
}

TEST_CASE("checked mode: a tile map whose columns are not whole vectors is refused, nothing written", "[checks]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  tile_setup s;
  errc code{};
  // 62 columns (not a multiple of 4 floats): vectors would straddle the right edge of the output.
  const fz::tile_map odd_cols{64, 62, 8, 32};
  s.reset();
  CHECK(s.run({odd_cols, odd_cols, odd_cols}, false, {256, 256, 256}) == 0);
  std::string e = s.first_error(&code);
  INFO(e);
  CHECK(code == errc::invalid_argument);
  CHECK(e.find("not a multiple of the vector width (4 elements)") != std::string::npos);
  CHECK(e.find("(62)") != std::string::npos);
  // Tile columns that are not whole vectors (30), in a tile of 240 elements.
  const fz::tile_map odd_tile{64, 60, 8, 30};
  s.reset();
  CHECK(s.run({odd_tile, odd_tile, odd_tile}, false, {240, 240, 240}) == 0);
  e = s.first_error(&code);
  CHECK(code == errc::invalid_argument);
  CHECK(e.find("not a multiple of the vector width") != std::string::npos);
  check_recovers(s, fz::tile_map{64, 64, 8, 32});
}

TEST_CASE("checked mode: a tile AllReduce call without finish() makes the next call fail, nothing written",
          "[checks]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  tile_setup s;
  const fz::tile_map m{64, 64, 8, 32};
  s.reset();
  CHECK(s.run({m, m, m}, /*skip_finish=*/true) == static_cast<std::size_t>(s.n) * 64 * 64);  // itself correct
  CHECK(s.first_error().empty());
  CHECK(s.run({m, m, m}) == 0);  // the next call: refused
  errc code{};
  const std::string e = s.first_error(&code);
  INFO(e);
  CHECK(code == errc::invalid_argument);
  CHECK(e.find("did not call finish() in every block") != std::string::npos);
  for (const std::string& x : s.all_errors()) CHECK(x.find("finish()") != std::string::npos);
  check_recovers(s, m);

  // One block of each rank skips it: the counter stays too; the next call is refused.
  s.reset();
  CHECK(s.run({m, m, m}, false, {}, /*skip_block=*/1) == static_cast<std::size_t>(s.n) * 64 * 64);
  CHECK(s.first_error().empty());
  CHECK(s.run({m, m, m}) == 0);
  CHECK(s.first_error().find("did not call finish() in every block") != std::string::npos);
  check_recovers(s, m);
}

TEST_CASE("checked mode: objects constructed more than once per call and back-to-back calls pass", "[checks]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  tile_setup s;
  const fz::tile_map m{64, 64, 8, 32};
  s.reset();
  for (int call = 0; call < 4; ++call) {
    CAPTURE(call);
    CHECK(s.run({m, m, m}, false, {}, -1, /*second_object=*/call % 2 == 1) == static_cast<std::size_t>(s.n) * 64 * 64);
    CHECK(s.first_error().empty());
  }
  check_recovers(s, m);
}

