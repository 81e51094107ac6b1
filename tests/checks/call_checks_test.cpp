// The checked mode (RCCLX_CHECKS=1) on the device: a tile AllReduce call's arguments (the host
// check()'s, plus the region and the bytes of the algorithm the call resolved to) and its use of
// the tiles (publish marks, finish counts, tiles left unpublished or unreduced), each misuse named
// by its code with both values, nothing written where it is knowable before the first output (the
// outputs keep their sentinel, the 4 KiB after every buffer and, for arguments, every pad word stay
// as they were), and a correct call after a reset.
#include <rcclx/fused/combine.hpp>
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/fused/tile_allreduce.hpp>

#include <cstring>

#include <cstdint>
#include <string>
#include <vector>

#include "../support/catch.hpp"
#include "call_runs.hpp"

static_assert(rcclx::checks, "this test is built with RCCLX_CHECKS=1");

namespace {

using call_checks::algo_kind;
using call_checks::call_args;
using call_checks::call_result;
using call_checks::call_setup;
using call_checks::sentinel;
using rcclx::core::misuse;
namespace core = rcclx::core;
using flat_ar = rcclx::fused::tile_allreduce<float, 8, rcclx::algorithm::flat>;
using tree_ar = rcclx::fused::tile_allreduce<float, 8, rcclx::algorithm::tree>;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
using rcclx_test::under_thread_sanitizer;

// 8 tiles of 64 floats: 2 KiB of inputs per half.
constexpr std::size_t in_bytes = 8 * 64 * sizeof(float);

std::size_t touched(const call_result& r, int rank) {
  std::size_t n = 0;
  for (float v : r.out[static_cast<std::size_t>(rank)]) n += v != sentinel;
  return n;
}

void check_refused_everywhere(const call_result& r) {
  for (int q = 0; q < call_checks::ranks; ++q) {
    INFO("rank " << q);
    CHECK(touched(r, q) == 0);
  }
  CHECK(r.guard_intact);
}

// The record of `rank` names `m` with values (a, b).
void check_record(const call_result& r, int rank, misuse m, std::uint32_t a, std::uint32_t b) {
  const core::error_record& e = r.errors[static_cast<std::size_t>(rank)];
  INFO("rank " << rank << ": " << core::describe(e));
  CHECK(e.code == static_cast<std::uint32_t>(rcclx::errc::invalid_argument));
  CHECK(e.kind == static_cast<std::uint32_t>(m));
  CHECK(e.observed == a);
  CHECK(e.reserved == b);
}

// After a reset, a correct call gives the float64 sums on every rank and records nothing.
void check_recovers(call_setup& s, const call_args& good = call_args{}) {
  s.reset();
  const call_result r = s.run(good);
  const auto ref = call_checks::reference(good.num_tiles, good.tile_elems);
  for (int q = 0; q < call_checks::ranks; ++q) {
    INFO("rank " << q);
    CHECK(r.errors[static_cast<std::size_t>(q)].code == 0u);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) wrong += static_cast<double>(r.out[static_cast<std::size_t>(q)][i]) != ref[i];
    CHECK(wrong == 0);
    CHECK(r.out[static_cast<std::size_t>(q)][ref.size()] == sentinel);
  }
  CHECK(r.guard_intact);
}

}  // namespace

