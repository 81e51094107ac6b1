// rcclx/multinode/hierarchical.hpp: AllReduce, AllGather and ReduceScatter over several nodes,
// composed from rcclx's intra-node communicator (direct loads) and an engine the user already runs
// across nodes (engine.hpp: MPI, NCCL, RCCL). Host launchers, each rank on its own stream.
//
//   rcclx::host::communicator<8> node_comm(node_bootstrap);          // the ranks of this node
//   rcclx::multinode::mpi_engine across(mpi_comm_of_my_local_rank);  // one rank per node
//   rcclx::multinode::hierarchical<8> h(node_comm, across, rcclx::multinode::node_topology::from_env());
//   h.allreduce(in, out, count);                                      // exact, node order
//   h.allreduce(in, out, count, rcclx::multinode::inter_node::low_precision, stream);   // FP8 between nodes
//   h.allgather(in, gathered, count);                                 // gathered: G * L * count
//   h.reduce_scatter(in, mine, count);                                // count % (G * L) == 0
//
// G nodes of L ranks each; global rank p = g * L + l. Elements: float, bf16, fp16 (low precision:
// float, bf16); the sum (the engine's operation).
//
// AllReduce (count elements; C = count / L, the tail count % L below):
//   1. intra-node ReduceScatter (rcclx, plain): local rank l holds s_g = T(sum over l' = 0..L-1 of
//      fp32(x_{g,l'}[l * C + i])), added in fp32 in local rank order, rounded once to T;
//   2. inter-node hop on the shard s (C elements), by `inter_node`:
//      exact:         the engine's AllGather of every node's s; r = T(sum over g = 0..G-1 of fp32(s_g)),
//                     in fp32 in node order. Traffic per rank: (G - 1) * C * sizeof(T) in;
//      engine_reduce: the engine's AllReduce of s (in T): the engine's order and arithmetic
//                     (NCCL, Open MPI: the same bits on every rank); traffic 2 (G - 1) / G * C * sizeof(T);
//      low_precision: s quantized to the LPC wire format (lpc::default_config: FP8 e4m3 on CUDA and
//                     host, e4m3_fnuz on HIP, one fp32 scale per 32 elements of the shard), the
//                     engine's AllGather of the FP8 bytes + scales; r = T(sum over g = 0..G-1 of
//                     decode(q_g) * scale_g), in fp32 in node order (this node's own part dequantized
//                     too). Traffic: (G - 1) * C * (1 + 4/32) bytes in;
//   3. intra-node AllGather (rcclx, plain, exact copies) of r.
//   So for exact: out[i] = T(sum_{g=0..G-1} fp32(T(sum_{l=0..L-1} fp32(x_{g,l}[i])))), both sums left
//   to right from the first term, on every rank; for T = float the inner rounding is exact. The order
//   depends on L (the node's ranks are added first) but not on which engine or how many processes
//   run it. Calls larger than the communicator's buffer_bytes run in chunks of whole L-element rows
//   (elementwise: the same bits, except that low_precision's quantization blocks start at each
//   chunk's shard); the last count % L elements go through the intra-node AllReduce (the same
//   rank-order fp32 sum) and the same hop, so any count works.
// AllGather (count elements per rank; out: G * L * count, out[(g * L + l) * count + i] = x_{g,l}[i]):
//   intra-node AllGather into out's block of this node, then the engine's AllGather of that block
//   (in place). low_precision: the node's block (L * count elements) quantized as one buffer, the
//   engine gathers the FP8 form, every node's block (this node's too) is the dequantized copy.
// ReduceScatter (count elements per rank, count % (G * L) == 0, C = count / (G * L); out: C elements,
//   rank g * L + l gets sum over every rank of x[(g * L + l) * C + i]): G intra-node ReduceScatters
//   (one per destination node: partial sums in local rank order, rounded to T), then the hop on the
//   G * C partials with this node's C taken: exact and low_precision gather all G * C partials of
//   every node (traffic (G - 1) * G * C elements in: G times the minimum), engine_reduce all-reduces them.
//
// FP8 error (low_precision): each node's partial is quantized once, so the result of AllReduce and
// ReduceScatter is off by at most sum over g of c_F * amax_g(block) (e4m3 c_F = 1/28, fp32 scales;
// amax_g the largest |s_g| in the 32-element quantization block of the shard holding the element),
// plus fp32 summation and T rounding (docs/multinode.md); AllGather by one quantization per element.
//
// Every call is collective over all G * L ranks, in the same order, with the same arguments.
// With the communicator's check_calls (default), a call first exchanges a descriptor through the
// engine and the node's bootstrap, so a local error (a bad pointer, a count that differs) is thrown
// on every rank of the job, never left hanging in the engine. A peer that dies is reported by the
// intra-node communicator (the bounded wait names it) on its node and by the engine as the engine
// reports failures (MPI's default: the job aborts). Lifetime: the communicator and the engine must
// outlive this object. Scratch: device buffers kept by this object, grown on demand (reserve() before
// a graph capture: a capture must not allocate).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/types.hpp"
#include "../fp8/quantize_blocks.hpp"
#include "../gpu/runtime.hpp"
#include "../host/communicator.hpp"
#include "../lpc/config.hpp"
#include "detail/node_sum.hpp"
#include "engine.hpp"
#include "topology.hpp"

