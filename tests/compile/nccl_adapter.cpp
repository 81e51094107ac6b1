// The inter-node adapter over NCCL (CUDA) or RCCL (HIP) with every hierarchical collective
// instantiated for every hop, and the engine's AllReduce for every element type: a compile check
// (built as an object, never linked or run here; the GPU runs are docs/multinode.md's). The engine
// takes the element type at run time (one adapter for all of them), so float covers every call of
// the adapter; bf16 and fp16 go through the hop that hands them to NCCL / RCCL. (Every hop of
// every type would compile the intra-node kernels nine times over: minutes of CI for no more of
// the adapter.)
#include <rcclx/multinode/hierarchical.hpp>
#include <rcclx/multinode/nccl_engine.hpp>
#include <rcclx/multinode/nccl_engine.hpp>  // include guard

namespace {

template <class T>
void every_call(rcclx::multinode::hierarchical<8>& h, const T* in, T* out, rcclx::gpu::stream_t s) {
  using rcclx::multinode::inter_node;
  for (const inter_node hop : {inter_node::exact, inter_node::engine_reduce, inter_node::low_precision}) {
    h.allreduce(in, out, 1024, hop, s);
    h.allgather(in, out, 1024, hop, s);
    h.reduce_scatter(in, out, 1024, hop, s);
  }
}

}  // namespace

void rcclx_nccl_adapter_check(ncclComm_t comm, rcclx::host::communicator<8>& node, rcclx::gpu::stream_t s,
                              const void* in, void* out) {
  rcclx::multinode::nccl_engine eng(comm);
  const auto topo = rcclx::multinode::node_topology::from_env();
  rcclx::multinode::hierarchical<8> h(node, eng, topo);
  every_call(h, static_cast<const float*>(in), static_cast<float*>(out), s);
  using rcclx::multinode::inter_node;
#if !RCCLX_ADAPTER_FLOAT_ONLY
  // (The HIP tree leaves these out: they compile the intra-node kernels twice more for the engine's
  // type mapping, the same host code the CUDA tree compiles.)
  h.allreduce(static_cast<const rcclx::bf16*>(in), static_cast<rcclx::bf16*>(out), 1024, inter_node::engine_reduce, s);
  h.allreduce(static_cast<const rcclx::fp16*>(in), static_cast<rcclx::fp16*>(out), 1024, inter_node::engine_reduce, s);
#endif
  rcclx::multinode::hierarchical<8> one_rank_per_node(eng, topo);
  every_call(one_rank_per_node, static_cast<const float*>(in), static_cast<float*>(out), s);
}