TEST_CASE("checked tile call: the region constructor and need() (bytes of the class's algorithm)", "[checks]") {
  STATIC_REQUIRE(flat_ar::need(64, 8).bytes == 2 * in_bytes);
  STATIC_REQUIRE(flat_ar::need(64, 8).sized_for == core::sized_for_flat);
  STATIC_REQUIRE(tree_ar::need(64, 8).bytes == 4 * in_bytes);
  STATIC_REQUIRE(tree_ar::need(64, 8, 256).bytes == 2 * (in_bytes + 256));
  STATIC_REQUIRE(tree_ar::need(64, 8).sized_for == core::sized_for_tree);
  STATIC_REQUIRE(rcclx::fused::tile_allreduce<float, 8, rcclx::algorithm::automatic>::need(64, 8).bytes == 4 * in_bytes);
  STATIC_REQUIRE(rcclx::fused::tile_allreduce<float, 8, rcclx::algorithm::automatic>::need(64, 8).sized_for ==
                 core::sized_for_any);
  STATIC_REQUIRE(flat_ar::need(64, 8).max_tiles == 8);
  // A region in the middle of a larger buffer, both parities (calls alternate the halves), flat and tree.
  call_setup s(8192 + 4 * in_bytes);
  for (algo_kind k : {algo_kind::flat, algo_kind::tree}) {
    call_args a;
    a.algo = k;
    a.use_region = true;
    const std::size_t bytes = k == algo_kind::flat ? 2 * in_bytes : 4 * in_bytes;
    a.region = core::region{8192, bytes, core::tile_slots{5, 8}, 1u, k == algo_kind::flat ? 1u : 2u};
    for (std::uint32_t start : {0u, 1u}) {
      CAPTURE(static_cast<int>(k), start);
      s.reset(start);
      check_recovers(s, a);
    }
  }
}

TEST_CASE("checked tile call: a tree kernel on a flat-sized buffer is refused before any write", "[checks]") {
  call_setup s(2 * in_bytes);  // flat's workspace: tree's results would lie past the buffer
  for (bool region : {false, true}) {
    CAPTURE(region);
    call_args a;
    a.algo = algo_kind::tree;
    a.use_region = region;
    a.region = core::region{0, 2 * in_bytes, core::tile_slots{0, 16}, 1u, core::sized_for_flat};
    s.reset(1);  // an odd call: the second half, whose results would be written into the guard
    const call_result r = s.run(a);
    for (int q = 0; q < call_checks::ranks; ++q) {
      check_record(r, q, misuse::region_too_small, static_cast<std::uint32_t>(4 * in_bytes),
                   static_cast<std::uint32_t>(2 * in_bytes));
      CHECK(r.errors[static_cast<std::size_t>(q)].call == ((region ? 1u : 3u) << 8 | 1u));
    }
    check_refused_everywhere(r);
    CHECK(r.pads_intact);
    check_recovers(s);
  }
}

TEST_CASE("checked tile call: arguments check() would refuse are refused on the device, no pad word written", "[checks]") {
  call_setup s(4 * in_bytes);
  const int mb = s.max_blocks();
  struct arg_case {
    const char* what;
    call_args a;
    misuse m;
    std::uint32_t va, vb;
  };
  std::vector<arg_case> cases;
  {
    call_args a;
    a.slots = core::tile_slots{0, 4};
    cases.push_back({"more tiles than the slot range", a, misuse::arg_num_tiles, 8u, 4u});
  }
  {
    call_args a;
    a.slots = core::tile_slots{mb - 4, 8};
    cases.push_back({"slot range past the pads", a, misuse::arg_slots, static_cast<std::uint32_t>(mb + 5),
                     static_cast<std::uint32_t>(mb)});
  }
  {
    call_args a;
    a.tile_elems = 66;
    cases.push_back({"tile_elems not whole vectors", a, misuse::arg_tile_elems, 66u, 4u});
  }
  {
    call_args a;
    a.null_rank = 1;
    cases.push_back({"a null buffer", a, misuse::arg_buffer, 1u, 0u});
  }
  {
    call_args a;
    a.misaligned_rank = 2;
    cases.push_back({"a misaligned buffer", a, misuse::arg_buffer, 2u, 1u});
  }
  {
    call_args a;
    a.use_region = true;
    a.region = core::region{256, 4 * in_bytes, core::tile_slots{0, 16}, 1u, core::sized_for_flat};
    cases.push_back({"a region past the buffer's end", a, misuse::region_outside_buffer,
                     static_cast<std::uint32_t>(256 + 4 * in_bytes), static_cast<std::uint32_t>(4 * in_bytes)});
  }
  {
    call_args a;
    a.capacity = in_bytes;  // half of flat's workspace
    cases.push_back({"a buffer smaller than flat's workspace", a, misuse::region_too_small,
                     static_cast<std::uint32_t>(2 * in_bytes), static_cast<std::uint32_t>(in_bytes)});
  }
  for (const arg_case& c : cases) {
    INFO(c.what);
    s.reset();
    const call_result r = s.run(c.a);
    for (int q = 0; q < call_checks::ranks; ++q) check_record(r, q, c.m, c.va, c.vb);
    check_refused_everywhere(r);
    CHECK(r.pads_intact);
    check_recovers(s);
  }
}

