// bench/fused/combine_rows.cpp: rcclx-bench-fused's cross-rank combine rows (docs/fusion.md section
// 12). Fused: one kernel whose epilogue is fused::combine (flat, tree; automatic = the built-in
// table's). Unfused, the way an engine does it today: rcclx's AllGather (dda::flat_allgather) of
// every rank's partial records, then a merge kernel running the combine's own arithmetic in rank
// order. Floor: that AllGather alone. The unfused kernels and floors: testing/emulated_combine_baselines.hpp.
// Per call, all emulated ranks in one launch per kernel; graphs of K back-to-back calls on GPUs, the
// unfused kernels captured together.
//   attn_merge (B tokens x 32 heads x 128, bf16): fused copies each rank's partial records (O_r, L_r
//     in ordinary memory, where the attention kernel left them) into the combine's input, as that
//     kernel's epilogue would, and merges with reduce_slices (a thread per 16-byte slice); L_r in
//     [-6, 6) or -inf (about one rank in 8, its O_r NaN: never read), every 13th head -inf on every
//     rank (O = 0, L = -inf).
//   argmax, topk50 (B rows, a vocabulary V split over the ranks, float logits): the rank's scan of
//     its shard (fused::shard_scan, a block per row) is on both sides, identical code (local_us: it
//     alone). Logits: multiples of 2^-12 in [-8, 8) (ties across ranks), row 0 with a -inf, row 1
//     NaNs; for the checks only, row 2 ascends along rank 1's shard (the top-k scan's safe mode).
//   read: the logits read once by the scan's blocks and loads, nothing kept (the scan's floor).
// Checks: every rank the same bits; fused flat, fused tree and unfused bit-identical; rank 0 against
// a float64 merge of the partials (FP32 and bf16 rounding bounds) or testing::topk_reference.
#include "combine_rows.hpp"

#include <rcclx/dda/allgather.hpp>
#include <rcclx/dda/select.hpp>
#include <rcclx/fused/combine.hpp>
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/fused/shard_scan.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/emulated_bench.hpp>
#include <rcclx/testing/emulated_combine_baselines.hpp>
#include <rcclx/testing/launch.hpp>
#include <rcclx/testing/rank_inputs.hpp>
#include <rcclx/testing/references.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/report.hpp"

