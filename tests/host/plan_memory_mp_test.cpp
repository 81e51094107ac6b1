// host::plan_memory across 3 processes: one kernel per rank runs two tile AllReduces (flat and
// tree) and an argmax combine, each on its own region of one plan (core::region_table narrows the
// allocation's table, the region's slots carry the flags), three launches in a row (both halves of
// every region), against references computed here (float64 sums, argmax by hand); then the memory
// is given back and a second plan_memory of the same plan takes the same slots. Host backend: once
// set up, no /dev/shm name of the process is left.
#include <dirent.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include <rcclx/core/region.hpp>
#include <rcclx/fused/combine.hpp>
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/fused/region_plan.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/host/communicator.hpp>
#include <rcclx/host/plan_memory.hpp>
#include <rcclx/host/socket_bootstrap.hpp>
#include <rcclx/testing/launch.hpp>

#include "../support/catch.hpp"
#include "multiprocess.hpp"
#include "multiprocess_checks.hpp"

namespace plan_memory_kernels {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
constexpr int max_r = 8;
using argmax_t = fz::combine<fz::argmax::record, fz::argmax, max_r>;

// Rank r's element e of AllReduce `which` in launch k: a multiple of 1/8 in [-4, 4) (sums exact).
RCCLX_HOST_DEVICE inline float value(int r, int which, int k, std::size_t e) {
  return static_cast<float>(static_cast<int>((e * 7 + static_cast<std::size_t>(r) * 13 + which * 5 + k * 3) % 64) -
                            32) *
         0.125f;
}
// Rank r's candidate for record i in launch k (ties between ranks happen: the lower index wins).
RCCLX_HOST_DEVICE inline fz::argmax::record candidate(int r, int k, std::size_t i) {
  return {static_cast<float>(static_cast<int>((i * 5 + static_cast<std::size_t>(r) * 3 + k) % 7)),
          static_cast<std::uint32_t>(r * 1000 + static_cast<int>(i))};
}

struct layer {
  rcclx::core::peer_table<float, max_r> table;  // the plan_memory's table of this rank
  rcclx::core::region ar1, ar2, merge;
  fz::tile_map map;
  std::size_t tile_records, num_records;
  float* out1;
  float* out2;
  fz::argmax::record* best;
  int launch;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const auto t1 = rcclx::core::region_table(table, ar1);
    const auto t2 = rcclx::core::region_table(table, ar2);
    const auto tm = rcclx::core::region_table(table, merge).template as<fz::argmax::record>();
    const int tiles = static_cast<int>(map.num_tiles());
    fz::tile_allreduce<float, max_r, rcclx::algorithm::flat> a1(t1, ar1.slots, map.tile_elems(), tiles);
    fz::tile_allreduce<float, max_r, rcclx::algorithm::tree> a2(t2, ar2.slots, map.tile_elems(), tiles);
    argmax_t m(tm, merge.slots, tile_records, num_records);
    for (int t = ix.block; t < tiles; t += ix.num_blocks) {
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < map.tile_elems();
           e += static_cast<std::size_t>(g.size())) {
        a1.input(t)[e] = value(ix.rank, 0, launch, static_cast<std::size_t>(t) * map.tile_elems() + e);
        a2.input(t)[e] = value(ix.rank, 1, launch, static_cast<std::size_t>(t) * map.tile_elems() + e);
      }
      a1.publish(g, t);
      a2.publish(g, t);
    }
    for (int t = ix.block; t < m.num_tiles(); t += ix.num_blocks) {
      const std::size_t first = static_cast<std::size_t>(t) * tile_records;
      for (std::size_t i = static_cast<std::size_t>(g.thread_rank()); i < m.records_in(t);
           i += static_cast<std::size_t>(g.size()))
        m.input(t)[i] = candidate(ix.rank, launch, first + i);
      m.publish(g, t);
    }
    const fz::epilogue<fz::store<float>> e1{{out1, map.cols}};
    const fz::epilogue<fz::store<float>> e2{{out2, map.cols}};
    bool ok = true;
    for (int t = ix.block; t < tiles && ok; t += ix.num_blocks)
      ok = a1.template reduce<4>(g, t, map, e1) && a2.template reduce<4>(g, t, map, e2);
    fz::argmax::record* const out = best;
    for (int t = ix.block; t < m.num_tiles() && ok; t += ix.num_blocks)
      ok = m.reduce(g, t, [&](std::size_t i, const fz::argmax::record& r) { out[i] = r; });
    a1.finish(g, ix.num_blocks);
    a2.finish(g, ix.num_blocks);
    m.finish(g, ix.num_blocks);
  }
};

}  // namespace plan_memory_kernels

namespace {

namespace fz = rcclx::fused;
using plan_memory_kernels::max_r;
using comm_t = rcclx::host::communicator<max_r>;

std::size_t round16(std::size_t x) { return (x + 15) / 16 * 16; }

// This process's names in /dev/shm (host backend: "rcclx.<pid>.*").
int own_shm_names() {
  int n = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    const std::string prefix = "rcclx." + std::to_string(::getpid()) + ".";
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) ++n;
    ::closedir(d);
  }
  return n;
}

