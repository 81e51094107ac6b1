// The emulated harness's diagnostics (built with RCCLX_CHECKS=1): the texts of timeouts and misuse
// records (synthetic records against literal strings), the root cause reported first, a world left
// with an error refusing the next launch ("reset them"), and no RCCLX_CHECKS hint where every rank is
// one binary; with real launches of a tile AllReduce in which a rank is absent or refuses its call.
#include <rcclx/core/call_check.hpp>
#include <rcclx/core/error.hpp>
#include <rcclx/fused/region_plan.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/testing/emulated_peers.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "../support/catch.hpp"

namespace harness_kernels {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
constexpr int max_r = 8;

// A tile AllReduce of ones; rank `refuses` records arg_num_tiles (as the checked constructor does
// for too many tiles) and leaves without publishing.
struct ones {
  const rcclx::core::peer_table<float, max_r>* tables;
  rcclx::core::region reg;
  fz::tile_map map;
  float* out[max_r];
  int refuses;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const int tiles = static_cast<int>(map.num_tiles());
    if (ix.rank == refuses) {
      if (g.thread_rank() == 0 && ix.block == 0)
        rcclx::core::record_error(tables[ix.rank].signals, rcclx::errc::invalid_argument, ix.rank,
                                  static_cast<std::uint32_t>(rcclx::core::misuse::arg_num_tiles), reg.slots.first, 0u,
                                  static_cast<std::uint32_t>(reg.slots.max_tiles + 1),
                                  static_cast<std::uint32_t>(reg.slots.max_tiles));
      return;
    }
    const auto t = rcclx::core::region_table(tables[ix.rank], reg);
    fz::tile_allreduce<float, max_r> ar(t, reg.slots, map.tile_elems(), tiles);
    for (int k = ix.block; k < tiles; k += ix.num_blocks) {
      float* in = ar.input(k);
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < map.tile_elems();
           e += static_cast<std::size_t>(g.size()))
        in[e] = 1.0f;
      ar.publish(g, k);
    }
    const fz::epilogue<fz::store<float>> epi{{out[ix.rank], map.cols}};
    bool ok = true;
    for (int k = ix.block; k < tiles && ok; k += ix.num_blocks) ok = ar.template reduce<4>(g, k, map, epi);
    ar.finish(g, ix.num_blocks);
  }
};

struct nothing {
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G&, rt::launch_index) const {}
};

}  // namespace harness_kernels

namespace {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using rcclx::errc;
using rcclx::core::error_record;
using harness_kernels::max_r;

error_record timeout(std::uint32_t waiting, std::uint32_t missing, rcclx::core::barrier_kind k, std::uint32_t block,
                     std::uint32_t call, std::uint32_t observed) {
  return error_record{static_cast<std::uint32_t>(errc::timeout), waiting, missing, static_cast<std::uint32_t>(k),
                      block, call, observed, 0u};
}
error_record misuse(std::uint32_t rank, rcclx::core::misuse m, std::uint32_t block, std::uint32_t a, std::uint32_t b,
                    std::uint32_t call = 0) {
  return error_record{static_cast<std::uint32_t>(errc::invalid_argument), rank, rank, static_cast<std::uint32_t>(m),
                      block, call, a, b};
}

// A world with one region of a plan for harness_kernels::ones, and its outputs.
struct ones_world {
  static constexpr int n = 3, blocks = 2;
  const fz::tile_map map{8, 16, 4, 8};  // 4 tiles of 32 floats
  fz::region_plan plan;
  fz::region_plan::handle h;
  rt::emulated_world<max_r> world;
  std::vector<float*> out;

