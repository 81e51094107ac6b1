// Example 07: split-KV decode attention across ranks. Every rank holds a contiguous part of each
// sequence's KV cache (context parallelism); its kernel attends the new token's query to its own
// keys and ends with a cross-rank merge (fused::combine with fused::lse_merge) that gives every
// rank the attention over the whole cache. A rank without keys for a sequence (short sequences,
// many ranks) contributes L = -inf and is skipped. Checked against float64 attention over the
// whole cache; every rank must hold the same bits.
//
//   rcclx_example_attention_merge [tokens heads max_len]              8 emulated ranks
//   rcclx_example_attention_merge --procs N [tokens heads max_len]    N processes, one rank each
#include <rcclx/fused/combine.hpp>
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/host/communicator.hpp>
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

namespace fz = rcclx::fused;
using T = rcclx::bf16;
constexpr int D = 128;  // head dimension
constexpr int max_ranks = 8;
constexpr bool on_gpu = rcclx::current_backend != rcclx::backend::host;
constexpr int threads = on_gpu ? 64 : 1;
using merge = fz::lse_merge<T, D>;
using rec = merge::record;

// Rank r's part of a sequence of len positions: [begin(r), begin(r + 1)).
RCCLX_HOST_DEVICE inline int part_begin(int r, int n, int len) { return static_cast<int>(static_cast<long>(len) * r / n); }

// The kernel: one record per (token, head), a tile per token (its heads). A thread computes the
// partial attention of a head over this rank's keys (FP32, normalised, with its log-sum-exp),
// then the merge folds the ranks' partials, a thread per 16-byte slice of a head (reduce_slices:
// 16 threads per head, the same bits as a thread per head); the epilogue stores the merged output.
struct attention_merge {
  const rcclx::core::peer_table<rec, max_ranks>* tables[max_ranks];
  const T* q;              // [tokens][heads][D], the same on every rank
  const T* k[max_ranks];   // rank r's keys: [tokens][heads][part_cap][D]
  const T* v[max_ranks];   // rank r's values, the same layout
  const int* lens;         // [tokens]: sequence lengths
  T* out[max_ranks];       // [tokens][heads][D]
  fz::tile_slots slots;
  int tokens, heads, part_cap;
  float scale;

  RCCLX_HOST_DEVICE void partial(int rank, int n, int token, int head, rec& r) const {
    const int len = lens[token], b = part_begin(rank, n, len), e = part_begin(rank + 1, n, len);
    r.lse = -__builtin_huge_valf();  // no keys here: L = -inf, O left as it is (never read)
    if (b == e) return;
    const std::size_t row = static_cast<std::size_t>(token) * heads + head;
    const T* qh = q + row * D;
    const T* kh = k[rank] + row * part_cap * D;
    const T* vh = v[rank] + row * part_cap * D;
    float qf[D];
    for (int d = 0; d < D; ++d) qf[d] = static_cast<float>(qh[d]) * scale;
    float m = -__builtin_huge_valf(), sum = 0, o[D] = {};
    for (int s = 0; s < e - b; ++s) {  // one pass, rescaling as the maximum grows
      float x = 0;
      for (int d = 0; d < D; ++d) x += qf[d] * static_cast<float>(kh[s * D + d]);
      const float m2 = fmaxf(m, x), c = expf(m - m2), p = expf(x - m2);
      sum = sum * c + p;
      for (int d = 0; d < D; ++d) o[d] = o[d] * c + p * static_cast<float>(vh[s * D + d]);
      m = m2;
    }
    for (int d = 0; d < D; ++d) r.o[d] = T(o[d] / sum);
    r.lse = m + logf(sum);
  }

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    const std::size_t h = static_cast<std::size_t>(heads);
    fz::combine<rec, merge, max_ranks> c(*tables[ix.rank], slots, h, static_cast<std::size_t>(tokens) * h);
    for (int t = ix.block; t < tokens; t += ix.num_blocks) {
      for (int i = g.thread_rank(); i < heads; i += g.size()) partial(ix.rank, ix.num_ranks, t, i, c.input(t)[i]);
      c.publish(g, t);
    }
    T* o = out[ix.rank];
    for (int t = ix.block; t < tokens; t += ix.num_blocks)  // a thread per 16-byte slice of a head
      if (!c.reduce_slices(g, t, [&](std::size_t i, int j, const merge::slice& s) {
            for (int d = 0; d < merge::slice_elems; ++d) o[i * D + j * merge::slice_elems + d] = s.o[d];
          }))
        break;
    c.finish(g, ix.num_blocks);
  }
};