TEST_CASE("checked tile call: publish marks name the block that published or reduced wrongly", "[checks]") {
  call_setup s(4 * in_bytes);
  SECTION("a tile published twice") {
    call_args a;
    a.publish_twice = true;
    s.reset();
    const call_result r = s.run(a);
    for (int q = 0; q < call_checks::ranks; ++q) {
      const core::error_record& e = r.errors[static_cast<std::size_t>(q)];
      CHECK(e.kind == static_cast<std::uint32_t>(misuse::published_twice));
      CHECK(e.observed == e.reserved);  // the same block, twice
    }
    check_refused_everywhere(r);
    check_recovers(s);
  }
  SECTION("every rank runs with rank 0's table (two tiles per block, and one)") {
    // Every rank's producers write rank 0's buffer at once: a data race by design, which
    // ThreadSanitizer (rightly) stops; the case runs in the other builds.
    if (under_thread_sanitizer) {
      WARN("skipped under ThreadSanitizer: a race by design");
      return;
    }
    for (int tiles : {2 * s.blocks(), s.blocks()}) {
      CAPTURE(tiles);
      call_args a;
      a.tables_of_rank0 = true;
      a.num_tiles = tiles;
      s.reset();
      const call_result r = s.run(a);
      // Every rank's blocks publish into rank 0's rows: the second publisher of each tile is named
      // there (the peers' flags then never come: their waits expire later).
      CHECK(r.errors[0].kind == static_cast<std::uint32_t>(misuse::published_twice));
      CHECK(r.errors[0].code == static_cast<std::uint32_t>(rcclx::errc::invalid_argument));
      CHECK(touched(r, 0) == 0);
      check_recovers(s);
    }
  }
  SECTION("a tile reduced by another block than its publisher (tile_reducer::same_block)") {
    call_args a;
    a.reduce_shift = 1;
    s.reset();
    const call_result r = s.run(a);
    const int nb = s.blocks();
    for (int q = 0; q < call_checks::ranks; ++q) {
      const core::error_record& e = r.errors[static_cast<std::size_t>(q)];
      INFO("rank " << q << ": " << core::describe(e));
      CHECK(e.kind == static_cast<std::uint32_t>(misuse::reducer_not_publisher));
      // Block ids are those of the rank's own grid (on the host too: one grid per emulated rank).
      const std::uint32_t pub = e.observed, red = e.reserved;
      CHECK(pub < static_cast<std::uint32_t>(nb));
      CHECK(red == (pub + 1) % static_cast<std::uint32_t>(nb));
      CHECK(e.block % static_cast<std::uint32_t>(nb) == pub);  // the tile, published by block tile % nb
    }
    check_refused_everywhere(r);
    check_recovers(s);
  }
  SECTION("a rank reduces its tiles before publishing them") {
    call_args a;
    a.reduce_first_rank = 1;
    s.reset();
    const call_result r = s.run(a);
    const core::error_record& e = r.errors[1];
    INFO(core::describe(e));
    CHECK(e.kind == static_cast<std::uint32_t>(misuse::reduced_before_publish));
    CHECK(e.observed < 8u);
    CHECK(touched(r, 1) == 0);
    check_recovers(s);
  }
  SECTION("a tile past the call's tiles") {
    call_args a;
    a.publish_past_end = true;
    s.reset();
    const call_result r = s.run(a);
    for (int q = 0; q < call_checks::ranks; ++q) check_record(r, q, misuse::tile_out_of_range, 8u, 8u);
    CHECK(r.guard_intact);
    check_recovers(s);
  }
}

