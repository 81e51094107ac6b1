// fused::combine with the built-in combines, on emulated ranks: a split-KV decode attention whose
// partial outputs are merged across ranks (lse_merge) against float64 attention over the whole KV
// cache, with ranks and whole heads without keys (-inf log-sum-exp, a NaN partial output that must
// not be read); argmax, top-k and softmax statistics over a vocabulary split unevenly over the
// ranks, against a float64 scan of the whole vocabulary (ties, NaN, -inf, shards smaller than K).
// Ranks 2..8, tiles that do not divide the records, ranks bit-identical, flat == tree ==
// automatic, reduce_slices == reduce (lse_merge, a thread per slice), reduce_entries == reduce
// (topk, a thread per entry; place_among against the merge with ties across ranks); a rank that
// never arrives;
// the host-side checks.
#include <rcclx/fused/combine.hpp>
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../support/bits.hpp"
#include "../support/catch.hpp"
#include "reference.hpp"

namespace {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using rcclx::algorithm;
constexpr int max_r = 8;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
// The host backend's blocks are one thread, unless every thread is emulated (RCCLX_EMULATE_THREADS,
// tests/emulate): then the GPU's block size.
constexpr bool one_thread_blocks = on_host && !rcclx::emulate_threads;
constexpr int threads = one_thread_blocks ? 1 : 64;
const bool quick = rcclx_test::quick();

using rcclx_test::mix;
float uniform(std::uint64_t seed) {  // in [-1, 1)
  return static_cast<float>(mix(seed) >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

// Device memory owned by a test.
struct arena {
  std::vector<void*> owned;
  ~arena() {
    for (void* p : owned) rcclx::gpu::device_free(p);
  }
  template <class T>
  T* alloc(std::size_t count) {
    owned.push_back(rcclx::gpu::device_malloc(count * sizeof(T) + 16));
    return static_cast<T*>(owned.back());
  }
  template <class T>
  T* upload(const std::vector<T>& v) {
    T* p = alloc<T>(v.size());
    rcclx::gpu::copy(p, v.data(), v.size() * sizeof(T));
    return p;
  }
};
template <class T>
std::vector<T> download(const T* p, std::size_t count) {
  std::vector<T> v(count);
  rcclx::gpu::copy(v.data(), p, count * sizeof(T));
  return v;
}
template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}


// ---- attention ------------------------------------------------------------------------------------
// Record i = one (token, head): query q[i], keys and values k[i][s], v[i][s] for s < keys[i]; rank r
// holds keys [split[i][r], split[i][r + 1]) and computes its partial attention over them in FP32
// (the user's kernel), then the ranks merge: a thread per record (reduce) or per 16-byte slice of
// a record (Sliced: reduce_slices).
template <class T, int D, algorithm Algo, bool Sliced = false>
struct attention_kernel {
  using merge = fz::lse_merge<T, D>;
  using rec = typename merge::record;
  const rcclx::core::peer_table<rec, max_r>* tables;
  const float* q;      // [records][D]
  const float* k;      // [records][max_keys][D]
  const float* v;      // [records][max_keys][D]
  const int* split;    // [records][n + 1]
  T* out[max_r];       // [records][D]
  float* lse[max_r];   // [records]
  fz::tile_slots slots;
  std::size_t records, tile_records, max_keys;
  float scale;

  RCCLX_HOST_DEVICE void partial(int rank, int n, std::size_t i, rec& r) const {
    const int s0 = split[i * (n + 1) + rank], s1 = split[i * (n + 1) + rank + 1];
    if (s0 == s1) {  // no keys here: what a plain kernel leaves (0 / 0), never to be read
      for (int d = 0; d < D; ++d) r.o[d] = T(__builtin_nanf(""));
      r.lse = -__builtin_huge_valf();
      return;
    }
    const float* qi = q + i * D;
    auto score = [&](int s) {
      const float* ks = k + (i * max_keys + static_cast<std::size_t>(s)) * D;
      float x = 0;
      for (int d = 0; d < D; ++d) x += qi[d] * ks[d];
      return x * scale;
    };
    float m = score(s0);
    for (int s = s0 + 1; s < s1; ++s) m = fmaxf(m, score(s));
    float o[D] = {}, sum = 0;
    for (int s = s0; s < s1; ++s) {
      const float p = expf(score(s) - m);
      sum += p;
      const float* vs = v + (i * max_keys + static_cast<std::size_t>(s)) * D;
      for (int d = 0; d < D; ++d) o[d] += p * vs[d];
    }
    for (int d = 0; d < D; ++d) r.o[d] = T(o[d] / sum);
    r.lse = m + logf(sum);
  }

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    fz::combine<rec, merge, max_r, Algo> c(tables[ix.rank], slots, tile_records, records);
    for (int t = ix.block; t < c.num_tiles(); t += ix.num_blocks) {
      rec* in = c.input(t);
      for (std::size_t j = static_cast<std::size_t>(g.thread_rank()); j < c.records_in(t); j += static_cast<std::size_t>(g.size()))
        partial(ix.rank, ix.num_ranks, static_cast<std::size_t>(t) * tile_records + j, in[j]);
      c.publish(g, t);
    }
    T* o = out[ix.rank];
    float* l = lse[ix.rank];
    bool ok = true;
    for (int t = ix.block; t < c.num_tiles() && ok; t += ix.num_blocks) {
      if constexpr (Sliced) {
        ok = c.reduce_slices(g, t, [&](std::size_t i, int j, const typename merge::slice& s) {
          for (int d = 0; d < merge::slice_elems; ++d) o[i * D + j * merge::slice_elems + d] = s.o[d];
          if (j == 0) l[i] = s.lse;
        });
      } else {
        ok = c.reduce(g, t, [&](std::size_t i, const rec& r) {
          for (int d = 0; d < D; ++d) o[i * D + d] = r.o[d];
          l[i] = r.lse;
        });
      }
    }
    c.finish(g, ix.num_blocks);
  }
};

struct attention_case {
  int n;
  std::size_t records, max_keys, tile_records;
  std::vector<float> q, k, v;
  std::vector<int> split;    // [records][n + 1]
  std::vector<int> keys;     // [records]
};

// Records with 0 keys, keys all on one rank, ranks without keys, and uneven splits.
attention_case make_attention(int n, std::size_t records, std::size_t max_keys, std::size_t tile_records, int d,
                              std::uint64_t seed) {
  attention_case a{n, records, max_keys, tile_records, {}, {}, {}, {}, {}};
  a.q.resize(records * d);
  a.k.resize(records * max_keys * d);
  a.v.resize(records * max_keys * d);
  for (std::size_t i = 0; i < a.q.size(); ++i) a.q[i] = 2.0f * uniform(seed ^ (i << 8) ^ 1);
  for (std::size_t i = 0; i < a.k.size(); ++i) a.k[i] = 2.0f * uniform(seed ^ (i << 8) ^ 2);
  for (std::size_t i = 0; i < a.v.size(); ++i) a.v[i] = uniform(seed ^ (i << 8) ^ 3);
  for (std::size_t i = 0; i < records; ++i) {
    const std::uint64_t h = mix(seed ^ (i << 16) ^ 4);
    int keys = static_cast<int>(h % (max_keys + 1));
    if (i == 1) keys = 0;  // a head nobody has keys for
    a.keys.push_back(keys);
    std::vector<int> cuts(n + 1);
    cuts[0] = 0;
    cuts[n] = keys;
    const int mode = static_cast<int>((h >> 20) % 3);
    for (int r = 1; r < n; ++r) {
      if (mode == 0) cuts[r] = 0;                                  // all keys on the last rank
      else if (mode == 1) cuts[r] = static_cast<int>((mix(h + r) % (keys + 1)));  // random cuts
      else cuts[r] = keys * r / n;                                  // even (small ones: empty ranks)
    }
    std::sort(cuts.begin(), cuts.end());
    a.split.insert(a.split.end(), cuts.begin(), cuts.end());
  }
  return a;
}

template <class T, int D, algorithm Algo, bool Sliced = false>
std::pair<std::vector<std::vector<T>>, std::vector<std::vector<float>>> run_attention(const attention_case& a, int blocks,
                                                                                      std::uint64_t timeout_ns = rcclx::core::default_timeout_ns,
                                                                                      int absent = -1) {
  using kernel = attention_kernel<T, D, Algo, Sliced>;
  using c_t = fz::combine<typename kernel::rec, typename kernel::merge, max_r, algorithm::tree>;
  const fz::tile_slots slots{3, 64};
  rt::emulated_world<max_r> world(a.n, c_t::workspace_bytes(a.tile_records, a.records), slots.end(), timeout_ns);
  c_t::check("attention", world.table<typename kernel::rec>(0), slots, a.tile_records, a.records);
  arena mem;
  kernel k{};
  k.tables = world.device_tables<typename kernel::rec>();
  k.q = mem.upload(a.q);
  k.k = mem.upload(a.k);
  k.v = mem.upload(a.v);
  k.split = mem.upload(a.split);
  for (int r = 0; r < a.n; ++r) {
    k.out[r] = mem.alloc<T>(a.records * D);
    k.lse[r] = mem.alloc<float>(a.records);
  }
  k.slots = slots;
  k.records = a.records;
  k.tile_records = a.tile_records;
  k.max_keys = a.max_keys;
  k.scale = 1.0f / std::sqrt(static_cast<float>(D));
  if (absent >= 0) {
    rt::launch_emulated(a.n, blocks, threads, rt::without_rank(k, absent));
    rcclx::gpu::device_synchronize();
    const auto errors = world.errors();
    // Every other rank times out, waiting for the absent rank or (tree) for an owner that itself
    // waited for it; the absent rank is named.
    REQUIRE(errors[absent].code == 0);
    int naming = 0;
    for (int r = 0; r < a.n; ++r) {
      if (r == absent) continue;
      CAPTURE(r);
      REQUIRE(errors[r].code == static_cast<std::uint32_t>(rcclx::errc::timeout));
      REQUIRE(errors[r].kind == static_cast<std::uint32_t>(rcclx::core::barrier_kind::tile));
      const int m = static_cast<int>(errors[r].missing_rank);
      if (Algo == algorithm::flat) REQUIRE(m == absent);
      REQUIRE((m == absent || errors[m].code == static_cast<std::uint32_t>(rcclx::errc::timeout)));
      naming += m == absent;
    }
    REQUIRE(naming > 0);
    try {
      world.throw_if_error();
      FAIL("no error");
    } catch (const rcclx::error& e) {
      REQUIRE(e.code() == rcclx::errc::timeout);
      REQUIRE(std::string(e.what()).find("waiting for rank ") != std::string::npos);
    }
    return {};
  }
  rt::launch_emulated(a.n, blocks, threads, k);
  rcclx::gpu::device_synchronize();
  world.throw_if_error();
  std::pair<std::vector<std::vector<T>>, std::vector<std::vector<float>>> got;
  for (int r = 0; r < a.n; ++r) {
    got.first.push_back(download(k.out[r], a.records * D));
    got.second.push_back(download(k.lse[r], a.records));
  }
  return got;
}

// float64 attention over each record's whole KV cache, and the FP32 / rounding bounds.
template <class T, int D>
void check_attention(const attention_case& a, const std::vector<T>& o, const std::vector<float>& l) {
  const double u = fused_ref::unit<T>(), u32 = fused_ref::u32, scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < a.records; ++i) {
    const int keys = a.keys[i];
    if (keys == 0) {  // nobody has keys: O = 0, L = -inf, no NaN
      for (int d = 0; d < D; ++d)
        if (fused_ref::exact(o[i * D + d]) != 0.0 && bad++ == 0) first = "record " + std::to_string(i) + ": O != 0";
      if (!(l[i] == -std::numeric_limits<float>::infinity()) && bad++ == 0)
        first = "record " + std::to_string(i) + ": L = " + std::to_string(l[i]);
      continue;
    }
    std::vector<double> s(keys);
    double m = -INFINITY, se = 0;  // se: bound on a score's FP32 error
    for (int j = 0; j < keys; ++j) {
      double x = 0, xa = 0;
      for (int d = 0; d < D; ++d) {
        const double p = static_cast<double>(a.q[i * D + d]) * a.k[(i * a.max_keys + j) * D + d];
        x += p;
        xa += std::fabs(p);
      }
      s[j] = x * scale;
      se = std::max(se, (D + 2) * u32 * xa * scale);
      m = std::max(m, s[j]);
    }
    double sum = 0;
    for (int j = 0; j < keys; ++j) sum += std::exp(s[j] - m);
    const double lref = m + std::log(sum);
    // Score errors change the weights by a factor exp(+-2 se); the partial sums and the merge add
    // FP32 errors of the key count and the rank count; O_r and O are rounded to T.
    const double ew = 2 * se + (keys + 2 * a.n + 16) * u32 * 4;
    const double tol_l = 2 * (ew + 4 * u32 * (std::fabs(lref) + 1));
    if (!(std::fabs(l[i] - lref) <= tol_l) && bad++ == 0)
      first = "record " + std::to_string(i) + ": L = " + std::to_string(l[i]) + ", expected " + std::to_string(lref);
    for (int d = 0; d < D; ++d) {
      double od = 0, oa = 0;
      for (int j = 0; j < keys; ++j) {
        const double w = std::exp(s[j] - m) / sum, x = a.v[(i * a.max_keys + j) * D + d];
        od += w * x;
        oa += w * std::fabs(x);
      }
      const double got = fused_ref::exact(o[i * D + d]);
      const double tol = 2 * (2 * ew * oa + u * oa + u * std::fabs(od)) + fused_ref::tiny<T>();
      if (!(std::fabs(got - od) <= tol) && bad++ == 0)
        first = "record " + std::to_string(i) + " d " + std::to_string(d) + ": O = " + std::to_string(got) +
                ", expected " + std::to_string(od) + " +- " + std::to_string(tol);
    }
  }
  CAPTURE(first);
  REQUIRE(bad == 0);
}

