// The rcclx torch extension: communicators built over a torch.distributed group, and the collectives
// as registered torch operators (torch.ops.rcclx.*), each with a Meta implementation so that tracing
// sees their shapes. Compiled for the host backend by a C++ compiler (CPU tensors, ranks as
// processes sharing memory) and for the CUDA backend by nvcc (CUDA tensors).
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/extension.h>
#if defined(__CUDACC__)
#  include <ATen/cuda/CUDAContext.h>
#endif

#include <rcclx/host/bootstrap.hpp>
#include <rcclx/host/communicator.hpp>
#include <rcclx/lpc/select.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace {

constexpr int max_ranks = 16;
using communicator = rcclx::host::communicator<max_ranks>;

// One Python Communicator: the bootstrap (an allgather over the group, called back into Python)
// must outlive the communicator, which uses it for its per-call agreement checks.
struct entry {
  std::unique_ptr<rcclx::host::callback_bootstrap> bootstrap;
  std::unique_ptr<communicator> comm;
  int rank = 0, num_ranks = 0;
};

std::mutex registry_mutex;
std::map<std::int64_t, std::shared_ptr<entry>> registry;
std::int64_t next_id = 1;

std::shared_ptr<entry> find(std::int64_t id) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const auto it = registry.find(id);
  TORCH_CHECK(it != registry.end(), "rcclx: communicator ", id, " does not exist (destroyed, or never created)");
  return it->second;
}

// allgather(bytes) -> bytes (num_ranks * len), a Python callable; called with or without the GIL.
std::int64_t create(std::int64_t rank, std::int64_t num_ranks, py::function allgather, std::int64_t buffer_bytes,
                    double timeout_s) {
  auto e = std::make_shared<entry>();
  e->rank = static_cast<int>(rank);
  e->num_ranks = static_cast<int>(num_ranks);
  auto fn = std::make_shared<py::function>(std::move(allgather));
  const int n = e->num_ranks;
  e->bootstrap = std::make_unique<rcclx::host::callback_bootstrap>(
      e->rank, n, [fn, n](const void* in, void* out, std::size_t bytes) {
        py::gil_scoped_acquire gil;
        const py::bytes mine(static_cast<const char*>(in), bytes);
        const py::object got = (*fn)(mine);
        const std::string all = got.cast<std::string>();
        if (all.size() != bytes * static_cast<std::size_t>(n))
          throw rcclx::error(rcclx::errc::invalid_argument,
                             "the bootstrap allgather returned " + std::to_string(all.size()) + " bytes, expected " +
                                 std::to_string(bytes * static_cast<std::size_t>(n)));
        std::memcpy(out, all.data(), all.size());
      });
  rcclx::host::communicator_options o;
  if (buffer_bytes > 0) o.buffer_bytes = static_cast<std::size_t>(buffer_bytes);
  if (timeout_s > 0) o.timeout_ns = static_cast<std::uint64_t>(timeout_s * 1e9);
  e->comm = std::make_unique<communicator>(*e->bootstrap, o);
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry[next_id] = e;
  return next_id++;
}

void destroy(std::int64_t id) {
  std::shared_ptr<entry> e;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    const auto it = registry.find(id);
    if (it == registry.end()) return;
    e = it->second;
    registry.erase(it);
  }
  e->comm.reset();
}

rcclx::reduce_op parse_op(const std::string& op) {
  if (op == "sum") return rcclx::reduce_op::sum;
  if (op == "min") return rcclx::reduce_op::min;
  if (op == "max") return rcclx::reduce_op::max;
  TORCH_CHECK(false, "rcclx: op must be \"sum\", \"min\" or \"max\" (got \"", op, "\")");
}

rcclx::algorithm parse_algorithm(const std::string& a) {
  if (a == "flat") return rcclx::algorithm::flat;
  if (a == "tree") return rcclx::algorithm::tree;
  if (a == "low_precision") return rcclx::algorithm::low_precision;
  if (a == "automatic") return rcclx::algorithm::automatic;
  TORCH_CHECK(false, "rcclx: algorithm must be \"flat\", \"tree\", \"low_precision\" or \"automatic\" (got \"", a,
              "\")");
}

