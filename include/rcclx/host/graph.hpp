// rcclx/host/graph.hpp: a captured sequence of collectives, launched again and again.
// GPU backends: a CUDA/HIP graph (the stream was captured between communicator::begin_capture and
// end_capture). Host backend, which has no graphs: the collectives recorded during the capture,
// replayed in order on the calling thread; the stand-in that lets CI test graph patching.
//
//   comm.begin_capture(stream);
//   comm.allreduce(x, x_out, n, rcclx::reduce_op::sum, rcclx::algorithm::automatic, stream);
//   rcclx::host::graph g = comm.end_capture(stream);   // exchanges handles, patches device tables
//   for (int step = 0; step < steps; ++step) g.launch(stream);
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "../gpu/runtime.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

class graph {
 public:
  graph() = default;
#if RCCLX_BACKEND_GPU
  explicit graph(gpu::graph_exec_t exec) : exec_(exec) {}
#else
  explicit graph(std::vector<std::function<void()>> ops) : ops_(std::move(ops)) {}
#endif
  graph(graph&& o) noexcept { swap(o); }
  graph& operator=(graph&& o) noexcept {
    graph tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
  ~graph() {
#if RCCLX_BACKEND_GPU
    gpu::graph_destroy(exec_);
#endif
  }

  // Enqueues the captured work on `stream` (host backend: runs it now; errors throw here).
  void launch(gpu::stream_t stream = {}) const {
#if RCCLX_BACKEND_GPU
    if (!exec_) throw error(errc::invalid_argument, "graph::launch on an empty graph");
    gpu::graph_launch(exec_, stream);
#else
    (void)stream;
    for (const auto& op : ops_) op();
#endif
  }

  bool empty() const {
#if RCCLX_BACKEND_GPU
    return !exec_;
#else
    return ops_.empty();
#endif
  }

 private:
  void swap(graph& o) noexcept {
#if RCCLX_BACKEND_GPU
    std::swap(exec_, o.exec_);
#else
    std::swap(ops_, o.ops_);
#endif
  }
#if RCCLX_BACKEND_GPU
  gpu::graph_exec_t exec_{};
#else
  std::vector<std::function<void()>> ops_;
#endif
};

}  // namespace host
RCCLX_NAMESPACE_END
