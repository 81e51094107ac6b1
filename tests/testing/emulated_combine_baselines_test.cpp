// testing/emulated_combine_baselines.hpp on emulated ranks: the records gathered and merged give
// every rank the same bits, which are the host's fold of the records with the combine's own
// arithmetic (lse_merge: init, fold, finalize) and within testing::lse_merge_reference's bounds;
// the shard scans gathered and merged give testing::topk_reference's entries of each whole row
// (argmax and top-k, uneven shards, NaN and -inf logits); the read floor writes nothing.
#include <rcclx/core/types.hpp>
#include <rcclx/testing/emulated_bench.hpp>
#include <rcclx/testing/emulated_combine_baselines.hpp>
#include <rcclx/testing/references.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
namespace fz = rcclx::fused;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
constexpr int n = 3, max_r = 4, threads = on_host ? 1 : 128;
constexpr float inf_f = std::numeric_limits<float>::infinity();

// Every rank's `bytes` of partial records (host) gathered on the device: rank r's AllGather output.
struct gathered {
  rt::emulated_bench<max_r> b;
  std::vector<rt::record_word*> part, all;
  std::size_t words;

  explicit gathered(const std::vector<std::vector<unsigned char>>& records)
      : b(n, records[0].size() * n + 64, 4), words(records[0].size() / sizeof(rt::record_word)) {
    rt::emulated_record_gather<max_r> k{b.world().device_tables<rt::record_word>(), {}, words};
    for (int r = 0; r < n; ++r) {
      part.push_back(b.alloc<rt::record_word>(records[r].size()));
      all.push_back(b.alloc<rt::record_word>(records[r].size() * n));
      rcclx::gpu::copy(part[r], records[r].data(), records[r].size());
      k.buf.in[r] = part[r];
      k.buf.out[r] = all[r];
    }
    rt::launch_emulated(n, 2, on_host ? 1 : 64, k, b.stream());
    rcclx::gpu::device_synchronize();
    b.world().throw_if_error();
  }
};