void check_tensor(const char* what, const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.is_contiguous(), "rcclx.", what, ": ", name, " must be contiguous (got strides ", t.strides(), ")");
#if RCCLX_BACKEND_HOST
  TORCH_CHECK(t.device().is_cpu(), "rcclx.", what, ": ", name, " is on ", t.device(),
              "; this build of rcclx (host backend) takes CPU tensors");
#else
  TORCH_CHECK(t.device().is_cuda(), "rcclx.", what, ": ", name, " is on ", t.device(),
              "; this build of rcclx takes GPU tensors");
#endif
  const auto s = t.scalar_type();
  TORCH_CHECK(s == at::kFloat || s == at::kBFloat16 || s == at::kHalf || s == at::kInt, "rcclx.", what, ": ", name,
              " has dtype ", s, "; rcclx takes float32, bfloat16, float16 and int32");
}

rcclx::gpu::stream_t stream_of(const at::Tensor&) {
#if RCCLX_BACKEND_CUDA
  return at::cuda::getCurrentCUDAStream();  // torch's current stream: ordered with the caller's work
#else
  return {};  // host backend: calls run to completion
#endif
}

// Runs f with T the C++ type of the tensor's dtype.
template <class F>
void with_type(at::ScalarType s, F&& f) {
  switch (s) {
    case at::kFloat: f(float{}); break;
    case at::kBFloat16: f(rcclx::bf16{}); break;
    case at::kHalf: f(rcclx::fp16{}); break;
    case at::kInt: f(std::int32_t{}); break;
    default: TORCH_CHECK(false, "rcclx: unsupported dtype ", s);
  }
}

// f(T{}) with T the C++ type of t's dtype; an rcclx::error becomes a Python RuntimeError carrying
// its message (names the rank, the barrier, ...).
template <class F>
void run_typed(const at::Tensor& t, F&& f) {
  try {
    with_type(t.scalar_type(), f);
  } catch (const rcclx::error& e) {
    TORCH_CHECK(false, e.what());
  }
}

// An output / input pair of a collective: both usable, the same dtype.
void check_pair(const char* what, const at::Tensor& out, const at::Tensor& in) {
  check_tensor(what, "the input", in);
  check_tensor(what, "the output", out);
  TORCH_CHECK(out.scalar_type() == in.scalar_type(), "rcclx.", what, ": the output's dtype ", out.scalar_type(),
              " differs from the input's ", in.scalar_type());
}

rcclx::algorithm resolve(rcclx::lpc::collective c, rcclx::algorithm a, std::size_t bytes) {
  // automatic: low precision where RCCL_LOW_PRECISION_ENABLE* enables it for this size (lpc/select.hpp).
  if (a == rcclx::algorithm::automatic && rcclx::lpc::use_low_precision(c, bytes)) return rcclx::algorithm::low_precision;
  return a;
}

at::Tensor all_reduce(at::Tensor t, std::int64_t comm, std::string op, std::string algorithm) {
  check_tensor("all_reduce", "the tensor", t);
  const auto e = find(comm);
  const auto o = parse_op(op);
  const auto a = resolve(rcclx::lpc::collective::allreduce, parse_algorithm(algorithm), t.nbytes());
  run_typed(t, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.data_ptr());
    e->comm->allreduce<T>(p, p, static_cast<std::size_t>(t.numel()), o, a, stream_of(t));
  });
  return t;
}

void all_gather(at::Tensor out, at::Tensor in, std::int64_t comm, std::string algorithm) {
  check_pair("all_gather", out, in);
  const auto e = find(comm);
  TORCH_CHECK(out.numel() == in.numel() * e->num_ranks, "rcclx.all_gather: the output has ", out.numel(),
              " elements; it needs num_ranks x input = ", e->num_ranks, " x ", in.numel());
  const auto a = resolve(rcclx::lpc::collective::allgather, parse_algorithm(algorithm), in.nbytes());
  run_typed(in, [&](auto tag) {
    using T = decltype(tag);
    e->comm->allgather<T>(static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()),
                          static_cast<std::size_t>(in.numel()), a, stream_of(in));
  });
}

