// The rcclx torch extension: communicators built over a torch.distributed group, and the collectives
// as registered torch operators (torch.ops.rcclx.*), each with a Meta implementation so that tracing
// sees their shapes. This file holds torch's side only and is compiled by the host C++ compiler on
// every backend; the communicator and its launches are in engine.cpp and its collectives' units
// (nvcc for CUDA), reached through engine.hpp's plain interface.
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/extension.h>
#if RCCLX_TORCH_CUDA
#  include <ATen/cuda/CUDAContext.h>
#  include <c10/cuda/CUDAFunctions.h>
#endif

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "engine.hpp"
#include "mailbox.hpp"

namespace {

namespace rt = rcclx_torch;

// Error messages are built as text here (numbers with std::to_string) and handed to TORCH_CHECK as one
// string: with torch 2.11 (pip wheels, CUDA machine) a failing TORCH_CHECK whose arguments streamed an
// integer killed the process with SIGSEGV, where the same check with preformatted text raised.
void append(std::string& s, const char* a) { s += a; }
void append(std::string& s, const std::string& a) { s += a; }
void append(std::string& s, at::ScalarType a) { s += c10::toString(a); }
void append(std::string& s, const c10::Device& d) { s += d.str(); }
void append(std::string& s, const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  s += b;
}
void append(std::string& s, at::IntArrayRef a) {
  s += "[";
  for (std::size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + std::to_string(a[i]);
  s += "]";
}
template <class T, class = std::enable_if_t<std::is_integral<T>::value>>
void append(std::string& s, T v) {
  s += std::to_string(v);
}
template <class... A>
std::string text(const A&... a) {
  std::string s;
  (append(s, a), ...);
  return s;
}
#define RCCLX_TORCH_CHECK(cond, ...) TORCH_CHECK(cond, text(__VA_ARGS__))
constexpr int max_ranks = rt::max_ranks;

// One Python Communicator. The bootstrap's allgather (a Python callable) must outlive it.
struct entry {
  rt::engine_ptr engine;
  int rank = 0, num_ranks = 0;
  int device = -1;  // GPU builds: the device the communicator's memory lives on
};

// The communicators by id. Never destroyed: a communicator still alive when the interpreter exits
// is left to the operating system (its destructor would call the GPU runtime after it shut down).
struct registry_t {
  std::mutex mutex;
  std::map<std::int64_t, std::shared_ptr<entry>> entries;
  std::int64_t next_id = 1;
};
registry_t& registry() {
  static registry_t* r = new registry_t;
  return *r;
}

std::shared_ptr<entry> find(std::int64_t id) {
  registry_t& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  const auto it = reg.entries.find(id);
  RCCLX_TORCH_CHECK(it != reg.entries.end(), "rcclx: communicator ", id,
                    " does not exist (destroyed, or never created)");
  RCCLX_TORCH_CHECK(it->second->engine, "rcclx: communicator ", id, " was destroyed");
  return it->second;
}

// Raises an engine error (its text: a failed exchange names the dead peers) as a torch error.
void check(const std::string& err) { TORCH_CHECK(err.empty(), err); }

void* stream_of() {
#if RCCLX_TORCH_CUDA
  return static_cast<void*>(at::cuda::getCurrentCUDAStream().stream());  // ordered with the caller's work
#else
  return nullptr;  // host backend: calls run to completion
#endif
}

// allgather(bytes) -> bytes (num_ranks * len), a Python callable; called with or without the GIL.
// mailbox (may be null): the communicator's shared-memory mailbox once Python attaches it; then an
// exchange is posted and collected here, and only a peer later than `mailbox_spin` (or an error)
// goes to Python, as allgather(bytes, seq of the exchange already posted). The first 20 us of polling
// keep the GIL (most exchanges end there); the rest run without it.
constexpr std::chrono::microseconds mailbox_spin_gil{20}, mailbox_spin{2000};

std::int64_t create(std::int64_t rank, std::int64_t num_ranks, py::function allgather, std::int64_t buffer_bytes,
                    double timeout_s, std::int64_t check_calls, std::int64_t symmetric_bytes, std::int64_t max_tiles,
                    std::shared_ptr<rt::native_mailbox> mailbox) {
  auto e = std::make_shared<entry>();
  e->rank = static_cast<int>(rank);
  e->num_ranks = static_cast<int>(num_ranks);
#if RCCLX_TORCH_CUDA
  e->device = static_cast<int>(c10::cuda::current_device());
#endif
  auto fn = std::make_shared<py::function>(std::move(allgather));
  const int n = e->num_ranks;
  rt::allgather_fn ag = [fn, n, box = std::move(mailbox)](const void* in, void* out, std::size_t bytes) -> std::string {
    std::int64_t posted = -1;
    if (box && box->takes(bytes)) {
      const std::uint64_t k = box->seq;
      box->post(in, bytes, out);
      bool done = box->collect(bytes, out, mailbox_spin_gil);
      if (!done) {
        std::optional<py::gil_scoped_release> nogil;  // released while polling, where this thread holds it
        if (PyGILState_Check()) nogil.emplace();
        done = box->collect(bytes, out, mailbox_spin);
      }
      box->seq = k + 1;
      if (done) return {};
      posted = static_cast<std::int64_t>(k);
    }
    std::string all, failure;
    {
      py::gil_scoped_acquire gil;
      try {
        const py::bytes mine(static_cast<const char*>(in), bytes);
        const py::object got = posted < 0 ? (*fn)(mine) : (*fn)(mine, posted);
        all = got.cast<std::string>();
      } catch (py::error_already_set& x) {  // destroyed here, with the GIL held
        failure = x.what();
        const std::size_t at = failure.find("\n\nAt:");  // pybind11 appends the Python traceback
        if (at != std::string::npos) failure.resize(at);
      } catch (const std::exception& x) {
        failure = x.what();
      }
    }
    if (!failure.empty())
      return "the exchange between the ranks failed: " + failure;
    if (all.size() != bytes * static_cast<std::size_t>(n))
      return "the bootstrap allgather returned " + std::to_string(all.size()) + " bytes, expected " +
             std::to_string(bytes * static_cast<std::size_t>(n));
    std::memcpy(out, all.data(), all.size());
    return {};
  };
  rt::engine_options o;
  o.buffer_bytes = buffer_bytes > 0 ? static_cast<std::size_t>(buffer_bytes) : 0;
  o.timeout_s = timeout_s;
  o.check_calls = check_calls >= 0 ? static_cast<int>(check_calls != 0) : -1;
  o.max_tiles = static_cast<int>(max_tiles);
  o.symmetric_bytes = symmetric_bytes > 0 ? static_cast<std::size_t>(symmetric_bytes) : 0;
  check(rt::create(e->rank, n, std::move(ag), o, e->engine));
  registry_t& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.entries[reg.next_id] = e;
  return reg.next_id++;
}

void destroy(std::int64_t id) {
  std::shared_ptr<entry> e;
  {
    registry_t& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    const auto it = reg.entries.find(id);
    if (it == reg.entries.end()) return;
    e = it->second;
    reg.entries.erase(it);
  }
  e->engine.reset();
}

// Collective, every rank in the same order with the same shape and dtype: an uninitialised tensor
// in the communicator's registered pool (collectives on it read peers' copies: zero-copy).
// `like`: any tensor of the wanted dtype (pybind11 has no caster for torch.dtype).
at::Tensor symmetric_empty(std::int64_t id, std::vector<std::int64_t> shape, const at::Tensor& like) {
  const auto e = find(id);
  const at::ScalarType dtype = like.scalar_type();
  std::int64_t numel = 1;
  for (const std::int64_t d : shape) {
    RCCLX_TORCH_CHECK(d >= 0, "rcclx.symmetric_empty: negative dimension ", d, " in ", at::IntArrayRef(shape));
    numel *= d;
  }
  const std::size_t bytes = static_cast<std::size_t>(numel) * c10::elementSize(dtype);
  void* ptr = nullptr;
  std::function<void()> release;
  check(rt::symmetric_take(*e->engine, bytes, ptr, release));
  auto options = at::TensorOptions().dtype(dtype);
#if RCCLX_TORCH_CUDA
  options = options.device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(e->device)));
#endif
  auto done = std::make_shared<std::function<void()>>(std::move(release));
  return at::from_blob(ptr, shape, [done](void*) { (*done)(); }, options);
}

