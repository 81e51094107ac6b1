// The kernels and runs of the misuse suite (misuse_runs.hpp).
#include "misuse_runs.hpp"

#include <rcclx/core/region.hpp>
#include <rcclx/fused/combine.hpp>
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/fused/epilogue.hpp>
#include <rcclx/fused/region_plan.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/runtime.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>

namespace misuse_suite {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using rcclx::algorithm;
using rcclx::core::misuse;
constexpr int max_r = 8;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
constexpr int threads = on_host ? 1 : 64;
constexpr int blocks = 4;
constexpr int ranks = 3;
constexpr int tiles = 8;
constexpr std::size_t cols = 64;                                   // one row of 64 floats per tile
constexpr int vpt = on_host ? static_cast<int>(cols / 4) : 1;      // a whole row per chunk (RMSNorm)
constexpr std::size_t guard_bytes = 4096;
constexpr unsigned char guard_byte = 0xA5;

bool outcome::has(misuse m, std::uint32_t* a, std::uint32_t* b) const {
  for (const auto& r : records)
    if (r.code == static_cast<std::uint32_t>(rcclx::errc::invalid_argument) && r.kind == static_cast<std::uint32_t>(m)) {
      if (a) *a = r.observed;
      if (b) *b = r.reserved;
      return true;
    }
  return false;
}

// Rank r's element e of tile t: small multiples of 1/2, so every sum is exact in float.
RCCLX_HOST_DEVICE inline float value(int r, int t, std::size_t e) {
  return static_cast<float>(r + 1) + 0.5f * static_cast<float>((static_cast<std::size_t>(t) * 7 + e) % 13);
}

// ---- device memory with guards ---------------------------------------------------------------

// Device buffers of `elems` T with guard_bytes of guard_byte before and after each.
template <class T>
class guarded {
 public:
  explicit guarded(std::size_t elems) : elems_(elems) {
    raw_ = static_cast<unsigned char*>(rcclx::gpu::device_malloc(bytes() + 2 * guard_bytes));
    std::vector<unsigned char> g(bytes() + 2 * guard_bytes, guard_byte);
    rcclx::gpu::copy(raw_, g.data(), g.size());
  }
  ~guarded() { rcclx::gpu::device_free(raw_); }
  guarded(const guarded&) = delete;
  guarded& operator=(const guarded&) = delete;
  T* get() const { return reinterpret_cast<T*>(raw_ + guard_bytes); }
  std::size_t bytes() const { return elems_ * sizeof(T); }
  void fill(T v) {
    std::vector<T> h(elems_, v);
    rcclx::gpu::copy(get(), h.data(), bytes());
  }
  std::vector<T> download() const {
    std::vector<T> h(elems_);
    rcclx::gpu::copy(h.data(), get(), bytes());
    return h;
  }
  bool guards_intact() const {
    std::vector<unsigned char> g(guard_bytes);
    for (const unsigned char* at : {raw_, raw_ + guard_bytes + bytes()}) {
      rcclx::gpu::copy(g.data(), at, guard_bytes);
      for (unsigned char c : g)
        if (c != guard_byte) return false;
    }
    return true;
  }