template <class R>
std::vector<unsigned char> bytes_of(const std::vector<R>& v) {
  std::vector<unsigned char> out(v.size() * sizeof(R));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST_CASE("emulated_attention_merge: the host's lse_merge fold on every rank, within the float64 bounds",
          "[testing][fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = rcclx::bf16;
  constexpr int d = 16;
  using merge = fz::lse_merge<T, d>;
  const std::size_t records = 10;
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<merge::record>> parts(n, std::vector<merge::record>(records));
  std::vector<std::vector<unsigned char>> raw;
  for (auto& p : parts) {
    for (std::size_t i = 0; i < records; ++i) {
      const bool empty = i == 3 || g() % 5 == 0;  // record 3: no rank has keys
      p[i].lse = empty ? -inf_f : 6.0f * u(g);
      for (auto& o : p[i].o) o = empty ? T::from_bits(0x7FC0) : T(u(g));
    }
    raw.push_back(bytes_of(p));
  }
  gathered x(raw);
  rt::emulated_attention_merge<T, d, max_r> m{};
  std::vector<T*> o;
  std::vector<float*> l;
  for (int r = 0; r < n; ++r) {
    o.push_back(x.b.alloc<T>(records * d * sizeof(T)));
    l.push_back(x.b.alloc<float>(records * sizeof(float)));
    m.gathered[r] = x.all[r];
    m.out_o[r] = o[r];
    m.out_l[r] = l[r];
  }
  m.records = records;
  m.count = x.words;
  const auto got_o = x.b.outputs_after([&](rcclx::gpu::stream_t s) { rt::launch_emulated(n, 2, on_host ? 1 : 64, m, s); }, o,
                                       records * d * sizeof(T));
  const auto got_l = x.b.download(l, records * sizeof(float));
  const merge op{};
  for (std::size_t i = 0; i < records; ++i) {
    auto acc = op.init(parts[0][i]);
    for (int q = 1; q < n; ++q) op.fold(acc, parts[q][i]);
    const merge::record want = op.finalize(acc);
    const auto ref = rt::lse_merge_reference<T>(
        n, d, [&](int q) { return parts[q][i].lse; }, [&](int q, int j) { return static_cast<double>(static_cast<float>(parts[q][i].o[j])); });
    CAPTURE(i);
    for (int r = 0; r < n; ++r) {
      CHECK(std::memcmp(got_o[r].data() + i * d * sizeof(T), want.o, d * sizeof(T)) == 0);
      CHECK(std::memcmp(got_l[r].data() + i * sizeof(float), &want.lse, sizeof(float)) == 0);
    }
    if (ref.lse == -inf_f) {
      CHECK(want.lse == -inf_f);
      continue;
    }
    CHECK(std::fabs(want.lse - ref.lse) <= ref.lse_tol);
    for (int j = 0; j < d; ++j) CHECK(std::fabs(static_cast<float>(want.o[j]) - ref.o[j]) <= ref.tol[j]);
  }
}

template <class Op>
void sampling(int k) {
  using rec = typename Op::record;
  const std::size_t rows = 5, vocab = 301;  // shards of 100, 100 and 101
  std::mt19937 g(9);
  std::vector<float> logits(rows * vocab);
  for (auto& v : logits) v = static_cast<float>(static_cast<int>(g() % 64) - 32) * 0.25f;  // ties
  logits[vocab + 7] = std::numeric_limits<float>::quiet_NaN();
  logits[2 * vocab + 250] = -inf_f;
  rt::emulated_bench<max_r> b(n, 64, 4);
  rt::emulated_shard_scan<Op, max_r, threads> scan{};
  rt::emulated_shard_read<max_r, threads> read{};
  std::vector<std::vector<unsigned char>> parts;
  for (int r = 0; r < n; ++r) {
    const std::size_t first = rt::vocab_shard_begin(r, n, vocab), len = rt::vocab_shard_begin(r + 1, n, vocab) - first;
    std::vector<float> shard(rows * len);
    for (std::size_t i = 0; i < rows; ++i)
      std::memcpy(shard.data() + i * len, logits.data() + i * vocab + first, len * sizeof(float));
    scan.logits[r] = read.logits[r] = b.alloc<float>(shard.size() * sizeof(float));
    rcclx::gpu::copy(const_cast<float*>(scan.logits[r]), shard.data(), shard.size() * sizeof(float));
    scan.part[r] = b.alloc<rec>(rows * sizeof(rec));
    read.sink[r] = b.alloc<float>(threads * sizeof(float));
  }
  scan.rows = read.rows = rows;
  scan.vocab = read.vocab = vocab;
  std::vector<float*> sinks(read.sink, read.sink + n);
  const auto sunk = b.outputs_after([&](rcclx::gpu::stream_t s) { rt::launch_emulated(n, 2, threads, read, s); }, sinks,
                                    threads * sizeof(float));
  for (const auto& v : sunk) CHECK(v == std::vector<unsigned char>(threads * sizeof(float), 0x5A));
  std::vector<rec*> part(scan.part, scan.part + n);
  const auto partial = b.outputs_after([&](rcclx::gpu::stream_t s) { rt::launch_emulated(n, 2, threads, scan, s); }, part,
                                       rows * sizeof(rec));
  gathered x(partial);
  rt::emulated_sampling_merge<Op, max_r, threads> m{};
  std::vector<rec*> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(x.b.alloc<rec>(rows * sizeof(rec)));
    m.gathered[r] = x.all[r];
    m.out[r] = out[r];
  }
  m.rows = rows;
  m.count = x.words;
  const auto got = x.b.outputs_after(
      [&](rcclx::gpu::stream_t s) { rt::launch_emulated(n, decltype(m)::blocks(rows), threads, m, s); }, out, rows * sizeof(rec));
  for (std::size_t i = 0; i < rows; ++i) {
    const auto want = rt::topk_reference(logits.data() + i * vocab, vocab, 0, k);
    for (int r = 0; r < n; ++r) {
      rec e;
      std::memcpy(&e, got[r].data() + i * sizeof(rec), sizeof(rec));
      CAPTURE(i, r);
      for (int j = 0; j < k; ++j) {
        if constexpr (std::is_same<Op, fz::argmax>::value) CHECK(rt::same_entry(e.value, e.index, want[j]));
        else CHECK(rt::same_entry(e.value[j], e.index[j], want[j]));
      }
    }
  }
}

TEST_CASE("emulated_shard_scan + emulated_sampling_merge: each whole row's best entries on every rank",
          "[testing][fused]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  sampling<fz::argmax>(1);
  sampling<fz::topk<5>>(5);
}

}  // namespace
