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
#include <string>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/types.hpp"
#include "../fp8/quantize_blocks.hpp"
#include "../gpu/runtime.hpp"
#include "../host/communicator.hpp"
#include "../host/detail/env.hpp"
#include "../host/detail/launch_checks.hpp"
#include "../host/detail/owned_memory.hpp"
#include "../lpc/config.hpp"
#include "detail/node_agreement.hpp"
#include "detail/node_sum.hpp"
#include "detail/scratch.hpp"
#include "engine.hpp"
#include "inter_node.hpp"
#include "registration.hpp"
#include "topology.hpp"

RCCLX_NAMESPACE_BEGIN
namespace multinode {

namespace detail {

template <class T>
inline constexpr bool is_element_v =
    std::is_same<T, float>::value || std::is_same<T, bf16>::value || std::is_same<T, fp16>::value;

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
  // Waits for this process's device work, then frees the scratch (deregistered first).
  ~hierarchical() { host::detail::synchronize_quietly(); }

  const node_topology& topology() const { return topo_; }
  const hierarchical_options& options() const { return opts_; }
  // The node's communicator; null with one rank per node.
  communicator_type* intra_node() const { return intra_; }
  engine& inter_node_engine() const { return inter_; }
  // Whether this object registers buffers with the engine (the option, and an engine that registers).
  bool registers_buffers() const { return scratch_.registers(); }