// Does t lie in a buffer registered with the communicator (a symmetric tensor)?
bool is_symmetric(std::int64_t id, const at::Tensor& t) {
  const auto e = find(id);
  return rt::is_registered(*e->engine, t.data_ptr(), t.nbytes());
}

// Collective: after a CUDA graph captured collectives on this communicator, opens the peers' copies
// of the buffers they read (communicator::register_graph_buffers).
void register_graph_buffers(std::int64_t id) {
  const auto e = find(id);
  check(rt::register_graph_buffers(*e->engine));
}

// Waits for torch's current stream, then raises a device-side error (a peer that never arrived).
void synchronize(std::int64_t id) {
  const auto e = find(id);
  check(rt::synchronize(*e->engine, stream_of()));
}

rt::reduce parse_op(const std::string& op) {
  if (op == "sum") return rt::reduce::sum;
  if (op == "min") return rt::reduce::min;
  if (op == "max") return rt::reduce::max;
  if (op == "product") return rt::reduce::product;
  if (op == "avg") return rt::reduce::avg;
  if (op == "premul_sum") return rt::reduce::premul_sum;
  RCCLX_TORCH_CHECK(false,
                    "rcclx: op must be \"sum\", \"min\", \"max\", \"product\", \"avg\" or \"premul_sum\" (got \"",
                    op, "\")");
}

