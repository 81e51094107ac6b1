// rcclx/testing/hierarchical_reference.hpp: what multinode::hierarchical's AllReduce (sum) must
// produce, computed on the host from docs/multinode.md and independently of its code, per hop:
// exact: the node partials (each the FP32 sum of the node's ranks in order, rounded to T) summed in
// FP32 in node order and rounded to T, bit for bit; engine_reduce: the engine's sum in an order of
// its own, within a float64 tolerance; low_precision: each node partial quantized per FP8 block of
// the shard the call cuts (docs/multinode.md "Error bound of the FP8 hop"), then summed in FP32.
//
//   namespace rt = rcclx::testing;
//   const rt::error_summary s = rt::check_hierarchical_allreduce(out.data(), count, topo,
//       rcclx::multinode::inter_node::low_precision, chunk, [&](int rank, std::size_t i) { return x(rank, i); });
//   // s.max_error: the largest |out - float64 sum|; s.within: every element within its hop's bound
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../multinode/inter_node.hpp"
#include "../multinode/topology.hpp"
#include "error_bounds.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

// The runs [first, length) of an AllReduce of `count` elements on nodes of `local_ranks` ranks that
// the low_precision hop quantizes from their start: per chunk of `chunk` elements (whole
// local_ranks-element rows) its local_ranks shards, then the count % local_ranks tail as one run.
inline std::vector<std::pair<std::size_t, std::size_t>> hierarchical_shards(std::size_t count, std::size_t local_ranks,
                                                                            std::size_t chunk) {
  std::vector<std::pair<std::size_t, std::size_t>> s;
  const std::size_t main = count / local_ranks * local_ranks;
  for (std::size_t off = 0; off < main; off += chunk) {
    const std::size_t c = std::min(chunk, main - off) / local_ranks;
    for (std::size_t q = 0; q < local_ranks; ++q) s.emplace_back(off + q * c, c);
  }
  if (count > main) s.emplace_back(main, count - main);
  return s;
}

// out[0, count) of hierarchical's AllReduce on topology t with `hop`, against the inputs x(rank, i)
// (global rank, as T decodes them): chunk = elements per chunk of the call (L > 1: whole L-element
// rows within the node communicator's buffer_bytes; L = 1: hierarchical_options::chunk_bytes); the
// FP8 blocks are Config's. max_error is against the float64 sum of every rank's input.
template <class T, class Config = lpc::default_config, class X>
error_summary check_hierarchical_allreduce(const T* out, std::size_t count, const multinode::node_topology& t,
                                           multinode::inter_node hop, std::size_t chunk, X&& x) {
  constexpr std::size_t bs = Config::block_size;
  constexpr int max_nodes = 64;
  const std::size_t l = static_cast<std::size_t>(t.local_ranks);
  const int g_n = t.num_nodes, n = t.num_ranks();
  const double u = unit_roundoff<T>();
  if (g_n > max_nodes) throw error(errc::unsupported, "check_hierarchical_allreduce: at most 64 nodes");
  // Whole quantization blocks of each run, so that low_precision sees each block's amax.
  std::vector<std::pair<std::size_t, std::size_t>> blocks;
  for (const auto& s : hierarchical_shards(count, l, chunk))
    for (std::size_t b = 0; b < s.second; b += bs) blocks.emplace_back(s.first + b, std::min(bs, s.second - b));
  return summarize_errors(blocks.size(), [&](std::size_t bi, error_summary& e) {
    const std::size_t first = blocks[bi].first, len = blocks[bi].second;
    float part[bs][max_nodes];  // node partials s_g
    double amax[max_nodes] = {}, ref[bs] = {}, mag[bs] = {};
    for (std::size_t k = 0; k < len; ++k)
      for (int g = 0; g < g_n; ++g) {
        const int r0 = g * static_cast<int>(l);
        float s = x(r0, first + k);
        for (std::size_t q = 1; q < l; ++q) s += x(r0 + static_cast<int>(q), first + k);
        for (std::size_t q = 0; q < l; ++q) {
          const double v = x(r0 + static_cast<int>(q), first + k);
          ref[k] += v;
          mag[k] += std::fabs(v);
        }
        part[k][g] = static_cast<float>(T(s));
        amax[g] = std::max(amax[g], std::fabs(static_cast<double>(part[k][g])));
      }
    for (std::size_t k = 0; k < len; ++k) {
      const double got = static_cast<float>(out[first + k]);
      bool good = true;
      if (hop == multinode::inter_node::exact) {
        float order = part[k][0];
        for (int g = 1; g < g_n; ++g) order += part[k][g];
        const T want(order);
        good = std::memcmp(&want, &out[first + k], sizeof(T)) == 0;
      } else if (hop == multinode::inter_node::engine_reduce) {
        good = std::fabs(got - ref[k]) <= (2 * n * u + n * 0x1p-23) * mag[k] + u * std::fabs(ref[k]);
      } else {
        double q = 0, psum = 0, pabs = 0;
        for (int g = 0; g < g_n; ++g) {
          q += fp8_block_error<typename Config::format, Config::scale>(amax[g]);
          psum += part[k][g];
          pabs += std::fabs(part[k][g]);
        }
        good = std::fabs(got - psum) <= q + g_n * 0x1p-23 * (pabs + q) + u * (std::fabs(psum) + q);
      }
      e.add(std::fabs(got - ref[k]), good);
    }
  });
}

}  // namespace testing
RCCLX_NAMESPACE_END