RCCLX_NAMESPACE_BEGIN
namespace multinode {

// What crosses the network between nodes.
enum class inter_node {
  exact,          // the engine's AllGather, summed in fp32 in node order (a fixed order)
  engine_reduce,  // the engine's AllReduce (its order and arithmetic); AllGather: as exact
  low_precision,  // block-scaled FP8 (the LPC wire format) through the engine's AllGather
  default_hop = exact
};

inline const char* to_string(inter_node h) {
  switch (h) {
    case inter_node::exact: return "exact";
    case inter_node::engine_reduce: return "engine_reduce";
    case inter_node::low_precision: return "low_precision";
  }
  return "invalid";
}

template <class T>
struct data_type_of;
template <>
struct data_type_of<float> {
  static constexpr data_type value = data_type::float32;
};
template <>
struct data_type_of<bf16> {
  static constexpr data_type value = data_type::bfloat16;
};
template <>
struct data_type_of<fp16> {
  static constexpr data_type value = data_type::float16;
};

namespace detail {

template <class T>
inline constexpr bool is_element_v =
    std::is_same<T, float>::value || std::is_same<T, bf16>::value || std::is_same<T, fp16>::value;

// What every rank of the job must agree on before a call; exchanged through the engine.
struct call_word {
  std::uint32_t failed;
  std::uint32_t kind;
  std::uint32_t hop;
  std::uint32_t type_bytes;
  std::uint64_t count;
  char message[232];
};
static_assert(sizeof(call_word) == 256, "call_word is one 256-byte record");

struct device_buffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
};

}  // namespace detail

template <int MaxRanks = max_ranks>
class hierarchical {
 public:
  using communicator_type = host::communicator<MaxRanks>;
  using wire = lpc::default_config;  // the FP8 format, block and scale kind of inter_node::low_precision