rt::algo parse_algorithm(const std::string& a) {
  if (a == "flat") return rt::algo::flat;
  if (a == "tree") return rt::algo::tree;
  if (a == "low_precision") return rt::algo::low_precision;
  if (a == "automatic") return rt::algo::automatic;
  RCCLX_TORCH_CHECK(false, "rcclx: algorithm must be \"flat\", \"tree\", \"low_precision\" or \"automatic\" (got \"", a,
                    "\")");
}

void check_tensor(const char* what, const char* name, const at::Tensor& t) {
  RCCLX_TORCH_CHECK(t.is_contiguous(), "rcclx.", what, ": ", name, " must be contiguous (got strides ", t.strides(),
                    ")");
#if RCCLX_TORCH_CUDA
  RCCLX_TORCH_CHECK(t.device().is_cuda(), "rcclx.", what, ": ", name, " is on ", t.device(),
                    "; this build of rcclx takes GPU tensors");
  RCCLX_TORCH_CHECK(t.device().index() == c10::cuda::current_device(), "rcclx.", what, ": ", name, " is on ",
                    t.device(), " but the current device is cuda:", static_cast<int>(c10::cuda::current_device()));
#else
  RCCLX_TORCH_CHECK(t.device().is_cpu(), "rcclx.", what, ": ", name, " is on ", t.device(),
                    "; this build of rcclx (host backend) takes CPU tensors");
#endif
  const auto s = t.scalar_type();
  RCCLX_TORCH_CHECK(s == at::kFloat || s == at::kBFloat16 || s == at::kHalf || s == at::kInt || s == at::kChar ||
                        s == at::kByte || s == at::kLong || s == at::kDouble || s == at::kBool,
                    "rcclx.", what, ": ", name, " has dtype ", s,
                    "; rcclx takes float32, bfloat16, float16, float64, int8, uint8, int32, int64 and bool");
}

rt::element element_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return rt::element::f32;
    case at::kBFloat16: return rt::element::bf16;
    case at::kHalf: return rt::element::f16;
    case at::kInt: return rt::element::i32;
    case at::kChar: return rt::element::i8;
    case at::kByte: return rt::element::u8;
    case at::kLong: return rt::element::i64;
    case at::kDouble: return rt::element::f64;
    case at::kBool: return rt::element::boolean;
    default: RCCLX_TORCH_CHECK(false, "rcclx: unsupported dtype ", t.scalar_type());
  }
}

// The op with its premul_sum factor: `factor`, or factor_tensor (one element: on the collective's
// device, read when the kernel runs; a CPU tensor beside a GPU collective is read now, as a number). `keep` holds a converted copy of the factor for the call.
rt::reduction reduction_of(const char* what, const std::string& op, double factor,
                           const c10::optional<at::Tensor>& factor_tensor, const at::Tensor& like, at::Tensor& keep) {
  rt::reduction r;
  r.op = parse_op(op);
  r.factor = factor;
  if (factor_tensor.has_value() && factor_tensor->defined()) {
    RCCLX_TORCH_CHECK(r.op == rt::reduce::premul_sum, "rcclx.", what, ": a factor tensor is for op \"premul_sum\" only (got \"",
                      op, "\")");
    RCCLX_TORCH_CHECK(factor_tensor->numel() == 1, "rcclx.", what, ": the premul_sum factor must have one element (got ",
                      factor_tensor->numel(), ")");
    if (factor_tensor->device().is_cpu() && !like.device().is_cpu()) {
      r.factor = factor_tensor->reshape({1}).to(at::kDouble).item<double>();  // known now: a number
      return r;
    }
    RCCLX_TORCH_CHECK(factor_tensor->device() == like.device(), "rcclx.", what, ": the premul_sum factor is on ",
                      factor_tensor->device(), ", the tensor on ", like.device());
    keep = factor_tensor->reshape({1}).to(like.scalar_type()).contiguous();
    r.factor_device = keep.data_ptr();
  }
  return r;
}

