// rcclx/multinode/detail/node_agreement.hpp: how every rank of a hierarchical job agrees before a
// call. Each rank's word (the call, or a local error) goes through the engine to its peers on the
// other nodes, then the node's communicator spreads any error or disagreement to the node's other
// ranks (host::communicator::check_user_call), so every rank of the job throws the same error and
// none is left waiting in the engine.
//
//   rcclx::multinode::detail::node_agreement<8> across(engine, &node_comm, topology);
//   across.agree<float>(check_calls, "hierarchical allreduce", 1, count, hop, local_error, stream);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../../core/error.hpp"
#include "../../gpu/runtime.hpp"
#include "../../host/communicator.hpp"
#include "../../host/detail/call_check.hpp"
#include "../../host/detail/owned_memory.hpp"
#include "../engine.hpp"
#include "../inter_node.hpp"
#include "../topology.hpp"

RCCLX_NAMESPACE_BEGIN
namespace multinode {
namespace detail {

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

template <int MaxRanks>
class node_agreement {
 public:
  // `inter` and `intra` (null with one rank per node) must outlive this object.
  node_agreement(engine& inter, host::communicator<MaxRanks>* intra, const node_topology& topo)
      : inter_(inter),
        intra_(intra),
        topo_(topo),
        dev_(gpu::device_malloc(sizeof(call_word) * static_cast<std::size_t>(inter.num_ranks() + 1))) {}

  // Collective over the engine: every node's word, in node order. The words go through the engine
  // unregistered on every rank (256 bytes per node), from device memory.
  std::vector<call_word> exchange(const call_word& w, gpu::stream_t stream) {
    const std::size_t g_n = static_cast<std::size_t>(inter_.num_ranks());
    auto* dev = static_cast<call_word*>(dev_.get());
    gpu::copy(dev + g_n, &w, sizeof(w));
    inter_.allgather(dev + g_n, dev, sizeof(w), stream);
    gpu::stream_synchronize(stream);
    std::vector<call_word> all(g_n);
    gpu::copy(all.data(), dev, g_n * sizeof(w));
    return all;
  }

  // Every rank of the job learns whether any rank's call is bad or differs (engine, then the node's
  // bootstrap), and throws the same error; with check_calls off, only a local error is thrown.
  template <class T>
  void agree(bool check_calls, const std::string& who, std::uint32_t kind, std::size_t count, inter_node hop,
             const std::string& local, gpu::stream_t stream) {
    if (!check_calls) {
      if (!local.empty()) throw error(errc::invalid_argument, local);
      return;
    }
    std::string err = local;
    if (!gpu::stream_is_capturing(stream)) {
      call_word w{};
      w.failed = local.empty() ? 0u : 1u;
      w.kind = kind;
      w.hop = static_cast<std::uint32_t>(hop);
      w.type_bytes = static_cast<std::uint32_t>(sizeof(T));
      w.count = count;
      host::detail::copy_name(w.message, local.c_str());
      const std::vector<call_word> all = exchange(w, stream);
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

 private:
  engine& inter_;
  host::communicator<MaxRanks>* intra_;
  node_topology topo_;
  host::detail::device_ptr dev_;
};

}  // namespace detail
}  // namespace multinode
RCCLX_NAMESPACE_END