namespace combine_bench {
namespace {

using rcclx::algorithm;
namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using T = rcclx::bf16;
using word = rt::record_word;  // the AllGather moves records as 32-bit words (bitwise copies)
// Launch shapes (the host backend: a block is one thread, at most 4 per rank).
constexpr int host_blocks = 4;
constexpr int attn_threads = on_host ? 1 : 256;  // 16 heads x 16 slices: a tile per pass
constexpr int vocab_threads = on_host ? 1 : 128;
constexpr std::size_t tile_heads = 16;  // attention records per tile: half a token's heads

using merge_op = fz::lse_merge<T, head_dim>;
using attn_rec = merge_op::record;
using topk_op = fz::topk<top_k>;
static_assert(sizeof(attn_rec) % 16 == 0, "attention records are whole 16-byte vectors");
static_assert(sizeof(fz::argmax::record) % sizeof(word) == 0 && sizeof(topk_op::record) % sizeof(word) == 0,
              "records are whole words");
using rt::vocab_shard_begin;
// The unfused paths and floors (testing/emulated_combine_baselines.hpp) on this file's shapes.
using gather_kernel = rt::emulated_record_gather<max_r>;
using attention_merge = rt::emulated_attention_merge<T, head_dim, max_r>;
template <class Op>
using vocab_local = rt::emulated_shard_scan<Op, max_r, vocab_threads>;
using vocab_read = rt::emulated_shard_read<max_r, vocab_threads>;
template <class Op>
using vocab_merge = rt::emulated_sampling_merge<Op, max_r, vocab_threads>;

// The attention rows' output: O (bf16), then L (float) from the next 16-byte boundary.
constexpr std::size_t attn_o_bytes(std::size_t records) { return (records * head_dim * sizeof(T) + 15) / 16 * 16; }

// ---- kernels (functors run by testing::launch_emulated: every rank's blocks in one launch) --------

// Fused attention merge: the partial records into the combine's input, the merge as its epilogue.
template <algorithm Algo>
struct attention_fused {
  static constexpr int max_threads_per_block = 256;
  const rcclx::core::peer_table<attn_rec, max_r>* tables;
  const attn_rec* part[max_r];
  T* out_o[max_r];      // [records][head_dim]
  float* out_l[max_r];  // [records]
  fz::tile_slots slots;
  std::size_t records;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    fz::combine<attn_rec, merge_op, max_r, Algo> c(tables[ix.rank], slots, tile_heads, records);
    const std::size_t tid = static_cast<std::size_t>(g.thread_rank()), gs = static_cast<std::size_t>(g.size());
    for (int t = ix.block; t < c.num_tiles(); t += ix.num_blocks) {
      const auto* src = reinterpret_cast<const unsigned char*>(part[ix.rank] + static_cast<std::size_t>(t) * tile_heads);
      auto* dst = reinterpret_cast<unsigned char*>(c.input(t));
      const std::size_t vecs = c.records_in(t) * sizeof(attn_rec) / 16;
      for (std::size_t v = tid; v < vecs; v += gs) rcclx::gpu::store16(dst + 16 * v, rcclx::gpu::load16(src + 16 * v));
      c.publish(g, t);
    }
    T* o = out_o[ix.rank];
    float* l = out_l[ix.rank];
    for (int t = ix.block; t < c.num_tiles(); t += ix.num_blocks)
      if (!c.reduce_slices(g, t, [&](std::size_t i, int j, const merge_op::slice& s) {
            rt::store_slice_o(o + i * head_dim + static_cast<std::size_t>(j) * merge_op::slice_elems, s);
            if (j == 0) l[i] = s.lse;
          }))
        break;
    c.finish(g, ix.num_blocks);
  }
};

// Fused sampling: the scan of the rank's shard, then the combine (a tile per row).
template <class Op, algorithm Algo>
struct vocab_fused {
  static constexpr int max_threads_per_block = rt::sampling_max_threads;
  static constexpr int min_blocks_per_multiprocessor = rt::sampling_blocks_per_sm;
  using rec = typename Op::record;
  const rcclx::core::peer_table<rec, max_r>* tables;
  const float* logits[max_r];  // [rows][shard length]
  rec* out[max_r];             // [rows]
  fz::tile_slots slots;
  std::size_t rows, vocab;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    fz::combine<rec, Op, max_r, Algo> c(tables[ix.rank], slots, 1, rows);
    const std::size_t b = vocab_shard_begin(ix.rank, ix.num_ranks, vocab);
    const std::size_t len = vocab_shard_begin(ix.rank + 1, ix.num_ranks, vocab) - b;
    for (int t = ix.block; t < c.num_tiles(); t += ix.num_blocks) {
      fz::shard_scan<Op, vocab_threads>::run(g, logits[ix.rank] + static_cast<std::size_t>(t) * len, len, b, c.input(t));
      c.publish(g, t);  // (syncs the group first)
    }
    rec* o = out[ix.rank];
    for (int t = ix.block; t < c.num_tiles(); t += ix.num_blocks) {
      bool ok;
      if constexpr (!std::is_same<Op, fz::argmax>::value) {  // top-k: a thread per entry
        // [combine-entries]
        auto& st = rcclx::gpu::block_shared<fz::entries_storage<Op, max_r>, struct fused_entries_tag>();
        ok = c.reduce_entries(g, t, st, [&](std::size_t i, int place, const typename Op::entry& e) {
          o[i].value[place] = e.value;
          o[i].index[place] = e.index;
        });
        // [combine-entries]
      } else {
        ok = c.reduce(g, t, [&](std::size_t i, const rec& r) { o[i] = r; });
      }
      if (!ok) break;
    }
    c.finish(g, ix.num_blocks);
  }
};

// ---- inputs and references ----------------------------------------------------------------------

std::string to_string(kind k) {
  return k == kind::attention ? "attn_merge" : k == kind::argmax ? "argmax" : "topk" + std::to_string(top_k);
}

// ---- the runner ---------------------------------------------------------------------------------