  // Collective over every rank of the job. Checks that the communicator is this node's (rank =
  // local_rank, size = local_ranks), that the engine joins the nodes (rank = node, size = num_nodes),
  // and, through the engine, that every node has the same number of ranks; a failure anywhere is
  // thrown on every rank (the uneven-nodes error names each node's local size).
  hierarchical(communicator_type& intra, engine& inter, node_topology topo) : intra_(intra), inter_(inter), topo_(topo) {
    std::string err;
    try {
      topo_.validate("hierarchical");
      if (intra.num_ranks() != topo_.local_ranks || intra.rank() != topo_.local_rank)
        err = "hierarchical: the communicator has rank " + std::to_string(intra.rank()) + " of " +
              std::to_string(intra.num_ranks()) + ", the topology says local rank " + std::to_string(topo_.local_rank) +
              " of " + std::to_string(topo_.local_ranks);
      else if (inter.num_ranks() != topo_.num_nodes || inter.rank() != topo_.node)
        err = std::string("hierarchical: the engine (") + inter.name() + ") has rank " + std::to_string(inter.rank()) +
              " of " + std::to_string(inter.num_ranks()) + ", the topology says node " + std::to_string(topo_.node) +
              " of " + std::to_string(topo_.num_nodes);
    } catch (const std::exception& e) {
      err = e.what();
    }
    check_dev_.ptr = gpu::device_malloc(sizeof(detail::call_word) * static_cast<std::size_t>(inter.num_ranks() + 1));
    check_dev_.bytes = sizeof(detail::call_word) * static_cast<std::size_t>(inter.num_ranks() + 1);
    // Every engine member reports its node's local size; uneven nodes fail in each engine that joins
    // two of them, and the node's bootstrap spreads the error to the node's other ranks.
    detail::call_word w{};
    w.kind = 0x746f706fu;
    w.count = static_cast<std::uint64_t>(topo_.local_ranks);
    w.hop = static_cast<std::uint32_t>(topo_.num_nodes);
    const std::vector<detail::call_word> all = exchange_across(w, gpu::stream_t{});
    for (std::size_t g = 0; g < all.size() && err.empty(); ++g)
      if (all[g].count != w.count || all[g].hop != w.hop) {
        err = "hierarchical: uneven nodes are not supported: ranks per node (LOCAL_WORLD_SIZE):";
        for (std::size_t q = 0; q < all.size(); ++q)
          err += std::string(q ? ", " : " ") + "node " + std::to_string(q) + ": " + std::to_string(all[q].count);
        err += "; nodes: " + std::to_string(w.hop) + " here, " + std::to_string(all[g].hop) + " on node " + std::to_string(g);
      }
    try {
      intra_.template check_user_call<int>("hierarchical set-up", 0, 0, err);
    } catch (...) {
      free_all();
      throw;
    }
    if (!err.empty()) {  // check_calls off: the local error, on this rank
      free_all();
      throw error(errc::invalid_argument, err);
    }
  }

  hierarchical(const hierarchical&) = delete;
  hierarchical& operator=(const hierarchical&) = delete;
  ~hierarchical() {
    try {
      gpu::device_synchronize();
    } catch (...) {
    }
    free_all();
  }

  const node_topology& topology() const { return topo_; }
  communicator_type& intra_node() const { return intra_; }
  engine& inter_node_engine() const { return inter_; }

  // Grows every scratch buffer to at least `bytes` now (before a graph capture, which must not
  // allocate). The calls need, per chunk, up to G * C_chunk * sizeof(T) (exact), G * (G * C) * sizeof(T)
  // (reduce_scatter) or G times the FP8 form (low_precision).
  void reserve(std::size_t bytes) {
    for (auto& b : scratch_) grow(b, bytes, gpu::stream_t{});
  }

  // AllReduce (sum) of `count` elements; input may equal output. See the file comment for the order.
  template <class T>
  void allreduce(const T* input, T* output, std::size_t count, inter_node hop = inter_node::default_hop,
                 gpu::stream_t stream = {}) {
    const std::string who = "hierarchical allreduce";
    std::string local;
    try {
      check_args<T>(who, hop);
      check_pointer(who, input, count, "input");
      check_pointer(who, output, count, "output");
    } catch (const std::exception& e) {
      local = e.what();
    }
    agree<T>(who, 1, count, hop, local, stream);
    if (count == 0) return;
    const std::size_t l = static_cast<std::size_t>(topo_.local_ranks);
    // Chunks of whole L-element rows that fit the workspace (reduce-scatter input, allgather output).
    std::size_t rows = intra_.options().buffer_bytes / sizeof(T) / l;
    if (rows == 0) rows = 1;
    const std::size_t main = count / l * l;
    for (std::size_t off = 0; off < main; off += rows * l) {
      const std::size_t c = (main - off < rows * l ? main - off : rows * l) / l;
      T* shard = static_cast<T*>(grow(scratch_[0], c * sizeof(T), stream));
      intra_.reduce_scatter(input + off, shard, c * l, reduce_op::sum, algorithm::automatic, stream);
      reduce_across<T>(shard, c, 0, c, shard, hop, stream);
      intra_.allgather(shard, output + off, c, algorithm::automatic, stream);
    }
    if (const std::size_t t = count - main) {
      T* tail = static_cast<T*>(grow(scratch_[0], t * sizeof(T), stream));
      intra_.allreduce(input + main, tail, t, reduce_op::sum, algorithm::automatic, stream);
      reduce_across<T>(tail, t, 0, t, output + main, hop, stream);
    }
  }

