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
//   rcclx::multinode::hierarchical<> h1(across, {node, num_nodes, 0, 1});   // one rank per node
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
// One rank per node (L = 1, no communicator): the intra-node steps vanish and the hop reads the
//   caller's input and writes its output directly: AllReduce engine_reduce is one engine AllReduce,
//   exact / low_precision run in chunks of hierarchical_options::chunk_bytes; AllGather exact /
//   engine_reduce is one engine AllGather (the same results, by the formulas above with L = 1).
//
// FP8 error (low_precision): each node's partial is quantized once, so the result of AllReduce and
// ReduceScatter is off by at most sum over g of c_F * amax_g(block) (e4m3 c_F = 1/28, fp32 scales;
// amax_g the largest |s_g| in the 32-element quantization block of the shard holding the element),
// plus fp32 summation and T rounding (docs/multinode.md); AllGather by one quantization per element.
//
// Every call is collective over all G * L ranks, in the same order, with the same arguments.
// With check_calls (the communicator's; with one rank per node hierarchical_options::check_calls;
// on by default), a call first exchanges a descriptor through the engine and the node's bootstrap,
// so a local error (a bad pointer, a count that differs, a failed registration) is thrown on every
// rank of the job, never left hanging in the engine. A peer that dies is reported by the
// intra-node communicator (the bounded wait names it) on its node and by the engine as the engine
// reports failures (MPI's default: the job aborts). Lifetime: the communicator and the engine must
// outlive this object. Scratch: device buffers kept by this object, grown on demand (reserve() before
// a graph capture: a capture must not allocate).
// Registration (hierarchical_options::register_buffers, on by default; a no-op with an engine that
// registers nothing, like the MPI adapter): every buffer an engine operation reads or writes is
// registered with the engine through its cache (engine::register_buffer): the scratch buffers once,
// when grown (and deregistered before they are freed), the caller's buffers at each call (a cache
// hit after the first), so repeated calls register nothing and the engine moves registered memory
// with no staging copy. A caller's buffer stays registered after the call: before freeing memory
// that a call handed to the engine (AllGather's output; with L = 1 the inputs and outputs), call
// engine::forget_buffer on it (NCCL's rule for registered memory) or destroy the engine first.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
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
#include "registration.hpp"
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

// Set-up options. Every rank of the job must pass the same (checked at set-up).
struct hierarchical_options {
  // Register the buffers the inter-node hop hands to the engine (engine::register_buffer, through
  // the engine's cache keyed on the allocation): the scratch buffers once, when they grow; the
  // caller's buffers that an engine operation reads or writes (AllGather's output; with one rank per
  // node, the inputs and outputs too) at each call, a lookup when already registered. Nothing during
  // a graph capture (NCCL registers captured buffers itself). false: nothing is registered.
  bool register_buffers = true;
  // One rank per node (no communicator): bytes per chunk of the exact and low_precision hops (their
  // scratch: G times a chunk); L > 1 chunks by the communicator's buffer_bytes.
  std::size_t chunk_bytes = std::size_t(8) << 20;
  // One rank per node: agree on every call's arguments through the engine first (L > 1: the
  // communicator's check_calls decides). RCCLX_CHECK_CALLS=0/1 overrides it.
  bool check_calls = true;
};

template <int MaxRanks = max_ranks>
class hierarchical {
 public:
  using communicator_type = host::communicator<MaxRanks>;
  using wire = lpc::default_config;  // the FP8 format, block and scale kind of inter_node::low_precision

  // Collective over every rank of the job. Checks that the communicator is this node's (rank =
  // local_rank, size = local_ranks), that the engine joins the nodes (rank = node, size = num_nodes),
  // and, through the engine, that every node has the same number of ranks and options; a failure
  // anywhere is thrown on every rank (the uneven-nodes error names each node's local size).
  hierarchical(communicator_type& intra, engine& inter, node_topology topo, hierarchical_options opts = {})
      : hierarchical(&intra, inter, topo, opts) {}

  // One rank per node (topo.local_ranks == 1): no intra-node communicator, the intra-node steps
  // vanish and the hop works on the caller's buffers (AllReduce engine_reduce: one engine
  // AllReduce of the whole call; AllGather exact / engine_reduce: one engine AllGather).
  hierarchical(engine& inter, node_topology topo, hierarchical_options opts = {})
      : hierarchical(nullptr, inter, topo, opts) {}

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
  const hierarchical_options& options() const { return opts_; }
  // The node's communicator; null with one rank per node.
  communicator_type* intra_node() const { return intra_; }
  engine& inter_node_engine() const { return inter_; }
  // Whether this object registers buffers with the engine (the option, and an engine that registers).
  bool registers_buffers() const { return opts_.register_buffers && inter_.registers_buffers(); }