// Sizes a shape needs.
struct needs {
  std::size_t records, rec_bytes, workspace, logits, out_bytes;
  int tiles;
};
needs needs_of(const shape& s, int n) {
  needs x{};
  if (s.what == kind::attention) {
    using c_t = fz::combine<attn_rec, merge_op, max_r, algorithm::tree>;
    x.records = s.batch * heads;
    x.rec_bytes = sizeof(attn_rec);
    x.workspace = c_t::workspace_bytes(tile_heads, x.records);
    x.tiles = c_t::tiles_for(tile_heads, x.records);
    x.out_bytes = attn_o_bytes(x.records) + x.records * sizeof(float);
  } else {
    const bool top = s.what == kind::topk;
    x.records = s.batch;
    x.rec_bytes = top ? sizeof(topk_op::record) : sizeof(fz::argmax::record);
    x.workspace = top ? fz::combine<topk_op::record, topk_op, max_r, algorithm::tree>::workspace_bytes(1, s.batch)
                      : fz::combine<fz::argmax::record, fz::argmax, max_r, algorithm::tree>::workspace_bytes(1, s.batch);
    x.tiles = static_cast<int>(s.batch);
    x.logits = s.batch * (s.vocab / static_cast<std::size_t>(n) + 1);
    x.out_bytes = s.batch * x.rec_bytes;
  }
  return x;
}

// What the runner allocates: the largest of every shape's needs.
struct capacity {
  std::size_t part_bytes = 16, buffer_bytes = 16, logits = 1, out_bytes = 16;
  int tiles = 1;
};

class runner : rt::emulated_bench<max_r> {
 public:
  runner(int num_ranks, const rt::timing_options& t, const capacity& c)
      : emulated_bench(num_ranks, c.buffer_bytes, fz::pad_blocks_for(barrier_blocks, c.tiles)), n_(num_ranks), timing_(t),
        slots_{barrier_blocks, c.tiles} {
    for (int r = 0; r < n_; ++r) {
      part_.push_back(alloc(c.part_bytes));
      gathered_.push_back(static_cast<word*>(alloc(c.part_bytes * static_cast<std::size_t>(n_))));
      out_.push_back(alloc(c.out_bytes));
      logits_.push_back(static_cast<float*>(alloc(c.logits * sizeof(float))));
    }
  }

  row run(const shape& s) {
    const bool attn = s.what == kind::attention;
    row r{to_string(s.what), std::to_string(s.batch) + "x" + (attn ? std::to_string(heads) + "x" + std::to_string(head_dim)
                                                                   : std::to_string(s.vocab)),
          s.batch, attn ? 0 : s.vocab};
    const rt::timing_mode mode = on_host ? rt::timing_mode::wall : rt::timing_mode::graph;
    r.timing = rt::to_string(mode);
    guard(r, [&] {
      if (s.batch == 0 || (s.what != kind::attention && s.vocab < static_cast<std::size_t>(n_)))
        throw rcclx::error(rcclx::errc::invalid_argument, "empty batch, or a vocabulary smaller than the rank count");
      if (s.what == kind::attention) attention(s, mode, r);
      else if (s.what == kind::argmax) vocab<fz::argmax>(s, mode, r);
      else vocab<topk_op>(s, mode, r);
      r.speedup = r.fused_auto_us > 0 ? r.unfused_us / r.fused_auto_us : 0;
      const double best = std::min(r.fused_flat_us, r.fused_tree_us);
      r.speedup_best = best > 0 ? r.unfused_us / best : 0;
    });
    return r;
  }

 private:
  void* alloc(std::size_t bytes) { return emulated_bench::alloc(bytes + 64); }

  template <class F>
  int blocks_for(int wanted, int threads) const {
    const int cap = on_host ? host_blocks : rt::max_blocks_per_rank<F>(n_, threads);
    return std::max(1, std::min(wanted, cap));
  }

  // The AllGather of `words` words per rank from part_ into gathered_.
  int gather_blocks(std::size_t words) const {
    const rcclx::dda::launch_config cfg{dda_threads, dda_max_blocks, dda_max_blocks};
    return blocks_for<gather_kernel>(std::min(rcclx::dda::allgather_blocks<word>(words, cfg), barrier_blocks),
                                     dda_threads);
  }
  void gather(std::size_t words, int blocks, rcclx::gpu::stream_t st) const {
    gather_kernel k{};
    k.tables = world().device_tables<word>();
    for (int q = 0; q < n_; ++q) {
      k.buf.in[q] = static_cast<const word*>(part_[q]);
      k.buf.out[q] = gathered_[q];
    }
    k.count = words;
    rt::launch_emulated(n_, blocks, dda_threads, k, st);
  }