  // AllGather of `count` elements per rank into output (G * L * count elements, disjoint from input):
  // output[(g * L + l) * count + i] = rank (g, l)'s input[i].
  template <class T>
  void allgather(const T* input, T* output, std::size_t count, inter_node hop = inter_node::default_hop,
                 gpu::stream_t stream = {}) {
    const std::string who = "hierarchical allgather";
    const std::size_t g_n = static_cast<std::size_t>(topo_.num_nodes), l = static_cast<std::size_t>(topo_.local_ranks);
    const std::size_t node_elems = l * count;
    std::string local;
    try {
      check_args<T>(who, hop);
      check_pointer(who, input, count, "input");
      check_pointer(who, output, g_n * node_elems, "output");
      if (count > 0 && overlaps(input, count * sizeof(T), output, g_n * node_elems * sizeof(T)))
        throw error(errc::invalid_argument, who + ": output overlaps input");
    } catch (const std::exception& e) {
      local = e.what();
    }
    agree<T>(who, 2, count, hop, local, stream);
    if (count == 0) return;
    T* mine = output + static_cast<std::size_t>(topo_.node) * node_elems;
    intra_.allgather(input, mine, count, algorithm::automatic, stream);
    if (hop != inter_node::low_precision) {
      inter_.allgather(mine, output, node_elems * sizeof(T), stream);  // in place
      return;
    }
    if constexpr (lpc::is_element_v<T>) {
      using layout = typename wire::layout;
      const std::size_t part = layout::total_bytes(node_elems);
      // The node's block is quantized from a 16-byte aligned copy (output blocks need not be aligned).
      T* src = static_cast<T*>(grow(scratch_[0], node_elems * sizeof(T), stream));
      gpu::copy_async(src, mine, node_elems * sizeof(T), stream);
      auto* q = static_cast<std::uint8_t*>(grow(scratch_[1], part, stream));
      auto* gathered = static_cast<std::uint8_t*>(grow(scratch_[2], g_n * part, stream));
      fp8::quantize_blocks<typename wire::format, wire::block_size, wire::scale>(src, node_elems, q, layout::scales(q, node_elems),
                                                                                 stream);
      inter_.allgather(q, gathered, part, stream);
      for (std::size_t g = 0; g < g_n; ++g)
        detail::dequantize_sum<wire>(gathered + g * part, 1, part, node_elems, 0, node_elems, output + g * node_elems, stream);
    }
  }

