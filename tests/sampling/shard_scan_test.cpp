// fused::shard_scan (the rank-local half of vocabulary-parallel sampling: a block's argmax or top-K
// of one row of its shard) against a plain scan of the whole row in the combine's order of (value,
// index), bit for bit: random rows with ties, NaN, -0 and +0, infinities; rows ascending, all
// equal or with three values (the top-k scan's slots overflow and it restarts in its safe mode);
// rows shorter than K; every 16-byte misalignment of the row; global indices offset by `begin`;
// K = 1, 7, 50, 64, the default tuning and a tight one (few slots, a check after every chunk).
// gpu::warp_sort against std::sort (a warp is one thread on the host backend).
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/fused/shard_scan.hpp>
#include <rcclx/gpu/warp_sort.hpp>
#include <rcclx/testing/launch.hpp>
#include <rcclx/testing/references.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "../support/bits.hpp"
#include "../support/catch.hpp"

namespace {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
// One-thread host blocks (the host backend, unless every thread is emulated: tests/emulate).
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host && !rcclx::emulate_threads;
constexpr int threads = on_host ? 1 : 128;  // the block size of rcclx-bench-fused's sampling rows

// One row of the scanned buffer: x + offset, len elements, global indices from begin.
struct row_desc {
  std::size_t offset, len, begin;
};

template <class Scan>
struct scan_rows {
  static constexpr int max_threads_per_block = threads;
  const float* x;
  const row_desc* rows;
  typename Scan::record* out;
  std::size_t num_rows;
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    for (std::size_t r = static_cast<std::size_t>(ix.block); r < num_rows; r += static_cast<std::size_t>(ix.num_blocks)) {
      const row_desc d = rows[r];
      Scan::run(g, x + d.offset, d.len, d.begin, out + r);
    }
  }
};

// The K best entries of the whole row: testing::topk_reference (the combine's order as a sort key,
// written independently of it: NaN first, then larger values, -0 equal to +0, then lower indices).
using entry = rt::ranked_entry;

// Row patterns: 0 random multiples of 2^-12 in [-8, 8) (ties), 1 the same with NaNs, -0, +0 and
// infinities, 2 ascending, 3 all equal, 4 descending, 5 three values, 6 all -inf, 7 all NaN.
constexpr int patterns = 8;
float element(int pattern, std::size_t j, std::uint64_t seed) {
  const std::uint64_t h = rcclx_test::mix(seed * 1000003 + j);
  const float r = static_cast<float>(static_cast<int>(h >> 48) - 32768) * 0x1p-12f;
  switch (pattern) {
    case 0: return r;
    case 1: {
      const int c = static_cast<int>(h % 61);
      if (c == 0) return std::numeric_limits<float>::quiet_NaN();
      if (c == 1) return -0.0f;
      if (c == 2) return 0.0f;
      if (c == 3) return std::numeric_limits<float>::infinity();
      if (c == 4) return -std::numeric_limits<float>::infinity();
      return r;
    }
    case 2: return static_cast<float>(j) * 0x1p-12f - 4.0f;
    case 3: return 0.5f;
    case 4: return 4.0f - static_cast<float>(j) * 0x1p-12f;
    case 5: return static_cast<float>(h % 3) - 1.0f;
    case 6: return -std::numeric_limits<float>::infinity();
    default: return std::numeric_limits<float>::quiet_NaN();
  }
}

// Entry i of a record, and whether it is `want` bit for bit.
entry entry_at(const fz::argmax::record& r, int) { return {r.value, r.index}; }
template <class Record>
entry entry_at(const Record& r, int i) {
  return {r.value[i], r.index[i]};
}
bool same_bits(const entry& got, const entry& want) {
  return std::memcmp(&got.value, &want.value, sizeof(float)) == 0 && got.index == want.index;
}
template <class Combine>
constexpr int k_of = 1;  // argmax
template <int K>
constexpr int k_of<fz::topk<K>> = K;

template <class Combine, class... Policy>
struct config {
  using combine = Combine;
  using scan = fz::shard_scan<Combine, threads, Policy...>;
  static constexpr int k = k_of<Combine>;
};
// A tight tuning: the fewest slots the scan takes for K, a check after every chunk of 4 vectors.
template <int K>
using tight = fz::shard_scan_policy<4, on_host ? 2 * K : 1024, 1>;

}  // namespace