  // What every combine row does once its kernels are set: every rank's output (out_bytes) after
  // fused flat, fused tree and unfused, all the same bits; check(rank 0's); then the times of the
  // three, the automatic one's, the floor (the AllGather of `words` per rank on `gb` blocks alone)
  // and, argmax / topk, more(time).
  template <class FF, class FT, class U, class Check, class More>
  void measure(row& r, rt::timing_mode mode, algorithm automatic, FF&& fused_flat, FT&& fused_tree, U&& unfused,
               std::size_t out_bytes, std::size_t words, int gb, Check&& check, More&& more) {
    const auto flat = outputs_after(fused_flat, out_, out_bytes), tree = outputs_after(fused_tree, out_, out_bytes),
               unf = outputs_after(unfused, out_, out_bytes);
    for (std::size_t q = 0; q < flat.size(); ++q)
      r.identical = r.identical && flat[q] == flat[0] && tree[q] == flat[0] && unf[q] == flat[0];
    check(flat[0]);
    bool fell_back = false;
    const auto time = [&](auto&& f) { return emulated_bench::time(mode, timing_, f, fell_back); };
    r.fused_flat_us = time(fused_flat);
    r.fused_tree_us = time(fused_tree);
    r.fused_auto_us = automatic == algorithm::flat ? r.fused_flat_us : r.fused_tree_us;
    r.unfused_us = time(unfused);
    r.floor_us = time([&](rcclx::gpu::stream_t st) { gather(words, gb, st); });
    more(time);
    if (fell_back) r.timing = "events*";
  }

  // ---- attention merge ----

  void attention(const shape& s, rt::timing_mode mode, row& r) {
    const needs x = needs_of(s, n_);
    const std::size_t records = x.records, words = records * sizeof(attn_rec) / sizeof(word);
    r.records = records;
    r.exchange_bytes = records * sizeof(attn_rec);
    fz::combine<attn_rec, merge_op, max_r, algorithm::tree>::check("rcclx-bench-fused attn_merge",
                                                                   world().table<attn_rec>(0), slots_, tile_heads, records);
    const algorithm automatic = fz::combine<attn_rec, merge_op, max_r, algorithm::automatic>::resolve(tile_heads, records, n_);
    r.fused_auto_algo = rcclx::to_string(automatic);
    // Inputs: every rank's partial records.
    std::vector<std::vector<attn_rec>> parts(n_, std::vector<attn_rec>(records));
    for (int q = 0; q < n_; ++q) {
      for (std::size_t i = 0; i < records; ++i) {
        attn_rec& p = parts[q][i];
        const std::uint64_t seed = (static_cast<std::uint64_t>(s.batch) << 40) ^ (static_cast<std::uint64_t>(q) << 32) ^ i;
        const bool empty = i % 13 == 5 || rt::splitmix64(seed ^ 0xE0) % 8 == 0;
        p.lse = empty ? -std::numeric_limits<float>::infinity() : static_cast<float>(12.0 * rt::unit_uniform(seed ^ 0x1E) - 6.0);
        for (int d = 0; d < head_dim; ++d)
          p.o[d] = empty ? T::from_bits(0x7FC0) : T(static_cast<float>(2.0 * rt::unit_uniform(seed * 131 + d) - 1.0));
      }
      rcclx::gpu::copy(part_[q], parts[q].data(), records * sizeof(attn_rec));
    }
    const int fused_blocks = blocks_for<attention_fused<algorithm::flat>>(x.tiles, attn_threads);
    const int tree_blocks = blocks_for<attention_fused<algorithm::tree>>(x.tiles, attn_threads);
    const int merge_blocks = blocks_for<attention_merge>(
        static_cast<int>((records * merge_op::slices + attn_threads - 1) / attn_threads), attn_threads);
    const int gb = gather_blocks(words);
    r.fused_blocks = automatic == algorithm::flat ? fused_blocks : tree_blocks;
    r.gather_blocks = gb;
    const std::size_t o_bytes = attn_o_bytes(records);
    auto set_out = [&](auto& k) {
      for (int q = 0; q < n_; ++q) {
        k.out_o[q] = static_cast<T*>(out_[q]);
        k.out_l[q] = reinterpret_cast<float*>(static_cast<unsigned char*>(out_[q]) + o_bytes);
      }
    };
    attention_fused<algorithm::flat> ff{};
    attention_fused<algorithm::tree> ft{};
    auto set_fused = [&](auto& k) {
      k.tables = world().device_tables<attn_rec>();
      for (int q = 0; q < n_; ++q) k.part[q] = static_cast<const attn_rec*>(part_[q]);
      set_out(k);
      k.slots = slots_;
      k.records = records;
    };
    set_fused(ff);
    set_fused(ft);
    attention_merge m{};
    for (int q = 0; q < n_; ++q) m.gathered[q] = gathered_[q];
    set_out(m);
    m.records = records;
    m.count = words;
    auto fused_flat = [&](rcclx::gpu::stream_t st) { rt::launch_emulated(n_, fused_blocks, attn_threads, ff, st); };
    auto fused_tree = [&](rcclx::gpu::stream_t st) { rt::launch_emulated(n_, tree_blocks, attn_threads, ft, st); };
    auto unfused = [&](rcclx::gpu::stream_t st) {
      gather(words, gb, st);
      rt::launch_emulated(n_, merge_blocks, attn_threads, m, st);
    };
    measure(
        r, mode, automatic, fused_flat, fused_tree, unfused, o_bytes + records * sizeof(float), words, gb,
        [&](const std::vector<unsigned char>& got) { check_attention(parts, got, o_bytes, r); }, [](auto&&) {});
  }