  // ReduceScatter (sum) of `count` elements per rank (count % (G * L) == 0, C = count / (G * L)) into
  // output (C elements, disjoint from input): rank (g, l) gets the sum of every rank's block g * L + l.
  template <class T>
  void reduce_scatter(const T* input, T* output, std::size_t count, inter_node hop = inter_node::default_hop,
                      gpu::stream_t stream = {}) {
    const std::string who = "hierarchical reduce_scatter";
    const std::size_t g_n = static_cast<std::size_t>(topo_.num_nodes), l = static_cast<std::size_t>(topo_.local_ranks);
    const std::size_t ranks = g_n * l, c = count / ranks;
    std::string local;
    try {
      check_args<T>(who, hop);
      if (count % ranks != 0)
        throw error(errc::invalid_argument, who + ": count = " + std::to_string(count) +
                                                " is not a multiple of the job's ranks (" + std::to_string(g_n) +
                                                " nodes x " + std::to_string(l) + " = " + std::to_string(ranks) + ")");
      check_pointer(who, input, count, "input");
      check_pointer(who, output, c, "output");
      if (c > 0 && overlaps(input, count * sizeof(T), output, c * sizeof(T)))
        throw error(errc::invalid_argument, who + ": output overlaps input");
    } catch (const std::exception& e) {
      local = e.what();
    }
    agree<T>(who, 3, count, hop, local, stream);
    if (c == 0) return;
    T* partial = static_cast<T*>(grow(scratch_[0], g_n * c * sizeof(T), stream));
    for (std::size_t g = 0; g < g_n; ++g)
      intra_.reduce_scatter(input + g * l * c, partial + g * c, l * c, reduce_op::sum, algorithm::automatic, stream);
    reduce_across<T>(partial, g_n * c, static_cast<std::size_t>(topo_.node) * c, c, output, hop, stream);
  }

 private:
  // dst[i] = sum over nodes of src_g[first + i], i < n (src: `total` elements of this node's part,
  // in scratch_[0] or another 16-byte aligned buffer that the hop may overwrite).
  template <class T>
  void reduce_across(T* src, std::size_t total, std::size_t first, std::size_t n, T* dst, inter_node hop,
                     gpu::stream_t stream) {
    const int g_n = topo_.num_nodes;
    switch (hop) {
      case inter_node::engine_reduce:
        inter_.allreduce(src, src, total, data_type_of<T>::value, stream);
        if (dst != src + first) gpu::copy_async(dst, src + first, n * sizeof(T), stream);
        return;
      case inter_node::low_precision:
        if constexpr (lpc::is_element_v<T>) {
          using layout = typename wire::layout;
          const std::size_t part = layout::total_bytes(total);
          auto* q = static_cast<std::uint8_t*>(grow(scratch_[1], part, stream));
          auto* gathered = static_cast<std::uint8_t*>(grow(scratch_[2], static_cast<std::size_t>(g_n) * part, stream));
          fp8::quantize_blocks<typename wire::format, wire::block_size, wire::scale>(src, total, q, layout::scales(q, total),
                                                                                     stream);
          inter_.allgather(q, gathered, part, stream);
          detail::dequantize_sum<wire>(gathered, g_n, part, total, first, n, dst, stream);
        }
        return;
      default: {
        T* gathered = static_cast<T*>(grow(scratch_[2], static_cast<std::size_t>(g_n) * total * sizeof(T), stream));
        inter_.allgather(src, gathered, total * sizeof(T), stream);
        detail::sum_parts(gathered, g_n, total, first, n, dst, stream);
        return;
      }
    }
  }

  template <class T>
  void check_args(const std::string& who, inter_node hop) const {
    if constexpr (!detail::is_element_v<T>) {
      throw error(errc::unsupported, who + ": elements must be float, rcclx::bf16 or rcclx::fp16");
    } else {
      if (hop != inter_node::exact && hop != inter_node::engine_reduce && hop != inter_node::low_precision)
        throw error(errc::invalid_argument, who + ": inter_node = " + std::to_string(static_cast<int>(hop)) +
                                                " is not an rcclx::multinode::inter_node");
      if (hop == inter_node::low_precision && !lpc::is_element_v<T>)
        throw error(errc::unsupported, who + ": inter_node::low_precision takes float or bf16 elements, not fp16");
    }
  }

  template <class T>
  static void check_pointer(const std::string& who, const T* p, std::size_t count, const char* name) {
    if (count > 0 && p == nullptr)
      throw error(errc::invalid_argument, who + ": " + name + " is null (" + std::to_string(count) + " elements)");
  }

