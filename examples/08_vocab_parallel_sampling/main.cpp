// Example 08: vocabulary-parallel sampling. The LM head's weight is split over the ranks by
// vocabulary rows; each rank's kernel computes its logits (a GEMV per token), keeps per token its
// best entry, its top-k and its softmax statistics, and ends with a cross-rank combine that gives
// every rank the global argmax (greedy decoding), the global top-k and the softmax normaliser
// (max, sum of exp) over the whole vocabulary. The three come from one user-defined combine over a
// record that holds the three built-in records (docs/fusion.md, "Cross-rank combines"). Checked
// against float64 logits; every rank must hold the same bits.
//
//   rcclx_example_vocab_parallel_sampling [tokens vocab hidden]              8 emulated ranks
//   rcclx_example_vocab_parallel_sampling --procs N [tokens vocab hidden]    N processes, one rank each
#include <rcclx/fused/combine.hpp>
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/host/communicator.hpp>
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

namespace fz = rcclx::fused;
using T = rcclx::bf16;
constexpr int K = 8;  // top-k
constexpr int max_ranks = 8;
constexpr bool on_gpu = rcclx::current_backend != rcclx::backend::host;
constexpr int threads = on_gpu ? 128 : 1;

// [combine-user]
// A user-defined combine: one record per token with the token's argmax, top-k and softmax
// statistics, each folded by its built-in combine (rank order, FP32), in one exchange.
struct sample_record {
  fz::argmax::record best;
  fz::topk<K>::record top;
  fz::softmax_stats::record stats;
};
struct sample_combine {
  RCCLX_HOST_DEVICE sample_record init(const sample_record& r) const { return r; }
  RCCLX_HOST_DEVICE void fold(sample_record& a, const sample_record& r) const {
    fz::argmax{}.fold(a.best, r.best);
    fz::topk<K>{}.fold(a.top, r.top);
    fz::softmax_stats{}.fold(a.stats, r.stats);
  }
  RCCLX_HOST_DEVICE sample_record finalize(const sample_record& a) const { return a; }
};
// [combine-user]

// Rank r's vocabulary rows: [begin(r), begin(r + 1)) (uneven when n does not divide the vocabulary).
RCCLX_HOST_DEVICE inline std::size_t shard_begin(int r, int n, std::size_t vocab) {
  return vocab * static_cast<std::size_t>(r) / static_cast<std::size_t>(n);
}

// The kernel: a tile per token. The block's threads compute the token's logits over this rank's
// rows (thread i: rows i, i + G, ...), each keeping its own record; thread 0 merges them (in
// thread order) into the combine's input; then the ranks' records are combined.
struct lm_head_sampling {
  const rcclx::core::peer_table<sample_record, max_ranks>* tables[max_ranks];
  const T* x;              // [tokens][hidden], the same on every rank
  const T* w[max_ranks];   // rank r's rows of the LM head: [rows_r][hidden]
  sample_record* out[max_ranks];  // [tokens]
  fz::tile_slots slots;
  int tokens;
  std::size_t vocab, hidden;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    fz::combine<sample_record, sample_combine, max_ranks> c(*tables[ix.rank], slots, 1, static_cast<std::size_t>(tokens));
    const std::size_t b = shard_begin(ix.rank, ix.num_ranks, vocab), e = shard_begin(ix.rank + 1, ix.num_ranks, vocab);
    sample_record(&part)[threads] = rcclx::gpu::block_shared<sample_record[threads], struct part_tag>();
    const sample_combine op{};
    for (int t = ix.block; t < tokens; t += ix.num_blocks) {
      sample_record mine{fz::argmax::empty(), fz::topk<K>::empty(), fz::softmax_stats::empty()};
      const T* xt = x + static_cast<std::size_t>(t) * hidden;
      for (std::size_t j = b + static_cast<std::size_t>(g.thread_rank()); j < e; j += static_cast<std::size_t>(g.size())) {
        const T* wj = w[ix.rank] + (j - b) * hidden;
        float logit = 0;
        for (std::size_t h = 0; h < hidden; ++h) logit += static_cast<float>(xt[h]) * static_cast<float>(wj[h]);
        fz::argmax::push(mine.best, logit, static_cast<std::uint32_t>(j));  // global indices
        fz::topk<K>::push(mine.top, logit, static_cast<std::uint32_t>(j));
        fz::softmax_stats::push(mine.stats, logit);
      }
      part[g.thread_rank()] = mine;
      g.sync();
      if (g.thread_rank() == 0) {
        sample_record acc = op.init(part[0]);
        for (int i = 1; i < g.size(); ++i) op.fold(acc, part[i]);
        c.input(t)[0] = op.finalize(acc);
      }
      c.publish(g, t);  // syncs the group before raising the flags
    }
    sample_record* o = out[ix.rank];
    for (int t = ix.block; t < tokens; t += ix.num_blocks)
      if (!c.reduce(g, t, [&](std::size_t i, const sample_record& r) { o[i] = r; })) break;
    c.finish(g, ix.num_blocks);
  }
};