  // Rank 0's O and L against the merge of the partials in float64 (testing::lse_merge_reference).
  void check_attention(const std::vector<std::vector<attn_rec>>& parts, const std::vector<unsigned char>& got,
                       std::size_t o_bytes, row& r) const {
    for (std::size_t i = 0; i < parts[0].size(); ++i) {
      const rt::lse_merge_row ref = rt::lse_merge_reference<T>(
          n_, head_dim, [&](int q) { return parts[q][i].lse; },
          [&](int q, int d) { return static_cast<double>(static_cast<float>(parts[q][i].o[d])); });
      const bool empty = ref.lse == -INFINITY;  // no rank has keys: O = +0 exactly, L = -inf
      float l;
      std::memcpy(&l, got.data() + o_bytes + i * sizeof(float), sizeof(float));
      r.ref_ok = r.ref_ok && (empty ? l == -INFINITY : std::fabs(l - ref.lse) <= ref.lse_tol);
      for (int d = 0; d < head_dim; ++d) {
        T o;
        std::memcpy(&o, got.data() + (i * head_dim + d) * sizeof(T), sizeof(T));
        const double e = std::fabs(static_cast<float>(o) - ref.o[d]);
        if (!empty) r.max_err = std::max(r.max_err, e);
        r.ref_ok = r.ref_ok && (empty ? o.bits == 0 : e <= ref.tol[d]);
      }
    }
  }

  // ---- argmax and top-k ----