// An output / input pair of a collective: both usable, the same dtype.
void check_pair(const char* what, const at::Tensor& out, const at::Tensor& in) {
  check_tensor(what, "the input", in);
  check_tensor(what, "the output", out);
  RCCLX_TORCH_CHECK(out.scalar_type() == in.scalar_type(), "rcclx.", what, ": the output's dtype ", out.scalar_type(),
                    " differs from the input's ", in.scalar_type());
}

// A reducing collective in place on `t`: AllReduce, or Reduce to `root`.
void reduce_in_place(const char* what, rt::collective c, const at::Tensor& t, std::int64_t comm, const std::string& op,
                     const std::string& algorithm, double factor, const c10::optional<at::Tensor>& factor_tensor,
                     int root) {
  check_tensor(what, "the tensor", t);
  const auto e = find(comm);
  at::Tensor keep;
  const auto o = reduction_of(what, op, factor, factor_tensor, t, keep);
  const auto a = parse_algorithm(algorithm);
  check(rt::run_collective(*e->engine, c, element_of(t), t.data_ptr(), t.data_ptr(), static_cast<std::size_t>(t.numel()),
                           o, a, stream_of(), root));
}

void all_reduce(at::Tensor t, std::int64_t comm, std::string op, std::string algorithm, double factor,
                c10::optional<at::Tensor> factor_tensor) {
  reduce_in_place("all_reduce", rt::collective::allreduce, t, comm, op, algorithm, factor, factor_tensor, 0);
}

void all_gather(at::Tensor out, at::Tensor in, std::int64_t comm, std::string algorithm) {
  check_pair("all_gather", out, in);
  const auto e = find(comm);
  RCCLX_TORCH_CHECK(out.numel() == in.numel() * e->num_ranks, "rcclx.all_gather: the output has ", out.numel(),
                    " elements; it needs num_ranks x input = ", e->num_ranks, " x ", in.numel());
  const auto a = parse_algorithm(algorithm);
  check(rt::run_collective(*e->engine, rt::collective::allgather, element_of(in), in.data_ptr(), out.data_ptr(),
                           static_cast<std::size_t>(in.numel()), rt::reduction{}, a, stream_of()));
}

void reduce_scatter(at::Tensor out, at::Tensor in, std::int64_t comm, std::string op, std::string algorithm,
                    double factor, c10::optional<at::Tensor> factor_tensor) {
  check_pair("reduce_scatter", out, in);
  const auto e = find(comm);
  RCCLX_TORCH_CHECK(in.numel() == out.numel() * e->num_ranks, "rcclx.reduce_scatter: the input has ", in.numel(),
                    " elements; it needs num_ranks x output = ", e->num_ranks, " x ", out.numel());
  at::Tensor keep;
  const auto o = reduction_of("reduce_scatter", op, factor, factor_tensor, in, keep);
  const auto a = parse_algorithm(algorithm);
  check(rt::run_collective(*e->engine, rt::collective::reduce_scatter, element_of(in), in.data_ptr(),
                           out.data_ptr(), static_cast<std::size_t>(in.numel()), o, a, stream_of()));
}

void all_to_all(at::Tensor out, at::Tensor in, std::int64_t comm, std::string algorithm) {
  check_pair("all_to_all", out, in);
  const auto e = find(comm);
  RCCLX_TORCH_CHECK(out.numel() == in.numel(), "rcclx.all_to_all: the output has ", out.numel(),
                    " elements; it needs the input's ", in.numel());
  RCCLX_TORCH_CHECK(in.numel() % e->num_ranks == 0, "rcclx.all_to_all: ", in.numel(),
                    " elements do not split into ", e->num_ranks, " equal blocks");
  const auto a = parse_algorithm(algorithm);
  check(rt::run_collective(*e->engine, rt::collective::alltoall, element_of(in), in.data_ptr(), out.data_ptr(),
                           static_cast<std::size_t>(in.numel()), rt::reduction{}, a, stream_of()));
}