  static bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
    const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
    return x < y + b_bytes && y < x + a_bytes;
  }

  // Every rank of the job learns whether any rank's call is bad or differs (engine, then the node's
  // bootstrap), and throws the same error; with check_calls off, only a local error is thrown.
  template <class T>
  void agree(const std::string& who, std::uint32_t kind, std::size_t count, inter_node hop, const std::string& local,
             gpu::stream_t stream) {
    if (!intra_.options().check_calls) {
      if (!local.empty()) throw error(errc::invalid_argument, local);
      return;
    }
    std::string err = local;
    if (!gpu::stream_is_capturing(stream)) {
      detail::call_word w{};
      w.failed = local.empty() ? 0u : 1u;
      w.kind = kind;
      w.hop = static_cast<std::uint32_t>(hop);
      w.type_bytes = static_cast<std::uint32_t>(sizeof(T));
      w.count = count;
      host::detail::copy_name(w.message, local.c_str());
      const std::vector<detail::call_word> all = exchange_across(w, stream);
      for (std::size_t g = 0; g < all.size() && err.empty(); ++g) {
        const auto& o = all[g];
        if (o.failed) {
          err = who + " on node " + std::to_string(g) + " (local rank " + std::to_string(topo_.local_rank) + "): " + o.message;
        } else if (o.kind != w.kind || o.hop != w.hop || o.type_bytes != w.type_bytes || o.count != w.count) {
          err = who + ": nodes disagree (local rank " + std::to_string(topo_.local_rank) + "): node " +
                std::to_string(topo_.node) + " calls count = " + std::to_string(w.count) + ", " + to_string(hop) + ", " +
                std::to_string(w.type_bytes) + "-byte elements; node " + std::to_string(g) + " calls count = " +
                std::to_string(o.count) + ", " + to_string(static_cast<inter_node>(o.hop)) + ", " +
                std::to_string(o.type_bytes) + "-byte elements" + (o.kind != w.kind ? " of another collective" : "");
        }
      }
    }
    intra_.template check_user_call<T>(who.c_str(), count, static_cast<std::uint32_t>(hop), err);
  }

  std::vector<detail::call_word> exchange_across(const detail::call_word& w, gpu::stream_t stream) {
    const std::size_t g_n = static_cast<std::size_t>(inter_.num_ranks());
    auto* dev = static_cast<detail::call_word*>(check_dev_.ptr);
    gpu::copy(dev + g_n, &w, sizeof(w));
    inter_.allgather(dev + g_n, dev, sizeof(w), stream);
    gpu::stream_synchronize(stream);
    std::vector<detail::call_word> all(g_n);
    gpu::copy(all.data(), dev, g_n * sizeof(w));
    return all;
  }

  // A scratch buffer of at least `bytes` (16-byte aligned). Growing waits for `stream` and the
  // device first: earlier calls may still read the old one.
  void* grow(detail::device_buffer& b, std::size_t bytes, gpu::stream_t stream) {
    if (bytes <= b.bytes) return b.ptr;
    if (gpu::stream_is_capturing(stream))
      throw error(errc::invalid_argument, "hierarchical: a call during graph capture needs " + std::to_string(bytes) +
                                              " bytes of scratch, more than reserved (" + std::to_string(b.bytes) +
                                              "); call reserve() before the capture");
    const std::size_t want = bytes < 2 * b.bytes ? 2 * b.bytes : bytes;
    gpu::stream_synchronize(stream);
    gpu::device_synchronize();
    void* p = gpu::device_malloc(want);
    if (b.ptr) gpu::device_free(b.ptr);
    b.ptr = p;
    b.bytes = want;
    return p;
  }

  void free_all() noexcept {
    for (detail::device_buffer* b : {&scratch_[0], &scratch_[1], &scratch_[2], &check_dev_}) {
      try {
        if (b->ptr) gpu::device_free(b->ptr);
      } catch (...) {
      }
      b->ptr = nullptr;
      b->bytes = 0;
    }
  }

  communicator_type& intra_;
  engine& inter_;
  node_topology topo_;
  detail::device_buffer scratch_[3];
  detail::device_buffer check_dev_;
};

}  // namespace multinode
RCCLX_NAMESPACE_END