template <class T, int D>
void attention_cases(int n) {
  // Records not a multiple of the tile; a tile of one record; one tile for all.
  const std::size_t records = 29, max_keys = D == 256 ? 24 : 41;
  for (const std::size_t tile : {std::size_t{4}, std::size_t{1}, std::size_t{29}}) {
    const int blocks = on_host ? 3 : 5;
    CAPTURE(n, D, tile);
    const attention_case a = make_attention(n, records, max_keys, tile, D, 0xA77E + n * 131 + D + tile);
    const auto flat = run_attention<T, D, algorithm::flat>(a, blocks);
    check_attention<T, D>(a, flat.first[0], flat.second[0]);
    for (int r = 1; r < n; ++r) {
      CAPTURE(r);
      REQUIRE(same_bytes(flat.first[r], flat.first[0]));
      REQUIRE(same_bytes(flat.second[r], flat.second[0]));
    }
    const auto tree = run_attention<T, D, algorithm::tree>(a, blocks);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      REQUIRE(same_bytes(tree.first[r], flat.first[0]));
      REQUIRE(same_bytes(tree.second[r], flat.second[0]));
    }
    const auto one_block = run_attention<T, D, algorithm::automatic>(a, 1);  // another grid: the same bits
    REQUIRE(same_bytes(one_block.first[n - 1], flat.first[0]));
    REQUIRE(same_bytes(one_block.second[n - 1], flat.second[0]));
    // A thread per slice: the same bits as a thread per record, flat and tree, every rank.
    const auto sliced_flat = run_attention<T, D, algorithm::flat, true>(a, blocks);
    const auto sliced_tree = run_attention<T, D, algorithm::tree, true>(a, blocks);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      REQUIRE(same_bytes(sliced_flat.first[r], flat.first[0]));
      REQUIRE(same_bytes(sliced_flat.second[r], flat.second[0]));
      REQUIRE(same_bytes(sliced_tree.first[r], flat.first[0]));
      REQUIRE(same_bytes(sliced_tree.second[r], flat.second[0]));
    }
  }
}