TEST_CASE("checked tile call: finish() with another count than the grid's", "[checks]") {
  call_setup s(4 * in_bytes);
  call_args a;
  a.finish_blocks = s.blocks() - 1;
  const auto nb = static_cast<std::uint32_t>(s.blocks());
  for (int round = 0; round < 3; ++round) {
    s.reset();
    const call_result r = s.run(a);
    int named = 0;
    for (int q = 0; q < call_checks::ranks; ++q) {
      const core::error_record& e = r.errors[static_cast<std::size_t>(q)];
      INFO("rank " << q << ": " << core::describe(e));
      if (e.kind == static_cast<std::uint32_t>(misuse::finish_count)) {  // the grid is known (GPUs)
        CHECK(e.observed == nb - 1);
        CHECK(e.reserved == nb);
        ++named;
      } else if (e.code == static_cast<std::uint32_t>(rcclx::errc::invalid_argument)) {
        // The grid is not known (host): the block counted after the call ended is one too many.
        CHECK(e.kind == static_cast<std::uint32_t>(misuse::finish_twice));
        CHECK(e.observed == nb);
        CHECK(e.reserved == nb - 1);
        ++named;
      } else {
        // Host: a peer whose late block refused its tiles times out waiting for them.
        CHECK(on_host);
        CHECK(e.code == static_cast<std::uint32_t>(rcclx::errc::timeout));
      }
    }
    CHECK(named >= 1);
    if (!on_host) CHECK(named == call_checks::ranks);
  }
  check_recovers(s);
}

TEST_CASE("checked tile call: tiles a call never published or never reduced (a stale grid stride)", "[checks]") {
  call_setup s(4 * in_bytes);
  const int nb = s.blocks();
  for (bool publish_too : {true, false}) {
    CAPTURE(publish_too);
    call_args bad;
    bad.num_tiles = nb + 4;  // more tiles than blocks: a stride of nb + 1 misses tile nb
    if (publish_too) {
      bad.publish_stride = bad.reduce_stride = nb + 1;  // tile nb is published and reduced by nobody
    } else {
      bad.skip_reduce_tile = nb;  // a reduce loop that skips a tile
    }
    s.reset();
    const call_result r1 = s.run(bad);
    for (int q = 0; q < call_checks::ranks; ++q) CHECK(r1.errors[static_cast<std::size_t>(q)].code == 0u);
    // The harness's audit after the launch (no next call yet) names the tile on every rank.
    {
      rcclx::errc code{};
      const std::string e = s.described_errors(&code);
      INFO(e);
      CHECK(code == rcclx::errc::invalid_argument);
      CHECK(e.find("tile " + std::to_string(nb)) != std::string::npos);
      CHECK(e.find(publish_too ? "publish" : "reduc") != std::string::npos);
    }
    // The next call on the slot range looks at the call before (its first block to finish) and
    // names the tile on the device; the call after it is refused.
    const call_result r2 = s.run(call_args{});
    for (int q = 0; q < call_checks::ranks; ++q)
      check_record(r2, q, publish_too ? misuse::tile_not_published : misuse::tile_not_reduced,
                   static_cast<std::uint32_t>(nb), 1u);
    const call_result r3 = s.run(call_args{});
    for (int q = 0; q < call_checks::ranks; ++q)
      check_record(r3, q, publish_too ? misuse::tile_not_published : misuse::tile_not_reduced,
                   static_cast<std::uint32_t>(nb), 1u);
    check_refused_everywhere(r3);
    check_recovers(s);
  }
}