// The whole problem (the same in every process: one seed): queries, every sequence's full cache.
struct problem {
  int tokens, heads, max_len;
  std::vector<int> lens;
  std::vector<T> q, k, v;  // k, v: [tokens][heads][max_len][D]
};
problem make_problem(int tokens, int heads, int max_len) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  problem p{tokens, heads, max_len, {}, {}, {}, {}};
  for (int t = 0; t < tokens; ++t) p.lens.push_back(t == 0 ? 2 : 1 + static_cast<int>(gen() % max_len));
  p.q.resize(static_cast<std::size_t>(tokens) * heads * D);
  p.k.resize(p.q.size() * max_len);
  p.v.resize(p.k.size());
  for (auto& x : p.q) x = T(2.0f * dist(gen));
  for (auto& x : p.k) x = T(2.0f * dist(gen));
  for (auto& x : p.v) x = T(dist(gen));
  return p;
}

// Rank r's shard of the cache: [tokens][heads][part_cap][D].
std::vector<T> shard(const problem& p, const std::vector<T>& full, int r, int n, int part_cap) {
  std::vector<T> s(static_cast<std::size_t>(p.tokens) * p.heads * part_cap * D, T(0.0f));
  for (int t = 0; t < p.tokens; ++t)
    for (int h = 0; h < p.heads; ++h) {
      const int b = part_begin(r, n, p.lens[t]), e = part_begin(r + 1, n, p.lens[t]);
      const std::size_t row = static_cast<std::size_t>(t) * p.heads + h;
      std::copy(full.begin() + (row * p.max_len + b) * D, full.begin() + (row * p.max_len + e) * D,
                s.begin() + row * part_cap * D);
    }
  return s;
}

// float64 attention over each sequence's whole cache. Returns the elements out of tolerance: the
// partial and merged outputs are rounded to bf16 (u = 2^-8), the rest is FP32.
int check_against_float64(const problem& p, const std::vector<T>& o, double& max_err) {
  int bad = 0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D)), u = 0x1p-8;
  for (int t = 0; t < p.tokens; ++t)
    for (int h = 0; h < p.heads; ++h) {
      const std::size_t row = static_cast<std::size_t>(t) * p.heads + h;
      const int len = p.lens[t];
      std::vector<double> s(len);
      double m = -INFINITY, sum = 0;
      for (int j = 0; j < len; ++j) {
        double x = 0;
        for (int d = 0; d < D; ++d)
          x += static_cast<double>(static_cast<float>(p.q[row * D + d])) *
               static_cast<float>(p.k[(row * p.max_len + j) * D + d]);
        s[j] = x * scale;
        m = std::max(m, s[j]);
      }
      for (int j = 0; j < len; ++j) sum += std::exp(s[j] - m);
      for (int d = 0; d < D; ++d) {
        double ref = 0, mag = 0;
        for (int j = 0; j < len; ++j) {
          const double w = std::exp(s[j] - m) / sum, x = static_cast<float>(p.v[(row * p.max_len + j) * D + d]);
          ref += w * x;
          mag += w * std::fabs(x);
        }
        const double err = std::fabs(static_cast<float>(o[row * D + d]) - ref);
        max_err = std::max(max_err, err);
        if (!(err <= 2 * (u * mag + u * std::fabs(ref)) + 1e-4 * mag)) ++bad;
      }
    }
  return bad;
}

int part_cap_of(const problem& p, int n) { return (p.max_len + n - 1) / n; }

struct uploads {
  std::vector<void*> owned;
  ~uploads() {
    for (void* x : owned) rcclx::gpu::device_free(x);
  }
  template <class U>
  U* put(const std::vector<U>& v) {
    owned.push_back(rcclx::gpu::device_malloc(v.size() * sizeof(U)));
    rcclx::gpu::copy(owned.back(), v.data(), v.size() * sizeof(U));
    return static_cast<U*>(owned.back());
  }
};

// Fills k with rank r's inputs and output (and the shared ones on first use).
void upload_rank(attention_merge& k, const problem& p, int r, int n, uploads& up) {
  const int cap = part_cap_of(p, n);
  if (!k.q) {
    k.q = up.put(p.q);
    k.lens = up.put(p.lens);
  }
  k.k[r] = up.put(shard(p, p.k, r, n, cap));
  k.v[r] = up.put(shard(p, p.v, r, n, cap));
  k.out[r] = up.put(std::vector<T>(p.q.size(), T(0.0f)));
  k.tokens = p.tokens;
  k.heads = p.heads;
  k.part_cap = cap;
  k.scale = 1.0f / std::sqrt(static_cast<float>(D));
}

std::uint64_t hash(const std::vector<T>& o) {
  std::uint64_t h = 1469598103934665603ull;
  for (const T& x : o) h = (h ^ x.bits) * 1099511628211ull;
  return h;
}