// ---- sampling -------------------------------------------------------------------------------------
// Rank r's shard of the vocabulary: [begin(r), begin(r + 1)), uneven (quadratic cuts: the first
// ranks' shards are small, some smaller than K).
RCCLX_HOST_DEVICE inline std::size_t shard_begin(int r, int n, std::size_t vocab) {
  return vocab * static_cast<std::size_t>(r) * static_cast<std::size_t>(r) / (static_cast<std::size_t>(n) * n);
}

template <class Op>
struct scan;  // a rank's own record over its shard of one row
template <>
struct scan<fz::argmax> {
  RCCLX_HOST_DEVICE static fz::argmax::record of(const float* x, std::size_t b, std::size_t e) {
    fz::argmax::record r = fz::argmax::empty();
    for (std::size_t j = b; j < e; ++j) fz::argmax::push(r, x[j], static_cast<std::uint32_t>(j));
    return r;
  }
};
template <int K>
struct scan<fz::topk<K>> {
  RCCLX_HOST_DEVICE static typename fz::topk<K>::record of(const float* x, std::size_t b, std::size_t e) {
    auto r = fz::topk<K>::empty();
    for (std::size_t j = b; j < e; ++j) fz::topk<K>::push(r, x[j], static_cast<std::uint32_t>(j));
    return r;
  }
};
template <>
struct scan<fz::softmax_stats> {
  RCCLX_HOST_DEVICE static fz::softmax_stats::record of(const float* x, std::size_t b, std::size_t e) {
    fz::softmax_stats::record r = fz::softmax_stats::empty();
    for (std::size_t j = b; j < e; ++j) fz::softmax_stats::push(r, x[j]);
    return r;
  }
};