// Uneven AlltoAll (all_to_all_single with split sizes, in elements of the flattened tensors).
void all_to_all_v(at::Tensor out, at::Tensor in, std::int64_t comm, std::vector<std::int64_t> output_splits,
                  std::vector<std::int64_t> input_splits) {
  check_pair("all_to_all_v", out, in);
  const auto e = find(comm);
  const auto n = static_cast<std::size_t>(e->num_ranks);
  RCCLX_TORCH_CHECK(input_splits.size() == n && output_splits.size() == n, "rcclx.all_to_all_v: input_splits has ",
                    input_splits.size(), " entries and output_splits ", output_splits.size(), "; both need num_ranks = ",
                    e->num_ranks);
  std::vector<std::size_t> is(n), os(n);
  std::int64_t in_total = 0, out_total = 0;
  for (std::size_t p = 0; p < n; ++p) {
    RCCLX_TORCH_CHECK(input_splits[p] >= 0 && output_splits[p] >= 0, "rcclx.all_to_all_v: split sizes must not be "
                      "negative (input_splits[", p, "] = ", input_splits[p], ", output_splits[", p, "] = ",
                      output_splits[p], ")");
    is[p] = static_cast<std::size_t>(input_splits[p]);
    os[p] = static_cast<std::size_t>(output_splits[p]);
    in_total += input_splits[p];
    out_total += output_splits[p];
  }
  RCCLX_TORCH_CHECK(in_total <= in.numel(), "rcclx.all_to_all_v: input_splits add up to ", in_total,
                    " elements; the input has ", in.numel());
  RCCLX_TORCH_CHECK(out_total <= out.numel(), "rcclx.all_to_all_v: output_splits add up to ", out_total,
                    " elements; the output has ", out.numel());
  check(rt::run_alltoallv(*e->engine, element_of(in), in.data_ptr(), is.data(), out.data_ptr(), os.data(),
                          stream_of()));
}

// Broadcast from root, in place on every rank.
void broadcast(at::Tensor t, std::int64_t comm, std::int64_t root, std::string algorithm) {
  check_tensor("broadcast", "the tensor", t);
  const auto e = find(comm);
  const auto a = parse_algorithm(algorithm);
  check(rt::run_collective(*e->engine, rt::collective::broadcast, element_of(t), t.data_ptr(), t.data_ptr(),
                           static_cast<std::size_t>(t.numel()), rt::reduction{}, a, stream_of(),
                           static_cast<int>(root)));
}

// Reduce to root, in place on the root (other ranks' tensors are left as they were).
void reduce(at::Tensor t, std::int64_t comm, std::int64_t root, std::string op, std::string algorithm, double factor,
            c10::optional<at::Tensor> factor_tensor) {
  reduce_in_place("reduce", rt::collective::reduce, t, comm, op, algorithm, factor, factor_tensor, static_cast<int>(root));
}

// Every rank waits for every other (the host backend blocks; GPU builds: on the current stream).
void barrier(std::int64_t id) {
  const auto e = find(id);
  check(rt::barrier(*e->engine, stream_of()));
}

// ---- your own kernels: the device handles of a symmetric tensor -------------------------------