int run_process_rank(const rcclx::host::launch_config& cfg, const problem& p) {
  rcclx::host::use_device(cfg);
  rcclx::host::socket_bootstrap bs(cfg);
  const int n = bs.num_ranks();
  const std::size_t records = static_cast<std::size_t>(p.tokens) * p.heads;
  // Room in the pads for the combine's flags after the communicator's own slots; the communicator
  // hands the range out.
  rcclx::host::communicator_options opts;
  opts.max_blocks = fz::pad_blocks_for(opts.max_blocks, p.tokens);
  opts.buffer_bytes = std::max(opts.buffer_bytes, fz::combine<rec, merge, max_ranks>::workspace_bytes(p.heads, records));
  rcclx::host::communicator<max_ranks> comm(bs, opts);
  const fz::tile_slots slots = comm.reserve_tile_slots(p.tokens, "example 07's combine");
  const int rank = comm.rank();
  fz::combine<rec, merge, max_ranks>::check("example 07", comm.device_handle<rec>(), slots, p.heads, records);
  uploads up;
  attention_merge k{};
  k.tables[rank] = comm.device_table<rec>();
  k.slots = slots;
  upload_rank(k, p, rank, n, up);
  rcclx::gpu::stream_t stream = rcclx::gpu::stream_create();
  for (int rep = 0; rep < 3; ++rep) {  // repeated calls alternate buffer halves
    rcclx::testing::launch_rank(rank, n, std::min(p.tokens, on_gpu ? 32 : 3), threads, k, stream);
    comm.synchronize(stream);  // throws if a peer never arrived
  }
  rcclx::gpu::stream_destroy(stream);
  std::vector<T> o(p.q.size());
  rcclx::gpu::copy(o.data(), k.out[rank], o.size() * sizeof(T));
  double max_err = 0;
  const int bad = check_against_float64(p, o, max_err);
  const auto all = comm.get_bootstrap().allgather_value(hash(o));
  int differ = 0;
  for (const std::uint64_t x : all) differ += x != all[0];
  if (bad) std::printf("  [rank %d] %d elements out of tolerance\n", rank, bad);
  if (rank == 0)
    std::printf("  %d processes: max |error| vs float64 %.3g (rank 0); %s\n", n, max_err,
                differ ? "ranks DIFFER" : "every rank bit-identical");
  return bad || differ ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 0;  // 0: emulated ranks in this process; -1: one rank of a launcher's job
  if (!rcclx::host::procs_argument(argc, argv, max_ranks, procs)) return 2;
  int tokens = on_gpu ? 64 : 6, heads = on_gpu ? 32 : 8, max_len = on_gpu ? 4096 : 60;
  if (argc == 4) {
    tokens = std::atoi(argv[1]);
    heads = std::atoi(argv[2]);
    max_len = std::atoi(argv[3]);
  }
  if (tokens < 1 || heads < 1 || max_len < 2) {
    std::printf("tokens and heads must be positive, max_len at least 2\n");
    return 2;
  }
  const problem p = make_problem(tokens, heads, max_len);
  std::printf("rcclx split-KV decode attention + cross-rank merge: %d tokens x %d heads x %d, sequences of 2..%d "
              "positions split over the ranks\n", tokens, heads, D, max_len);
  if (procs != 0) {
    const int rc = rcclx::host::run_ranks(procs, [&](const rcclx::host::launch_config& cfg) {
      return run_process_rank(cfg, p);
    });
    if (procs > 0) std::printf(rc ? "FAILED\n" : "all ranks within tolerance of float64, bit-identical\n");
    return rc;
  }
  if (on_gpu && rcclx::gpu::device_count() == 0) {
    std::printf("built for a GPU but none is present; rebuild with RCCLX_BACKEND=host\n");
    return 0;
  }
  const int n = 8;
  const std::size_t records = static_cast<std::size_t>(tokens) * heads;
  rcclx::testing::emulated_world<max_ranks> world(n, fz::combine<rec, merge, max_ranks>::workspace_bytes(heads, records),
                                                  fz::pad_blocks_for(0, tokens));
  const fz::tile_slots slots = world.reserve_tile_slots(tokens);  // one tile (one token's heads) per slot
  fz::combine<rec, merge, max_ranks>::check("example 07", world.table<rec>(0), slots, heads, records);
  uploads up;
  attention_merge k{};
  for (int r = 0; r < n; ++r) {
    k.tables[r] = world.device_tables<rec>() + r;
    upload_rank(k, p, r, n, up);
  }
  k.slots = slots;
  for (int rep = 0; rep < 3; ++rep) {  // repeated calls alternate buffer halves
    rcclx::testing::launch_emulated(n, std::min(tokens, on_gpu ? 32 : 3), threads, k);
    rcclx::gpu::device_synchronize();
  }
  world.throw_if_error();
  int bad = 0;
  double max_err = 0;
  std::vector<T> o0(p.q.size()), o(p.q.size());
  rcclx::gpu::copy(o0.data(), k.out[0], o0.size() * sizeof(T));
  for (int r = 1; r < n; ++r) {
    rcclx::gpu::copy(o.data(), k.out[r], o.size() * sizeof(T));
    bad += hash(o) != hash(o0);  // every rank holds the same bits
  }
  bad += check_against_float64(p, o0, max_err);
  std::printf("  %d emulated ranks: max |error| vs float64 %.3g; %s\n", n, max_err,
              bad ? "FAILED" : "every rank bit-identical and within tolerance");
  return bad ? 1 : 0;
}