TEST_CASE("checked tile call: a symmetric input changed between publish and the end of its reduce", "[checks]") {
  // Stores into inputs the peers read at the same time: a data race by design, which
  // ThreadSanitizer (rightly) stops; the case runs in the other builds.
  if (under_thread_sanitizer) {
    WARN("skipped under ThreadSanitizer: a race by design");
    return;
  }
  call_setup s(4 * in_bytes);
  // An epilogue of the user's (not a stage: nothing checks it before the call) that stores the sums
  // into the tile's own input while the peers may still read it: every rank, every tile.
  for (algo_kind algo : {algo_kind::flat, algo_kind::tree}) {
    CAPTURE(algo == algo_kind::tree);
    call_args bad;
    bad.algo = algo;
    bad.epilogue = 4;
    s.reset();
    const call_result r1 = s.run(bad);
    for (int q = 0; q < call_checks::ranks; ++q) CHECK(r1.errors[static_cast<std::size_t>(q)].code == 0u);
    {
      rcclx::errc code{};
      const std::string e = s.described_errors(&code);  // the harness's audit after the launch
      INFO(e);
      CHECK(code == rcclx::errc::invalid_argument);
      CHECK(e.find("symmetric input of tile 0 changed in call 1") != std::string::npos);
    }
    call_args next;
    next.algo = algo;
    const call_result r2 = s.run(next);  // the next call's first block to finish names it on the device
    for (int q = 0; q < call_checks::ranks; ++q) check_record(r2, q, misuse::input_changed, 0u, 1u);
    check_recovers(s, next);
  }
  // A kernel's store into a tile's input after publishing it (rank 1, tile 5): that rank, that tile.
  for (algo_kind algo : {algo_kind::flat, algo_kind::tree}) {
    CAPTURE(algo == algo_kind::tree);
    call_args bad;
    bad.algo = algo;
    bad.store_rank = 1;
    bad.store_tile = 5;
    s.reset();
    const call_result r1 = s.run(bad);
    for (int q = 0; q < call_checks::ranks; ++q) CHECK(r1.errors[static_cast<std::size_t>(q)].code == 0u);
    {
      rcclx::errc code{};
      const std::string e = s.described_errors(&code);
      INFO(e);
      CHECK(code == rcclx::errc::invalid_argument);
      CHECK(e.find("rank 1") != std::string::npos);
      CHECK(e.find("symmetric input of tile 5 changed in call 1") != std::string::npos);
      CHECK(e.find("rank 0") == std::string::npos);
      CHECK(e.find("rank 2") == std::string::npos);
    }
    call_args next;
    next.algo = algo;
    const call_result r2 = s.run(next);
    check_record(r2, 1, misuse::input_changed, 5u, 1u);
    // The other ranks: nothing, or (tree) a wait for a result rank 1 refused from then on.
    for (int q : {0, 2}) {
      const std::uint32_t c = r2.errors[static_cast<std::size_t>(q)].code;
      CHECK((c == 0u || (algo == algo_kind::tree && c == static_cast<std::uint32_t>(rcclx::errc::timeout))));
    }
    {
      rcclx::errc code{};
      const std::string e = s.described_errors(&code);
      INFO(e);
      CHECK(code == rcclx::errc::invalid_argument);  // the root cause first
      CHECK(e.find("rank 1: the symmetric input of tile 5 changed in call 1") != std::string::npos);
    }
    check_recovers(s, next);
  }
  // Correct calls one after another leave nothing to name (the hashes cancel, each call's words
  // are cleared for the call after next).
  for (algo_kind algo : {algo_kind::flat, algo_kind::tree}) {
    call_args good;
    good.algo = algo;
    s.reset();
    for (int c = 0; c < 4; ++c) {
      const call_result r = s.run(good);
      for (int q = 0; q < call_checks::ranks; ++q) CHECK(r.errors[static_cast<std::size_t>(q)].code == 0u);
      rcclx::errc code{};
      CHECK(s.described_errors(&code).empty());
    }
  }
}