  ones_world()
      : h(plan.add(rcclx::core::region_need{2 * 4 * 32 * sizeof(float), 4, 1u}, "ones")),
        world(n, plan.bytes(), plan.slots(), rcclx_test::absent_timeout_ns) {
    plan.place(world);
    for (int r = 0; r < n; ++r)
      out.push_back(static_cast<float*>(rcclx::gpu::device_malloc(map.rows * map.cols * sizeof(float))));
  }
  ~ones_world() {
    for (float* p : out) rcclx::gpu::device_free(p);
  }
  harness_kernels::ones kernel(int refuses = -1) const {
    harness_kernels::ones k{};
    k.tables = world.device_tables<float>();
    k.reg = plan[h];
    k.map = map;
    for (int r = 0; r < n; ++r) k.out[r] = out[static_cast<std::size_t>(r)];
    k.refuses = refuses;
    return k;
  }
  bool outputs_are(float v) const {
    std::vector<float> got(map.rows * map.cols);
    for (int r = 0; r < n; ++r) {
      rcclx::gpu::copy(got.data(), out[static_cast<std::size_t>(r)], got.size() * sizeof(float));
      for (float x : got)
        if (x != v) return false;
    }
    return true;
  }
};

const int threads = rcclx::current_backend == rcclx::backend::host ? 1 : 64;

}  // namespace

TEST_CASE("harness: timeout texts say what the flag read against the call awaited", "[regions]") {
  using rcclx::core::barrier_kind;
  using rcclx::core::describe;
  const rcclx::core::describe_context emulated{true, true};
  const std::string prefix = "rank 0 timed out in the tile barrier (tile 6, call 3) waiting for rank 3: ";
  REQUIRE(describe(timeout(0, 3, barrier_kind::tile, 6, 3, 2)) ==
          prefix + "rank 3's flag says call 2, this is call 3: rank 3 never arrived at tile 6 of call 3 (not launched, "
                   "its grid skips the tile, or it made fewer calls)");
  REQUIRE(describe(timeout(0, 3, barrier_kind::tile, 6, 3, 5)) ==
          prefix + "rank 3's flag says call 5, this is call 3: rank 3 is ahead: this rank's pads are behind (an earlier "
                   "call failed here, finish() counts differ, or only some pads were reset): reset every rank's pads");
  REQUIRE(describe(timeout(0, 3, barrier_kind::tile, 6, 3, 0)) ==
          prefix + "rank 3's flag says call 0, this is call 3: rank 3 never published on these slots since the pads "
                   "were reset");
  REQUIRE(describe(timeout(0, 3, barrier_kind::tile, 6, 3, 0), emulated) ==
          prefix + "rank 3's flag says call 0, this is call 3: rank 3 never published on these slots since the pads "
                   "were reset (it ran in this launch, so it skipped this publish: a publish loop or publish_strided "
                   "that misses the tile, or blocks that used another table or slot range)");
  // Counters wrap: call 1 after 0xFFFFFFFF is one call ahead of the flag.
  REQUIRE(describe(timeout(2, 1, barrier_kind::start, 4, 1, 0xFFFFFFFFu)) ==
          "rank 2 timed out in the start barrier (block 4, call 1) waiting for rank 1: rank 1's flag says call "
          "4294967295, this is call 1: rank 1 never arrived at the barrier of block 4 of call 1 (not launched, its grid "
          "has fewer blocks, or it made fewer calls)");
  const error_record check = timeout(1, 0, barrier_kind::check, 0, 7, 6);
  const std::string check_text =
      "rank 1 timed out in the call check barrier (block 0, call 7) waiting for rank 0: rank 0's flag says call 6, "
      "this is call 7: rank 0 never arrived at the barrier of block 0 of call 7 (not launched, its grid has fewer "
      "blocks, or it made fewer calls)";
  REQUIRE(describe(check) ==
          check_text + " (or was not built with RCCLX_CHECKS: every rank must use the same setting)");
  REQUIRE(describe(check, rcclx::core::describe_context{true, false}) == check_text);
}

