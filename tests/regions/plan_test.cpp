// fused::region_plan: region sizes against the formulas written out by hand, pairwise disjoint
// bytes and slots of random plans (brute force), place() refusals, slots given back and handed out
// again, and two tile AllReduces in one launch on the regions of one plan (float64 reference).
#include <rcclx/core/region.hpp>
#include <rcclx/fused/region_plan.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../support/catch.hpp"

namespace plan_kernels {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
constexpr int max_r = 8;

// Rank r's element e of call `which`: a multiple of 1/8 in [-4, 4): every float sum of up to 8 ranks
// is exact, so the reference is the float64 sum.
RCCLX_HOST_DEVICE inline float value(int r, int which, std::size_t e) {
  return static_cast<float>(static_cast<int>((e * 7 + static_cast<std::size_t>(r) * 13 + which * 5) % 64) - 32) *
         0.125f;
}

// Two tile AllReduces in one kernel, each on its region of one plan (the buffer narrowed to the
// region with core::region_table, the region's slots): flat on the first, tree on the second.
struct two_calls {
  const rcclx::core::peer_table<float, max_r>* tables;
  rcclx::core::region a, b;
  fz::tile_map map;
  float* out_a[max_r];
  float* out_b[max_r];

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const auto ta = rcclx::core::region_table(tables[ix.rank], a);
    const auto tb = rcclx::core::region_table(tables[ix.rank], b);
    const int tiles = static_cast<int>(map.num_tiles());
    fz::tile_allreduce<float, max_r, rcclx::algorithm::flat> ar_a(ta, a.slots, map.tile_elems(), tiles);
    fz::tile_allreduce<float, max_r, rcclx::algorithm::tree> ar_b(tb, b.slots, map.tile_elems(), tiles);
    for (int t = ix.block; t < tiles; t += ix.num_blocks) {
      float* ia = ar_a.input(t);
      float* ib = ar_b.input(t);
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < map.tile_elems();
           e += static_cast<std::size_t>(g.size())) {
        ia[e] = value(ix.rank, 0, static_cast<std::size_t>(t) * map.tile_elems() + e);
        ib[e] = value(ix.rank, 1, static_cast<std::size_t>(t) * map.tile_elems() + e);
      }
      ar_a.publish(g, t);
      ar_b.publish(g, t);
    }
    const fz::epilogue<fz::store<float>> ea{{out_a[ix.rank], map.cols}};
    const fz::epilogue<fz::store<float>> eb{{out_b[ix.rank], map.cols}};
    bool ok = true;
    for (int t = ix.block; t < tiles && ok; t += ix.num_blocks)
      ok = ar_a.template reduce<4>(g, t, map, ea) && ar_b.template reduce<4>(g, t, map, eb);
    ar_a.finish(g, ix.num_blocks);
    ar_b.finish(g, ix.num_blocks);
  }
};

}  // namespace plan_kernels

namespace {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using rcclx::core::region_need;
using plan_kernels::max_r;

std::size_t round16(std::size_t x) { return (x + 15) / 16 * 16; }

// The needs as the formulas give them: tile AllReduce 2 * round16(tiles * elems * sizeof T), tree
// adding round16 of the results (default: the tiles again) to each half; combine round16(records *
// record bytes) per half.
region_need tile_need(std::size_t elem_bytes, std::size_t elems, int tiles, bool tree) {
  const std::size_t in = round16(static_cast<std::size_t>(tiles) * elems * elem_bytes);
  return region_need{2 * (tree ? in + round16(in) : in), tiles, tree ? 3u : 1u};
}
region_need combine_need(std::size_t record_bytes, std::size_t tile_records, std::size_t max_records) {
  const int tiles = static_cast<int>((max_records + tile_records - 1) / tile_records);
  return region_need{2 * round16(max_records * record_bytes), tiles, 1u};
}

bool messages(const rcclx::error& e, const std::string& s) { return std::string(e.what()).find(s) != std::string::npos; }

}  // namespace