TEST_CASE("checked tile call: two calls in flight over the same bytes or slots are refused", "[checks]") {
  call_setup s(4 * in_bytes);
  const auto ref = call_checks::reference(8, 64);
  // Every output element is the sentinel or the float64 sum (call 1: + 100 per rank): never wrong.
  const auto wrong = [&](const call_checks::two_result& r, bool all_refused) {
    std::size_t bad = 0;
    for (int c = 0; c < 2; ++c)
      for (const auto& o : r.out[c])
        for (std::size_t i = 0; i < ref.size(); ++i) {
          const double want = ref[i] + 100.0 * c * call_checks::ranks;
          bad += o[i] != sentinel && (all_refused || static_cast<double>(o[i]) != want);
        }
    return bad;
  };
  SECTION("two tile AllReduces on separate slot ranges of one buffer (the constructors without a region)") {
    s.reset();
    const auto r = s.run_two(call_checks::two_args{});
    for (int q = 0; q < call_checks::ranks; ++q) {
      const core::error_record& e = r.errors[static_cast<std::size_t>(q)];
      INFO("rank " << q << ": " << core::describe(e));
      CHECK(e.kind == static_cast<std::uint32_t>(misuse::region_overlap_bytes));
      CHECK(((e.observed == 0u && e.reserved == 10u) || (e.observed == 10u && e.reserved == 0u)));
    }
    CHECK(wrong(r, false) == 0);
  }
  SECTION("two hand-made regions sharing bytes") {
    call_checks::two_args a;
    a.use_region = true;
    a.region[0] = core::region{0, 2 * in_bytes, core::tile_slots{0, 8}, 1u, 1u};
    a.region[1] = core::region{in_bytes, 2 * in_bytes, core::tile_slots{10, 8}, 2u, 1u};
    s.reset();
    const auto r = s.run_two(a);
    for (int q = 0; q < call_checks::ranks; ++q)
      CHECK(r.errors[static_cast<std::size_t>(q)].kind == static_cast<std::uint32_t>(misuse::region_overlap_bytes));
    CHECK(wrong(r, false) == 0);
  }
  SECTION("two regions sharing pad slots") {
    call_checks::two_args a;
    a.use_region = true;
    a.region[0] = core::region{0, 2 * in_bytes, core::tile_slots{0, 8}, 1u, 1u};
    a.region[1] = core::region{2 * in_bytes, 2 * in_bytes, core::tile_slots{6, 8}, 2u, 1u};
    s.reset();
    const auto r = s.run_two(a);
    for (int q = 0; q < call_checks::ranks; ++q) {
      const core::error_record& e = r.errors[static_cast<std::size_t>(q)];
      CHECK(e.kind == static_cast<std::uint32_t>(misuse::region_overlap_slots));
      CHECK(((e.observed == 0u && e.reserved == 6u) || (e.observed == 6u && e.reserved == 0u)));
    }
    CHECK(wrong(r, false) == 0);
  }
  SECTION("two regions apart in bytes and slots: both calls right, twice") {
    call_checks::two_args a;
    a.use_region = true;
    a.region[0] = core::region{0, 2 * in_bytes, core::tile_slots{0, 8}, 1u, 1u};
    a.region[1] = core::region{2 * in_bytes, 2 * in_bytes, core::tile_slots{9, 8}, 2u, 1u};
    s.reset();
    for (int call = 0; call < 2; ++call) {
      const auto r = s.run_two(a);
      for (int q = 0; q < call_checks::ranks; ++q) CHECK(r.errors[static_cast<std::size_t>(q)].code == 0u);
      std::size_t sentinels = 0;
      for (int c = 0; c < 2; ++c)
        for (const auto& o : r.out[c])
          for (std::size_t i = 0; i < ref.size(); ++i) sentinels += o[i] == sentinel;
      CHECK(sentinels == 0);
      CHECK(wrong(r, false) == 0);
    }
  }
  check_recovers(s);
}