// Entries: 0 reduce; the selection combine's reduce_entries (a thread per entry of every rank's
// list) 1 without storage, 2 with the lists staged in the block's shared memory.
template <class Op, algorithm Algo, int Entries = 0>
struct sampling_kernel {
  using rec = typename Op::record;
  const rcclx::core::peer_table<rec, max_r>* tables;
  const float* logits;  // [rows][vocab]
  rec* out[max_r];      // [rows]
  fz::tile_slots slots;
  std::size_t rows, vocab, tile_records;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    fz::combine<rec, Op, max_r, Algo> c(tables[ix.rank], slots, tile_records, rows);
    const std::size_t b = shard_begin(ix.rank, ix.num_ranks, vocab), e = shard_begin(ix.rank + 1, ix.num_ranks, vocab);
    for (int t = ix.block; t < c.num_tiles(); t += ix.num_blocks) {
      rec* in = c.input(t);
      for (std::size_t j = static_cast<std::size_t>(g.thread_rank()); j < c.records_in(t); j += static_cast<std::size_t>(g.size()))
        in[j] = scan<Op>::of(logits + (static_cast<std::size_t>(t) * tile_records + j) * vocab, b, e);
      c.publish(g, t);
    }
    rec* o = out[ix.rank];
    bool ok = true;
    for (int t = ix.block; t < c.num_tiles() && ok; t += ix.num_blocks) {
      if constexpr (Entries != 0) {
        const auto sink = [&](std::size_t i, int place, const typename Op::entry& e) {
          o[i].value[place] = e.value;
          o[i].index[place] = e.index;
        };
        if constexpr (Entries == 1) ok = c.reduce_entries(g, t, sink);
        else ok = c.reduce_entries(g, t, rcclx::gpu::block_shared<fz::entries_storage<Op, max_r>, struct entries_tag>(), sink);
      } else {
        ok = c.reduce(g, t, [&](std::size_t i, const rec& r) { o[i] = r; });
      }
    }
    c.finish(g, ix.num_blocks);
  }
};

// Logits with many ties (multiples of 1/8 in [-2, 2)), a -inf, and NaNs in row 2 (`nans`).
std::vector<float> make_logits(std::size_t rows, std::size_t vocab, std::uint64_t seed, bool nans) {
  std::vector<float> x(rows * vocab);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::floor(uniform(seed ^ (i << 8)) * 16.0f) / 8.0f;
  if (vocab > 3) x[vocab - 2] = -INFINITY;
  if (nans && rows > 2) {
    x[2 * vocab + vocab - 1] = NAN;
    x[2 * vocab + vocab * 2 / 3] = NAN;
  }
  return x;
}