// A CPU uint8 tensor holding an rcclx::pytorch::kernel_handles record for the symmetric tensor t
// (include/rcclx/pytorch/kernel_handles.hpp reads it in the user's extension). Local: no exchange.
at::Tensor kernel_handles(std::int64_t id, const at::Tensor& t) {
  const auto e = find(id);
  RCCLX_TORCH_CHECK(t.is_contiguous(), "rcclx.kernel_handles: the tensor must be contiguous");
  RCCLX_TORCH_CHECK(rt::is_registered(*e->engine, t.data_ptr(), t.nbytes()), "rcclx.kernel_handles: the tensor (",
                    t.nbytes(), " bytes at ", t.data_ptr(),
                    ") is not a symmetric tensor of this communicator: make it with comm.symmetric_empty on every "
                    "rank");
  std::vector<unsigned char> bytes;
  check(rt::kernel_handles(*e->engine, t.data_ptr(), t.nbytes(), bytes));
  at::Tensor out = at::empty({static_cast<std::int64_t>(bytes.size())}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

// ---- AllReduce + residual add + RMSNorm ---------------------------------------------------------

// residual <- residual + allreduce(x); out <- rmsnorm(residual) * weight (FP8: codes of out / scale).
// x, residual: [tokens, hidden]; weight: [hidden]; the same bits on every rank.
void all_reduce_rmsnorm(at::Tensor x, at::Tensor residual, at::Tensor weight, at::Tensor out, double eps,
                        std::int64_t comm, std::string algorithm, std::string out_format,
                        c10::optional<at::Tensor> scale) {
  const char* who = "all_reduce_rmsnorm";
  check_tensor(who, "x", x);
  check_tensor(who, "residual", residual);
  check_tensor(who, "weight", weight);
  RCCLX_TORCH_CHECK(out.is_contiguous(), "rcclx.all_reduce_rmsnorm: out must be contiguous");
  RCCLX_TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf,
                    "rcclx.all_reduce_rmsnorm: x must be float32, bfloat16 or float16 (got ", x.scalar_type(), ")");
  RCCLX_TORCH_CHECK(residual.scalar_type() == x.scalar_type() && weight.scalar_type() == x.scalar_type(),
                    "rcclx.all_reduce_rmsnorm: x, residual and weight must have one dtype (got ", x.scalar_type(), ", ",
                    residual.scalar_type(), ", ", weight.scalar_type(), ")");
  RCCLX_TORCH_CHECK(x.dim() >= 1, "rcclx.all_reduce_rmsnorm: x must have at least one dimension (its last is hidden)");
  const std::int64_t hidden = x.size(-1);
  RCCLX_TORCH_CHECK(residual.sizes() == x.sizes(), "rcclx.all_reduce_rmsnorm: residual has shape ", residual.sizes(),
                    ", x has ", x.sizes());
  RCCLX_TORCH_CHECK(weight.numel() == hidden, "rcclx.all_reduce_rmsnorm: weight has ", weight.numel(),
                    " elements; it needs x's last dimension, ", hidden);
  RCCLX_TORCH_CHECK(out.numel() == x.numel(), "rcclx.all_reduce_rmsnorm: out has ", out.numel(), " elements; x has ",
                    x.numel());
  rt::rmsnorm_call c{};
  if (out_format.empty() || out_format == "same") c.out = rt::out_format::same;
  else if (out_format == "e4m3") c.out = rt::out_format::e4m3;
  else if (out_format == "e5m2") c.out = rt::out_format::e5m2;
  else RCCLX_TORCH_CHECK(false, "rcclx.all_reduce_rmsnorm: out_format must be \"same\", \"e4m3\" or \"e5m2\" (got \"",
                         out_format, "\")");
  const bool fp8 = c.out != rt::out_format::same;
  RCCLX_TORCH_CHECK(fp8 ? out.element_size() == 1 : out.scalar_type() == x.scalar_type(),
                    "rcclx.all_reduce_rmsnorm: out ",
                    fp8 ? "must have 1-byte elements (uint8 or a float8 dtype) for FP8 output" : "must have x's dtype",
                    " (got ", out.scalar_type(), ")");
  if (fp8) {
    RCCLX_TORCH_CHECK(scale.has_value() && scale->numel() == 1 && scale->scalar_type() == at::kFloat,
                      "rcclx.all_reduce_rmsnorm: FP8 output needs scale, a float32 tensor of one element");
    check_tensor(who, "scale", *scale);
  }
  c.type = element_of(x);
  c.x = x.data_ptr();
  c.residual = residual.data_ptr();
  c.weight = weight.data_ptr();
  c.output = out.data_ptr();
  c.scale = fp8 ? static_cast<const float*>(scale->data_ptr()) : nullptr;
  c.hidden = static_cast<std::size_t>(hidden);
  c.tokens = hidden > 0 ? static_cast<std::size_t>(x.numel() / hidden) : 0;
  c.eps = static_cast<float>(eps);
  const auto e = find(comm);
  check(rt::all_reduce_rmsnorm(*e->engine, c, parse_algorithm(algorithm), stream_of()));
}

// ---- benchmark support (bench/torch) ------------------------------------------------------------

// The C++ figure of bench/torch: `iters` in-place AllReduces (sum) of t called from C++ on torch's
// current stream, as rcclx-bench --procs calls the communicator; returns seconds of wall clock
// until the stream has finished them. Collective.
double time_all_reduce(std::int64_t id, at::Tensor t, std::string algorithm, std::int64_t iters) {
  check_tensor("time_all_reduce", "the tensor", t);
  const auto e = find(id);
  const auto a = parse_algorithm(algorithm);
  double seconds = 0;
  std::string err;
  {
    py::gil_scoped_release nogil;
    err = rt::time_all_reduce(*e->engine, element_of(t), t.data_ptr(), static_cast<std::size_t>(t.numel()), a, iters,
                              stream_of(), seconds);
  }
  check(err);
  return seconds;
}

// bench/torch: seconds for `iters` calls of the op `name` (the same C++ functions the torch ops
// run: their checks included, no Python, no dispatcher) until the stream has finished them. `in` is
// the input (in place for all_reduce, all_reduce_avg, broadcast, reduce), `out` the output of
// all_gather, reduce_scatter, all_to_all and all_to_all_v (even splits); roots are rank 0.
double time_op(std::int64_t id, std::string name, at::Tensor out, at::Tensor in, std::string algorithm,
               std::int64_t iters) {
  const auto e = find(id);
  const auto n = static_cast<std::int64_t>(e->num_ranks);
  std::function<void()> call;
  if (name == "all_reduce" || name == "all_reduce_avg")
    call = [&, op = std::string(name == "all_reduce" ? "sum" : "avg")] { all_reduce(in, id, op, algorithm, 1.0, {}); };
  else if (name == "broadcast") call = [&] { broadcast(in, id, 0, algorithm); };
  else if (name == "reduce") call = [&] { reduce(in, id, 0, "sum", algorithm, 1.0, {}); };
  else if (name == "all_gather") call = [&] { all_gather(out, in, id, algorithm); };
  else if (name == "reduce_scatter") call = [&] { reduce_scatter(out, in, id, "sum", algorithm, 1.0, {}); };
  else if (name == "all_to_all") call = [&] { all_to_all(out, in, id, algorithm); };
  else if (name == "all_to_all_v") {
    const std::vector<std::int64_t> splits(static_cast<std::size_t>(n), in.numel() / n);
    call = [&, splits] { all_to_all_v(out, in, id, splits, splits); };
  } else if (name == "barrier") call = [&] { barrier(id); };
  else RCCLX_TORCH_CHECK(false, "rcclx.time_op: no op named \"", name, "\"");
  synchronize(id);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < iters; ++i) call();
  synchronize(id);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Meta: shapes only (torch.compile / fake tensors trace through them).
void all_reduce_meta(at::Tensor, std::int64_t, std::string, std::string, double, c10::optional<at::Tensor>) {}
void collective_meta(at::Tensor, at::Tensor, std::int64_t, std::string) {}
void reduce_scatter_meta(at::Tensor, at::Tensor, std::int64_t, std::string, std::string, double,
                         c10::optional<at::Tensor>) {}
void all_to_all_v_meta(at::Tensor, at::Tensor, std::int64_t, std::vector<std::int64_t>, std::vector<std::int64_t>) {}
void broadcast_meta(at::Tensor, std::int64_t, std::int64_t, std::string) {}
void reduce_meta(at::Tensor, std::int64_t, std::int64_t, std::string, std::string, double, c10::optional<at::Tensor>) {
}
void all_reduce_rmsnorm_meta(at::Tensor, at::Tensor, at::Tensor, at::Tensor, double, std::int64_t, std::string,
                             std::string, c10::optional<at::Tensor>) {}

}  // namespace