TEMPLATE_TEST_CASE("shard_scan: a block's argmax / top-K of a row against a scan of the whole row", "[sampling]",
                   (config<fz::argmax>), (config<fz::topk<1>>), (config<fz::topk<7>>), (config<fz::topk<50>>),
                   (config<fz::topk<64>>), (config<fz::argmax, fz::shard_scan_policy<1>>),
                   (config<fz::topk<7>, tight<7>>), (config<fz::topk<50>, tight<50>>),
                   (config<fz::topk<64>, tight<64>>)) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using scan = typename TestType::scan;
  using record = typename scan::record;
  constexpr int k = TestType::k;
  const bool small = rcclx_test::quick() || rcclx_test::tsan;
  std::vector<std::size_t> lengths{1, 2, 5, 49, 50, 51, 64, 127, 300, 1031, 4099};
  if (!small) lengths.push_back(20000);
  // Every row at offsets 0..3 floats from a 16-byte boundary: every split of its vectors.
  std::vector<row_desc> rows;
  std::vector<float> x;
  std::vector<int> pattern_of;
  for (int p = 0; p < patterns; ++p)
    for (const std::size_t len : lengths)
      for (std::size_t mis = 0; mis < 4; ++mis) {
        const std::size_t offset = (x.size() + 3) / 4 * 4 + mis;
        x.resize(offset + len);
        for (std::size_t j = 0; j < len; ++j) x[offset + j] = element(p, j, rows.size());
        rows.push_back({offset, len, rows.size() % 2 ? std::size_t{1000003} : 0});
        pattern_of.push_back(p);
      }
  float* dx = static_cast<float*>(rcclx::gpu::device_malloc(x.size() * sizeof(float) + 16));
  auto* drows = static_cast<row_desc*>(rcclx::gpu::device_malloc(rows.size() * sizeof(row_desc)));
  auto* dout = static_cast<record*>(rcclx::gpu::device_malloc(rows.size() * sizeof(record)));
  rcclx::gpu::copy(dx, x.data(), x.size() * sizeof(float));
  rcclx::gpu::copy(drows, rows.data(), rows.size() * sizeof(row_desc));
  const scan_rows<scan> f{dx, drows, dout, rows.size()};
  const int blocks = std::max(1, std::min(64, rt::max_blocks_per_rank<scan_rows<scan>>(1, threads)));
  rt::launch_emulated(1, blocks, threads, f);
  rcclx::gpu::device_synchronize();
  std::vector<record> got(rows.size());
  rcclx::gpu::copy(got.data(), dout, got.size() * sizeof(record));
  for (void* q : {static_cast<void*>(dx), static_cast<void*>(drows), static_cast<void*>(dout)}) rcclx::gpu::device_free(q);
  int wrong = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::vector<entry> want = rt::topk_reference(x.data() + rows[r].offset, rows[r].len, rows[r].begin, k);
    bool ok = true;
    for (int i = 0; i < k; ++i) ok = ok && same_bits(entry_at(got[r], i), want[static_cast<std::size_t>(i)]);
    if (!ok && ++wrong <= 5)
      FAIL_CHECK("row " << r << ": pattern " << pattern_of[r] << ", length " << rows[r].len << ", offset "
                        << rows[r].offset % 4 << ", begin " << rows[r].begin << ": the record differs from the scan of "
                        << "the whole row");
  }
  CHECK(wrong == 0);
}

namespace {
template <bool Descending>
struct sort_warp {
  static constexpr int max_threads_per_block = RCCLX_WARP_SIZE;
  const float* in;
  float* out;
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index) const {
    const int lane = g.thread_rank();
    const rcclx::gpu::warp_sort<float> s;
    out[lane] = Descending ? s.descending(in[lane]) : s.ascending(in[lane]);
  }
};
}  // namespace

TEST_CASE("gpu::warp_sort: one value per lane sorted across the warp", "[sampling][gpu]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  constexpr int w = on_host ? 1 : RCCLX_WARP_SIZE;
  float* d = static_cast<float*>(rcclx::gpu::device_malloc(2 * w * sizeof(float)));
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<float> in(w);
    for (int i = 0; i < w; ++i)  // ties too: 16 values for 32 or 64 lanes
      in[static_cast<std::size_t>(i)] = static_cast<float>(rcclx_test::mix(seed * 131 + static_cast<std::uint64_t>(i)) % 16) - 8.0f;
    rcclx::gpu::copy(d, in.data(), w * sizeof(float));
    std::vector<float> down(w), up(w);
    rt::launch_emulated(1, 1, w, sort_warp<true>{d, d + w});
    rcclx::gpu::device_synchronize();
    rcclx::gpu::copy(down.data(), d + w, w * sizeof(float));
    rt::launch_emulated(1, 1, w, sort_warp<false>{d, d + w});
    rcclx::gpu::device_synchronize();
    rcclx::gpu::copy(up.data(), d + w, w * sizeof(float));
    std::vector<float> want = in;
    std::sort(want.begin(), want.end(), std::greater<float>());
    CHECK(down == want);
    std::reverse(want.begin(), want.end());
    CHECK(up == want);
  }
  rcclx::gpu::device_free(d);
}