void reduce_scatter(at::Tensor out, at::Tensor in, std::int64_t comm, std::string op, std::string algorithm) {
  check_pair("reduce_scatter", out, in);
  const auto e = find(comm);
  TORCH_CHECK(in.numel() == out.numel() * e->num_ranks, "rcclx.reduce_scatter: the input has ", in.numel(),
              " elements; it needs num_ranks x output = ", e->num_ranks, " x ", out.numel());
  const auto o = parse_op(op);
  const auto a = resolve(rcclx::lpc::collective::reduce_scatter, parse_algorithm(algorithm), in.nbytes());
  run_typed(in, [&](auto tag) {
    using T = decltype(tag);
    e->comm->reduce_scatter<T>(static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()),
                               static_cast<std::size_t>(in.numel()), o, a, stream_of(in));
  });
}

void all_to_all(at::Tensor out, at::Tensor in, std::int64_t comm, std::string algorithm) {
  check_pair("all_to_all", out, in);
  const auto e = find(comm);
  TORCH_CHECK(out.numel() == in.numel(), "rcclx.all_to_all: the output has ", out.numel(),
              " elements; it needs the input's ", in.numel());
  TORCH_CHECK(in.numel() % e->num_ranks == 0, "rcclx.all_to_all: ", in.numel(),
              " elements do not split into ", e->num_ranks, " equal blocks");
  const auto a = resolve(rcclx::lpc::collective::alltoall, parse_algorithm(algorithm), in.nbytes());
  run_typed(in, [&](auto tag) {
    using T = decltype(tag);
    e->comm->alltoall<T>(static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()),
                         static_cast<std::size_t>(in.numel()), a, stream_of(in));
  });
}

// Meta: shapes only (torch.compile / fake tensors trace through them).
at::Tensor all_reduce_meta(at::Tensor t, std::int64_t, std::string, std::string) { return t; }
void collective_meta(at::Tensor, at::Tensor, std::int64_t, std::string) {}
void reduce_scatter_meta(at::Tensor, at::Tensor, std::int64_t, std::string, std::string) {}

}  // namespace

TORCH_LIBRARY(rcclx, m) {
  m.def("all_reduce(Tensor(a!) t, int comm, str op, str algorithm) -> Tensor(a!)");
  m.def("all_gather(Tensor(a!) out, Tensor input, int comm, str algorithm) -> ()");
  m.def("reduce_scatter(Tensor(a!) out, Tensor input, int comm, str op, str algorithm) -> ()");
  m.def("all_to_all(Tensor(a!) out, Tensor input, int comm, str algorithm) -> ()");
}

TORCH_LIBRARY_IMPL(rcclx, CompositeExplicitAutograd, m) {
  m.impl("all_reduce", &all_reduce);
  m.impl("all_gather", &all_gather);
  m.impl("reduce_scatter", &reduce_scatter);
  m.impl("all_to_all", &all_to_all);
}

// No gradients: a clear error if one is asked for, and meta / CPU tensors dispatch through.
TORCH_LIBRARY_IMPL(rcclx, Autograd, m) {
  m.impl("all_reduce", torch::autograd::autogradNotImplementedFallback());
  m.impl("all_gather", torch::autograd::autogradNotImplementedFallback());
  m.impl("reduce_scatter", torch::autograd::autogradNotImplementedFallback());
  m.impl("all_to_all", torch::autograd::autogradNotImplementedFallback());
}

TORCH_LIBRARY_IMPL(rcclx, Meta, m) {
  m.impl("all_reduce", &all_reduce_meta);
  m.impl("all_gather", &collective_meta);
  m.impl("reduce_scatter", &reduce_scatter_meta);
  m.impl("all_to_all", &collective_meta);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "rcclx: collectives over shared memory, as torch operators";
  m.def("create", &create, "Creates a communicator (collective over the group); returns its id", py::arg("rank"),
        py::arg("num_ranks"), py::arg("allgather"), py::arg("buffer_bytes") = 0, py::arg("timeout_s") = 0.0);
  m.def("destroy", &destroy, "Destroys a communicator", py::arg("id"));
  m.attr("max_ranks") = max_ranks;
  m.attr("backend") = rcclx::current_backend == rcclx::backend::host ? "host" : "cuda";
  m.attr("checks") = rcclx::checks;
}