TEST_CASE("harness: misuse texts name the field, both values and what was written", "[regions]") {
  using rcclx::core::describe;
  using m = rcclx::core::misuse;
  REQUIRE(describe(misuse(2, m::arg_num_tiles, 5, 9, 8)) ==
          "rank 2: num_tiles = 9 is more than the slot range's max_tiles = 8 (tile_slots from slot 5); no output was "
          "written and no flag was raised");
  REQUIRE(describe(misuse(0, m::region_too_small, 3, 0xFFFFFFFFu, 4096, (1u << 8) | 1u)) ==
          "rank 0: the call (slots from 3) runs tree and needs \u2265 4 GiB but its region has 4096 bytes (sized for "
          "flat): size the region with the class's need() for its algorithm; no output was written");
  REQUIRE(describe(misuse(1, m::wrong_rank_table, 0, 0, 1)) ==
          "rank 1: the kernel was given rank 0's table but runs as rank 1 (tables[0] on every rank?); no output was "
          "written");
  REQUIRE(describe(misuse(4, m::stage_scale, 2, 0xBF800000u, 0, (3u << 8) | 2u)) ==
          "rank 4 (tile 2): epilogue stage 2 (fp8_out): scale = -1 (bits 0xbf800000) must be finite and > 0; no output "
          "was written");
  REQUIRE(describe(misuse(0, m::reducer_not_publisher, 7, 1, 3)) ==
          "rank 0 (tile 7): the tile was published by block 1 but reduced by block 3 under tile_reducer::same_block "
          "(reduce it in its publishing block, or pass tile_reducer::any_block); this rank's call stopped there: "
          "outputs of tiles it reduced before may have been written, none after");
  // Every code 5..28 has a text of its own that names both values.
  for (std::uint32_t k = 5; k <= 28; ++k) {
    const std::string t = describe(misuse(0, static_cast<m>(k), 0, 12345, 67890));
    CAPTURE(k, t);
    REQUIRE(t.find("invalid argument (misuse") == std::string::npos);
    const bool is_float = k == 24 || k == 27;  // a float's bits and 0
    REQUIRE(t.find(is_float ? "(bits 0x00003039)" : "12345") != std::string::npos);
    const bool second_value = k != 8 && !is_float;  // arg_buffer: 0 null, 1 misaligned
    if (second_value) REQUIRE(t.find("67890") != std::string::npos);
    REQUIRE((t.find("written") != std::string::npos || t.find("outputs of that call may be wrong") != std::string::npos));
  }
}

TEST_CASE("harness: the root cause first, every rank's text kept", "[regions]") {
  using rcclx::core::barrier_kind;
  const rcclx::core::describe_context emulated{true, true};
  const error_record none{};
  const error_record refused = misuse(2, rcclx::core::misuse::arg_num_tiles, 5, 9, 8);
  const std::string refused_text = rcclx::core::describe(refused, emulated);
  errc code{};
  const std::string m = rt::emulated_world<max_r>::describe_records(
      {timeout(0, 2, barrier_kind::tile, 1, 1, 0), timeout(1, 2, barrier_kind::tile, 0, 1, 0), refused}, emulated, &code);
  CAPTURE(m);
  REQUIRE(code == errc::invalid_argument);
  REQUIRE(m.rfind(refused_text, 0) == 0);
  REQUIRE(m.find("; also rank 0 timed out in the tile barrier (tile 1, call 1) waiting for rank 2") != std::string::npos);
  REQUIRE(m.find("; also rank 1 timed out in the tile barrier (tile 0, call 1) waiting for rank 2") != std::string::npos);
  REQUIRE(m.find("(rank 2 failed first: " + refused_text + ")") != std::string::npos);

  // Timeouts only: the one whose missing rank has no record of its own (the end of the chain) first.
  const std::string chain = rt::emulated_world<max_r>::describe_records(
      {timeout(0, 1, barrier_kind::tile, 0, 1, 0), timeout(1, 2, barrier_kind::tile, 0, 1, 0), none}, emulated, &code);
  CAPTURE(chain);
  REQUIRE(code == errc::timeout);
  REQUIRE(chain.rfind("rank 1 timed out in the tile barrier (tile 0, call 1) waiting for rank 2", 0) == 0);
  REQUIRE(chain.find("rank 0 timed out") != std::string::npos);
  REQUIRE(chain.find("(rank 1 failed first: rank 1 timed out") != std::string::npos);
  // A cycle names no one as first.
  const std::string cycle = rt::emulated_world<max_r>::describe_records(
      {timeout(0, 1, barrier_kind::tile, 0, 1, 0), timeout(1, 0, barrier_kind::tile, 0, 1, 0)}, emulated, &code);
  REQUIRE(cycle.find("failed first") == std::string::npos);
  REQUIRE(rt::emulated_world<max_r>::describe_records({none, none}, emulated, &code).empty());
  REQUIRE(code == errc::ok);
}