template <class Op, algorithm Algo, int Entries = 0>
std::vector<std::vector<typename Op::record>> run_sampling(int n, const std::vector<float>& logits, std::size_t rows,
                                                           std::size_t vocab, std::size_t tile, int blocks) {
  using kernel = sampling_kernel<Op, Algo, Entries>;
  using rec = typename Op::record;
  using c_t = fz::combine<rec, Op, max_r, algorithm::tree>;
  const fz::tile_slots slots{0, 40};
  rt::emulated_world<max_r> world(n, c_t::workspace_bytes(tile, rows), slots.end());
  c_t::check("sampling", world.table<rec>(0), slots, tile, rows);
  arena mem;
  kernel k{};
  k.tables = world.device_tables<rec>();
  k.logits = mem.upload(logits);
  for (int r = 0; r < n; ++r) k.out[r] = mem.alloc<rec>(rows);
  k.slots = slots;
  k.rows = rows;
  k.vocab = vocab;
  k.tile_records = tile;
  rt::launch_emulated(n, blocks, threads, k);
  rcclx::gpu::device_synchronize();
  world.throw_if_error();
  std::vector<std::vector<rec>> got;
  for (int r = 0; r < n; ++r) got.push_back(download(k.out[r], rows));
  return got;
}

// The reference order of (value, index): NaN first, then larger values, then lower indices.
struct ref_entry {
  double value;
  std::uint32_t index;
};
bool ref_before(const ref_entry& a, const ref_entry& b) {
  if (std::isnan(a.value) || std::isnan(b.value)) {
    if (std::isnan(a.value) && std::isnan(b.value)) return a.index < b.index;
    return std::isnan(a.value);
  }
  if (a.value != b.value) return a.value > b.value;
  return a.index < b.index;
}
// The k best of a whole row, padded with (-inf, 0xFFFFFFFF).
std::vector<ref_entry> ref_topk(const float* x, std::size_t vocab, int k) {
  std::vector<ref_entry> all;
  for (std::size_t j = 0; j < vocab; ++j) all.push_back({x[j], static_cast<std::uint32_t>(j)});
  std::sort(all.begin(), all.end(), ref_before);
  all.resize(std::min<std::size_t>(all.size(), k));
  while (all.size() < static_cast<std::size_t>(k)) all.push_back({-INFINITY, 0xFFFFFFFFu});
  return all;
}
bool same_value(float got, double want) { return std::isnan(want) ? std::isnan(got) : static_cast<double>(got) == want; }

template <class Rec>
void require_identical(const std::vector<std::vector<Rec>>& got, const std::vector<Rec>& want) {
  for (std::size_t r = 0; r < got.size(); ++r) {
    CAPTURE(r);
    REQUIRE(same_bytes(got[r], want));
  }
}

template <class Op>
void require_algorithms_agree(int n, const std::vector<float>& x, std::size_t rows, std::size_t vocab, std::size_t tile,
                              const std::vector<std::vector<typename Op::record>>& flat) {
  for (int r = 1; r < n; ++r) REQUIRE(same_bytes(flat[r], flat[0]));
  require_identical(run_sampling<Op, algorithm::tree>(n, x, rows, vocab, tile, on_host ? 3 : 4), flat[0]);
  require_identical(run_sampling<Op, algorithm::automatic>(n, x, rows, vocab, tile, 1), flat[0]);
}

template <int K>
void topk_case(int n, const std::vector<float>& x, std::size_t rows, std::size_t vocab, std::size_t tile) {
  CAPTURE(K);
  const auto flat = run_sampling<fz::topk<K>, algorithm::flat>(n, x, rows, vocab, tile, on_host ? 3 : 4);
  for (std::size_t i = 0; i < rows; ++i) {
    const auto want = ref_topk(x.data() + i * vocab, vocab, K);
    for (int j = 0; j < K; ++j) {
      CAPTURE(i, j, want[j].value, want[j].index, flat[0][i].value[j], flat[0][i].index[j]);
      REQUIRE(same_value(flat[0][i].value[j], want[j].value));
      REQUIRE(flat[0][i].index[j] == want[j].index);
    }
  }
  require_algorithms_agree<fz::topk<K>>(n, x, rows, vocab, tile, flat);
  // reduce_entries (a thread per entry): the same bits as reduce, flat and tree, other grids.
  const int blocks = on_host ? 2 : 3;
  for (const int mode : {1, 2}) {
    CAPTURE(mode);
    const auto run = [&](auto algo) {
      constexpr algorithm a = decltype(algo)::value;
      return mode == 1 ? run_sampling<fz::topk<K>, a, 1>(n, x, rows, vocab, tile, blocks)
                       : run_sampling<fz::topk<K>, a, 2>(n, x, rows, vocab, tile, blocks);
    };
    require_identical(run(std::integral_constant<algorithm, algorithm::flat>{}), flat[0]);
    require_identical(run(std::integral_constant<algorithm, algorithm::tree>{}), flat[0]);
  }
}