 private:
  std::size_t elems_;
  unsigned char* raw_;
};

// Guard bytes [from, to) of every rank's symmetric buffer (the bytes no call of the run may touch).
template <class World>
void fill_buffer_guard(const World& w, std::size_t from, std::size_t to) {
  std::vector<unsigned char> g(to - from, guard_byte);
  for (int r = 0; r < w.num_ranks(); ++r) rcclx::gpu::copy(static_cast<unsigned char*>(w.buffer(r)) + from, g.data(), g.size());
}
template <class World>
bool buffer_guard_intact(const World& w, std::size_t from, std::size_t to) {
  std::vector<unsigned char> g(to - from);
  for (int r = 0; r < w.num_ranks(); ++r) {
    rcclx::gpu::copy(g.data(), static_cast<unsigned char*>(w.buffer(r)) + from, g.size());
    for (unsigned char c : g)
      if (c != guard_byte) return false;
  }
  return true;
}
// The flag and counter words of every rank's pad (a refused call raises no flag): a copy, compared after.
template <class World>
std::vector<unsigned char> pad_flags(const World& w) {
  const auto l = rcclx::core::pad_layout<max_r>::of(w.max_blocks(), w.ll());
  std::vector<unsigned char> all;
  for (int r = 0; r < w.num_ranks(); ++r) {
    std::vector<unsigned char> b(l.ll_epochs - l.flags);
    rcclx::gpu::copy(b.data(), static_cast<unsigned char*>(w.pad(r)) + l.flags, b.size());
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

// The flag rows of the slots not `allowed` and the barrier counters (no tile protocol uses them) as
// they were in `before` (pad_flags of the same world)?
template <class World>
bool pad_guard_intact(const World& w, const std::vector<unsigned char>& before, const std::vector<bool>& allowed) {
  const std::vector<unsigned char> now = pad_flags(w);
  const auto l = rcclx::core::pad_layout<max_r>::of(w.max_blocks(), w.ll());
  const std::size_t per_rank = l.ll_epochs - l.flags, row = max_r * sizeof(std::uint32_t);
  for (int r = 0; r < w.num_ranks(); ++r)
    for (std::size_t i = 0; i < per_rank; ++i) {
      const std::size_t at = static_cast<std::size_t>(r) * per_rank + i;
      const bool flag_row = i < l.counters - l.flags;
      if (flag_row && allowed[i / row]) continue;
      if (now[at] != before[at]) return false;
    }
  return true;
}

// Launches k on every rank of the world; the error (root cause first) and every record come back.
template <class World, class K>
void launch(World& world, const K& k, outcome& o) {
  try {
    rt::launch_emulated(world, blocks, threads, k);
  } catch (const rcclx::error& e) {
    o.threw = true;
    o.code = e.code();
    o.what = e.what();
  }
  rcclx::gpu::device_synchronize();
  o.records = world.audited_errors();  // with the audit of the last calls, as the error's text
}

// ---- tile AllReduce misuses --------------------------------------------------------------------

struct tile_params {
  const rcclx::core::peer_table<float, max_r>* tables;
  float* out[max_r];  // [2][tiles][cols]: call 0's rows, then call 1's
  rcclx::core::region reg[2];
  fz::tile_slots slots[2];
  bool use_region;
  int calls;
  std::size_t tile_elems;
  int loop_tiles;  // tiles the loops visit
  int ctor_tiles;  // num_tiles passed to the constructor
  tile_abuse what;
};

// Every block of every rank: for each call, write this rank's tiles (call c adds 100 c) and
// publish them; then, for each call, reduce the tiles into the call's output rows; finish each.
// The misuses bend one step of this.
template <algorithm Algo>
struct tile_kernel {
  static constexpr int max_threads_per_block = threads;
  using ar_t = fz::tile_allreduce<float, max_r, Algo>;
  tile_params p;

  template <class G>
  RCCLX_HOST_DEVICE void produce(const G& g, rt::launch_index ix, const ar_t& ar, int c) const {
    const tile_abuse w = p.what;
    const int stride = w == tile_abuse::stale_stride ? ix.num_blocks + 1 : ix.num_blocks;
    const std::size_t tid = static_cast<std::size_t>(g.thread_rank()), gs = static_cast<std::size_t>(g.size());
    for (int t = ix.block; t < p.loop_tiles; t += stride) {
      float* in = ar.input(t);
      for (std::size_t e = tid; e < p.tile_elems; e += gs) in[e] = value(ix.rank, t, e) + 100.0f * static_cast<float>(c);
      if (w != tile_abuse::strided_step_zero) ar.publish(g, t);
      if (w == tile_abuse::publish_twice && t == ix.block) ar.publish(g, t);
      if (w == tile_abuse::store_after_publish && t == ix.block && tid == 0) in[0] += 1000.0f;
    }
    if (w == tile_abuse::strided_step_zero) ar.publish_strided(g, ix.block, 0);
  }

  template <class G>
  RCCLX_HOST_DEVICE void consume(const G& g, rt::launch_index ix, const ar_t& ar, float* o) const {
    const fz::row_tiles map{static_cast<std::size_t>(p.loop_tiles), p.tile_elems};
    const tile_abuse w = p.what;
    const int stride = w == tile_abuse::stale_stride ? ix.num_blocks + 1 : ix.num_blocks;
    for (int t = ix.block; t < p.loop_tiles; t += stride) {
      if (w == tile_abuse::skip_reduce && t == 1) continue;
      const int tile = w == tile_abuse::reduce_other_block ? (t + 1) % p.loop_tiles : t;
      // The sums go to the output, or (the misuse) into the call's own symmetric input.
      const fz::epilogue<fz::store<float>> epi{
          fz::store<float>{w == tile_abuse::epilogue_into_input ? ar.input(0) : o, p.tile_elems}};
      if (w == tile_abuse::parts_stride_zero) {
        if (!ar.template reduce_parts<vpt>(g, tile, 2, 0, map, epi)) return;
      } else if (!ar.template reduce<vpt>(g, tile, map, epi)) {
        return;
      }
    }
  }

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const auto& t = p.tables[p.what == tile_abuse::table_of_rank0 ? 0 : ix.rank];
    const auto make = [&](int c) {
      rcclx::core::region r = p.reg[c];
      if (p.what == tile_abuse::region_per_rank && ix.rank == 1) r.offset += r.bytes;  // same slots, other bytes
      const bool whole = !p.use_region || (p.what == tile_abuse::whole_buffer_on_one_rank && ix.rank == 1);
      return whole ? ar_t(t, p.slots[c], p.tile_elems, p.ctor_tiles) : ar_t(t, r, p.tile_elems, p.ctor_tiles);
    };
    const ar_t ar0 = make(0), ar1 = make(p.calls > 1 ? 1 : 0);
    const bool early = p.what == tile_abuse::reduce_before_publish && ix.block == 0;
    float* o = p.out[ix.rank];
    if (early) consume(g, ix, ar0, o);
    produce(g, ix, ar0, 0);
    if (p.calls > 1) produce(g, ix, ar1, 1);
    if (!early) consume(g, ix, ar0, o);
    if (p.calls > 1) consume(g, ix, ar1, o + static_cast<std::size_t>(tiles) * cols);
    for (int c = 0; c < p.calls; ++c) {
      const ar_t& ar = c == 0 ? ar0 : ar1;
      ar.finish(g, p.what == tile_abuse::finish_count ? ix.num_blocks - 1 : ix.num_blocks);
      if (p.what == tile_abuse::finish_twice) ar.finish(g, ix.num_blocks);
    }
  }
};

const char* name(tile_abuse a) {
  switch (a) {
    case tile_abuse::none: return "one correct call";
    case tile_abuse::two_regions: return "two calls on two regions of one plan";
    case tile_abuse::two_legacy_calls: return "two calls on separate slot ranges of the same bytes";
    case tile_abuse::overlapping_region_bytes: return "hand-made regions sharing bytes";
    case tile_abuse::overlapping_region_slots: return "hand-made regions sharing slots";
    case tile_abuse::tree_in_flat_region: return "tree in a flat-sized region";
    case tile_abuse::too_many_tiles: return "more tiles than the slot range";
    case tile_abuse::slots_beyond_pads: return "slots beyond the pads";
    case tile_abuse::tile_elems_odd: return "tile_elems not whole vectors";
    case tile_abuse::null_peer_buffer: return "a null peer buffer in the table";
    case tile_abuse::misaligned_peer_buffer: return "a misaligned peer buffer in the table";
    case tile_abuse::publish_twice: return "a tile published twice";
    case tile_abuse::reduce_other_block: return "a tile reduced by another block";
    case tile_abuse::reduce_before_publish: return "a tile reduced before it is published";
    case tile_abuse::stale_stride: return "a stale grid stride";
    case tile_abuse::skip_reduce: return "a tile never reduced";
    case tile_abuse::store_after_publish: return "a store into the input after publish";
    case tile_abuse::epilogue_into_input: return "an epilogue storing into the symmetric input";
    case tile_abuse::finish_count: return "finish with the wrong block count";
    case tile_abuse::finish_twice: return "finish twice";
    case tile_abuse::table_of_rank0: return "rank 0's table on every rank";
    case tile_abuse::not_reset: return "a launch on pads that still hold an error";
    case tile_abuse::timeout_one_binary: return "a rank that never arrives";
    case tile_abuse::region_per_rank: return "another region on one rank";
    case tile_abuse::whole_buffer_on_one_rank: return "the whole buffer on one rank, a region on the others";
    case tile_abuse::region_past_buffer: return "a region past the end of the buffer";
    case tile_abuse::strided_step_zero: return "a strided publish with step 0";
    case tile_abuse::parts_stride_zero: return "reduce_parts with two parts and stride 0";
  }
  return "?";
}

namespace {

using flat_ar = fz::tile_allreduce<float, max_r, algorithm::flat>;
using tree_ar = fz::tile_allreduce<float, max_r, algorithm::tree>;

// Reference of call c's output element (tile t, element e): the float64 sum over the ranks.
double expected(int n, int t, std::size_t e) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += value(r, t, e);
  return s;
}

// Counts the outputs [calls][loop_tiles][cols] that changed and that are wrong.
void count_outputs(const std::vector<std::unique_ptr<guarded<float>>>& out, int n, int calls, int loop_tiles,
                   outcome& o) {
  o.outputs = o.outputs_changed = o.outputs_wrong = o.outputs_corrupted = 0;
  for (int r = 0; r < n; ++r) {
    const std::vector<float> h = out[r]->download();
    o.guards_intact = o.guards_intact && out[r]->guards_intact();
    for (int c = 0; c < 2; ++c)
      for (int t = 0; t < tiles; ++t)
        for (std::size_t e = 0; e < cols; ++e) {
          const float x = h[(static_cast<std::size_t>(c) * tiles + t) * cols + e];
          const bool meant = c < calls && t < loop_tiles;
          o.outputs += meant;
          o.outputs_changed += x != sentinel;
          const bool wrong = meant ? static_cast<double>(x) != expected(n, t, e) + 100.0 * n * c : x != sentinel;
          o.outputs_wrong += wrong;
          o.outputs_corrupted += wrong && x != sentinel;
        }
  }
}

}  // namespace

outcome run_tile_case(tile_abuse a) {
  outcome o;
  const int n = ranks;
  const bool tree = a == tile_abuse::tree_in_flat_region;
  const std::size_t tile_elems = a == tile_abuse::tile_elems_odd ? 6 : cols;
  const int loop_tiles = tiles, ctor_tiles = tiles;
  const int max_tiles = a == tile_abuse::too_many_tiles ? tiles - 3 : tiles;
  // Each call's bytes: sized for tree (either algorithm fits), or for flat alone (the tree misuse).
  const std::size_t flat_bytes = flat_ar::workspace_bytes(cols, tiles), tree_bytes = tree_ar::workspace_bytes(cols, tiles);
  const std::size_t region_bytes = ((tree ? flat_bytes : tree_bytes) + 255) / 256 * 256;
  const bool two = a == tile_abuse::two_regions || a == tile_abuse::two_legacy_calls ||
                   a == tile_abuse::overlapping_region_bytes || a == tile_abuse::overlapping_region_slots;
  // region_per_rank: room for rank 1's region after the others'.
  const bool room = two || a == tile_abuse::region_per_rank;
  const std::size_t used = (room ? 2 : 1) * region_bytes;
  const int slot_count = 2 * (1 + tiles);
  rt::emulated_world<max_r> world(n, used + guard_bytes, slot_count, timeout_ns);

  tile_params p{};
  p.tables = world.device_tables<float>();
  p.calls = two ? 2 : 1;
  p.tile_elems = tile_elems;
  p.loop_tiles = loop_tiles;
  p.ctor_tiles = ctor_tiles;
  p.what = a;
  fz::region_plan plan;  // two_regions: the correct way to two calls in one kernel
  if (a == tile_abuse::two_regions) {
    const auto h0 = plan.add(tree_ar::need(cols, tiles), "call 0");
    const auto h1 = plan.add(flat_ar::need(cols, tiles), "call 1");
    plan.place(world);
    p.reg[0] = plan[h0];
    p.reg[1] = plan[h1];
  } else {
    p.slots[0] = world.reserve_tile_slots(tiles, "misuse suite, call 0");
    p.slots[1] = world.reserve_tile_slots(tiles, "misuse suite, call 1");
    if (a == tile_abuse::too_many_tiles) p.slots[0] = fz::tile_slots{slot_count - 1 - max_tiles, max_tiles};
    if (a == tile_abuse::slots_beyond_pads) p.slots[0].first = slot_count - 3;
    const std::uint32_t sized = tree ? rcclx::core::sized_for_flat : rcclx::core::sized_for_any;
    p.reg[0] = rcclx::core::region{0, region_bytes, p.slots[0], 1u, sized};
    p.reg[1] = rcclx::core::region{region_bytes, region_bytes, p.slots[1], 2u, sized};
  }
  p.use_region = a == tile_abuse::two_regions || a == tile_abuse::overlapping_region_bytes ||
                 a == tile_abuse::overlapping_region_slots || tree || a == tile_abuse::region_per_rank ||
                 a == tile_abuse::whole_buffer_on_one_rank || a == tile_abuse::region_past_buffer;
  // Past the buffer: the region starts 128 bytes before the buffer's end, in the guard bytes after
  // the bytes in use (a kernel writing its first tile there would change the guard and write past
  // the allocation; its other tiles lie wholly past it).
  if (a == tile_abuse::region_past_buffer) p.reg[0].offset = used + guard_bytes - 128;
  if (a == tile_abuse::overlapping_region_bytes) p.reg[1].offset = 0;
  if (a == tile_abuse::overlapping_region_slots) p.reg[1].slots.first = p.reg[0].slots.first - 2;  // [7, 16) and [9, 18)

  // Tables with a bad peer buffer in rank 0's view.
  void* bad_tables = nullptr;
  if (a == tile_abuse::null_peer_buffer || a == tile_abuse::misaligned_peer_buffer) {
    std::vector<rcclx::core::peer_table<float, max_r>> h(n);
    for (int r = 0; r < n; ++r) h[r] = world.table<float>(r);
    h[0].data[1] = a == tile_abuse::null_peer_buffer ? nullptr : reinterpret_cast<float*>(reinterpret_cast<char*>(h[0].data[1]) + 4);
    bad_tables = rcclx::gpu::device_malloc(sizeof(h[0]) * n);
    rcclx::gpu::copy(bad_tables, h.data(), sizeof(h[0]) * n);
    p.tables = static_cast<const rcclx::core::peer_table<float, max_r>*>(bad_tables);
  }

  std::vector<std::unique_ptr<guarded<float>>> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(std::make_unique<guarded<float>>(2 * tiles * cols));
    out.back()->fill(sentinel);
    p.out[r] = out.back()->get();
  }
  fill_buffer_guard(world, used, used + guard_bytes);
  const std::vector<unsigned char> flags_before = pad_flags(world);