TEST_CASE("checked tile call: an epilogue's own check() is asked before the first output", "[checks]") {
  call_setup s(4 * in_bytes);
  SECTION("a checked store into the output: the sums") {
    call_args a;
    a.epilogue = 1;
    s.reset();
    check_recovers(s, a);
  }
  SECTION("a checked store into the call's symmetric input") {
    call_args a;
    a.epilogue = 2;
    s.reset();
    const call_result r = s.run(a);
    for (int q = 0; q < call_checks::ranks; ++q) {
      const core::error_record& e = r.errors[static_cast<std::size_t>(q)];
      INFO("rank " << q << ": " << core::describe(e));
      CHECK(e.kind == static_cast<std::uint32_t>(misuse::stage_writes_symmetric));
      CHECK(e.observed == 0u);  // input(0) is the start of the call's first half
      CHECK(e.call == 0u);      // stage 0 of a user epilogue
      CHECK(touched(r, q) == 0);
    }
    CHECK(r.guard_intact);
    check_recovers(s);
  }
  SECTION("a checked store whose columns are not the map's") {
    call_args a;
    a.epilogue = 3;
    s.reset();
    const call_result r = s.run(a);
    for (int q = 0; q < call_checks::ranks; ++q) check_record(r, q, misuse::stage_cols, 32u, 64u);
    check_refused_everywhere(r);
    check_recovers(s);
  }
}

TEST_CASE("checked tile call: combine in a region, and refused in one sized for flat", "[checks]") {
  using c_t = rcclx::fused::combine<rcclx::fused::argmax::record, rcclx::fused::argmax, 8, rcclx::algorithm::tree>;
  const core::region_need need = c_t::need(16, 64);
  CHECK(need.bytes == c_t::workspace_bytes(16, 64));
  CHECK(need.max_tiles == 4);
  CHECK(need.sized_for == core::sized_for_tree);
  call_setup s(4096 + need.bytes);
  // Expected: per record the largest value, ties to the lower index (rank order), by hand.
  std::vector<std::uint32_t> want(2 * 64);
  for (std::uint32_t k = 0; k < 64; ++k) {
    float best = -1;
    std::uint32_t idx = 0;
    for (std::uint32_t r = 0; r < call_checks::ranks; ++r) {
      const float v = static_cast<float>((7 * k + 3 * r) % 11);
      if (v > best) {
        best = v;
        idx = 10 * k + r;
      }
    }
    std::memcpy(&want[2 * k], &best, 4);
    want[2 * k + 1] = idx;
  }
  for (std::uint32_t start : {0u, 1u}) {
    CAPTURE(start);
    s.reset(start);
    const auto r = s.run_combine(core::region{4096, need.bytes, core::tile_slots{3, 4}, 1u, need.sized_for});
    for (int q = 0; q < call_checks::ranks; ++q) {
      CHECK(r.errors[static_cast<std::size_t>(q)].code == 0u);
      CHECK(std::vector<std::uint32_t>(r.out[static_cast<std::size_t>(q)].begin(), r.out[static_cast<std::size_t>(q)].begin() + 128) == want);
      CHECK(r.out[static_cast<std::size_t>(q)][128] == 0xDEADBEEFu);
    }
  }
  // Tree in flat's bytes: refused on the device before any write.
  const std::size_t flat_bytes = rcclx::fused::combine<rcclx::fused::argmax::record, rcclx::fused::argmax, 8>::need(16, 64).bytes;
  s.reset(1);
  const auto r = s.run_combine(core::region{4096, flat_bytes, core::tile_slots{3, 4}, 1u, core::sized_for_flat});
  for (int q = 0; q < call_checks::ranks; ++q) {
    const core::error_record& e = r.errors[static_cast<std::size_t>(q)];
    CHECK(e.kind == static_cast<std::uint32_t>(misuse::region_too_small));
    CHECK(e.observed == static_cast<std::uint32_t>(need.bytes));
    CHECK(e.reserved == static_cast<std::uint32_t>(flat_bytes));
    std::size_t written = 0;
    for (std::uint32_t w : r.out[static_cast<std::size_t>(q)]) written += w != 0xDEADBEEFu;
    CHECK(written == 0);
  }
}