struct problem {
  int tokens;
  std::size_t vocab, hidden;
  std::vector<T> x, w;  // w: [vocab][hidden]
};
problem make_problem(int tokens, std::size_t vocab, std::size_t hidden) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  problem p{tokens, vocab, hidden, std::vector<T>(tokens * hidden), std::vector<T>(vocab * hidden)};
  for (auto& v : p.x) v = T(dist(gen));
  for (auto& v : p.w) v = T(dist(gen));
  return p;
}

// float64 logits; a result entry passes if its value is within the FP32 bound of its index's
// float64 logit and no entry left out beats it by more than twice the bound. Returns failures.
int check_against_float64(const problem& p, const std::vector<sample_record>& got, double& max_err) {
  int bad = 0;
  for (int t = 0; t < p.tokens; ++t) {
    std::vector<double> logit(p.vocab);
    double tol = 0;
    for (std::size_t j = 0; j < p.vocab; ++j) {
      double s = 0, mag = 0;
      for (std::size_t h = 0; h < p.hidden; ++h) {
        const double a = static_cast<double>(static_cast<float>(p.x[t * p.hidden + h])) *
                         static_cast<float>(p.w[j * p.hidden + h]);
        s += a;
        mag += std::fabs(a);
      }
      logit[j] = s;
      tol = std::max(tol, 2 * (p.hidden + 2) * 0x1p-24 * mag);
    }
    std::vector<std::size_t> order(p.vocab);
    for (std::size_t j = 0; j < p.vocab; ++j) order[j] = j;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return logit[a] > logit[b]; });
    const sample_record& r = got[t];
    auto entry_ok = [&](float v, std::uint32_t i, std::size_t rank_in_order) {
      if (i >= p.vocab) return false;
      max_err = std::max(max_err, std::fabs(v - logit[i]));
      return std::fabs(v - logit[i]) <= tol && logit[order[rank_in_order]] - logit[i] <= 2 * tol;
    };
    bad += !entry_ok(r.best.value, r.best.index, 0);
    bad += r.best.index != r.top.index[0] || r.best.value != r.top.value[0];  // one order for both
    for (int j = 0; j < K && static_cast<std::size_t>(j) < p.vocab; ++j) {
      bad += !entry_ok(r.top.value[j], r.top.index[j], static_cast<std::size_t>(j));
      if (j > 0) bad += !(r.top.value[j - 1] >= r.top.value[j]);
    }
    double sum = 0;
    for (std::size_t j = 0; j < p.vocab; ++j) sum += std::exp(logit[j] - logit[order[0]]);
    bad += !(std::fabs(r.stats.max - logit[order[0]]) <= tol);
    bad += !(std::fabs(r.stats.sum - sum) <= sum * (2 * tol + (p.vocab + 16) * 0x1p-24 * 4));
  }
  return bad;
}

struct uploads {
  std::vector<void*> owned;
  ~uploads() {
    for (void* v : owned) rcclx::gpu::device_free(v);
  }
  template <class U>
  U* put(const U* data, std::size_t count) {
    owned.push_back(rcclx::gpu::device_malloc(count * sizeof(U) + 16));
    if (count) rcclx::gpu::copy(owned.back(), data, count * sizeof(U));
    return static_cast<U*>(owned.back());
  }
};

void upload_rank(lm_head_sampling& k, const problem& p, int r, int n, uploads& up) {
  if (!k.x) k.x = up.put(p.x.data(), p.x.size());
  const std::size_t b = shard_begin(r, n, p.vocab), e = shard_begin(r + 1, n, p.vocab);
  k.w[r] = up.put(p.w.data() + b * p.hidden, (e - b) * p.hidden);
  const std::vector<sample_record> zero(p.tokens);
  k.out[r] = up.put(zero.data(), zero.size());
  k.tokens = p.tokens;
  k.vocab = p.vocab;
  k.hidden = p.hidden;
}

using combine_t = fz::combine<sample_record, sample_combine, max_ranks>;

