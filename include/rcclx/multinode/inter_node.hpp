// rcclx/multinode/inter_node.hpp: what crosses the network between nodes in a hierarchical
// collective (hierarchical.hpp): the exact parts, the engine's own reduction, or block-scaled FP8.
//
//   h.allreduce(in, out, count, rcclx::multinode::inter_node::low_precision, stream);
//   std::printf("%s\n", rcclx::multinode::to_string(rcclx::multinode::inter_node::exact));   // "exact"
#pragma once

#include "../config.hpp"
#include "../host/detail/enum_name.hpp"

RCCLX_NAMESPACE_BEGIN
namespace multinode {

enum class inter_node {
  exact,          // the engine's AllGather, summed in fp32 in node order (a fixed order)
  engine_reduce,  // the engine's AllReduce (its order and arithmetic); AllGather: as exact
  low_precision,  // block-scaled FP8 (the LPC wire format) through the engine's AllGather
  default_hop = exact
};

inline const char* to_string(inter_node h) {
  static constexpr const char* names[] = {"exact", "engine_reduce", "low_precision"};  // by value
  return host::detail::enum_name(h, names, "invalid");
}

}  // namespace multinode
RCCLX_NAMESPACE_END