TORCH_LIBRARY(rcclx, m) {
  // In place, returning nothing (as the other three): torch.compile functionalizes such ops.
  // factor / factor_tensor: premul_sum's factor (a number, or one element read when the kernel runs).
  m.def("all_reduce(Tensor(a!) t, int comm, str op, str algorithm, float factor=1.0, Tensor? factor_tensor=None) -> ()");
  m.def("all_gather(Tensor(a!) out, Tensor input, int comm, str algorithm) -> ()");
  m.def("reduce_scatter(Tensor(a!) out, Tensor input, int comm, str op, str algorithm, float factor=1.0, "
        "Tensor? factor_tensor=None) -> ()");
  m.def("all_to_all(Tensor(a!) out, Tensor input, int comm, str algorithm) -> ()");
  m.def("all_to_all_v(Tensor(a!) out, Tensor input, int comm, int[] output_splits, int[] input_splits) -> ()");
  m.def("broadcast(Tensor(a!) t, int comm, int root, str algorithm) -> ()");
  m.def("reduce(Tensor(a!) t, int comm, int root, str op, str algorithm, float factor=1.0, "
        "Tensor? factor_tensor=None) -> ()");
  m.def("all_reduce_rmsnorm(Tensor x, Tensor(a!) residual, Tensor weight, Tensor(b!) out, float eps, int comm, "
        "str algorithm, str out_format, Tensor? scale) -> ()");
}

TORCH_LIBRARY_IMPL(rcclx, CompositeExplicitAutograd, m) {
  m.impl("all_reduce", &all_reduce);
  m.impl("all_gather", &all_gather);
  m.impl("reduce_scatter", &reduce_scatter);
  m.impl("all_to_all", &all_to_all);
  m.impl("all_to_all_v", &all_to_all_v);
  m.impl("broadcast", &broadcast);
  m.impl("reduce", &reduce);
  m.impl("all_reduce_rmsnorm", &all_reduce_rmsnorm);
}