TEST_CASE("harness: a world left with an error refuses the next launch until reset", "[regions]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  ones_world w;
  rt::launch_emulated(w.world, w.blocks, threads, w.kernel());
  REQUIRE(w.outputs_are(3.0f));

  // Rank 1 absent: its peers time out, naming it; every rank is this binary, so no RCCLX_CHECKS hint.
  try {
    rt::launch_emulated(w.world, w.blocks, threads, rt::without_rank(w.kernel(), 1));
    FAIL("a launch with an absent rank did not throw");
  } catch (const rcclx::error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    REQUIRE(e.code() == errc::timeout);
    REQUIRE(what.find("waiting for rank 1") != std::string::npos);
    REQUIRE(what.find("RCCLX_CHECKS") == std::string::npos);
  }
  // Not reset: refused before launching, naming the earlier error.
  try {
    rt::launch_emulated(w.world, w.blocks, threads, w.kernel());
    FAIL("a launch on pads holding an error did not throw");
  } catch (const rcclx::error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    REQUIRE(e.code() == errc::invalid_argument);
    REQUIRE(what.find("the pads still hold an earlier error") != std::string::npos);
    REQUIRE(what.find("reset them") != std::string::npos);
    REQUIRE(what.find("waiting for rank 1") != std::string::npos);
  }
  w.world.reset();
  rt::launch_emulated(w.world, w.blocks, threads, w.kernel());
  REQUIRE(w.outputs_are(3.0f));
}

TEST_CASE("harness: emulated_peers run and collectives refuse pads that still hold an error", "[regions]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  rt::emulated_options o;
  o.timeout_ns = rcclx_test::absent_timeout_ns;
  o.pad_slots = 8;
  rt::emulated_peers<float, max_r> peers(2, 64, o);
  const rcclx::core::error_record stale = misuse(1, rcclx::core::misuse::arg_num_tiles, 0, 9, 8);
  rcclx::gpu::copy(peers.world().signals(1).err, &stale, sizeof(stale));
  REQUIRE_THROWS_WITH(peers.run(1, threads, harness_kernels::nothing{}),
                      RCCLX_CONTAINS("emulated_peers::run: the pads still hold an earlier error (rank 1: num_tiles = 9") &&
                          RCCLX_CONTAINS("reset them"));
  REQUIRE_THROWS_WITH(peers.allreduce(rcclx::algorithm::flat),
                      RCCLX_CONTAINS("emulated_peers: the pads still hold an earlier error") &&
                          RCCLX_CONTAINS("reset them"));
  peers.world().reset();
  peers.run(1, threads, harness_kernels::nothing{});
  for (int r = 0; r < 2; ++r)
    for (auto& x : peers.input(r)) x = static_cast<float>(r + 1);
  peers.allreduce(rcclx::algorithm::flat);
  for (int r = 0; r < 2; ++r)
    for (float x : peers.output(r)) REQUIRE(x == 3.0f);
}

TEST_CASE("harness: a rank that refuses its call is reported before the peers' timeouts", "[regions]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  ones_world w;
  try {
    rt::launch_emulated(w.world, w.blocks, threads, w.kernel(2));
    FAIL("a launch with a refusing rank did not throw");
  } catch (const rcclx::error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    REQUIRE(e.code() == errc::invalid_argument);
    REQUIRE(what.rfind("rcclx: invalid_argument: rank 2: num_tiles = 5 is more than the slot range's max_tiles = 4", 0) ==
            0);
    REQUIRE(what.find("waiting for rank 2") != std::string::npos);  // the peers' timeouts stay in the message
    REQUIRE(what.find("(rank 2 failed first: rank 2: num_tiles = 5") != std::string::npos);
  }
  w.world.reset();
  rt::launch_emulated(w.world, w.blocks, threads, w.kernel());
  REQUIRE(w.outputs_are(3.0f));
}