  const auto run = [&](const tile_params& q, outcome& into) {
    if (tree) launch(world, tile_kernel<algorithm::tree>{q}, into);
    else if (a == tile_abuse::timeout_one_binary) launch(world, rt::without_rank(tile_kernel<algorithm::flat>{q}, 2), into);
    else launch(world, tile_kernel<algorithm::flat>{q}, into);
  };
  if (a == tile_abuse::not_reset) {
    tile_params bad = p;
    bad.what = tile_abuse::finish_count;  // any refused call leaves an error in the pads
    outcome first;
    run(bad, first);
    for (int r = 0; r < n; ++r) out[r]->fill(sentinel);
    p.what = tile_abuse::none;
  }
  run(p, o);
  if (!o.threw && a != tile_abuse::not_reset) run(p, o);  // the second call uses the other buffer halves
  count_outputs(out, n, p.calls, loop_tiles, o);
  o.guards_intact = o.guards_intact && buffer_guard_intact(world, used, used + guard_bytes);
  // Only the calls' own slot ranges (as declared, inside the pads) may have raised flags.
  std::vector<bool> allowed(static_cast<std::size_t>(slot_count), false);
  for (int c = 0; c < p.calls; ++c) {
    const fz::tile_slots s = p.use_region ? p.reg[c].slots : p.slots[c];
    for (int q = std::max(0, s.first); q < std::min(slot_count, s.end()); ++q) allowed[static_cast<std::size_t>(q)] = true;
  }
  o.guards_intact = o.guards_intact && pad_guard_intact(world, flags_before, allowed);

