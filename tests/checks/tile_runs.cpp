// The tile AllReduce runs of the checked-mode test (tile_runs.hpp), built with RCCLX_CHECKS=1.
#include "tile_runs.hpp"

#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

static_assert(rcclx::checks, "this test is built with RCCLX_CHECKS=1");

namespace checks_test {
namespace {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
constexpr int max_r = 8;
// One-thread host blocks, or the GPU block size where every thread is emulated (tests/emulate).
constexpr int threads = rcclx::current_backend == rcclx::backend::host && !rcclx::emulate_threads ? 1 : 256;

struct tile_kernel {
  const rcclx::core::peer_table<float, max_r>* tables;
  float* out[max_r];
  fz::tile_map map[max_r];
  std::size_t tile_elems[max_r];
  int num_tiles[max_r];
  fz::tile_slots slots;
  bool skip_finish;
  int skip_block;
  bool second_object;
  bool declare;                 // declare declared[rank] before publishing
  fz::tile_map declared[max_r];

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const int r = ix.rank;
    fz::tile_allreduce<float, max_r> ar(tables[r], slots, tile_elems[r], num_tiles[r]);
    if (declare) ar.declare_map(declared[r]);
    for (int t = ix.block; t < num_tiles[r]; t += ix.num_blocks) {
      float* in = ar.input(t);
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < tile_elems[r]; e += static_cast<std::size_t>(g.size()))
        in[e] = static_cast<float>(r + 1);
      ar.publish(g, t);
    }
    const fz::epilogue<fz::store<float>> epi{{out[r], map[r].cols}};
    for (int t = ix.block; t < num_tiles[r]; t += ix.num_blocks) {
      if (second_object) {
        const fz::tile_allreduce<float, max_r> again(tables[r], slots, tile_elems[r], num_tiles[r]);
        if (!again.template reduce<4>(g, t, map[r], epi)) break;
      } else if (!ar.template reduce<4>(g, t, map[r], epi)) {
        break;
      }
    }
    if (!skip_finish && ix.block != skip_block) ar.finish(g, ix.num_blocks);
  }
};

}  // namespace

struct tile_setup::impl {
  fz::tile_slots slots{0, 64};
  rt::emulated_world<max_r> world{n, fz::tile_allreduce<float, max_r>::workspace_bytes(256, 64), fz::pad_blocks_for(0, 64)};
  std::vector<float*> out;
};

tile_setup::tile_setup() : p_(new impl) {
  for (int r = 0; r < n; ++r) p_->out.push_back(static_cast<float*>(rcclx::gpu::device_malloc(out_elems * sizeof(float))));
}

tile_setup::~tile_setup() {
  for (float* p : p_->out) rcclx::gpu::device_free(p);
}

void tile_setup::reset() { p_->world.reset(); }

std::size_t tile_setup::run(const std::vector<fz::tile_map>& maps, bool skip_finish,
                            const std::vector<std::size_t>& tile_elems, int skip_block, bool second_object) {
  return run_kernel(maps, {}, skip_finish, tile_elems, skip_block, second_object);
}

std::size_t tile_setup::run_declared(const std::vector<fz::tile_map>& declared, const std::vector<fz::tile_map>& maps) {
  return run_kernel(maps, declared, false, {}, -1, false);
}

std::size_t tile_setup::run_kernel(const std::vector<fz::tile_map>& maps, const std::vector<fz::tile_map>& declared,
                                   bool skip_finish, const std::vector<std::size_t>& tile_elems, int skip_block,
                                   bool second_object) {
  const std::vector<float> s(out_elems, sentinel);
  tile_kernel k{};
  k.declare = !declared.empty();
  for (int r = 0; r < n && k.declare; ++r) k.declared[r] = declared[r];
  k.tables = p_->world.device_tables<float>();
  for (int r = 0; r < n; ++r) {
    rcclx::gpu::copy(p_->out[r], s.data(), out_elems * sizeof(float));
    k.out[r] = p_->out[r];
    k.map[r] = maps[r];
    k.tile_elems[r] = tile_elems.empty() ? maps[r].tile_elems() : tile_elems[r];
    k.num_tiles[r] = static_cast<int>(maps[r].num_tiles());
  }
  k.slots = p_->slots;
  k.skip_finish = skip_finish;
  k.skip_block = skip_block;
  k.second_object = second_object;
  rt::launch_emulated(n, 2, threads, k);
  rcclx::gpu::device_synchronize();
  std::size_t touched = 0;
  for (int r = 0; r < n; ++r)
    for (float v : output(r)) touched += v != sentinel;
  return touched;
}

std::vector<float> tile_setup::output(int r) const {
  std::vector<float> h(out_elems);
  rcclx::gpu::copy(h.data(), p_->out[r], out_elems * sizeof(float));
  return h;
}

std::string tile_setup::first_error(rcclx::errc* code) const { return checks_test::first_error(p_->world, code); }

std::vector<std::string> tile_setup::all_errors() const { return checks_test::all_errors(p_->world); }

}  // namespace checks_test