TEST_CASE("region_plan: sizes and slots against the formulas by hand", "[regions]") {
  fz::region_plan plan;
  const region_need merge = combine_need(2 * 128 + 4, 8, 8 * 40);  // bf16 lse record of 128 + a float
  const region_need o_proj = tile_need(2, 1008, 7, false);
  const region_need down = tile_need(2, 1008, 7, true);
  const auto h0 = plan.add(merge, "attention merge");
  const auto h1 = plan.add(o_proj, "o_proj");
  const auto scratch = plan.add_bytes(1000, "scratch");
  const auto h2 = plan.add(down, "down_proj");
  // By hand: 2 * round16(320 * 260) = 166400 -> 166400; 2 * round16(7 * 1008 * 2) = 28224 -> 28416;
  // 1000 -> 1024; 4 * 14112 = 56448 -> 56576.
  REQUIRE(merge.bytes == 166400);
  REQUIRE(o_proj.bytes == 28224);
  REQUIRE(down.bytes == 56448);
  REQUIRE(plan.bytes() == 166400u + 28416u + 1024u + 56576u);
  REQUIRE(plan.slots() == (1 + 40) + (1 + 7) + (1 + 7));
  REQUIRE_THROWS_WITH(plan[h0], RCCLX_CONTAINS("not placed yet"));

  plan.place(rcclx::core::tile_slots{100, plan.slots() - 1}, plan.bytes() + 512, 512);
  const auto& m = plan[h0];
  const auto& a = plan[h1];
  const auto& s = plan[scratch];
  const auto& d = plan[h2];
  REQUIRE(m.offset == 512);
  REQUIRE(m.bytes == 166400);
  REQUIRE(m.slots.first == 100);
  REQUIRE(m.slots.max_tiles == 40);
  REQUIRE(m.id == 1);
  REQUIRE(a.offset == 512 + 166400);
  REQUIRE(a.bytes == 28416);
  REQUIRE(a.slots.first == 141);
  REQUIRE(a.sized_for == 1u);
  REQUIRE(s.offset == 512 + 166400 + 28416);
  REQUIRE(s.bytes == 1024);
  REQUIRE(s.slots.max_tiles < 0);
  REQUIRE(d.offset == 512 + 166400 + 28416 + 1024);
  REQUIRE(d.slots.first == 149);
  REQUIRE(d.slots.end() == 157);
  REQUIRE(d.sized_for == 3u);
  REQUIRE(d.id == 4);
  const std::string text = plan.describe();
  CAPTURE(text);
  REQUIRE_THAT(text, RCCLX_CONTAINS("\"down_proj\": bytes [196352, 252928), slots [149, 157) (7 tiles), "
                                    "sized for flat and tree"));
  REQUIRE_THAT(text, RCCLX_CONTAINS("\"scratch\": bytes [195328, 196352), no slots"));
}