  // A correct call on the same world after reset(): one flat call on the legacy constructor.
  world.reset();
  tile_params good = p;
  good.tables = world.device_tables<float>();
  good.what = tile_abuse::none;
  good.calls = 1;
  good.use_region = false;
  good.tile_elems = cols;
  good.loop_tiles = good.ctor_tiles = tiles;
  good.slots[0] = fz::tile_slots{0, tiles};
  for (int r = 0; r < n; ++r) out[r]->fill(sentinel);
  outcome after;
  try {
    launch(world, tile_kernel<algorithm::flat>{good}, after);
  } catch (const std::exception& e) {
    after.threw = true;
    after.what = e.what();
  }
  count_outputs(out, n, 1, tiles, after);
  o.after_reset_ok = !after.threw && after.outputs_wrong == 0;
  o.after_reset_error = after.what;
  if (bad_tables) rcclx::gpu::device_free(bad_tables);
  return o;
}

// ---- epilogue stage misuses -----------------------------------------------------------------------

struct stage_params {
  const rcclx::core::peer_table<float, max_r>* tables;
  float* out[max_r];
  std::uint8_t* codes[max_r];
  const float* scale;
  const float* weight;
  float* residual;  // tiles + 1 rows of cols
  fz::tile_slots slots;
  stage_abuse what;
};

struct stage_kernel {
  static constexpr int max_threads_per_block = threads;
  stage_params p;