// What the kernel's combine resolves automatic to, written by rank 0's block 0.
template <class Record, class Op>
struct resolved_of {
  const rcclx::core::peer_table<Record, max_r>* tables;
  fz::tile_slots slots;
  std::size_t tile, records;
  int* out;
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const fz::combine<Record, Op, max_r, algorithm::automatic> c(tables[ix.rank], slots, tile, records);
    if (ix.rank == 0 && ix.block == 0 && g.thread_rank() == 0) *out = static_cast<int>(c.resolved());
  }
};

}  // namespace

TEST_CASE("fused combine: resolve() is, before launch, the algorithm the kernel's combine resolves to",
          "[fused][combine]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using rec = fz::argmax::record;
  using c_t = fz::combine<rec, fz::argmax, max_r, algorithm::automatic>;
  REQUIRE(fz::combine<rec, fz::argmax, max_r, algorithm::tree>::resolve(1, 1, 8) == algorithm::tree);
  REQUIRE(fz::combine<rec, fz::argmax, max_r, algorithm::flat>::resolve(1, 1 << 20, 8) == algorithm::flat);
  rt::emulated_world<max_r> world(4, 16, 8);
  int* out = static_cast<int*>(rcclx::gpu::device_malloc(sizeof(int)));
  bool flat_seen = false, tree_seen = false;
  for (const std::size_t records : {std::size_t{1}, std::size_t{64}, std::size_t{4096}, std::size_t{1} << 16}) {
    CAPTURE(records);
    const std::size_t tile = records / 4 + 1;  // a few tiles: within the 8 slots
    const algorithm want = c_t::resolve(tile, records, 4);
    (want == algorithm::flat ? flat_seen : tree_seen) = true;
    rt::launch_emulated(4, 1, threads,
                        resolved_of<rec, fz::argmax>{world.device_tables<rec>(), {0, 8}, tile, records, out});
    rcclx::gpu::device_synchronize();
    int got = -1;
    rcclx::gpu::copy(&got, out, sizeof(int));
    REQUIRE(got == static_cast<int>(want));
  }
  rcclx::gpu::device_free(out);
  CHECK(flat_seen);
  CHECK((tree_seen || on_host));  // the host backend's table may pick flat for every size
}


TEMPLATE_TEST_CASE("fused combine: lse_merge of split-KV attention against float64 attention over the whole cache",
                   "[fused][combine]", float, rcclx::bf16, rcclx::fp16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = quick || rcclx_test::tsan ? GENERATE(2, 5) : GENERATE(2, 3, 4, 5, 6, 7, 8);
  attention_cases<T, 64>(n);
  attention_cases<T, 128>(n);
  attention_cases<T, 256>(n);
}

TEST_CASE("fused combine: lse_merge of -inf log-sum-exps (ranks and heads without keys)", "[fused][combine]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using merge = fz::lse_merge<float, 8>;
  const merge m{};
  merge::record empty{}, a{}, b{};
  for (int d = 0; d < 8; ++d) {
    empty.o[d] = NAN;  // never read
    a.o[d] = static_cast<float>(d);
    b.o[d] = -1.0f;
  }
  empty.lse = -INFINITY;
  a.lse = 0.5f;
  b.lse = 0.5f + std::log(3.0f);  // weights 1/4 and 3/4
  for (int first_empty = 0; first_empty < 2; ++first_empty) {
    auto acc = m.init(first_empty ? empty : a);
    if (first_empty) m.fold(acc, a);
    m.fold(acc, empty);
    m.fold(acc, b);
    m.fold(acc, empty);
    const merge::record r = m.finalize(acc);
    for (int d = 0; d < 8; ++d) REQUIRE(std::fabs(r.o[d] - (0.25 * d - 0.75)) <= 1e-6);
    REQUIRE(std::fabs(r.lse - (0.5 + std::log(4.0))) <= 1e-6);
  }
  auto acc = m.init(empty);
  m.fold(acc, empty);
  const merge::record r = m.finalize(acc);
  for (int d = 0; d < 8; ++d) REQUIRE(r.o[d] == 0.0f);
  REQUIRE(r.lse == -INFINITY);
  // Slice by slice (2 slices of 4 floats): the same bits as the whole record, and load/store.
  static_assert(merge::slices == 2 && merge::slice_elems == 4, "two slices of 4 floats");
  const merge::record order[] = {empty, a, empty, b, empty};
  for (int first = 0; first < 3; ++first) {
    auto whole = m.init(order[first]);
    for (int k = first + 1; k < 5; ++k) m.fold(whole, order[k]);
    const merge::record want = m.finalize(whole);
    merge::record got{};
    for (int j = 0; j < merge::slices; ++j) {
      auto part = m.init_slice(m.load_slice(order[first], j));
      for (int k = first + 1; k < 5; ++k) m.fold_slice(part, m.load_slice(order[k], j));
      const merge::slice s = m.finalize_slice(part);
      REQUIRE(std::memcmp(&s.lse, &want.lse, sizeof(float)) == 0);
      REQUIRE(std::memcmp(s.o, want.o + j * 4, sizeof(s.o)) == 0);
      m.store_slice(got, j, s);
      const merge::slice back = m.load_slice(got, j);
      REQUIRE(std::memcmp(back.o, s.o, sizeof(s.o)) == 0);
      REQUIRE(back.lse == s.lse);
    }
    REQUIRE(std::memcmp(got.o, want.o, sizeof(got.o)) == 0);
    REQUIRE(got.lse == want.lse);
  }
}