int run_process_rank(const rcclx::host::launch_config& cfg, const problem& p) {
  rcclx::host::use_device(cfg);
  rcclx::host::socket_bootstrap bs(cfg);
  const int n = bs.num_ranks();
  rcclx::host::communicator_options opts;
  const fz::tile_slots slots{opts.max_blocks, p.tokens};  // after the communicator's own slots
  opts.max_blocks = slots.end();
  opts.buffer_bytes = std::max(opts.buffer_bytes, combine_t::workspace_bytes(1, p.tokens));
  rcclx::host::communicator<max_ranks> comm(bs, opts);
  const int rank = comm.rank();
  combine_t::check("example 08", comm.device_handle<sample_record>(), slots, 1, p.tokens);
  uploads up;
  lm_head_sampling k{};
  k.tables[rank] = comm.device_table<sample_record>();
  k.slots = slots;
  upload_rank(k, p, rank, n, up);
  rcclx::gpu::stream_t stream = rcclx::gpu::stream_create();
  for (int rep = 0; rep < 3; ++rep) {
    rcclx::testing::launch_rank(rank, n, std::min(p.tokens, on_gpu ? 32 : 3), threads, k, stream);
    comm.synchronize(stream);  // throws if a peer never arrived
  }
  rcclx::gpu::stream_destroy(stream);
  std::vector<sample_record> got(p.tokens);
  rcclx::gpu::copy(got.data(), k.out[rank], got.size() * sizeof(sample_record));
  double max_err = 0;
  const int bad = check_against_float64(p, got, max_err);
  std::uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(got.data());
  for (std::size_t i = 0; i < got.size() * sizeof(sample_record); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  const auto all = comm.get_bootstrap().allgather_value(h);
  int differ = 0;
  for (const std::uint64_t x : all) differ += x != all[0];
  if (bad) std::printf("  [rank %d] %d checks failed\n", rank, bad);
  if (rank == 0)
    std::printf("  %d processes: token 0 argmax %u (%.4f), max |logit error| %.3g; %s\n", n, got[0].best.index,
                got[0].best.value, max_err, differ ? "ranks DIFFER" : "every rank bit-identical");
  return bad || differ ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 0;  // 0: emulated ranks in this process; -1: one rank of a launcher's job
  if (!rcclx::host::procs_argument(argc, argv, max_ranks, procs)) return 2;
  int tokens = on_gpu ? 64 : 5;
  std::size_t vocab = on_gpu ? 131072 : 3001, hidden = on_gpu ? 1024 : 96;
  if (argc == 4) {
    tokens = std::atoi(argv[1]);
    vocab = std::strtoull(argv[2], nullptr, 10);
    hidden = std::strtoull(argv[3], nullptr, 10);
  }
  if (tokens < 1 || vocab < 1 || vocab > 0xFFFFFFFEu || hidden < 1) {
    std::printf("tokens, vocab and hidden must be positive (vocab below 2^32 - 1)\n");
    return 2;
  }
  const problem p = make_problem(tokens, vocab, hidden);
  std::printf("rcclx vocabulary-parallel LM head + argmax / top-%d / softmax statistics across ranks: %d tokens, "
              "vocabulary %zu, hidden %zu\n", K, tokens, vocab, hidden);
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
  const fz::tile_slots slots{0, tokens};
  rcclx::testing::emulated_world<max_ranks> world(n, combine_t::workspace_bytes(1, tokens), slots.end());
  combine_t::check("example 08", world.table<sample_record>(0), slots, 1, tokens);
  uploads up;
  lm_head_sampling k{};
  for (int r = 0; r < n; ++r) {
    k.tables[r] = world.device_tables<sample_record>() + r;
    upload_rank(k, p, r, n, up);
  }
  k.slots = slots;
  for (int rep = 0; rep < 3; ++rep) {  // repeated calls alternate buffer halves
    rcclx::testing::launch_emulated(n, std::min(tokens, on_gpu ? 32 : 3), threads, k);
    rcclx::gpu::device_synchronize();
  }
  world.throw_if_error();
  std::vector<std::vector<sample_record>> got(n, std::vector<sample_record>(tokens));
  int bad = 0;
  for (int r = 0; r < n; ++r) {
    rcclx::gpu::copy(got[r].data(), k.out[r], tokens * sizeof(sample_record));
    bad += std::memcmp(got[r].data(), got[0].data(), tokens * sizeof(sample_record)) != 0;  // the same bits
  }
  double max_err = 0;
  bad += check_against_float64(p, got[0], max_err);
  std::printf("  %d emulated ranks: token 0 argmax %u (%.4f), max |logit error| %.3g; %s\n", n, got[0][0].best.index,
              got[0][0].best.value, max_err, bad ? "FAILED" : "every rank bit-identical and within tolerance");
  return bad ? 1 : 0;
}
