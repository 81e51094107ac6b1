// rcclx as a torch.distributed backend on torch >= 2 (rcclx/distributed.py): a c10d::Backend whose
// collectives call the same-named methods of a Python rcclx.distributed.ProcessGroupRcclx (the
// collectives on an rcclx.Communicator). torch then builds an ordinary ProcessGroup around it, so
// every caller reaches rcclx through torch's dispatcher: DDP's reducer, the functional collectives
// (torch.distributed._functional_collectives, DTensor), FSDP, dist.* from Python. The works it
// returns have completed on the host; on the GPU they are ordered on the stream that was current at
// the call, and wait() orders the then-current stream after it (a CUDA event), as NCCL's works do.
// torch 1.13 has no c10d::Backend: there the Python group is the group itself and this file adds
// nothing (bind_dist_backend is empty).
#include <torch/extension.h>

#if __has_include(<torch/csrc/distributed/c10d/Backend.hpp>)
#  define RCCLX_DIST_BACKEND 1
#  include <torch/csrc/distributed/c10d/Backend.hpp>
#  include <torch/csrc/distributed/c10d/Work.hpp>
#  if RCCLX_TORCH_CUDA
#    include <ATen/cuda/CUDAContext.h>
#    include <ATen/cuda/CUDAEvent.h>
#  endif
#endif

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

#if RCCLX_DIST_BACKEND
namespace {

bool any_cuda(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts)
    if (t.defined() && t.is_cuda()) return true;
  return false;
}

// A call that has run (see the file's comment).
class done_work : public c10d::Work {
 public:
  explicit done_work(std::vector<at::Tensor> result) : result_(std::move(result)) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future_->markCompleted(c10::IValue(result_));
#if RCCLX_TORCH_CUDA
    if (any_cuda(result_)) {
      event_ = std::make_unique<at::cuda::CUDAEvent>();
      event_->record(at::cuda::getCurrentCUDAStream());
    }
#endif
  }
  bool isCompleted() override {
#if RCCLX_TORCH_CUDA
    if (event_) return event_->query();
#endif
    return true;
  }
  bool wait(std::chrono::milliseconds /*timeout*/) override {
#if RCCLX_TORCH_CUDA
    if (event_) event_->block(at::cuda::getCurrentCUDAStream());
#endif
    return true;
  }
  std::vector<at::Tensor> result() override { return result_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> result_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
#if RCCLX_TORCH_CUDA
  std::unique_ptr<at::cuda::CUDAEvent> event_;
#endif
};

std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& v) {
  std::vector<at::Tensor> out;
  for (const auto& l : v) out.insert(out.end(), l.begin(), l.end());
  return out;
}

// The collectives of the Python group `impl`, each under the GIL; a Python exception becomes the
// matching c10 error (NotImplementedError and ValueError keep their type).
class forwarding_backend : public c10d::Backend {
 public:
  forwarding_backend(py::object impl, int rank, int size) : Backend(rank, size), impl_(std::move(impl)) {}
  ~forwarding_backend() override {
    if (!Py_IsInitialized()) {  // destroyed after the interpreter: leave the object to it
      impl_.release();
      return;
    }
    py::gil_scoped_acquire gil;
    impl_ = py::object();
  }

  const std::string getBackendName() const override { return "rcclx"; }

  // Not marked override: their names and signatures follow torch's version (a method a version lacks
  // is then an ordinary member, and torch's default answers for it).
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions& o) {
    return call("broadcast", t, t, o);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions& o) {
    return call("allreduce", t, t, o);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& t, const c10d::AllreduceCoalescedOptions& o) {
    return call("allreduce_coalesced", t, t, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& t, const c10d::ReduceOptions& o) {
    return call("reduce", t, t, o);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                           const c10d::AllgatherOptions& o) {
    return call("allgather", flat(out), out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o) {
    return call("_allgather_base", {out}, out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                                                 const c10d::AllgatherOptions& o) {
    return call("allgather_into_tensor_coalesced", out, out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                        const c10d::GatherOptions& o) {
    return call("gather", flat(out), out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
                                         const c10d::ScatterOptions& o) {
    return call("scatter", out, out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
                                                const c10d::ReduceScatterOptions& o) {
    return call("reduce_scatter", out, out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) {
    return call("_reduce_scatter_base", {out}, out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                                                 const c10d::ReduceScatterOptions& o) {
    return call("reduce_scatter_tensor_coalesced", out, out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits, const c10d::AllToAllOptions& o) {
    return call("alltoall_base", {out}, out, in, out_splits, in_splits, o);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                          const c10d::AllToAllOptions& o) {
    return call("alltoall", out, out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& o) { return call("barrier", {}, o); }
  void monitoredBarrier(const c10d::BarrierOptions& o, bool wait_all_ranks) {
    const auto ms = o.timeout.count();
    py::gil_scoped_acquire gil;
    guarded([&] {
      impl_.attr("monitored_barrier")(ms > 0 ? py::object(py::float_(static_cast<double>(ms) / 1000.0)) : py::none(),
                                      wait_all_ranks);
    });
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& t, int dst, int tag) { return call("send", {}, t, dst, tag); }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& t, int src, int tag) { return call("recv", {}, t, src, tag); }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& t, int tag) {
    return call("recv_anysource", {}, t, tag);
  }
  // Every call runs when it is made: coalescing has nothing to gather.
  void startCoalescing() {}
  c10::intrusive_ptr<c10d::Work> endCoalescing() { return c10::make_intrusive<done_work>(std::vector<at::Tensor>{}); }

 private:
  template <class F>
  static void guarded(F&& f) {
    std::string what;
    int kind = 0;
    try {
      f();
      return;
    } catch (py::error_already_set& e) {
      kind = e.matches(PyExc_NotImplementedError) ? 1 : e.matches(PyExc_ValueError) ? 2 : 0;
      what = e.what();
    }
    TORCH_CHECK_NOT_IMPLEMENTED(kind != 1, what);
    TORCH_CHECK_VALUE(kind != 2, what);
    TORCH_CHECK(false, what);
  }

  template <class... A>
  c10::intrusive_ptr<c10d::Work> call(const char* name, std::vector<at::Tensor> result, A&... a) {
    {
      py::gil_scoped_acquire gil;
      guarded([&] { impl_.attr(name)(a...); });
    }
    return c10::make_intrusive<done_work>(std::move(result));
  }

  py::object impl_;
};

}  // namespace
#endif

void bind_dist_backend(py::module& m) {
#if RCCLX_DIST_BACKEND
  m.def(
      "make_dist_backend",
      [](py::object impl, int rank, int size) -> c10::intrusive_ptr<c10d::Backend> {
        return c10::make_intrusive<forwarding_backend>(std::move(impl), rank, size);
      },
      "A c10d Backend whose collectives call the same-named methods of `impl` (rcclx.distributed)",
      py::arg("impl"), py::arg("rank"), py::arg("size"));
#else
  (void)m;
#endif
}
