// Example 09's layer on emulated ranks for tests/multicall (decode_runs.hpp).
#include "decode_runs.hpp"

#include <rcclx/testing/emulated_world.hpp>

#include <algorithm>
#include <cstring>

#include "../../examples/09_decode_layer/decode_layer.hpp"

namespace multicall_test {

namespace dl = decode_layer;
namespace fz = rcclx::fused;
using rcclx::algorithm;

const char* name(algos a) {
  switch (a) {
    case algos::flat: return "flat";
    case algos::tree: return "tree";
    case algos::automatic: return "automatic";
    case algos::mixed: return "merge automatic, o_proj tree, down_proj flat";
  }
  return "?";
}

namespace {

template <class U>
U* put(std::vector<void*>& owned, const std::vector<U>& v) {
  owned.push_back(rcclx::gpu::device_malloc(v.size() * sizeof(U) + 16));
  rcclx::gpu::copy(owned.back(), v.data(), v.size() * sizeof(U));
  return static_cast<U*>(owned.back());
}
template <class U>
U* zeros(std::vector<void*>& owned, std::size_t count) {
  owned.push_back(rcclx::gpu::device_malloc(count * sizeof(U) + 16));
  rcclx::gpu::memset_zero(owned.back(), count * sizeof(U) + 16);
  return static_cast<U*>(owned.back());
}

template <class T>
std::vector<T> download(const T* d, std::size_t count) {
  std::vector<T> h(count);
  rcclx::gpu::copy(h.data(), d, count * sizeof(T));
  return h;
}

template <class T>
std::uint32_t bits_of(const T& x) {
  std::uint32_t b = 0;
  std::memcpy(&b, &x, sizeof(T));
  return b;
}

template <class T, algorithm M, algorithm O, algorithm D, class Map>
layer_run run(int n, std::size_t hidden, int launches) {
  using kernel = dl::layer_kernel<T, M, O, D, Map>;
  const dl::layer_shape s{6, 8, 32, hidden};  // 6 tokens on 4 blocks: two blocks own two tokens
  dl::layer_plan<T, M, O, D> lp(s);
  rcclx::testing::emulated_world<dl::max_ranks> world(n, lp.plan.bytes(), lp.plan.slots());
  lp.plan.place(world);
  kernel k{};
  for (int r = 0; r < n; ++r) {
    k.tables[r] = world.device_tables<T>() + r;
    k.record_tables[r] = world.device_tables<dl::record<T>>() + r;
  }
  k.merge_region = lp.plan[lp.merge];
  k.o_proj_region = lp.plan[lp.o_proj];
  k.down_proj_region = lp.plan[lp.down_proj];
  k.shape = s;
  const dl::problem<T> p = dl::make_problem<T>(n, s, 17u + static_cast<unsigned>(hidden));
  std::vector<void*> owned;
  const std::size_t H = hidden, tokens = static_cast<std::size_t>(s.tokens), count = tokens * H;
  for (int r = 0; r < n; ++r) {
    const int h0 = dl::head_begin(r, n, s.heads), h1 = dl::head_begin(r + 1, n, s.heads);
    std::vector<T> wo(p.wo.begin() + static_cast<std::size_t>(h0) * dl::head_dim * H,
                      p.wo.begin() + static_cast<std::size_t>(h1) * dl::head_dim * H);
    if (wo.empty()) wo.resize(1);
    dl::rank_args<T>& a = k.args[r];
    a.partial = put(owned, p.partial[r]);
    a.wo = put(owned, wo);
    a.wup = put(owned, p.wup[r]);
    a.wdown = put(owned, p.wdown[r]);
    a.x = put(owned, p.x);
    a.norm_weight = put(owned, p.norm_weight);
    a.attn = zeros<T>(owned, tokens * static_cast<std::size_t>(s.heads) * dl::head_dim);
    a.act = zeros<float>(owned, tokens * static_cast<std::size_t>(s.ffn));
    a.h1 = zeros<T>(owned, count);
    a.normed = zeros<T>(owned, count);
    a.out = zeros<T>(owned, count);
    a.head_first = h0;
    a.head_end = h1;
  }
  layer_run res;
  try {
    const int blocks = std::max(1, std::min(4, rcclx::testing::max_blocks_per_rank<kernel>(n, dl::threads)));
    for (int i = 0; i < launches; ++i) rcclx::testing::launch_emulated(world, blocks, dl::threads, k);
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  const dl::reference ref = dl::layer_reference(p);
  std::vector<T> out0, normed0;
  for (int r = 0; r < n; ++r) {
    const std::vector<T> out = download(k.args[r].out, count), normed = download(k.args[r].normed, count);
    double unused = 0;
    res.out_of_bound += dl::out_of_bound(out, ref.out, ref.out_err, res.max_err) +
                        dl::out_of_bound(normed, ref.normed, ref.normed_err, unused);
    res.checked += 2 * count;
    if (r == 0) {
      out0 = out;
      normed0 = normed;
      for (const T& x : out) res.bits.push_back(bits_of(x));
      for (const T& x : normed) res.bits.push_back(bits_of(x));
    } else {
      for (std::size_t i = 0; i < count; ++i)
        res.rank_differ += (bits_of(out[i]) != bits_of(out0[i])) + (bits_of(normed[i]) != bits_of(normed0[i]));
    }
  }
  for (void* q : owned) rcclx::gpu::device_free(q);
  return res;
}

template <class T, class Map>
layer_run run_algos(int n, algos a, std::size_t hidden, int launches) {
  constexpr algorithm F = algorithm::flat, R = algorithm::tree, A = algorithm::automatic;
  switch (a) {
    case algos::flat: return run<T, F, F, F, Map>(n, hidden, launches);
    case algos::tree: return run<T, R, R, R, Map>(n, hidden, launches);
    case algos::automatic: return run<T, A, A, A, Map>(n, hidden, launches);
    case algos::mixed: return run<T, A, R, F, Map>(n, hidden, launches);
  }
  return {};
}

template <class T>
layer_run run_type(int n, algos a, std::size_t hidden, int launches) {
  if (hidden % (16 / sizeof(T)) == 0) return run_algos<T, fz::row_tiles>(n, a, hidden, launches);
  return run_algos<T, fz::ragged_row_tiles>(n, a, hidden, launches);
}

}  // namespace

layer_run run_layer(int n, bool bf16, algos a, std::size_t hidden, int launches) {
  return bf16 ? run_type<rcclx::bf16>(n, a, hidden, launches) : run_type<float>(n, a, hidden, launches);
}

}  // namespace multicall_test