TEST_CASE("region_plan: 200 random plans give pairwise disjoint bytes and slots", "[regions]") {
  std::mt19937_64 rng(43);
  for (int round = 0; round < 200; ++round) {
    fz::region_plan plan;
    const int n = 1 + static_cast<int>(rng() % 12);
    std::vector<std::size_t> asked;
    std::vector<int> tiles;
    for (int i = 0; i < n; ++i) {
      const std::size_t bytes = rng() % 5 == 0 ? 0 : rng() % 100000;
      if (rng() % 3 == 0) {
        plan.add_bytes(bytes, "b" + std::to_string(i));
        tiles.push_back(-1);
      } else {
        const int t = static_cast<int>(rng() % 70);
        plan.add(region_need{bytes, t, 1u + static_cast<std::uint32_t>(rng() % 3)}, "t" + std::to_string(i));
        tiles.push_back(t);
      }
      asked.push_back(bytes);
    }
    const std::size_t base = 256 * (rng() % 50);
    const int first = static_cast<int>(rng() % 300);
    plan.place(rcclx::core::tile_slots{first, plan.slots() - 1}, base + plan.bytes() + 256 * (rng() % 3), base);
    std::size_t total = 0;
    int slots = 0;
    for (int i = 0; i < n; ++i) {
      const auto& r = plan[i];
      CAPTURE(round, i);
      REQUIRE(r.offset % 256 == 0);
      REQUIRE(r.bytes % 256 == 0);
      REQUIRE(r.bytes >= asked[i]);
      REQUIRE(r.bytes < asked[i] + 256);
      REQUIRE(r.offset >= base);
      REQUIRE(r.end() <= base + plan.bytes());
      REQUIRE(r.slots.max_tiles == tiles[i]);
      total += r.bytes;
      if (tiles[i] >= 0) {
        REQUIRE(r.slots.first >= first);
        REQUIRE(r.slots.end() <= first + plan.slots());
        slots += 1 + tiles[i];
      }
      for (int j = 0; j < i; ++j) {
        const auto& o = plan[j];
        CAPTURE(j);
        if (r.bytes > 0 && o.bytes > 0) REQUIRE((r.end() <= o.offset || o.end() <= r.offset));
        if (tiles[i] >= 0 && tiles[j] >= 0)
          REQUIRE((r.slots.end() <= o.slots.first || o.slots.end() <= r.slots.first));
      }
    }
    REQUIRE(total == plan.bytes());
    REQUIRE(slots == plan.slots());
  }
}

TEST_CASE("region_plan: place refuses a small buffer, taken slots, a bad block, and release hands slots out again",
          "[regions]") {
  fz::region_plan plan;
  const auto h = plan.add(tile_need(4, 256, 4, false), "first");
  plan.add(tile_need(4, 256, 4, true), "second");
  REQUIRE(plan.bytes() == 8192 + 16384);
  REQUIRE(plan.slots() == 10);

  {  // buffer too small: nothing reserved
    rt::emulated_world<max_r> world(2, plan.bytes() - 256, plan.slots());
    REQUIRE_THROWS_WITH(plan.place(world), RCCLX_CONTAINS("base + bytes() = 0 + 24576 exceeds the buffer's 24320 bytes"));
    REQUIRE(world.slot_ranges().ranges().empty());
    REQUIRE_FALSE(plan.placed());
    rt::emulated_world<max_r> exact(2, plan.bytes(), plan.slots());
    REQUIRE_THROWS_WITH(plan.place(exact, 256), RCCLX_CONTAINS("exceeds"));
    REQUIRE_THROWS_WITH(plan.place(exact, 100), RCCLX_CONTAINS("base = 100 is not a multiple of 256"));
  }
  {  // slots taken by barrier-based grids
    rt::emulated_world<max_r> world(2, plan.bytes(), plan.slots());
    world.reserve_blocks(1);
    try {
      plan.place(world);
      FAIL("place() on pads without room did not throw");
    } catch (const rcclx::error& e) {
      REQUIRE(e.code() == rcclx::errc::invalid_argument);
      CAPTURE(e.what());
      REQUIRE(messages(e, "region plan (first, second): no 10 free pad slots"));
    }
    REQUIRE_FALSE(plan.placed());
  }
  {  // a block by hand of the wrong size
    REQUIRE_THROWS_WITH(plan.place(rcclx::core::tile_slots{0, 4}, plan.bytes()),
                        RCCLX_CONTAINS("does not hold the plan's 10 slots (max_tiles must be 9)"));
  }
  {  // placed, released, reserved by someone else, placed again elsewhere
    rt::emulated_world<max_r> world(2, plan.bytes(), 2 * plan.slots());
    plan.place(world);
    REQUIRE(plan[h].slots.first == plan.slots());  // the highest slots
    REQUIRE_THROWS_WITH(plan.add_bytes(16, "late"), RCCLX_CONTAINS("already placed"));
    REQUIRE_THROWS_WITH(plan.place(world), RCCLX_CONTAINS("already placed"));
    plan.release(world);
    REQUIRE(world.slot_ranges().ranges().empty());
    const auto other = world.reserve_tile_slots(plan.slots() - 1, "other");
    REQUIRE(other.first == plan.slots());
    plan.place(world);
    REQUIRE(plan[h].slots.first == 0);
    REQUIRE_THROWS_WITH(world.release_tile_slots(other, "someone"), RCCLX_CONTAINS("held by other, not by someone"));
    REQUIRE_THROWS_WITH(world.release_tile_slots(rcclx::core::tile_slots{3, 2}), RCCLX_CONTAINS("no pad slot range"));
    world.release_tile_slots(other);
    plan.release(world);
    REQUIRE(world.slot_ranges().ranges().empty());
  }
  {  // slot_ranges directly
    rcclx::core::slot_ranges s(20);
    const int a = s.reserve(5, "a");
    const int b = s.reserve(5, "b");
    REQUIRE(a == 15);
    REQUIRE(b == 10);
    s.release(a, "a");
    REQUIRE(s.reserve(3, "c") == 17);
    REQUIRE_THROWS_WITH(s.release(b, "a"), RCCLX_CONTAINS("held by b, not by a"));
    REQUIRE_THROWS_WITH(s.release_tiles(rcclx::core::tile_slots{b, 1}, "b"), RCCLX_CONTAINS("are not the 2 slots"));
  }
}