  template <int V = vpt, class G, class Epi, class Map = fz::row_tiles>
  RCCLX_HOST_DEVICE void call(const G& g, rt::launch_index ix, const Epi& epi, const Map& map = {tiles, cols}) const {
    const fz::tile_allreduce<float, max_r, algorithm::flat> ar(p.tables[ix.rank], p.slots, cols, tiles);
    for (int t = ix.block; t < tiles; t += ix.num_blocks) {
      float* in = ar.input(t);
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < cols; e += static_cast<std::size_t>(g.size()))
        in[e] = value(ix.rank, t, e);
      ar.publish(g, t);
    }
    for (int t = ix.block; t < tiles; t += ix.num_blocks)
      if (!ar.template reduce<V>(g, t, map, epi)) break;
    ar.finish(g, ix.num_blocks);
  }

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    float* o = p.out[ix.rank];
    switch (p.what) {
      case stage_abuse::fp8_scale_zero:
      case stage_abuse::fp8_scale_negative:
      case stage_abuse::fp8_scale_nan:
      case stage_abuse::fp8_scale_inf:
        call(g, ix, fz::epilogue<fz::fp8_out<rcclx::fp8::e4m3>>{{p.codes[ix.rank], cols, p.scale}});
        return;
      case stage_abuse::rms_cols_padded:
      case stage_abuse::eps_negative: {
        auto& tmp = rcclx::gpu::block_shared<fz::rms_norm<float, threads>::storage_type, struct misuse_norm_tag>();
        const std::size_t c = p.what == stage_abuse::rms_cols_padded ? cols + 8 : cols;
        const float eps = p.what == stage_abuse::eps_negative ? -1.0f : 1e-6f;
        call(g, ix, fz::epilogue<fz::rms_norm<float, threads>, fz::store<float>>{{p.weight, eps, c, &tmp}, {o, cols}});
        return;
      }
      case stage_abuse::rms_row_split:
      case stage_abuse::rms_half_rows: {
        auto& tmp = rcclx::gpu::block_shared<fz::rms_norm<float, threads>::storage_type, struct misuse_norm_tag>();
        const fz::epilogue<fz::rms_norm<float, threads>, fz::store<float>> epi{{p.weight, 1e-6f, cols, &tmp}, {o, cols}};
        if (p.what == stage_abuse::rms_row_split) call<1>(g, ix, epi);
        else call(g, ix, epi, fz::tile_map{tiles, cols, 2, cols / 2});
        return;
      }
      case stage_abuse::residual_next_row:
      case stage_abuse::residual_null: {
        float* res = p.residual + static_cast<std::size_t>(ix.rank) * (tiles + 1) * cols;
        const fz::residual_add<float> add = p.what == stage_abuse::residual_null ? fz::residual_add<float>{nullptr, nullptr, cols}
                                                                                  : fz::residual_add<float>{res, res + cols, cols};
        call(g, ix, fz::epilogue<fz::residual_add<float>, fz::store<float>>{add, {o, cols}});
        return;
      }
      case stage_abuse::map_tile_small:
        call(g, ix, fz::epilogue<fz::store<float>>{{o, cols}}, fz::tile_map{tiles, cols, 1, cols / 2});
        return;
      case stage_abuse::ld_short:
        call(g, ix, fz::epilogue<fz::store<float>>{{o, cols - 4}});
        return;
      case stage_abuse::misaligned_out:
        call(g, ix, fz::epilogue<fz::store<float>>{{o + 1, cols}});
        return;
      case stage_abuse::none:
        call(g, ix, fz::epilogue<fz::store<float>>{{o, cols}});
        return;
    }
  }
};

const char* name(stage_abuse a) {
  switch (a) {
    case stage_abuse::none: return "a plain store";
    case stage_abuse::fp8_scale_zero: return "FP8 scale 0";
    case stage_abuse::fp8_scale_negative: return "FP8 scale -1";
    case stage_abuse::fp8_scale_nan: return "FP8 scale NaN";
    case stage_abuse::fp8_scale_inf: return "FP8 scale inf";
    case stage_abuse::ld_short: return "ld shorter than the row";
    case stage_abuse::misaligned_out: return "a misaligned output pointer";
    case stage_abuse::rms_cols_padded: return "rms_norm::cols not the row's";
    case stage_abuse::eps_negative: return "a negative epsilon";
    case stage_abuse::rms_row_split: return "rms_norm on rows the group does not hold at once";
    case stage_abuse::rms_half_rows: return "rms_norm on a tile map of half rows";
    case stage_abuse::map_tile_small: return "a tile map whose tiles are smaller than the call's";
    case stage_abuse::residual_next_row: return "residual_add writing the updated residual one row on";
    case stage_abuse::residual_null: return "residual_add with a null residual";
  }
  return "?";
}