  template <class Op>
  void vocab(const shape& s, rt::timing_mode mode, row& r) {
    using rec = typename Op::record;
    const needs x = needs_of(s, n_);
    const std::size_t rows = s.batch, V = s.vocab, words = rows * sizeof(rec) / sizeof(word);
    r.records = rows;
    r.exchange_bytes = rows * sizeof(rec);
    fz::combine<rec, Op, max_r, algorithm::tree>::check("rcclx-bench-fused sampling", world().table<rec>(0), slots_, 1, rows);
    const algorithm automatic = fz::combine<rec, Op, max_r, algorithm::automatic>::resolve(1, rows, n_);
    r.fused_auto_algo = rcclx::to_string(automatic);
    // Logits: multiples of 2^-12 in [-8, 8); row 0 has a -inf, row 1 two NaNs (on different ranks).
    std::vector<float> all(rows * V);
    for (std::size_t i = 0; i < all.size(); ++i)
      all[i] = static_cast<float>(std::floor(rt::unit_uniform((static_cast<std::uint64_t>(rows) << 44) ^ (V << 8) ^ i) * 65536.0) - 32768.0) *
               0x1p-12f;
    if (V > 2) all[V - 2] = -INFINITY;
    if (rows > 1) {
      all[V + V * 5 / 8] = NAN;
      all[V + V / 3] = NAN;
    }
    // Row 2 (checked, not timed): rank 1's shard ascending and above every other logit, so every
    // chunk of the top-k scan beats the threshold of the one before: its slots overflow and it
    // takes its safe mode. Timed: random rows.
    const std::vector<float> random = all;
    if (rows > 2)
      for (std::size_t j = vocab_shard_begin(1, n_, V); j < vocab_shard_begin(2, n_, V); ++j)
        all[2 * V + j] = 8.0f + static_cast<float>(j - vocab_shard_begin(1, n_, V)) * 0x1p-12f;
    const auto upload = [&](const std::vector<float>& logits) {
      for (int q = 0; q < n_; ++q) {
        const std::size_t b = vocab_shard_begin(q, n_, V), len = vocab_shard_begin(q + 1, n_, V) - b;
        std::vector<float> shard(rows * len);
        for (std::size_t i = 0; i < rows; ++i)
          std::copy(logits.begin() + i * V + b, logits.begin() + i * V + b + len, shard.begin() + i * len);
        rcclx::gpu::copy(logits_[q], shard.data(), shard.size() * sizeof(float));
      }
    };
    upload(all);
    const int fused_blocks = blocks_for<vocab_fused<Op, algorithm::flat>>(x.tiles, vocab_threads);
    const int tree_blocks = blocks_for<vocab_fused<Op, algorithm::tree>>(x.tiles, vocab_threads);
    const int local_blocks = blocks_for<vocab_local<Op>>(static_cast<int>(rows), vocab_threads);
    const int merge_blocks = blocks_for<vocab_merge<Op>>(vocab_merge<Op>::blocks(rows), vocab_threads);
    const int gb = gather_blocks(words);
    r.fused_blocks = automatic == algorithm::flat ? fused_blocks : tree_blocks;
    r.gather_blocks = gb;
    vocab_fused<Op, algorithm::flat> ff{};
    vocab_fused<Op, algorithm::tree> ft{};
    auto set_fused = [&](auto& k) {
      k.tables = world().device_tables<rec>();
      for (int q = 0; q < n_; ++q) {
        k.logits[q] = logits_[q];
        k.out[q] = static_cast<rec*>(out_[q]);
      }
      k.slots = slots_;
      k.rows = rows;
      k.vocab = V;
    };
    set_fused(ff);
    set_fused(ft);
    vocab_local<Op> loc{};
    vocab_read rd{};
    vocab_merge<Op> m{};
    for (int q = 0; q < n_; ++q) {
      loc.logits[q] = logits_[q];
      loc.part[q] = static_cast<rec*>(part_[q]);
      rd.logits[q] = logits_[q];
      rd.sink[q] = static_cast<float*>(part_[q]);
      m.gathered[q] = gathered_[q];
      m.out[q] = static_cast<rec*>(out_[q]);
    }
    loc.rows = m.rows = rd.rows = rows;
    loc.vocab = rd.vocab = V;
    m.count = words;
    auto fused_flat = [&](rcclx::gpu::stream_t st) { rt::launch_emulated(n_, fused_blocks, vocab_threads, ff, st); };
    auto fused_tree = [&](rcclx::gpu::stream_t st) { rt::launch_emulated(n_, tree_blocks, vocab_threads, ft, st); };
    auto local = [&](rcclx::gpu::stream_t st) { rt::launch_emulated(n_, local_blocks, vocab_threads, loc, st); };
    auto unfused = [&](rcclx::gpu::stream_t st) {
      local(st);
      gather(words, gb, st);
      rt::launch_emulated(n_, merge_blocks, vocab_threads, m, st);
    };
    const int read_blocks = blocks_for<vocab_read>(static_cast<int>(rows), vocab_threads);
    measure(
        r, mode, automatic, fused_flat, fused_tree, unfused, rows * sizeof(rec), words, gb,
        [&](const std::vector<unsigned char>& got) {
          check_vocab<Op>(all, rows, V, got, r);
          upload(random);  // timed: random rows
        },
        [&](auto&& time) {
          r.local_us = time(local);
          r.read_us = time([&](rcclx::gpu::stream_t st) { rt::launch_emulated(n_, read_blocks, vocab_threads, rd, st); });
        });
  }

