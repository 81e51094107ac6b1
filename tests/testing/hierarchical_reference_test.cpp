// testing/hierarchical_reference.hpp against outputs built here from docs/multinode.md, element by
// element: the exact hop's node-order sum (accepted; one bit off refused), the float64 sum rounded
// once (engine_reduce: accepted; off by more than its tolerance refused), and the low_precision hop
// emulated with the library's FP8 block quantizer on each node partial's run of a chunked call with
// a tail (accepted; moved past the FP8 bound refused); and the runs themselves on a hand-made call.
#include <rcclx/fp8/block_scale.hpp>
#include <rcclx/testing/hierarchical_reference.hpp>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
namespace mn = rcclx::multinode;
using hop = mn::inter_node;
using cfg = rcclx::lpc::default_config;

TEST_CASE("hierarchical_shards: per chunk of whole rows its L shards, then the tail", "[testing][references]") {
  using run = std::pair<std::size_t, std::size_t>;
  const std::vector<run> want{{0, 4}, {4, 4}, {8, 4}, {12, 4}, {16, 2}, {18, 2}, {20, 1}};
  CHECK(rt::hierarchical_shards(21, 2, 8) == want);
  CHECK(rt::hierarchical_shards(6, 3, 100) == std::vector<run>{{0, 2}, {2, 2}, {4, 2}});
}

// G nodes of L ranks; rank p's element i: a value in [-1, 1) that T represents.
template <class T>
struct call {
  mn::node_topology topo;
  std::size_t count, chunk;

  float x(int p, std::size_t i) const {
    const std::uint32_t h = static_cast<std::uint32_t>((i * 2654435761u) ^ (static_cast<std::uint32_t>(p) * 40503u));
    return static_cast<float>(T(static_cast<float>(h % 2001) / 1000.0f - 1.0f));
  }
  // Node g's partial: the FP32 sum of its ranks in order, rounded to T.
  float partial(int g, std::size_t i) const {
    const int l = topo.local_ranks;
    float s = x(g * l, i);
    for (int q = 1; q < l; ++q) s += x(g * l + q, i);
    return static_cast<float>(T(s));
  }
  double exact(std::size_t i) const {
    double s = 0;
    for (int p = 0; p < topo.num_ranks(); ++p) s += x(p, i);
    return s;
  }
  // The FP8 block holding element i: its run (docs/multinode.md: chunks of whole rows, a shard of
  // chunk / L each, the count % L tail as one run), then blocks of 32 from the run's start.
  std::pair<std::size_t, std::size_t> block_of(std::size_t i) const {
    const std::size_t l = static_cast<std::size_t>(topo.local_ranks), main = count / l * l;
    std::size_t start = main, len = count - main;
    if (i < main) {
      const std::size_t off = i / chunk * chunk;
      len = std::min(chunk, main - off) / l;
      start = off + (i - off) / len * len;
    }
    const std::size_t b = start + (i - start) / 32 * 32;
    return {b, std::min<std::size_t>(32, start + len - b)};
  }
  // Node g's partial of element i after the FP8 round trip of its block.
  float quantized(int g, std::size_t i) const {
    static_assert(cfg::block_size == 32, "blocks of 32");
    const auto [b, len] = block_of(i);
    float in[32] = {}, out[32];
    for (std::size_t k = 0; k < len; ++k) in[k] = partial(g, b + k);
    rcclx::fp8::packed<32> q;
    const auto s = rcclx::fp8::block_quantize<cfg::format, 32, cfg::scale>{}(in, q);
    rcclx::fp8::block_dequantize<cfg::format, 32, cfg::scale>{}(q, s, out);
    return out[i - b];
  }

  std::vector<T> output(hop h) const {
    std::vector<T> out(count);
    for (std::size_t i = 0; i < count; ++i) {
      float s = 0;
      for (int g = 0; g < topo.num_nodes; ++g) {
        const float v = h == hop::low_precision ? quantized(g, i) : partial(g, i);
        s = g == 0 ? v : s + v;
      }
      out[i] = h == hop::engine_reduce ? T(static_cast<float>(exact(i))) : T(s);
    }
    return out;
  }
  rt::error_summary check(const std::vector<T>& out, hop h) const {
    return rt::check_hierarchical_allreduce(out.data(), count, topo, h, chunk, [&](int p, std::size_t i) { return x(p, i); });
  }
};

TEMPLATE_TEST_CASE("check_hierarchical_allreduce: every hop's documented result passes, a wrong one fails",
                   "[testing][references]", float, rcclx::bf16) {
  using T = TestType;
  for (const call<T> c : {call<T>{{0, 3, 0, 2}, 2 * 97 + 1, 2 * 40}, call<T>{{0, 2, 0, 1}, 150, 64},
                          call<T>{{0, 1, 0, 4}, 130, 4 * 20}}) {
    CAPTURE(c.topo.num_nodes, c.topo.local_ranks, c.count, c.chunk);
    for (const hop h : {hop::exact, hop::engine_reduce, hop::low_precision}) {
      CAPTURE(mn::to_string(h));
      std::vector<T> out = c.output(h);
      const rt::error_summary ok = c.check(out, h);
      CHECK(ok.within);
      CHECK(ok.max_error < (h == hop::low_precision ? 0.5 : 0.05));
      const std::size_t i = c.count / 2;
      if (h == hop::exact) {  // one bit off the node-order sum
        std::uint32_t bits = 0;
        std::memcpy(&bits, &out[i], sizeof(T));
        bits ^= 1u;
        std::memcpy(&out[i], &bits, sizeof(T));
      } else {
        out[i] = T(static_cast<float>(c.exact(i) + 1.0));
      }
      const rt::error_summary bad = c.check(out, h);
      CHECK_FALSE(bad.within);
      if (h != hop::exact) CHECK(bad.max_error >= 0.9);
    }
  }
}

TEST_CASE("check_hierarchical_allreduce: the exact hop is the node-order sum, not the float64 one", "[testing][references]") {
  // Node partials 1, 2^-24, 2^-24: in node order the small ones vanish; summed first they would not.
  const mn::node_topology t{0, 3, 0, 1};
  const auto x = [](int p, std::size_t) { return p == 0 ? 1.0f : 0x1p-24f; };
  const float order = (1.0f + 0x1p-24f) + 0x1p-24f, other = 1.0f + (0x1p-24f + 0x1p-24f);
  REQUIRE(order != other);
  CHECK(rt::check_hierarchical_allreduce(&order, 1, t, hop::exact, 1, x).within);
  CHECK_FALSE(rt::check_hierarchical_allreduce(&other, 1, t, hop::exact, 1, x).within);
  CHECK(rt::check_hierarchical_allreduce(&other, 1, t, hop::engine_reduce, 1, x).within);
}

}  // namespace
