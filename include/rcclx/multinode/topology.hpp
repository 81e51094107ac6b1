// rcclx/multinode/topology.hpp: where this process sits in a job of several nodes, each with the
// same number of ranks: node g of G, local rank l of L, global rank g * L + l (torchrun's numbering).
//
//   auto topo = rcclx::multinode::node_topology::from_env();   // GROUP_RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE
//   rcclx::multinode::node_topology t2{node, num_nodes, local_rank, local_ranks};   // or explicitly
//   t2.validate("my launcher");                                 // throws rcclx::error naming the field
//
// Uneven nodes (WORLD_SIZE not a multiple of LOCAL_WORLD_SIZE, or nodes that report different
// LOCAL_WORLD_SIZE) are refused: here from the environment, and by hierarchical's set-up, which
// compares every node's local size through the engine.
#pragma once

#include <cstdlib>
#include <string>

#include "../config.hpp"
#include "../core/error.hpp"
#include "../host/detail/env.hpp"

RCCLX_NAMESPACE_BEGIN
namespace multinode {

struct node_topology {
  int node = 0;         // this process's node, the engine's rank (GROUP_RANK)
  int num_nodes = 1;    // nodes in the job, the engine's size (WORLD_SIZE / LOCAL_WORLD_SIZE)
  int local_rank = 0;   // this process's rank within its node, the intra-node communicator's rank
  int local_ranks = 1;  // ranks per node, the same on every node (LOCAL_WORLD_SIZE)

  int rank() const { return node * local_ranks + local_rank; }
  int num_ranks() const { return num_nodes * local_ranks; }

  // Throws rcclx::error(invalid_argument) naming the first field outside its range; `who` starts it.
  void validate(const std::string& who) const {
    if (num_nodes < 1) throw error(errc::invalid_argument, who + ": num_nodes = " + std::to_string(num_nodes) + " must be >= 1");
    if (local_ranks < 1)
      throw error(errc::invalid_argument, who + ": local_ranks = " + std::to_string(local_ranks) + " must be >= 1");
    if (node < 0 || node >= num_nodes)
      throw error(errc::invalid_argument, who + ": node = " + std::to_string(node) + " is outside [0, " +
                                              std::to_string(num_nodes) + ")");
    if (local_rank < 0 || local_rank >= local_ranks)
      throw error(errc::invalid_argument, who + ": local_rank = " + std::to_string(local_rank) + " is outside [0, " +
                                              std::to_string(local_ranks) + ")");
  }

  // From torchrun's variables: GROUP_RANK (node), LOCAL_RANK, LOCAL_WORLD_SIZE and WORLD_SIZE, which
  // must be a multiple of LOCAL_WORLD_SIZE (uneven nodes are refused). RANK, when set, must equal
  // GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK (the numbering the collectives' layouts assume).
  static node_topology from_env() {
    const char* who = "node_topology::from_env";
    const auto get = [who](const char* name) {
      const char* v = host::detail::env_text(name);
      if (!v) throw error(errc::invalid_argument, std::string(who) + ": " + name + " is not set");
      long long x = 0;
      if (!host::detail::parse_int(v, 0, 1LL << 30, x))
        throw error(errc::invalid_argument, std::string(who) + ": " + name + " = '" + v + "' is not a non-negative integer");
      return static_cast<int>(x);
    };
    node_topology t;
    t.local_rank = get("LOCAL_RANK");
    t.local_ranks = get("LOCAL_WORLD_SIZE");
    t.node = get("GROUP_RANK");
    const int world = get("WORLD_SIZE");
    if (t.local_ranks < 1 || world % t.local_ranks != 0)
      throw error(errc::invalid_argument, std::string(who) + ": WORLD_SIZE = " + std::to_string(world) +
                                              " is not a multiple of LOCAL_WORLD_SIZE = " + std::to_string(t.local_ranks) +
                                              " (uneven nodes are not supported)");
    t.num_nodes = world / t.local_ranks;
    t.validate(who);
    if (std::getenv("RANK") && get("RANK") != t.rank())
      throw error(errc::invalid_argument, std::string(who) + ": RANK = " + std::to_string(get("RANK")) +
                                              " differs from GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK = " +
                                              std::to_string(t.rank()));
    return t;
  }
};

}  // namespace multinode
RCCLX_NAMESPACE_END