  // Rank 0's records against the K best entries of each whole row (exact: no arithmetic).
  template <class Op>
  static void check_vocab(const std::vector<float>& all, std::size_t rows, std::size_t V,
                          const std::vector<unsigned char>& got, row& r) {
    using rec = typename Op::record;
    constexpr bool top = !std::is_same<Op, fz::argmax>::value;
    for (std::size_t i = 0; i < rows; ++i) {
      const auto want = rt::topk_reference(all.data() + i * V, V, 0, top ? top_k : 1);
      rec g;
      std::memcpy(&g, got.data() + i * sizeof(rec), sizeof(rec));
      for (std::size_t j = 0; j < want.size(); ++j) {
        if constexpr (top) r.ref_ok = r.ref_ok && rt::same_entry(g.value[j], g.index[j], want[j]);
        else r.ref_ok = r.ref_ok && rt::same_entry(g.value, g.index, want[j]);
      }
    }
  }

  int n_;
  rt::timing_options timing_;
  fz::tile_slots slots_;
  std::vector<void*> part_, out_;
  std::vector<word*> gathered_;
  std::vector<float*> logits_;
};

}  // namespace

std::vector<row> run(int num_ranks, const rt::timing_options& t, const std::vector<shape>& shapes,
                     void (*print)(const row&)) {
  std::vector<row> rows;
  if (shapes.empty()) return rows;
  capacity c;
  for (const shape& sh : shapes) {
    const needs x = needs_of(sh, num_ranks);
    c.part_bytes = std::max(c.part_bytes, x.records * x.rec_bytes);
    // The symmetric buffer: the combine's workspace (tree: with results), and the AllGather's copy of the input.
    c.buffer_bytes = std::max({c.buffer_bytes, x.workspace, x.records * x.rec_bytes});
    c.logits = std::max(c.logits, x.logits);
    c.out_bytes = std::max(c.out_bytes, x.out_bytes);
    c.tiles = std::max(c.tiles, x.tiles);
  }
  runner r(num_ranks, t, c);
  for (const shape& sh : shapes) {
    rows.push_back(r.run(sh));
    if (print) print(rows.back());
  }
  return rows;
}

bool correct(const row& r) { return r.error.empty() && r.identical && r.ref_ok; }

void print_header() {
  std::printf("%-10s %-12s %6s %-5s %4s %5s %10s %10s %10s %10s %10s %10s %8s %8s %8s %9s %s\n", "combine", "shape",
              "bytes", "auto", "blk", "g_blk", "fused_flat", "fused_tree", "fused_auto", "unfused", "floor", "local",
              "read", "speedup", "x_best", "max_err", "ok");
}

void print_row(const row& r) {
  if (!r.error.empty()) {
    std::printf("%-10s %-12s ERROR: %s\n", r.kind.c_str(), r.shape.c_str(), r.error.c_str());
    std::fflush(stdout);
    return;
  }
  char local[32] = "-", read[32] = "-";
  if (r.kind != "attn_merge") {
    std::snprintf(local, sizeof(local), "%.2f", r.local_us);
    std::snprintf(read, sizeof(read), "%.2f", r.read_us);
  }
  std::printf("%-10s %-12s %6zu %-5s %4d %5d %10.2f %10.2f %10.2f %10.2f %10.2f %10s %8s %7.2fx %7.2fx %9.3g %s\n",
              r.kind.c_str(), r.shape.c_str(), r.exchange_bytes, r.fused_auto_algo.c_str(), r.fused_blocks,
              r.gather_blocks, r.fused_flat_us, r.fused_tree_us, r.fused_auto_us, r.unfused_us, r.floor_us, local,
              read, r.speedup, r.speedup_best, r.max_err, correct(r) ? "ok" : (!r.identical ? "DIFF" : "REF"));
  std::fflush(stdout);
}