outcome run_stage_case(stage_abuse a) {
  outcome o;
  const int n = ranks;
  rt::emulated_world<max_r> world(n, flat_ar::workspace_bytes(cols, tiles), 1 + tiles, timeout_ns);
  stage_params p{};
  p.tables = world.device_tables<float>();
  p.slots = world.reserve_tile_slots(tiles, "misuse suite, stages");
  p.what = a;
  const float scale = a == stage_abuse::fp8_scale_zero       ? 0.0f
                      : a == stage_abuse::fp8_scale_negative ? -1.0f
                      : a == stage_abuse::fp8_scale_nan      ? std::numeric_limits<float>::quiet_NaN()
                      : a == stage_abuse::fp8_scale_inf      ? std::numeric_limits<float>::infinity()
                                                             : 1.0f;
  guarded<float> scale_d(1), weight(cols), residual(static_cast<std::size_t>(n) * (tiles + 1) * cols);
  scale_d.fill(scale);
  weight.fill(1.0f);
  residual.fill(0.5f);
  p.scale = scale_d.get();
  p.weight = weight.get();
  p.residual = residual.get();
  std::vector<std::unique_ptr<guarded<float>>> out;
  std::vector<std::unique_ptr<guarded<std::uint8_t>>> codes;
  const bool fp8 = a == stage_abuse::fp8_scale_zero || a == stage_abuse::fp8_scale_negative ||
                   a == stage_abuse::fp8_scale_nan || a == stage_abuse::fp8_scale_inf;
  for (int r = 0; r < n; ++r) {
    out.push_back(std::make_unique<guarded<float>>(tiles * cols));
    out.back()->fill(sentinel);
    p.out[r] = out.back()->get();
    codes.push_back(std::make_unique<guarded<std::uint8_t>>(tiles * cols));
    codes.back()->fill(0x5A);
    p.codes[r] = codes.back()->get();
  }
  launch(world, stage_kernel{p}, o);
  for (int r = 0; r < n; ++r) {
    o.guards_intact = o.guards_intact && out[r]->guards_intact() && codes[r]->guards_intact();
    const std::vector<float> h = out[r]->download();
    const std::vector<std::uint8_t> c = codes[r]->download();
    for (std::size_t i = 0; i < h.size(); ++i) {
      const int t = static_cast<int>(i / cols);
      const std::size_t e = i % cols;
      o.outputs += 1;
      if (fp8) {
        o.outputs_changed += c[i] != 0x5A;
        // a scale that is not a positive finite number has no right codes
        o.outputs_wrong += c[i] != 0x5A;
        o.outputs_corrupted += c[i] != 0x5A;
      } else if (a == stage_abuse::rms_cols_padded || a == stage_abuse::eps_negative ||
                 a == stage_abuse::rms_row_split || a == stage_abuse::rms_half_rows) {
        o.outputs_changed += h[i] != sentinel;
        double ss = 0;
        for (std::size_t j = 0; j < cols; ++j) ss += expected(n, t, j) * expected(n, t, j);
        const double y = expected(n, t, e) / std::sqrt(ss / cols + 1e-6);
        const bool wrong = !(std::fabs(h[i] - y) <= 1e-5 * std::fabs(y) + 1e-6);
        o.outputs_wrong += wrong;
        o.outputs_corrupted += wrong && h[i] != sentinel;
      } else {
        o.outputs_changed += h[i] != sentinel;
        // residual_add: every residual element is 0.5 (exact in the sum's FP32)
        const double want = expected(n, t, e) + (a == stage_abuse::residual_next_row ? 0.5 : 0.0);
        const bool wrong = static_cast<double>(h[i]) != want;
        o.outputs_wrong += wrong;
        o.outputs_corrupted += wrong && h[i] != sentinel;
      }
    }
  }
  world.reset();
  stage_params good = p;
  good.what = stage_abuse::none;
  for (int r = 0; r < n; ++r) out[r]->fill(sentinel);
  outcome after;
  launch(world, stage_kernel{good}, after);
  std::size_t wrong = 0;
  for (int r = 0; r < n; ++r) {
    const std::vector<float> h = out[r]->download();
    for (std::size_t i = 0; i < h.size(); ++i)
      wrong += static_cast<double>(h[i]) != expected(n, static_cast<int>(i / cols), i % cols);
  }
  o.after_reset_ok = !after.threw && wrong == 0;
  o.after_reset_error = after.what;
  return o;
}

// ---- correct-usage controls: two user kernels on the legacy API ---------------------------------

namespace gemv {
constexpr std::size_t tokens = 5, hidden = 64, k = 24;  // K per rank
constexpr float eps = 1e-5f, fp8_scale = 1.0f / 64.0f;

// A row-parallel GEMV (x_r[tokens][k] W_r[k][hidden]) whose partial rows go through the tile
// AllReduce, then residual add (in place), RMSNorm and FP8 e4m3 codes: one call per kernel, the
// legacy constructor (a slot range, the whole buffer).
template <class T, algorithm Algo>
struct kernel {
  static constexpr int max_threads_per_block = threads;
  static constexpr int vecs = static_cast<int>(hidden * sizeof(T) / 16);
  static constexpr int vpt_row = on_host ? vecs : 1;
  const rcclx::core::peer_table<T, max_r>* tables;
  const T* x[max_r];
  const T* w[max_r];
  T* residual[max_r];
  std::uint8_t* codes[max_r];
  const T* weight;
  const float* scale;
  fz::tile_slots slots;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const int rows = static_cast<int>(tokens);
    fz::tile_allreduce<T, max_r, Algo> ar(tables[ix.rank], slots, hidden, rows);
    for (int t = ix.block; t < rows; t += ix.num_blocks) {
      T* part = ar.input(t);
      for (std::size_t j = static_cast<std::size_t>(g.thread_rank()); j < hidden; j += static_cast<std::size_t>(g.size())) {
        float s = 0.0f;
        for (std::size_t q = 0; q < k; ++q)
          s += static_cast<float>(x[ix.rank][t * k + q]) * static_cast<float>(w[ix.rank][q * hidden + j]);
        part[j] = T(s);
      }
      ar.publish(g, t);
    }
    auto& tmp = rcclx::gpu::block_shared<typename fz::rms_norm<T, threads>::storage_type, struct gemv_norm_tag>();
    const fz::epilogue<fz::residual_add<T>, fz::rms_norm<T, threads>, fz::fp8_out<rcclx::fp8::e4m3>> epi{
        {residual[ix.rank], residual[ix.rank], hidden}, {weight, eps, hidden, &tmp}, {codes[ix.rank], hidden, scale}};
    for (int t = ix.block; t < rows; t += ix.num_blocks)
      if (!ar.template reduce<vpt_row>(g, t, fz::row_tiles{tokens, hidden}, epi)) break;
    ar.finish(g, ix.num_blocks);
  }
};

double e4m3_decode(std::uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  if (e == 15 && m == 7) v = std::numeric_limits<double>::quiet_NaN();
  return s ? -v : v;
}