TEST_CASE("region_plan: two tile AllReduces in one launch on the regions of one plan", "[regions]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = 3, blocks = 2;
  const fz::tile_map map{12, 40, 4, 8};  // 15 tiles of 32 floats
  const int tiles = static_cast<int>(map.num_tiles());
  fz::region_plan plan;
  const auto ha = plan.add(tile_need(4, map.tile_elems(), tiles, false), "flat call");
  const auto hb = plan.add(tile_need(4, map.tile_elems(), tiles, true), "tree call");
  rt::emulated_world<max_r> world(n, plan.bytes(), plan.slots());
  plan.place(world);
  const std::size_t count = map.rows * map.cols;
  std::vector<float*> outs;
  plan_kernels::two_calls k{};
  k.tables = world.device_tables<float>();
  k.a = plan[ha];
  k.b = plan[hb];
  k.map = map;
  for (int r = 0; r < n; ++r) {
    outs.push_back(static_cast<float*>(rcclx::gpu::device_malloc(count * sizeof(float))));
    outs.push_back(static_cast<float*>(rcclx::gpu::device_malloc(count * sizeof(float))));
    k.out_a[r] = outs[2 * r];
    k.out_b[r] = outs[2 * r + 1];
  }
  const int threads = rcclx::current_backend == rcclx::backend::host ? 1 : 128;
  for (int launch = 0; launch < 3; ++launch) {  // both halves of each region
    rt::launch_emulated(n, blocks, threads, k);
    rcclx::gpu::device_synchronize();
    world.throw_if_error();
    for (int which = 0; which < 2; ++which)
      for (int r = 0; r < n; ++r) {
        std::vector<float> got(count);
        rcclx::gpu::copy(got.data(), outs[2 * r + which], count * sizeof(float));
        std::size_t bad = 0;
        for (std::size_t row = 0; row < map.rows; ++row)
          for (std::size_t col = 0; col < map.cols; ++col) {
            const std::size_t t = (row / map.tile_rows) * map.tiles_per_row() + col / map.tile_cols;
            const std::size_t e = (row % map.tile_rows) * map.tile_cols + col % map.tile_cols;
            double s = 0;
            for (int p = 0; p < n; ++p) s += static_cast<double>(plan_kernels::value(p, which, t * map.tile_elems() + e));
            if (static_cast<double>(got[row * map.cols + col]) != s) ++bad;
          }
        CAPTURE(launch, which, r);
        REQUIRE(bad == 0);
      }
  }
  for (float* p : outs) rcclx::gpu::device_free(p);
}