std::vector<bench::target> evaluate(const std::vector<row>& rows) {
  bench::target attn{"fused_attention_merge",
                     "fused attention merge (fused::combine + lse_merge) >= 1.25x faster than the AllGather of the "
                     "partials + a merge kernel, every decode row (batch <= 64)"};
  bench::target sample{"fused_argmax_topk",
                       "fused argmax / top-k (local scan + fused::combine) >= 1.25x faster than the local scan + "
                       "AllGather + a merge kernel, every decode row (batch <= 64)"};
  for (const row& r : rows)
    if (r.error.empty() && r.batch <= 64) (r.kind == "attn_merge" ? attn : sample).see(r.speedup);
  for (bench::target* t : {&attn, &sample}) t->close(t->worst >= 1.25, "worst speedup %.2fx", 1.0, "not measured");
  return {attn, sample};
}

namespace {
bench::fields fields_of(const row& r) {
  return {{"kind", r.kind}, {"shape", r.shape}, {"batch", r.batch}, {"vocab", r.vocab}, {"records_per_rank", r.records},
          {"exchange_bytes_per_rank", r.exchange_bytes}, {"fused_auto_algorithm", r.fused_auto_algo},
          {"fused_blocks_per_rank", r.fused_blocks}, {"allgather_blocks_per_rank", r.gather_blocks},
          {"timing", r.timing}, {"fused_flat_us", r.fused_flat_us}, {"fused_tree_us", r.fused_tree_us},
          {"fused_auto_us", r.fused_auto_us}, {"unfused_us", r.unfused_us}, {"floor_us", r.floor_us},
          {"local_us", r.local_us}, {"read_us", r.read_us}, {"speedup", r.speedup},
          {"speedup_best_fused", r.speedup_best}, {"max_abs_error", r.max_err}, {"reference_ok", r.ref_ok},
          {"fused_equals_unfused", r.identical}, {"error", r.error}};
}
}  // namespace

void write_json_members(std::ostream& f, const std::vector<row>& rows) {
  f << "  \"combine_definitions\": {\n"
       "    \"fused\": \"one kernel whose epilogue is fused::combine: attn_merge copies each rank's partial "
       "lse_merge<bf16, 128> records into the combine's input and folds them a thread per 16-byte slice "
       "(reduce_slices); argmax / topk scan each rank's vocabulary shard (a block per row) and combine a thread "
       "per record\",\n"
       "    \"unfused\": \"attn_merge: dda::flat_allgather of the partial records + a merge kernel; argmax / topk: "
       "the same scan as a kernel + dda::flat_allgather of the partial records + a merge kernel (rank order, the "
       "combine's arithmetic: bit-identical to fused)\",\n"
       "    \"floor_us\": \"the AllGather of the partial records alone (the exchange of the partial results)\",\n"
       "    \"local_us\": \"argmax / topk: the scan kernel alone (part of both fused and unfused)\",\n"
       "    \"read_us\": \"argmax / topk: the logits read once by the scan's blocks and loads, nothing kept (the "
       "scan's memory floor)\",\n"
       "    \"exchange_bytes_per_rank\": \"bytes of partial records each rank contributes\",\n"
       "    \"speedup\": \"unfused_us / fused_auto_us\",\n"
       "    \"speedup_best_fused\": \"unfused_us / min(fused_flat_us, fused_tree_us)\"\n"
       "  },\n  \"combine_rows\": [\n";
  bench::write_json_rows(f, rows, fields_of);
  f << "  ]";
}

void write_csv(const std::string& path, const std::vector<row>& rows) {
  bench::write_csv(path,
                   "kind,shape,batch,vocab,records_per_rank,exchange_bytes_per_rank,fused_auto_algorithm,"
                   "fused_blocks=fused_blocks_per_rank,allgather_blocks=allgather_blocks_per_rank,timing,fused_flat_us,"
                   "fused_tree_us,fused_auto_us,unfused_us,floor_us,local_us,read_us,speedup,speedup_best_fused,"
                   "max_abs_error,ok,\"error\"",
                   rows, [](const row& r) { return fields_of(r) + bench::fields{{"ok", correct(r) ? "ok" : "FAIL"}}; });
}

}  // namespace combine_bench