TEST_CASE("fused combine: argmax, top-k and softmax statistics over a split vocabulary, against float64",
          "[fused][combine]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const int n = quick || rcclx_test::tsan ? GENERATE(2, 7) : GENERATE(2, 3, 4, 5, 7, 8);
  for (const std::size_t vocab : {std::size_t{50}, std::size_t{1001}}) {
    const std::size_t rows = 11, tile = 3;  // 4 tiles, the last short
    CAPTURE(n, vocab);
    const auto x = make_logits(rows, vocab, 0x5A + vocab + n, true);
    {  // argmax
      const auto flat = run_sampling<fz::argmax, algorithm::flat>(n, x, rows, vocab, tile, on_host ? 3 : 4);
      for (std::size_t i = 0; i < rows; ++i) {
        const auto want = ref_topk(x.data() + i * vocab, vocab, 1)[0];
        CAPTURE(i, want.value, want.index, flat[0][i].value, flat[0][i].index);
        REQUIRE(same_value(flat[0][i].value, want.value));
        REQUIRE(flat[0][i].index == want.index);
      }
      require_algorithms_agree<fz::argmax>(n, x, rows, vocab, tile, flat);
    }
    topk_case<1>(n, x, rows, vocab, tile);
    topk_case<5>(n, x, rows, vocab, tile);
    topk_case<64>(n, x, rows, vocab, tile);  // vocab 50: fewer entries than K (empty ones after)
    {  // softmax statistics
      const auto flat = run_sampling<fz::softmax_stats, algorithm::flat>(n, x, rows, vocab, tile, on_host ? 3 : 4);
      for (std::size_t i = 0; i < rows; ++i) {
        const float* xi = x.data() + i * vocab;
        bool nan = false;
        double m = -INFINITY;
        for (std::size_t j = 0; j < vocab; ++j) {
          nan = nan || std::isnan(xi[j]);
          m = std::max(m, static_cast<double>(xi[j]));
        }
        CAPTURE(i, flat[0][i].max, flat[0][i].sum);
        if (nan) {
          REQUIRE(std::isnan(flat[0][i].sum));
          continue;
        }
        double s = 0;
        for (std::size_t j = 0; j < vocab; ++j) s += std::exp(xi[j] - m);
        REQUIRE(static_cast<double>(flat[0][i].max) == m);
        REQUIRE(std::fabs(flat[0][i].sum - s) <= 2 * (vocab + 4 * n + 8) * fused_ref::u32 * 4 * s);
      }
      require_algorithms_agree<fz::softmax_stats>(n, x, rows, vocab, tile, flat);
    }
  }
}

// place_among and merge_entries against the rank-order merge (topk::fold), on the host: lists with entries tied
// across ranks (the same value and index on several ranks: only the lower rank's is kept), empty
// padding on every rank, NaN, +0 / -0 and -inf; topk::key against topk::before on them. Places
// are checked to be distinct, and the entries
// placed below K to be, bit for bit, the merge's.
template <int K>
void place_among_case(int n, std::uint64_t seed) {
  using op = fz::topk<K>;
  using entry = typename op::entry;
  std::vector<typename op::record> lists(n, op::empty());
  const float pool[] = {NAN, 3.0f, 1.5f, 0.0f, -0.0f, -1.0f, -INFINITY};
  for (int r = 0; r < n; ++r) {
    const int count = static_cast<int>(mix(seed + r) % (K + 1));  // 0..K real entries, empties after
    for (int c = 0; c < count; ++c) {
      const std::uint64_t h = mix(seed ^ (static_cast<std::uint64_t>(r) << 20) ^ c);
      float v = pool[h % 7];
      if (std::isnan(v) && h % 3 == 0) v = -NAN;  // another NaN's bits
      op::push(lists[r], v, static_cast<std::uint32_t>((h >> 8) % 12));  // a few indices: ties across ranks
    }
  }
  auto want = lists[0];
  for (int r = 1; r < n; ++r) op{}.fold(want, lists[r]);
  for (int a = 0; a < n; ++a)  // topk::key is the order: before(x, y) exactly when key(x) > key(y)
    for (int p = 0; p < K; ++p) {
      const entry x = op{}.load_entry(lists[a], p), y = op{}.load_entry(lists[(a + p) % n], (p * 7 + 3) % K);
      REQUIRE(op::before(x, y) == (op::key(x) > op::key(y)));
      REQUIRE(op::before(y, x) == (op::key(y) > op::key(x)));
    }
  // Every place below K taken once, and the record the same bits as the merge's.
  const auto require_merge = [&](std::vector<int> places, const typename op::record& got) {
    std::sort(places.begin(), places.end());
    REQUIRE(places.size() == static_cast<std::size_t>(K));
    for (int p = 0; p < K; ++p) REQUIRE(places[p] == p);
    REQUIRE(std::memcmp(&got, &want, sizeof(got)) == 0);
  };
  typename op::record got = op::empty();
  std::vector<int> places;
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < K; ++p) {
      const entry e = op{}.load_entry(lists[r], p);
      const int place = fz::place_among<op, max_r>(op{}, e, r, p, n, [&](int s) -> const auto& { return lists[s]; });
      if (place >= K) continue;
      places.push_back(place);
      op{}.store_entry(got, place, e);
    }
  require_merge(places, got);
  // merge_entries (the lists staged, binary searches): the same places.
  static fz::entries_storage<op, max_r> st;
  typename op::record staged = op::empty();
  places.clear();
  fz::merge_entries<op, max_r>(rcclx::gpu::thread_group{}, op{}, n, st, [&](int s) -> const auto& { return lists[s]; },
                               [&](int place, const entry& e) {
                                 places.push_back(place);
                                 op{}.store_entry(staged, place, e);
                               });
  require_merge(places, staged);
}