// One rank: plan, memory, three launches, checks; "" when every output is as expected.
std::string run_rank(int rank, int n, const std::string& id) {
  rcclx_test::child_select_device(rank);
  rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
  rcclx::host::communicator_options o;
  o.buffer_bytes = 64 << 10;
  o.max_blocks = 256;  // the communicator's grids (up to 128 slots on a GPU) and the plan's tile slots
  o.timeout_ns = 30ull * 1000 * 1000 * 1000;
  comm_t comm(bs, o);

  const fz::tile_map map{12, 40, 4, 8};  // 15 tiles of 32 floats
  const int tiles = static_cast<int>(map.num_tiles());
  const std::size_t tile_records = 16, num_records = 70;  // 5 tiles, the last one short
  const int merge_tiles = 5;
  fz::region_plan plan;
  // The needs by the formulas: 2 * round16(tiles * elems * 4) (tree: twice that per half); the
  // combine's tiles of round16(16 * 8) bytes.
  const std::size_t in = round16(static_cast<std::size_t>(tiles) * map.tile_elems() * sizeof(float));
  const auto h1 = plan.add(rcclx::core::region_need{2 * in, tiles, 1u}, "first AllReduce");
  const auto h2 = plan.add(rcclx::core::region_need{4 * in, tiles, 3u}, "second AllReduce");
  const auto hm = plan.add(
      rcclx::core::region_need{2 * round16(merge_tiles * round16(tile_records * sizeof(fz::argmax::record))),
                               merge_tiles, 1u},
      "argmax");
  const std::size_t count = map.rows * map.cols;
  auto* out1 = static_cast<float*>(rcclx::gpu::device_malloc(count * sizeof(float)));
  auto* out2 = static_cast<float*>(rcclx::gpu::device_malloc(count * sizeof(float)));
  auto* best = static_cast<fz::argmax::record*>(rcclx::gpu::device_malloc(num_records * sizeof(fz::argmax::record)));
  std::string err;
  rcclx::core::tile_slots first_slots{};
  for (int round = 0; round < 2 && err.empty(); ++round) {
    rcclx::host::plan_memory<max_r> mem(comm, plan, "decode layer");
    if (round == 0) first_slots = mem.slots();
    // Every peer has mapped the workspace and this memory: none of their names is left (a kill
    // from now on leaves nothing in /dev/shm).
    if (rcclx::current_backend == rcclx::backend::host && own_shm_names() != 0)
      err = std::to_string(own_shm_names()) + " /dev/shm names of this process left after set-up";
    if (round == 1 && (mem.slots().first != first_slots.first || mem.slots().max_tiles != first_slots.max_tiles))
      err = "the second plan_memory got other slots (" + std::to_string(mem.slots().first) + " vs " +
            std::to_string(first_slots.first) + ")";
    plan_memory_kernels::layer k{};
    k.table = mem.table<float>();
    k.ar1 = plan[h1];
    k.ar2 = plan[h2];
    k.merge = plan[hm];
    k.map = map;
    k.tile_records = tile_records;
    k.num_records = num_records;
    k.out1 = out1;
    k.out2 = out2;
    k.best = best;
    for (int launch = 0; launch < 3 && err.empty(); ++launch) {
      k.launch = launch;
      rcclx::testing::launch_rank(rank, n, 2, rcclx::current_backend == rcclx::backend::host ? 1 : 128, k);
      comm.synchronize();
      std::vector<float> got(count);
      for (int which = 0; which < 2 && err.empty(); ++which) {
        rcclx::gpu::copy(got.data(), which == 0 ? out1 : out2, count * sizeof(float));
        for (std::size_t row = 0; row < map.rows && err.empty(); ++row)
          for (std::size_t col = 0; col < map.cols && err.empty(); ++col) {
            const std::size_t t = (row / map.tile_rows) * map.tiles_per_row() + col / map.tile_cols;
            const std::size_t e = (row % map.tile_rows) * map.tile_cols + col % map.tile_cols;
            double s = 0;
            for (int p = 0; p < n; ++p) s += plan_memory_kernels::value(p, which, launch, t * map.tile_elems() + e);
            if (static_cast<double>(got[row * map.cols + col]) != s)
              err = "round " + std::to_string(round) + " launch " + std::to_string(launch) + " AllReduce " +
                    std::to_string(which) + " row " + std::to_string(row) + " col " + std::to_string(col) + ": got " +
                    std::to_string(got[row * map.cols + col]) + ", expected " + std::to_string(s);
          }
      }
      std::vector<fz::argmax::record> b(num_records);
      rcclx::gpu::copy(b.data(), best, num_records * sizeof(fz::argmax::record));
      for (std::size_t i = 0; i < num_records && err.empty(); ++i) {
        fz::argmax::record want = plan_memory_kernels::candidate(0, launch, i);
        for (int p = 1; p < n; ++p) {
          const auto c = plan_memory_kernels::candidate(p, launch, i);
          if (c.value > want.value || (c.value == want.value && c.index < want.index)) want = c;
        }
        if (b[i].value != want.value || b[i].index != want.index)
          err = "launch " + std::to_string(launch) + " argmax record " + std::to_string(i) + ": got (" +
                std::to_string(b[i].value) + ", " + std::to_string(b[i].index) + "), expected (" +
                std::to_string(want.value) + ", " + std::to_string(want.index) + ")";
      }
    }
  }
  if (err.empty() && plan.placed()) err = "the plan is still placed after its memory was freed";
  rcclx::gpu::device_free(out1);
  rcclx::gpu::device_free(out2);
  rcclx::gpu::device_free(best);
  return err;
}

}  // namespace

TEST_CASE("host::plan_memory: two tile AllReduces and a combine in one kernel on one plan, 3 processes",
          "[host][multiprocess][regions]") {
  const int n = 3;
  const std::string id = rcclx_test::unique_job_id("planmem");
  auto rs = rcclx_test::run_processes(n, [&](int rank) { return run_rank(rank, n, id); }, std::chrono::seconds(180));
  RCCLX_SKIP_IF_NO_GPU(rs);
  rcclx_test::require_all_ok(rs);
}