template <class T, algorithm Algo>
control_result run(int n) {
  control_result res;
  const double u = sizeof(T) == 2 ? 0x1p-8 : 0x1p-24, u32 = 0x1p-24, u8 = 0x1p-4;
  std::mt19937 gen(2024 + n);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<T>> x(n, std::vector<T>(tokens * k)), w(n, std::vector<T>(k * hidden));
  std::vector<T> res0(tokens * hidden), weight(hidden);
  for (int r = 0; r < n; ++r) {
    for (T& v : x[r]) v = T(dist(gen));
    for (T& v : w[r]) v = T(0.5f * dist(gen));
  }
  for (T& v : res0) v = T(dist(gen));
  for (T& v : weight) v = T(1.0f + 0.25f * dist(gen));
  rt::emulated_world<max_r> world(n, fz::tile_allreduce<T, max_r, Algo>::workspace_bytes(hidden, tokens), 1 + tokens,
                                  timeout_ns);
  std::vector<void*> owned;
  const auto up = [&](const void* h, std::size_t bytes) {
    owned.push_back(rcclx::gpu::device_malloc(bytes));
    rcclx::gpu::copy(owned.back(), h, bytes);
    return owned.back();
  };
  kernel<T, Algo> kn{};
  kn.tables = world.template device_tables<T>();
  kn.slots = world.reserve_tile_slots(static_cast<int>(tokens), "GEMV + AllReduce + RMSNorm + FP8");
  kn.weight = static_cast<const T*>(up(weight.data(), hidden * sizeof(T)));
  kn.scale = static_cast<const float*>(up(&fp8_scale, sizeof(float)));
  const std::vector<std::uint8_t> code0(tokens * hidden, 0);
  for (int r = 0; r < n; ++r) {
    kn.x[r] = static_cast<const T*>(up(x[r].data(), x[r].size() * sizeof(T)));
    kn.w[r] = static_cast<const T*>(up(w[r].data(), w[r].size() * sizeof(T)));
    kn.residual[r] = static_cast<T*>(up(res0.data(), res0.size() * sizeof(T)));
    kn.codes[r] = static_cast<std::uint8_t*>(up(code0.data(), code0.size()));
  }
  try {
    rt::launch_emulated(world, blocks, threads, kn);
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  std::vector<std::vector<std::uint8_t>> codes(n, std::vector<std::uint8_t>(tokens * hidden));
  for (int r = 0; r < n; ++r) rcclx::gpu::copy(codes[r].data(), kn.codes[r], tokens * hidden);
  for (int r = 1; r < n; ++r)
    for (std::size_t i = 0; i < codes[r].size(); ++i) res.differ += codes[r][i] != codes[0][i];
  // float64: the rank partials (each rounded to T by the kernel: bounded by u), the sum, the
  // residual, the norm; then the FP8 code's decoded value against it.
  for (std::size_t t = 0; t < tokens; ++t) {
    std::vector<double> rr(hidden), er(hidden);
    double ms = 0, dms = 0;
    for (std::size_t j = 0; j < hidden; ++j) {
      // e_s: each rank's FP32 dot product ((k + 1) u32 of its magnitudes) rounded to T (u), the
      // FP32 sum over the ranks ((N - 1) u32), the sum rounded to T (u).
      double s = 0, e_parts = 0, abs_parts = 0;
      for (int r = 0; r < n; ++r) {
        double part = 0, pm = 0;
        for (std::size_t q = 0; q < k; ++q) {
          const double a = static_cast<float>(x[r][t * k + q]) * static_cast<double>(static_cast<float>(w[r][q * hidden + j]));
          part += a;
          pm += std::fabs(a);
        }
        s += part;
        e_parts += (k + 1) * u32 * pm + u * (std::fabs(part) + (k + 1) * u32 * pm);
        abs_parts += std::fabs(part) + (k + 1) * u32 * pm;
      }
      const double e_s = e_parts + (n - 1) * u32 * abs_parts + u * (std::fabs(s) + e_parts);
      rr[j] = s + static_cast<float>(res0[t * hidden + j]);
      er[j] = e_s + (u + u32) * (std::fabs(rr[j]) + e_s);
      ms += rr[j] * rr[j];
      dms += 2 * std::fabs(rr[j]) * er[j] + er[j] * er[j] + (hidden + 16) * u32 * (std::fabs(rr[j]) + er[j]) * (std::fabs(rr[j]) + er[j]);
    }
    ms /= hidden;
    dms /= hidden;
    const double f = 1.0 / std::sqrt(ms + eps), ef = dms / (2 * (ms + eps)) + 3 * u32;
    for (std::size_t j = 0; j < hidden; ++j) {
      const double wj = static_cast<float>(weight[j]), y = rr[j] * f * wj;
      const double e_y = std::fabs(wj) * f * er[j] + std::fabs(y) * (ef + 2 * u32);
      const double tol = 2 * (e_y + u8 * (std::fabs(y) + e_y) + fp8_scale * 0x1p-10 + u32 * std::fabs(y));
      const double got = e4m3_decode(codes[0][t * hidden + j]) * fp8_scale, err = std::fabs(got - y);
      res.max_err = std::max(res.max_err, err);
      res.wrong += !(err <= tol);
      ++res.checked;
    }
  }
  for (void* q : owned) rcclx::gpu::device_free(q);
  return res;
}
}  // namespace gemv

control_result run_gemv_rmsnorm_fp8(int n, bool bf16, algorithm algo) {
  if (bf16) return algo == algorithm::tree ? gemv::run<rcclx::bf16, algorithm::tree>(n) : gemv::run<rcclx::bf16, algorithm::flat>(n);
  return algo == algorithm::tree ? gemv::run<float, algorithm::tree>(n) : gemv::run<float, algorithm::flat>(n);
}