TEST_CASE("fused combine: place_among and merge_entries give the rank-order merge's bits (ties across ranks)",
          "[fused][combine]") {
  const int trials = rcclx_test::scaled(200);
  for (int t = 0; t < trials; ++t) {
    const int n = 1 + t % max_r;
    CAPTURE(t, n);
    place_among_case<1>(n, 0x1000 + t);
    place_among_case<7>(n, 0x2000 + t);
    place_among_case<8>(n, 0x3000 + t);
    place_among_case<9>(n, 0x4000 + t);
    place_among_case<50>(n, 0x5000 + t);
    place_among_case<64>(n, 0x6000 + t);
  }
}

TEST_CASE("fused combine: back-to-back calls alternate the halves and stay right", "[fused][combine]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  // One world, many calls with changing rows, tiles and algorithms: a stale record of an earlier call
  // would be a wrong argmax.
  const int n = 5;
  using rec = fz::argmax::record;
  using c_t = fz::combine<rec, fz::argmax, max_r, algorithm::tree>;
  const fz::tile_slots slots{2, 40};
  const std::size_t vocab = 97;
  rt::emulated_world<max_r> world(n, c_t::workspace_bytes(1, 40), slots.end());
  arena mem;
  rec* outs[max_r];
  for (int r = 0; r < n; ++r) outs[r] = mem.alloc<rec>(40);
  const int calls = rcclx_test::scaled(on_host ? 60 : 200);
  for (int c = 0; c < calls; ++c) {
    const std::size_t rows = 1 + static_cast<std::size_t>(mix(c) % 40), tile = 1 + static_cast<std::size_t>(mix(c + 99) % 5);
    if ((rows + tile - 1) / tile > 40) continue;
    const auto x = make_logits(rows, vocab, 0xC0 + c, false);
    float* dx = mem.upload(x);
    auto launch = [&](auto k) {
      k.tables = world.device_tables<rec>();
      k.logits = dx;
      for (int r = 0; r < n; ++r) k.out[r] = outs[r];
      k.slots = slots;
      k.rows = rows;
      k.vocab = vocab;
      k.tile_records = tile;
      rt::launch_emulated(n, 1 + c % 3, threads, k);
      rcclx::gpu::device_synchronize();
      world.throw_if_error();
    };
    if (c % 2) launch(sampling_kernel<fz::argmax, algorithm::tree>{});
    else launch(sampling_kernel<fz::argmax, algorithm::flat>{});
    CAPTURE(c, rows, tile);
    for (int r = 0; r < n; ++r) {
      const auto got = download(outs[r], rows);
      for (std::size_t i = 0; i < rows; ++i) {
        const auto want = ref_topk(x.data() + i * vocab, vocab, 1)[0];
        REQUIRE(got[i].index == want.index);
      }
    }
  }
}

TEST_CASE("fused combine: a rank that never arrives is a timeout error naming it", "[fused][combine]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  const attention_case a = make_attention(4, 9, 12, 2, 64, 77);
  for (const int absent : {0, 2}) {
    CAPTURE(absent);
    run_attention<rcclx::bf16, 64, algorithm::flat>(a, 2, rcclx_test::absent_timeout_ns, absent);
    run_attention<rcclx::bf16, 64, algorithm::tree>(a, 2, rcclx_test::absent_timeout_ns, absent);
  }
}

TEST_CASE("fused combine: host-side checks name the argument", "[fused][combine]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using rec = fz::topk<8>::record;
  using c_t = fz::combine<rec, fz::topk<8>, max_r>;
  rt::emulated_world<max_r> world(3, c_t::workspace_bytes(4, 40), 12);
  const auto t = world.table<rec>(0);
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const rcclx::error& e) {
      return e.what();
    }
    return "ok";
  };
  REQUIRE(message([&] { c_t::check("c", t, {0, 10}, 4, 40); }) == "ok");
  REQUIRE(message([&] { c_t::check("c", t, {0, 10}, 0, 40); }).find("tile_records") != std::string::npos);
  REQUIRE(message([&] { c_t::check("c", t, {0, 10}, 4, 41); }).find("tile_slots.max_tiles") != std::string::npos);
  REQUIRE(message([&] { c_t::check("c", t, {2, 10}, 4, 40); }).find("max_blocks = 12") != std::string::npos);
  REQUIRE(message([&] { c_t::check("c", t, {0, 11}, 8, 80); }).find("bytes of symmetric buffer") != std::string::npos);
}