  // Grows every scratch buffer to at least `bytes` now, registered (before a graph capture, which
  // must not allocate). The calls need, per chunk, up to G * C_chunk * sizeof(T) (exact),
  // G * (G * C) * sizeof(T) (reduce_scatter) or G times the FP8 form (low_precision).
  void reserve(std::size_t bytes) {
    for (int i = 0; i < 3; ++i) grow(i, bytes, gpu::stream_t{});
  }

  // AllReduce (sum) of `count` elements; input may equal output. See the file comment for the order.
  template <class T>
  void allreduce(const T* input, T* output, std::size_t count, inter_node hop = inter_node::default_hop,
                 gpu::stream_t stream = {}) {
    const std::string who = "hierarchical allreduce";
    const std::size_t l = static_cast<std::size_t>(topo_.local_ranks), g_n = static_cast<std::size_t>(topo_.num_nodes);
    const std::size_t chunk = chunk_elements<T>();  // elements per chunk (L > 1: whole L-element rows)
    const std::size_t main = count / l * l, tail = count - main;
    std::vector<registration> pins;
    std::string local;
    try {
      check_args<T>(who, hop);
      check_pointer(who, input, count, "input");
      check_pointer(who, output, count, "output");
      if (count > 0) {
        needs n;
        const std::size_t part = std::max(std::min(chunk, main) / l, tail);  // the largest shard or tail
        if (intra_) n.scratch[0] = part * sizeof(T);
        else if (hop == inter_node::low_precision && !aligned(input)) n.scratch[0] = part * sizeof(T);
        if (hop == inter_node::exact) n.scratch[2] = g_n * part * sizeof(T);
        if (hop == inter_node::low_precision) n.fp8(part, g_n);
        if (!intra_ && hop != inter_node::low_precision) n.user(input, count * sizeof(T));
        if (!intra_ && hop == inter_node::engine_reduce) n.user(output, count * sizeof(T));
        prepare(n, stream, pins);
      }
    } catch (const std::exception& e) {
      local = e.what();
    }
    agree<T>(who, 1, count, hop, local, stream);
    if (count == 0) return;
    if (!intra_) {
      if (hop == inter_node::engine_reduce) {  // the engine's AllReduce of the whole call
        inter_.allreduce(input, output, count, data_type_of<T>::value, stream);
        return;
      }
      for (std::size_t off = 0; off < count; off += chunk) {
        const std::size_t c = std::min(chunk, count - off);
        reduce_across<T>(input + off, c, 0, c, output + off, hop, stream, output + off);
      }
      return;
    }
    for (std::size_t off = 0; off < main; off += chunk) {
      const std::size_t c = std::min(chunk, main - off) / l;
      T* shard = static_cast<T*>(grow(0, c * sizeof(T), stream));
      intra_->reduce_scatter(input + off, shard, c * l, reduce_op::sum, algorithm::automatic, stream);
      reduce_across<T>(shard, c, 0, c, shard, hop, stream, shard);
      intra_->allgather(shard, output + off, c, algorithm::automatic, stream);
    }
    if (tail) {
      T* t = static_cast<T*>(grow(0, tail * sizeof(T), stream));
      intra_->allreduce(input + main, t, tail, reduce_op::sum, algorithm::automatic, stream);
      reduce_across<T>(t, tail, 0, tail, output + main, hop, stream, t);
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
    std::vector<registration> pins;
    std::string local;
    try {
      check_args<T>(who, hop);
      check_pointer(who, input, count, "input");
      check_pointer(who, output, g_n * node_elems, "output");
      if (count > 0 && overlaps(input, count * sizeof(T), output, g_n * node_elems * sizeof(T)))
        throw error(errc::invalid_argument, who + ": output overlaps input");
      if (count > 0) {
        needs n;
        if (hop != inter_node::low_precision) {
          n.user(output, g_n * node_elems * sizeof(T));
          if (!intra_) n.user(input, count * sizeof(T));
        } else {
          if (intra_ || !aligned(input)) n.scratch[0] = node_elems * sizeof(T);
          n.fp8(node_elems, g_n);
        }
        prepare(n, stream, pins);
      }
    } catch (const std::exception& e) {
      local = e.what();
    }
    agree<T>(who, 2, count, hop, local, stream);
    if (count == 0) return;
    T* mine = output + static_cast<std::size_t>(topo_.node) * node_elems;
    if (hop != inter_node::low_precision) {
      if (!intra_) {
        inter_.allgather(input, output, count * sizeof(T), stream);
        return;
      }
      intra_->allgather(input, mine, count, algorithm::automatic, stream);
      inter_.allgather(mine, output, node_elems * sizeof(T), stream);  // in place
      return;
    }
    if constexpr (lpc::is_element_v<T>) {
      using layout = typename wire::layout;
      const std::size_t part = layout::total_bytes(node_elems);
      // The node's block is quantized from a 16-byte aligned copy (output blocks need not be aligned).
      const T* src = input;
      if (intra_ || !aligned(input)) {
        T* copy = static_cast<T*>(grow(0, node_elems * sizeof(T), stream));
        if (intra_) intra_->allgather(input, mine, count, algorithm::automatic, stream);
        gpu::copy_async(copy, intra_ ? mine : input, node_elems * sizeof(T), stream);
        src = copy;
      }
      auto* q = static_cast<std::uint8_t*>(grow(1, part, stream));
      auto* gathered = static_cast<std::uint8_t*>(grow(2, g_n * part, stream));
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
    const std::size_t ranks = g_n * l, c = count / ranks, total = g_n * c;
    std::vector<registration> pins;
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
      if (c > 0) {
        needs n;
        // L > 1: the G partials in scratch 0; one rank per node: the input is the partials (engine_reduce
        // reduces it into scratch 0, low_precision quantizes a 16-byte aligned copy).
        if (intra_ || hop == inter_node::engine_reduce || (hop == inter_node::low_precision && !aligned(input)))
          n.scratch[0] = total * sizeof(T);
        if (hop == inter_node::exact) n.scratch[2] = g_n * total * sizeof(T);
        if (hop == inter_node::low_precision) n.fp8(total, g_n);
        if (!intra_ && hop != inter_node::low_precision) n.user(input, count * sizeof(T));
        prepare(n, stream, pins);
      }
    } catch (const std::exception& e) {
      local = e.what();
    }
    agree<T>(who, 3, count, hop, local, stream);
    if (c == 0) return;
    const std::size_t first = static_cast<std::size_t>(topo_.node) * c;
    if (!intra_) {
      T* work = hop == inter_node::engine_reduce ? static_cast<T*>(grow(0, total * sizeof(T), stream)) : nullptr;
      reduce_across<T>(input, total, first, c, output, hop, stream, work);
      return;
    }
    T* partial = static_cast<T*>(grow(0, total * sizeof(T), stream));
    for (std::size_t g = 0; g < g_n; ++g)
      intra_->reduce_scatter(input + g * l * c, partial + g * c, l * c, reduce_op::sum, algorithm::automatic, stream);
    reduce_across<T>(partial, total, first, c, output, hop, stream, partial);
  }

 private:
  // What a call needs before it starts: scratch bytes (0 = none) and the caller's buffers that an
  // engine operation will read or write (registered when registration is on).
  struct needs {
    std::size_t scratch[3] = {0, 0, 0};
    const void* user_ptr[2] = {nullptr, nullptr};
    std::size_t user_bytes[2] = {0, 0};
    int users = 0;

    void user(const void* p, std::size_t bytes) {
      user_ptr[users] = p;
      user_bytes[users++] = bytes;
    }
    // The FP8 form of `elems` elements (scratch 1) and every node's (scratch 2).
    void fp8(std::size_t elems, std::size_t g_n) {
      scratch[1] = wire::layout::total_bytes(elems);
      scratch[2] = g_n * scratch[1];
    }
  };

  hierarchical(communicator_type* intra, engine& inter, node_topology topo, hierarchical_options opts)
      : intra_(intra), inter_(inter), topo_(topo), opts_(opts) {
    if (const char* v = std::getenv("RCCLX_CHECK_CALLS"); v && *v) opts_.check_calls = v[0] != '0';
    std::string err;
    try {
      topo_.validate("hierarchical");
      if (intra && (intra->num_ranks() != topo_.local_ranks || intra->rank() != topo_.local_rank))
        err = "hierarchical: the communicator has rank " + std::to_string(intra->rank()) + " of " +
              std::to_string(intra->num_ranks()) + ", the topology says local rank " + std::to_string(topo_.local_rank) +
              " of " + std::to_string(topo_.local_ranks);
      else if (!intra && topo_.local_ranks != 1)
        err = "hierarchical: no intra-node communicator, but the topology says " + std::to_string(topo_.local_ranks) +
              " ranks per node (without one, a node has one rank)";
      else if (inter.num_ranks() != topo_.num_nodes || inter.rank() != topo_.node)
        err = std::string("hierarchical: the engine (") + inter.name() + ") has rank " + std::to_string(inter.rank()) +
              " of " + std::to_string(inter.num_ranks()) + ", the topology says node " + std::to_string(topo_.node) +
              " of " + std::to_string(topo_.num_nodes);
      else if (opts_.chunk_bytes < 256)
        err = "hierarchical: chunk_bytes = " + std::to_string(opts_.chunk_bytes) + " must be >= 256";
    } catch (const std::exception& e) {
      err = e.what();
    }
    check_dev_.ptr = gpu::device_malloc(sizeof(detail::call_word) * static_cast<std::size_t>(inter.num_ranks() + 1));
    check_dev_.bytes = sizeof(detail::call_word) * static_cast<std::size_t>(inter.num_ranks() + 1);
    // Every engine member reports its node's local size and options (and its local error); uneven
    // nodes fail in each engine that joins two of them, and the node's bootstrap spreads the error
    // to the node's other ranks.
    detail::call_word w{};
    w.failed = err.empty() ? 0u : 1u;
    w.kind = 0x746f706fu;
    w.count = static_cast<std::uint64_t>(topo_.local_ranks);
    w.hop = static_cast<std::uint32_t>(topo_.num_nodes);
    w.type_bytes = opts_.register_buffers ? 1u : 0u;
    host::detail::copy_name(w.message, err.c_str());
    std::vector<detail::call_word> all;
    try {
      all = exchange_across(w, gpu::stream_t{});
    } catch (...) {
      free_all();
      throw;
    }
    for (std::size_t g = 0; g < all.size() && err.empty(); ++g) {
      if (all[g].failed) {
        err = "hierarchical set-up on node " + std::to_string(g) + ": " + all[g].message;
      } else if (all[g].count != w.count || all[g].hop != w.hop) {
        err = "hierarchical: uneven nodes are not supported: ranks per node (LOCAL_WORLD_SIZE):";
        for (std::size_t q = 0; q < all.size(); ++q)
          err += std::string(q ? ", " : " ") + "node " + std::to_string(q) + ": " + std::to_string(all[q].count);
        err += "; nodes: " + std::to_string(w.hop) + " here, " + std::to_string(all[g].hop) + " on node " + std::to_string(g);
      } else if (all[g].type_bytes != w.type_bytes) {
        err = "hierarchical: nodes disagree on hierarchical_options::register_buffers (" +
              std::string(w.type_bytes ? "true" : "false") + " here, on node " + std::to_string(topo_.node) + "; " +
              (all[g].type_bytes ? "true" : "false") + " on node " + std::to_string(g) +
              "): an engine operation must see registered buffers on every rank or on none";
      }
    }
    try {
      if (intra_) intra_->template check_user_call<int>("hierarchical set-up", 0, 0, err);
    } catch (...) {
      free_all();
      throw;
    }
    if (!err.empty()) {  // one rank per node, or check_calls off: the error, on this rank
      free_all();
      throw error(errc::invalid_argument, err);
    }
  }

  // Elements per chunk: L > 1, whole L-element rows within the communicator's buffer_bytes; one rank
  // per node, chunk_bytes rounded down to 16 elements (chunks keep the input's 16-byte alignment).
  template <class T>
  std::size_t chunk_elements() const {
    if (!intra_) return std::max<std::size_t>(opts_.chunk_bytes / sizeof(T) / 16 * 16, 16);
    const std::size_t l = static_cast<std::size_t>(topo_.local_ranks);
    return std::max<std::size_t>(intra_->options().buffer_bytes / sizeof(T) / l, 1) * l;
  }

  static bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

  // Grows the scratch a call needs and registers it, and pins the caller's buffers the engine will
  // touch. Runs before the call's agreement, so a failure here is thrown on every rank.
  void prepare(const needs& n, gpu::stream_t stream, std::vector<registration>& pins) {
    for (int i = 0; i < 3; ++i)
      if (n.scratch[i]) grow(i, n.scratch[i], stream);
    if (!registers_buffers() || gpu::stream_is_capturing(stream)) return;
    for (int i = 0; i < n.users; ++i)
      if (n.user_bytes[i]) pins.push_back(inter_.register_buffer(const_cast<void*>(n.user_ptr[i]), n.user_bytes[i]));
  }

  // dst[i] = sum over nodes of src_g[first + i], i < n, where src is this node's part (`total`
  // elements; low_precision copies it into scratch 0 first if it is not 16-byte aligned).
  // engine_reduce reduces into `work` (total elements of scratch 0, may be src).
  template <class T>
  void reduce_across(const T* src, std::size_t total, std::size_t first, std::size_t n, T* dst, inter_node hop,
                     gpu::stream_t stream, T* work) {
    const int g_n = topo_.num_nodes;
    switch (hop) {
      case inter_node::engine_reduce:  // into work (registered scratch), then the wanted part out
        inter_.allreduce(src, work, total, data_type_of<T>::value, stream);
        if (dst != work + first) gpu::copy_async(dst, work + first, n * sizeof(T), stream);
        return;
      case inter_node::low_precision:
        if constexpr (lpc::is_element_v<T>) {
          using layout = typename wire::layout;
          const std::size_t part = layout::total_bytes(total);
          if (!aligned(src)) {
            T* copy = static_cast<T*>(grow(0, total * sizeof(T), stream));
            gpu::copy_async(copy, src, total * sizeof(T), stream);
            src = copy;
          }
          auto* q = static_cast<std::uint8_t*>(grow(1, part, stream));
          auto* gathered = static_cast<std::uint8_t*>(grow(2, static_cast<std::size_t>(g_n) * part, stream));
          fp8::quantize_blocks<typename wire::format, wire::block_size, wire::scale>(src, total, q, layout::scales(q, total),
                                                                                     stream);
          inter_.allgather(q, gathered, part, stream);
          detail::dequantize_sum<wire>(gathered, g_n, part, total, first, n, dst, stream);
        }
        return;
      default: {
        T* gathered = static_cast<T*>(grow(2, static_cast<std::size_t>(g_n) * total * sizeof(T), stream));
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

  bool check_calls() const { return intra_ ? intra_->options().check_calls : opts_.check_calls; }

  // Every rank of the job learns whether any rank's call is bad or differs (engine, then the node's
  // bootstrap), and throws the same error; with check_calls off, only a local error is thrown.
  template <class T>
  void agree(const std::string& who, std::uint32_t kind, std::size_t count, inter_node hop, const std::string& local,
             gpu::stream_t stream) {
    if (!check_calls()) {
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
    if (intra_) intra_->template check_user_call<T>(who.c_str(), count, static_cast<std::uint32_t>(hop), err);
    else if (!err.empty()) throw error(errc::invalid_argument, err);
  }

  // The call descriptors go through the engine unregistered on every rank (256 bytes per node).
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

  // Scratch buffer i with at least `bytes` (16-byte aligned), registered with the engine when
  // registration is on (a failed registration is retried by the next call that needs the buffer).
  // Growing waits for `stream` and the device first (earlier calls may still read the old buffer),
  // then deregisters and frees the old one.
  void* grow(int i, std::size_t bytes, gpu::stream_t stream) {
    detail::device_buffer& b = scratch_[i];
    if (bytes > b.bytes) {
      if (gpu::stream_is_capturing(stream))
        throw error(errc::invalid_argument, "hierarchical: a call during graph capture needs " + std::to_string(bytes) +
                                                " bytes of scratch, more than reserved (" + std::to_string(b.bytes) +
                                                "); call reserve() before the capture");
      const std::size_t want = bytes < 2 * b.bytes ? 2 * b.bytes : bytes;
      gpu::stream_synchronize(stream);
      gpu::device_synchronize();
      release(i);
      b.ptr = gpu::device_malloc(want);
      b.bytes = want;
    }
    if (b.ptr && registers_buffers() && !scratch_reg_[i].active() && !gpu::stream_is_capturing(stream))
      scratch_reg_[i] = inter_.register_buffer(b.ptr, b.bytes);
    return b.ptr;
  }

  // Deregisters (now: the memory is about to be freed) and frees scratch buffer i.
  void release(int i) noexcept {
    detail::device_buffer& b = scratch_[i];
    const bool was_registered = scratch_reg_[i].active();
    scratch_reg_[i].reset();
    if (!b.ptr) return;
    try {
      if (was_registered) inter_.forget_buffer(b.ptr);
    } catch (...) {
    }
    try {
      gpu::device_free(b.ptr);
    } catch (...) {
    }
    b.ptr = nullptr;
    b.bytes = 0;
  }

  void free_all() noexcept {
    for (int i = 0; i < 3; ++i) release(i);
    try {
      if (check_dev_.ptr) gpu::device_free(check_dev_.ptr);
    } catch (...) {
    }
    check_dev_.ptr = nullptr;
    check_dev_.bytes = 0;
  }

  communicator_type* intra_;
  engine& inter_;
  node_topology topo_;
  hierarchical_options opts_;
  detail::device_buffer scratch_[3];
  registration scratch_reg_[3];
  detail::device_buffer check_dev_;
};

}  // namespace multinode
RCCLX_NAMESPACE_END