namespace merge {
constexpr int head_dim = 64;
using op = fz::lse_merge<rcclx::bf16, head_dim>;
using rec = op::record;
constexpr int tokens = 5, heads = 6;

// Every rank writes its partial records of a token (one per head) and the merge gives every rank
// the attention over the whole cache: combine<lse_merge>, the legacy constructor, reduce_slices.
template <algorithm Algo>
struct kernel {
  static constexpr int max_threads_per_block = threads;
  const rcclx::core::peer_table<rec, max_r>* tables;
  const rec* partial[max_r];  // [tokens][heads]
  rcclx::bf16* out[max_r];    // [tokens][heads][head_dim]
  fz::tile_slots slots;
  combine_abuse abuse = combine_abuse::none;  // what rank 1 passes otherwise

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const bool odd = ix.rank == 1;
    const std::size_t records = static_cast<std::size_t>(tokens) * heads -
                                (odd && abuse == combine_abuse::fewer_records ? 1 : 0);
    const std::size_t per_tile = heads - (odd && abuse == combine_abuse::records_per_tile ? 1 : 0);
    fz::combine<rec, op, max_r, Algo> c(tables[ix.rank], slots, per_tile, records);
    for (int t = ix.block; t < c.num_tiles(); t += ix.num_blocks) {
      const std::size_t first = static_cast<std::size_t>(t) * c.tile_records();
      for (std::size_t h = static_cast<std::size_t>(g.thread_rank()); h < c.records_in(t); h += static_cast<std::size_t>(g.size()))
        c.input(t)[h] = partial[ix.rank][first + h];
      c.publish(g, t);
    }
    rcclx::bf16* o = out[ix.rank];
    for (int t = ix.block; t < c.num_tiles(); t += ix.num_blocks)
      if (!c.reduce_slices(g, t, [&](std::size_t i, int j, const op::slice& s) {
            for (int d = 0; d < op::slice_elems; ++d) o[i * head_dim + j * op::slice_elems + d] = s.o[d];
          }))
        break;
    c.finish(g, ix.num_blocks);
  }
};

template <algorithm Algo>
control_result run(int n, combine_abuse abuse = combine_abuse::none) {
  control_result res;
  std::mt19937 gen(77 + n);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<rec>> part(n, std::vector<rec>(tokens * heads));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < tokens * heads; ++i) {
      rec& x = part[r][i];
      for (int d = 0; d < head_dim; ++d) x.o[d] = rcclx::bf16(dist(gen));
      // rank 1 has no keys for token 0; every rank some spread of log-sum-exps
      x.lse = (r == 1 && i / heads == 0) ? -std::numeric_limits<float>::infinity() : 3.0f * dist(gen);
    }
  using C = fz::combine<rec, op, max_r, Algo>;
  // (room for one tile more than the merge's: combine_abuse::records_per_tile's rank 1 has 6)
  rt::emulated_world<max_r> world(n, C::workspace_bytes(heads, tokens * heads), 2 + tokens, timeout_ns);
  std::vector<void*> owned;
  kernel<Algo> kn{};
  kn.tables = world.template device_tables<rec>();
  kn.slots = world.reserve_tile_slots(tokens + 1, "split-KV merge");
  kn.abuse = abuse;
  for (int r = 0; r < n; ++r) {
    owned.push_back(rcclx::gpu::device_malloc(part[r].size() * sizeof(rec)));
    rcclx::gpu::copy(owned.back(), part[r].data(), part[r].size() * sizeof(rec));
    kn.partial[r] = static_cast<const rec*>(owned.back());
    owned.push_back(rcclx::gpu::device_malloc(tokens * heads * head_dim * 2));
    rcclx::gpu::memset_zero(owned.back(), tokens * heads * head_dim * 2);
    kn.out[r] = static_cast<rcclx::bf16*>(owned.back());
  }
  try {
    rt::launch_emulated(world, blocks, threads, kn);
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  std::vector<std::vector<rcclx::bf16>> o(n, std::vector<rcclx::bf16>(tokens * heads * head_dim));
  for (int r = 0; r < n; ++r) rcclx::gpu::copy(o[r].data(), kn.out[r], o[r].size() * 2);
  for (int r = 1; r < n; ++r)
    for (std::size_t i = 0; i < o[r].size(); ++i) res.differ += o[r][i].bits != o[0][i].bits;
  for (int r = 0; r < n; ++r)
    for (const rcclx::bf16& x : o[r]) res.changed += x.bits != 0;
  for (int i = 0; i < tokens * heads; ++i) {
    double m = -INFINITY;
    for (int r = 0; r < n; ++r) m = std::max(m, static_cast<double>(part[r][i].lse));
    double s = 0;
    for (int r = 0; r < n; ++r) s += std::exp(part[r][i].lse - m);
    for (int d = 0; d < head_dim; ++d) {
      double ref = 0, mag = 0;
      for (int r = 0; r < n; ++r) {
        const double wr = std::exp(part[r][i].lse - m) / s, x = static_cast<float>(part[r][i].o[d]);
        ref += wr * x;
        mag += wr * std::fabs(x);
      }
      const double err = std::fabs(static_cast<float>(o[0][i * head_dim + d]) - ref);
      res.max_err = std::max(res.max_err, err);
      res.wrong += !(err <= 2 * (0x1p-8 * std::fabs(ref) + 64 * 0x1p-24 * mag));
      ++res.checked;
    }
  }
  for (void* q : owned) rcclx::gpu::device_free(q);
  return res;
}
}  // namespace merge

control_result run_split_kv_merge(int n, algorithm algo) {
  return algo == algorithm::tree ? merge::run<algorithm::tree>(n) : merge::run<algorithm::flat>(n);
}

control_result run_combine_case(combine_abuse a) { return merge::run<algorithm::flat>(ranks, a); }

const char* name(combine_abuse a) {
  switch (a) {
    case combine_abuse::none: return "a correct merge";
    case combine_abuse::fewer_records: return "one rank with one record less";
    case combine_abuse::records_per_tile: return "one rank with another tile_records";
  }
  return "?";
}

}  // namespace misuse_suite