  // Grows every scratch buffer to at least `bytes` now, registered (before a graph capture, which
  // must not allocate). The calls need, per chunk, up to G * C_chunk * sizeof(T) (exact),
  // G * (G * C) * sizeof(T) (reduce_scatter) or G times the FP8 form (low_precision).
  void reserve(std::size_t bytes) {
    for (int i = 0; i < detail::scratch_buffers::count; ++i) scratch_.grow(i, bytes, gpu::stream_t{});
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
        detail::scratch_needs n;
        const std::size_t part = std::max(std::min(chunk, main) / l, tail);  // the largest shard or tail
        if (intra_) n.scratch[0] = part * sizeof(T);
        else if (hop == inter_node::low_precision && !aligned(input)) n.scratch[0] = part * sizeof(T);
        if (hop == inter_node::exact) n.scratch[2] = g_n * part * sizeof(T);
        if (hop == inter_node::low_precision) n.fp8(wire::layout::total_bytes(part), g_n);
        if (!intra_ && hop != inter_node::low_precision) n.user(input, count * sizeof(T));
        if (!intra_ && hop == inter_node::engine_reduce) n.user(output, count * sizeof(T));
        scratch_.prepare(n, stream, pins);
      }
    } catch (const std::exception& e) {
      local = e.what();
    }
    across_.template agree<T>(check_calls(), who, 1, count, hop, local, stream);
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
      T* shard = static_cast<T*>(scratch_.grow(0, c * sizeof(T), stream));
      intra_->reduce_scatter(input + off, shard, c * l, reduce_op::sum, algorithm::automatic, stream);
      reduce_across<T>(shard, c, 0, c, shard, hop, stream, shard);
      intra_->allgather(shard, output + off, c, algorithm::automatic, stream);
    }
    if (tail) {
      T* t = static_cast<T*>(scratch_.grow(0, tail * sizeof(T), stream));
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
      if (count > 0 && host::detail::overlaps(input, count * sizeof(T), output, g_n * node_elems * sizeof(T)))
        throw error(errc::invalid_argument, who + ": output overlaps input");
      if (count > 0) {
        detail::scratch_needs n;
        if (hop != inter_node::low_precision) {
          n.user(output, g_n * node_elems * sizeof(T));
          if (!intra_) n.user(input, count * sizeof(T));
        } else {
          if (intra_ || !aligned(input)) n.scratch[0] = node_elems * sizeof(T);
          n.fp8(wire::layout::total_bytes(node_elems), g_n);
        }
        scratch_.prepare(n, stream, pins);
      }
    } catch (const std::exception& e) {
      local = e.what();
    }
    across_.template agree<T>(check_calls(), who, 2, count, hop, local, stream);
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
        T* copy = static_cast<T*>(scratch_.grow(0, node_elems * sizeof(T), stream));
        if (intra_) intra_->allgather(input, mine, count, algorithm::automatic, stream);
        gpu::copy_async(copy, intra_ ? mine : input, node_elems * sizeof(T), stream);
        src = copy;
      }
      auto* q = static_cast<std::uint8_t*>(scratch_.grow(1, part, stream));
      auto* gathered = static_cast<std::uint8_t*>(scratch_.grow(2, g_n * part, stream));
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
      if (c > 0 && host::detail::overlaps(input, count * sizeof(T), output, c * sizeof(T)))
        throw error(errc::invalid_argument, who + ": output overlaps input");
      if (c > 0) {
        detail::scratch_needs n;
        // L > 1: the G partials in scratch 0; one rank per node: the input is the partials (engine_reduce
        // reduces it into scratch 0, low_precision quantizes a 16-byte aligned copy).
        if (intra_ || hop == inter_node::engine_reduce || (hop == inter_node::low_precision && !aligned(input)))
          n.scratch[0] = total * sizeof(T);
        if (hop == inter_node::exact) n.scratch[2] = g_n * total * sizeof(T);
        if (hop == inter_node::low_precision) n.fp8(wire::layout::total_bytes(total), g_n);
        if (!intra_ && hop != inter_node::low_precision) n.user(input, count * sizeof(T));
        scratch_.prepare(n, stream, pins);
      }
    } catch (const std::exception& e) {
      local = e.what();
    }
    across_.template agree<T>(check_calls(), who, 3, count, hop, local, stream);
    if (c == 0) return;
    const std::size_t first = static_cast<std::size_t>(topo_.node) * c;
    if (!intra_) {
      T* work = hop == inter_node::engine_reduce ? static_cast<T*>(scratch_.grow(0, total * sizeof(T), stream)) : nullptr;
      reduce_across<T>(input, total, first, c, output, hop, stream, work);
      return;
    }
    T* partial = static_cast<T*>(scratch_.grow(0, total * sizeof(T), stream));
    for (std::size_t g = 0; g < g_n; ++g)
      intra_->reduce_scatter(input + g * l * c, partial + g * c, l * c, reduce_op::sum, algorithm::automatic, stream);
    reduce_across<T>(partial, total, first, c, output, hop, stream, partial);
  }

 private:
  hierarchical(communicator_type* intra, engine& inter, node_topology topo, hierarchical_options opts)
      : intra_(intra),
        inter_(inter),
        topo_(topo),
        opts_(opts),
        scratch_(inter, opts.register_buffers),
        across_(inter, intra, topo) {
    std::string err;
    try {
      opts_.check_calls = host::detail::env_flag("RCCLX_CHECK_CALLS", opts_.check_calls);
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
    const std::vector<detail::call_word> all = across_.exchange(w, gpu::stream_t{});
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
    if (intra_) intra_->template check_user_call<int>("hierarchical set-up", 0, 0, err);
    // One rank per node, or check_calls off: the error, on this rank.
    if (!err.empty()) throw error(errc::invalid_argument, err);
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
            T* copy = static_cast<T*>(scratch_.grow(0, total * sizeof(T), stream));
            gpu::copy_async(copy, src, total * sizeof(T), stream);
            src = copy;
          }
          auto* q = static_cast<std::uint8_t*>(scratch_.grow(1, part, stream));
          auto* gathered = static_cast<std::uint8_t*>(scratch_.grow(2, static_cast<std::size_t>(g_n) * part, stream));
          fp8::quantize_blocks<typename wire::format, wire::block_size, wire::scale>(src, total, q, layout::scales(q, total),
                                                                                     stream);
          inter_.allgather(q, gathered, part, stream);
          detail::dequantize_sum<wire>(gathered, g_n, part, total, first, n, dst, stream);
        }
        return;
      default: {
        T* gathered = static_cast<T*>(scratch_.grow(2, static_cast<std::size_t>(g_n) * total * sizeof(T), stream));
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

  bool check_calls() const { return intra_ ? intra_->options().check_calls : opts_.check_calls; }

  communicator_type* intra_;
  engine& inter_;
  node_topology topo_;
  hierarchical_options opts_;
  detail::scratch_buffers scratch_;
  detail::node_agreement<MaxRanks> across_;
};

}  // namespace multinode
RCCLX_NAMESPACE_END