// No gradients: a clear error if one is asked for, and meta / CPU tensors dispatch through.
TORCH_LIBRARY_IMPL(rcclx, Autograd, m) {
  m.impl("all_reduce", torch::autograd::autogradNotImplementedFallback());
  m.impl("all_gather", torch::autograd::autogradNotImplementedFallback());
  m.impl("reduce_scatter", torch::autograd::autogradNotImplementedFallback());
  m.impl("all_to_all", torch::autograd::autogradNotImplementedFallback());
  m.impl("all_to_all_v", torch::autograd::autogradNotImplementedFallback());
  m.impl("broadcast", torch::autograd::autogradNotImplementedFallback());
  m.impl("reduce", torch::autograd::autogradNotImplementedFallback());
  m.impl("all_reduce_rmsnorm", torch::autograd::autogradNotImplementedFallback());
}

TORCH_LIBRARY_IMPL(rcclx, Meta, m) {
  m.impl("all_reduce", &all_reduce_meta);
  m.impl("all_gather", &collective_meta);
  m.impl("reduce_scatter", &reduce_scatter_meta);
  m.impl("all_to_all", &collective_meta);
  m.impl("all_to_all_v", &all_to_all_v_meta);
  m.impl("broadcast", &broadcast_meta);
  m.impl("reduce", &reduce_meta);
  m.impl("all_reduce_rmsnorm", &all_reduce_rmsnorm_meta);
}

void bind_dist_backend(py::module& m);  // dist_backend.cpp

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "rcclx: collectives over shared memory, as torch operators";
  py::class_<rt::native_mailbox, std::shared_ptr<rt::native_mailbox>>(
      m, "NativeMailbox", "A communicator's shared-memory mailbox as its C++ exchanges use it (rcclx._exchange)")
      .def(py::init<>())
      .def("attach", &rt::native_mailbox::attach, "From now on exchanges of at most slot_bytes - 24 bytes go here",
           py::arg("address"), py::arg("rank"), py::arg("num_ranks"), py::arg("slot_bytes"))
      .def("detach", &rt::native_mailbox::detach, "Every later exchange goes to Python's path")
      .def_property_readonly("attached", &rt::native_mailbox::attached)
      .def_readwrite("seq", &rt::native_mailbox::seq, "The number of the next exchange");
  m.def("create", &create, "Creates a communicator (collective over the group); returns its id", py::arg("rank"),
        py::arg("num_ranks"), py::arg("allgather"), py::arg("buffer_bytes") = 0, py::arg("timeout_s") = 0.0,
        py::arg("check_calls") = -1, py::arg("symmetric_bytes") = 0, py::arg("max_tiles") = 0,
        py::arg("mailbox") = py::none());
  m.def("crc32", [](py::bytes b, std::uint32_t seed) {
          const std::string s = b;
          return rt::crc32(s.data(), s.size(), seed);
        }, "crc32 as the mailbox computes it (zlib's)", py::arg("data"), py::arg("seed") = 0u);
  m.def("destroy", &destroy, "Destroys a communicator", py::arg("id"));
  m.def("symmetric_empty", &symmetric_empty, "A tensor in the communicator's registered pool (collective)",
        py::arg("id"), py::arg("shape"), py::arg("like"));
  m.def("is_symmetric", &is_symmetric, "Does the tensor lie in a registered buffer?", py::arg("id"), py::arg("t"));
  m.def("register_graph_buffers", &register_graph_buffers,
        "After a graph capture: opens the peers' buffers of the captured collectives (collective)", py::arg("id"));
  m.def("kernel_handles", &kernel_handles,
        "The device handles of a symmetric tensor, for your own extension's kernels (a CPU uint8 tensor)",
        py::arg("id"), py::arg("t"));
  m.def("tile_slots",
        [](std::int64_t id) {
          const auto e = find(id);
          int first = 0, max_tiles = 0;
          rt::tile_slots_of(*e->engine, first, max_tiles);
          return py::make_tuple(first, max_tiles);
        },
        "The (first, max_tiles) pad slots kept for tile-protocol kernels", py::arg("id"));
  m.def("time_all_reduce", &time_all_reduce, "bench/torch: seconds for iters AllReduces called from C++ (collective)",
        py::arg("id"), py::arg("t"), py::arg("algorithm"), py::arg("iters"));
  m.def("time_op", &time_op, "bench/torch: seconds for iters calls of an op's C++ function (collective)",
        py::arg("id"), py::arg("name"), py::arg("out"), py::arg("input"), py::arg("algorithm"), py::arg("iters"));
  m.def("barrier", &barrier, "Every rank waits for every other (collective)", py::arg("id"));
  m.def("synchronize", &synchronize, "Waits for the current stream; raises a device-side error", py::arg("id"));
  m.attr("max_ranks") = max_ranks;
  m.attr("backend") = rt::backend_name();
  bind_dist_backend(m);
}
