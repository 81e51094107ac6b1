// The rcclx torch extension: communicators built over a torch.distributed group, and the collectives
// as registered torch operators (torch.ops.rcclx.*), each with a Meta implementation so that tracing
// sees their shapes. Compiled for the host backend by a C++ compiler (CPU tensors, ranks as
// processes sharing memory) and for the CUDA backend by nvcc (CUDA tensors).
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/extension.h>
#if defined(__CUDACC__)
#  include <ATen/cuda/CUDAContext.h>
#  include <c10/cuda/CUDAFunctions.h>
#endif

#include <rcclx/host/bootstrap.hpp>
#include <rcclx/host/communicator.hpp>
#include <rcclx/host/shareable_memory.hpp>
#include <rcclx/lpc/select.hpp>
#include <rcclx/pytorch/kernel_handles.hpp>

#include "fused.hpp"


#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int max_ranks = rcclx::pytorch::max_ranks;
using communicator = rcclx::host::communicator<max_ranks>;
// The pad slots of the communicator's own collectives (its launches use at most this many blocks);
// the tile-protocol range (fused ops, users' kernels) follows them.
constexpr int collective_slots = 128;

// One Python Communicator: the bootstrap (an allgather over the group, called back into Python)
// must outlive the communicator, which uses it for its per-call agreement checks.
// Symmetric tensors (symmetric_empty): one registered pool per communicator, allocated on first
// use (collective), handed out in call order by a bump pointer, so every rank's n-th tensor lies at
// the same offset. The pool starts over when none of its tensors is alive.
struct symmetric_pool {
  void* base = nullptr;
  std::size_t bytes = 0, used = 0;
  std::int64_t live = 0;
  ~symmetric_pool() {
    if (base) rcclx::host::shareable_free(base);  // after the last tensor in it, or the communicator, is gone
  }
};

// The fused ops' own symmetric buffer (all_reduce_rmsnorm's workspace): registered on first use,
// replaced by a larger one when a call needs more (collective: every rank makes the same calls).
struct fused_region {
  void* base = nullptr;
  std::size_t bytes = 0;
};

struct entry {
  std::unique_ptr<rcclx::host::callback_bootstrap> bootstrap;
  std::unique_ptr<communicator> comm;
  int rank = 0, num_ranks = 0;
  int device = -1;  // GPU builds: the device the communicator's memory lives on
  std::size_t symmetric_bytes = 0;
  rcclx::fused::tile_slots tile_slots{collective_slots, 0};  // fused ops and users' kernels
  fused_region fused;
  std::shared_ptr<std::mutex> pool_mutex = std::make_shared<std::mutex>();
  std::shared_ptr<symmetric_pool> pool = std::make_shared<symmetric_pool>();
  ~entry() {
    comm.reset();  // before the pool and the fused region: the communicator closes its registrations
    if (fused.base) rcclx::host::shareable_free(fused.base);
  }
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
  TORCH_CHECK(it != reg.entries.end(), "rcclx: communicator ", id, " does not exist (destroyed, or never created)");
  return it->second;
}

// Peers whose process no longer runs (the communicator's ranks share this node): "" or a sentence.
std::string dead_peers(const entry& e) {
  if (!e.comm) return {};
  std::string m;
  const std::vector<int>& pids = e.comm->pids();
  for (int r = 0; r < static_cast<int>(pids.size()); ++r) {
    if (r == e.rank || pids[r] <= 0) continue;
    if (rcclx::host::detail::process_gone(pids[r]))
      m += (m.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " (pid " + std::to_string(pids[r]) + ")");
  }
  return m.empty() ? m : " [no longer running: " + m + "]";
}

// allgather(bytes) -> bytes (num_ranks * len), a Python callable; called with or without the GIL.
std::int64_t create(std::int64_t rank, std::int64_t num_ranks, py::function allgather, std::int64_t buffer_bytes,
                    double timeout_s, std::int64_t check_calls, std::int64_t symmetric_bytes, std::int64_t max_tiles) {
  auto e = std::make_shared<entry>();
  e->rank = static_cast<int>(rank);
  e->num_ranks = static_cast<int>(num_ranks);
  e->symmetric_bytes = symmetric_bytes > 0 ? static_cast<std::size_t>(symmetric_bytes) : std::size_t(64) << 20;
#if RCCLX_BACKEND_CUDA
  e->device = static_cast<int>(c10::cuda::current_device());
#endif
  auto fn = std::make_shared<py::function>(std::move(allgather));
  const int n = e->num_ranks;
  e->bootstrap = std::make_unique<rcclx::host::callback_bootstrap>(
      e->rank, n, [fn, n](const void* in, void* out, std::size_t bytes) {
        std::string all, failure;
        {
          py::gil_scoped_acquire gil;
          try {
            const py::bytes mine(static_cast<const char*>(in), bytes);
            const py::object got = (*fn)(mine);
            all = got.cast<std::string>();
          } catch (py::error_already_set& x) {  // destroyed here, with the GIL held
            failure = x.what();
            const std::size_t at = failure.find("\n\nAt:");  // pybind11 appends the Python traceback
            if (at != std::string::npos) failure.resize(at);
          } catch (const py::cast_error& x) {
            failure = x.what();
          }
        }
        if (!failure.empty())
          throw rcclx::error(rcclx::errc::peer_failure,
                             "the exchange over the process group failed (did a rank die or leave the group?): " +
                                 failure);
        if (all.size() != bytes * static_cast<std::size_t>(n))
          throw rcclx::error(rcclx::errc::invalid_argument,
                             "the bootstrap allgather returned " + std::to_string(all.size()) + " bytes, expected " +
                                 std::to_string(bytes * static_cast<std::size_t>(n)));
        std::memcpy(out, all.data(), all.size());
      });
  rcclx::host::communicator_options o;
  if (buffer_bytes > 0) o.buffer_bytes = static_cast<std::size_t>(buffer_bytes);
  if (timeout_s > 0) o.timeout_ns = static_cast<std::uint64_t>(timeout_s * 1e9);
  if (check_calls >= 0) o.check_calls = check_calls != 0;
  TORCH_CHECK(max_tiles >= 0 && max_tiles <= 4096 - 1 - collective_slots, "rcclx.Communicator: max_tiles = ", max_tiles,
              " must be in [0, ", 4096 - 1 - collective_slots, "] (0: the default, 2048)");
  e->tile_slots = rcclx::fused::tile_slots{collective_slots, max_tiles > 0 ? static_cast<int>(max_tiles) : 2048};
  o.max_blocks = e->tile_slots.end();
  std::string err;
  try {
    e->comm = std::make_unique<communicator>(*e->bootstrap, o);
  } catch (const rcclx::error& x) {
    err = x.what();
  }
  TORCH_CHECK(err.empty(), err);
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
  e->comm.reset();
}

// f() with an rcclx::error raised as a torch error (RuntimeError in Python), from a plain scope
// (not from inside the handler). A failed exchange over the group also names the peers whose
// process no longer runs (a timeout's message names its missing rank already).
template <class F>
void run_plain(const entry* e, F&& f) {
  std::string err;
  try {
    f();
  } catch (const rcclx::error& x) {
    err = x.what();
    if (e && x.code() == rcclx::errc::peer_failure) err += dead_peers(*e);  // timeouts name the rank already
  }
  TORCH_CHECK(err.empty(), err);
}

// Collective, every rank in the same order with the same shape and dtype: an uninitialised tensor
// in the communicator's registered pool (collectives on it read peers' copies: zero-copy).
// `like`: any tensor of the wanted dtype (pybind11 has no caster for torch.dtype).
at::Tensor symmetric_empty(std::int64_t id, std::vector<std::int64_t> shape, const at::Tensor& like) {
  const auto e = find(id);
  const at::ScalarType dtype = like.scalar_type();
  std::int64_t numel = 1;
  for (const std::int64_t d : shape) {
    TORCH_CHECK(d >= 0, "rcclx.symmetric_empty: negative dimension ", d, " in ", at::IntArrayRef(shape));
    numel *= d;
  }
  const std::size_t bytes = static_cast<std::size_t>(numel) * c10::elementSize(dtype);
  void* ptr = nullptr;
  std::string err;  // raised once the lock is released (see run_typed)
  {
    std::lock_guard<std::mutex> lock(*e->pool_mutex);
    symmetric_pool& pool = *e->pool;
    if (!pool.base) {
      pool.base = rcclx::host::shareable_malloc(e->symmetric_bytes);
      pool.bytes = e->symmetric_bytes;
      try {
        e->comm->register_buffer(pool.base, pool.bytes);  // collective
      } catch (const rcclx::error& x) {
        rcclx::host::shareable_free(pool.base);
        pool.base = nullptr;
        err = std::string("rcclx.symmetric_empty: registering the pool failed: ") + x.what();
      }
    }
    const std::size_t need = (bytes + 255) / 256 * 256;  // every tensor 256-byte aligned
    if (err.empty() && pool.used + need > pool.bytes) {
      std::ostringstream m;
      m << "rcclx.symmetric_empty: " << bytes << " bytes for shape " << at::IntArrayRef(shape) << " do not fit: "
        << pool.bytes - pool.used << " of the pool's " << pool.bytes
        << " bytes are left (Communicator(symmetric_bytes=...) sets its size; it is reused once no symmetric "
           "tensor is alive)";
      err = m.str();
    }
    if (err.empty()) {
      ptr = static_cast<char*>(pool.base) + pool.used;
      pool.used += need;
      ++pool.live;
    }
  }
  TORCH_CHECK(err.empty(), err);
  auto pool = e->pool;
  auto mutex = e->pool_mutex;
  auto options = at::TensorOptions().dtype(dtype);
#if RCCLX_BACKEND_CUDA
  options = options.device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(e->device)));
#endif
  return at::from_blob(
      ptr, shape,
      [pool, mutex](void*) {
        std::lock_guard<std::mutex> lock(*mutex);
        if (--pool->live == 0) pool->used = 0;
      },
      options);
}

// Does t lie in a buffer registered with the communicator (a symmetric tensor)?
bool is_symmetric(std::int64_t id, const at::Tensor& t) {
  const auto e = find(id);
  return e->comm->is_registered(t.data_ptr(), t.nbytes());
}

// Collective: after a CUDA graph captured collectives on this communicator, opens the peers' copies
// of the buffers they read (communicator::register_graph_buffers).
void register_graph_buffers(std::int64_t id) {
  const auto e = find(id);
  run_plain(e.get(), [&] { e->comm->register_graph_buffers(); });
}

// Waits for torch's current stream, then raises a device-side error (a peer that never arrived).
void synchronize(std::int64_t id) {
  const auto e = find(id);
  run_plain(e.get(), [&] {
#if RCCLX_BACKEND_CUDA
    e->comm->synchronize(at::cuda::getCurrentCUDAStream());
#else
    e->comm->synchronize();
#endif
  });
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
  TORCH_CHECK(t.device().index() == c10::cuda::current_device(), "rcclx.", what, ": ", name, " is on ",
              t.device(), " but the current device is cuda:", static_cast<int>(c10::cuda::current_device()));
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

// f(T{}) with T the C++ type of t's dtype; an rcclx::error is raised as run_plain does.
template <class F>
void run_typed(const entry& e, const at::Tensor& t, F&& f) {
  run_plain(&e, [&] { with_type(t.scalar_type(), f); });
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

void all_reduce(at::Tensor t, std::int64_t comm, std::string op, std::string algorithm) {
  check_tensor("all_reduce", "the tensor", t);
  const auto e = find(comm);
  const auto o = parse_op(op);
  const auto a = resolve(rcclx::lpc::collective::allreduce, parse_algorithm(algorithm), t.nbytes());
  run_typed(*e, t, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.data_ptr());
    e->comm->allreduce<T>(p, p, static_cast<std::size_t>(t.numel()), o, a, stream_of(t));
  });
}

void all_gather(at::Tensor out, at::Tensor in, std::int64_t comm, std::string algorithm) {
  check_pair("all_gather", out, in);
  const auto e = find(comm);
  TORCH_CHECK(out.numel() == in.numel() * e->num_ranks, "rcclx.all_gather: the output has ", out.numel(),
              " elements; it needs num_ranks x input = ", e->num_ranks, " x ", in.numel());
  const auto a = resolve(rcclx::lpc::collective::allgather, parse_algorithm(algorithm), in.nbytes());
  run_typed(*e, in, [&](auto tag) {
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
  run_typed(*e, in, [&](auto tag) {
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
  run_typed(*e, in, [&](auto tag) {
    using T = decltype(tag);
    e->comm->alltoall<T>(static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()),
                         static_cast<std::size_t>(in.numel()), a, stream_of(in));
  });
}

// ---- your own kernels: the device handles of a symmetric tensor -------------------------------

// A CPU uint8 tensor holding an rcclx::pytorch::kernel_handles record for the symmetric tensor t
// (include/rcclx/pytorch/kernel_handles.hpp reads it in the user's extension). Local: no exchange.
at::Tensor kernel_handles(std::int64_t id, const at::Tensor& t) {
  const auto e = find(id);
  TORCH_CHECK(t.is_contiguous(), "rcclx.kernel_handles: the tensor must be contiguous");
  TORCH_CHECK(e->comm->is_registered(t.data_ptr(), t.nbytes()),
              "rcclx.kernel_handles: the tensor (", t.nbytes(), " bytes at ", t.data_ptr(),
              ") is not a symmetric tensor of this communicator: make it with comm.symmetric_empty on every rank");
  rcclx::pytorch::kernel_handles h{};
  h.magic = rcclx::pytorch::kernel_handles::magic_value;
  h.version = rcclx::pytorch::kernel_handles::layout_version;
  h.bytes = sizeof(h);
  h.max_ranks_of_writer = max_ranks;
  h.slots = e->tile_slots;
  h.buffer_bytes = t.nbytes();
  run_plain(e.get(), [&] {
    h.table = e->comm->buffer_handle(static_cast<const unsigned char*>(t.data_ptr()), t.nbytes());
  });
  at::Tensor out = at::empty({static_cast<std::int64_t>(sizeof(h))}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(out.data_ptr(), &h, sizeof(h));
  return out;
}

// ---- AllReduce + residual add + RMSNorm ---------------------------------------------------------

// The fused ops' symmetric buffer, at least `need` bytes (collective: every rank makes the same
// calls). A larger one replaces the old after a barrier, so no rank still reads the old one.
void ensure_fused_region(entry& e, std::size_t need, rcclx::gpu::stream_t stream) {
  if (e.fused.bytes >= need) return;
  if (rcclx::gpu::stream_is_capturing(stream))
    throw rcclx::error(rcclx::errc::invalid_argument,
                       "all_reduce_rmsnorm: this shape needs a larger fused workspace (" + std::to_string(need) +
                           " bytes), which cannot be allocated during graph capture: run the call once before "
                           "capturing it");
  if (e.fused.base) {
    e.comm->barrier(stream);
    e.comm->synchronize(stream);
    e.comm->unregister_buffer(e.fused.base);
    rcclx::host::shareable_free(e.fused.base);
    e.fused = {};
  }
  const std::size_t bytes = std::max<std::size_t>(need, std::size_t(1) << 20);
  void* p = rcclx::host::shareable_malloc(bytes);
  try {
    e.comm->register_buffer(p, bytes);  // collective
  } catch (...) {
    rcclx::host::shareable_free(p);
    throw;
  }
  e.fused.base = p;
  e.fused.bytes = bytes;
}

// residual <- residual + allreduce(x); out <- rmsnorm(residual) * weight (FP8: codes of out / scale).
// x, residual: [tokens, hidden]; weight: [hidden]; the same bits on every rank. The kernels: fused.cpp.
void all_reduce_rmsnorm(at::Tensor x, at::Tensor residual, at::Tensor weight, at::Tensor out, double eps,
                        std::int64_t comm, std::string algorithm, std::string out_format,
                        c10::optional<at::Tensor> scale) {
  const char* who = "all_reduce_rmsnorm";
  check_tensor(who, "x", x);
  check_tensor(who, "residual", residual);
  check_tensor(who, "weight", weight);
  TORCH_CHECK(out.is_contiguous(), "rcclx.all_reduce_rmsnorm: out must be contiguous");
  TORCH_CHECK(x.scalar_type() != at::kInt, "rcclx.all_reduce_rmsnorm: x must be float32, bfloat16 or float16");
  TORCH_CHECK(residual.scalar_type() == x.scalar_type() && weight.scalar_type() == x.scalar_type(),
              "rcclx.all_reduce_rmsnorm: x, residual and weight must have one dtype (got ", x.scalar_type(), ", ",
              residual.scalar_type(), ", ", weight.scalar_type(), ")");
  TORCH_CHECK(x.dim() >= 1, "rcclx.all_reduce_rmsnorm: x must have at least one dimension (its last is hidden)");
  const std::int64_t hidden = x.size(-1);
  TORCH_CHECK(residual.sizes() == x.sizes(), "rcclx.all_reduce_rmsnorm: residual has shape ", residual.sizes(),
              ", x has ", x.sizes());
  TORCH_CHECK(weight.numel() == hidden, "rcclx.all_reduce_rmsnorm: weight has ", weight.numel(),
              " elements; it needs x's last dimension, ", hidden);
  TORCH_CHECK(out.numel() == x.numel(), "rcclx.all_reduce_rmsnorm: out has ", out.numel(), " elements; x has ",
              x.numel());
  rcclx_torch::rmsnorm_call c{};
  if (out_format.empty() || out_format == "same") c.out = rcclx_torch::out_format::same;
  else if (out_format == "e4m3") c.out = rcclx_torch::out_format::e4m3;
  else if (out_format == "e5m2") c.out = rcclx_torch::out_format::e5m2;
  else TORCH_CHECK(false, "rcclx.all_reduce_rmsnorm: out_format must be \"same\", \"e4m3\" or \"e5m2\" (got \"",
                   out_format, "\")");
  const bool fp8 = c.out != rcclx_torch::out_format::same;
  TORCH_CHECK(fp8 ? out.element_size() == 1 : out.scalar_type() == x.scalar_type(), "rcclx.all_reduce_rmsnorm: out ",
              fp8 ? "must have 1-byte elements (uint8 or a float8 dtype) for FP8 output" : "must have x's dtype",
              " (got ", out.scalar_type(), ")");
  if (fp8) {
    TORCH_CHECK(scale.has_value() && scale->numel() == 1 && scale->scalar_type() == at::kFloat,
                "rcclx.all_reduce_rmsnorm: FP8 output needs scale, a float32 tensor of one element");
    check_tensor(who, "scale", *scale);
  }
  c.type = x.scalar_type() == at::kFloat      ? rcclx_torch::element::f32
           : x.scalar_type() == at::kBFloat16 ? rcclx_torch::element::bf16
                                              : rcclx_torch::element::f16;
  c.x = x.data_ptr();
  c.residual = residual.data_ptr();
  c.weight = weight.data_ptr();
  c.output = out.data_ptr();
  c.scale = fp8 ? static_cast<const float*>(scale->data_ptr()) : nullptr;
  c.hidden = static_cast<std::size_t>(hidden);
  c.tokens = hidden > 0 ? static_cast<std::size_t>(x.numel() / hidden) : 0;
  c.eps = static_cast<float>(eps);
  const auto e = find(comm);
  const rcclx::algorithm a = parse_algorithm(algorithm);
  const auto stream = stream_of(x);
  // This rank's argument errors are raised on every rank by the agreement check (nothing is launched).
  const std::string local = rcclx_torch::rmsnorm_errors(c, a, e->tile_slots.max_tiles);
  run_typed(*e, x, [&](auto tag) {
    e->comm->check_user_call<decltype(tag)>(who, c.tokens * c.hidden, static_cast<std::uint32_t>(c.hidden), local);
    if (c.tokens == 0) return;
    const rcclx::algorithm resolved = rcclx_torch::rmsnorm_algorithm(c, a, e->num_ranks);
    ensure_fused_region(*e, rcclx_torch::rmsnorm_workspace_bytes(c, resolved), stream);
    const auto table = e->comm->buffer_handle(static_cast<const unsigned char*>(e->fused.base), e->fused.bytes);
    rcclx_torch::rmsnorm_launch(c, table, e->tile_slots, resolved, stream);
  });
}

// ---- benchmark support (bench/torch) ------------------------------------------------------------

// The C++ figure of bench/torch: `iters` in-place AllReduces (sum) of t called from C++ on torch's
// current stream, as rcclx-bench --procs calls the communicator; returns seconds of wall clock
// until the stream has finished them. Collective.
double time_all_reduce(std::int64_t id, at::Tensor t, std::string algorithm, std::int64_t iters) {
  check_tensor("time_all_reduce", "the tensor", t);
  const auto e = find(id);
  const auto a = resolve(rcclx::lpc::collective::allreduce, parse_algorithm(algorithm), t.nbytes());
  const auto stream = stream_of(t);
  double seconds = 0;
  run_typed(*e, t, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.data_ptr());
    const auto n = static_cast<std::size_t>(t.numel());
    py::gil_scoped_release nogil;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < iters; ++i) e->comm->allreduce<T>(p, p, n, rcclx::reduce_op::sum, a, stream);
    e->comm->synchronize(stream);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  return seconds;
}

// Meta: shapes only (torch.compile / fake tensors trace through them).
void all_reduce_meta(at::Tensor, std::int64_t, std::string, std::string) {}
void collective_meta(at::Tensor, at::Tensor, std::int64_t, std::string) {}
void reduce_scatter_meta(at::Tensor, at::Tensor, std::int64_t, std::string, std::string) {}
void all_reduce_rmsnorm_meta(at::Tensor, at::Tensor, at::Tensor, at::Tensor, double, std::int64_t, std::string,
                             std::string, c10::optional<at::Tensor>) {}

}  // namespace

TORCH_LIBRARY(rcclx, m) {
  // In place, returning nothing (as the other three): torch.compile functionalizes such ops.
  m.def("all_reduce(Tensor(a!) t, int comm, str op, str algorithm) -> ()");
  m.def("all_gather(Tensor(a!) out, Tensor input, int comm, str algorithm) -> ()");
  m.def("reduce_scatter(Tensor(a!) out, Tensor input, int comm, str op, str algorithm) -> ()");
  m.def("all_to_all(Tensor(a!) out, Tensor input, int comm, str algorithm) -> ()");
  m.def("all_reduce_rmsnorm(Tensor x, Tensor(a!) residual, Tensor weight, Tensor(b!) out, float eps, int comm, "
        "str algorithm, str out_format, Tensor? scale) -> ()");
}

TORCH_LIBRARY_IMPL(rcclx, CompositeExplicitAutograd, m) {
  m.impl("all_reduce", &all_reduce);
  m.impl("all_gather", &all_gather);
  m.impl("reduce_scatter", &reduce_scatter);
  m.impl("all_to_all", &all_to_all);
  m.impl("all_reduce_rmsnorm", &all_reduce_rmsnorm);
}

// No gradients: a clear error if one is asked for, and meta / CPU tensors dispatch through.
TORCH_LIBRARY_IMPL(rcclx, Autograd, m) {
  m.impl("all_reduce", torch::autograd::autogradNotImplementedFallback());
  m.impl("all_gather", torch::autograd::autogradNotImplementedFallback());
  m.impl("reduce_scatter", torch::autograd::autogradNotImplementedFallback());
  m.impl("all_to_all", torch::autograd::autogradNotImplementedFallback());
  m.impl("all_reduce_rmsnorm", torch::autograd::autogradNotImplementedFallback());
}

TORCH_LIBRARY_IMPL(rcclx, Meta, m) {
  m.impl("all_reduce", &all_reduce_meta);
  m.impl("all_gather", &collective_meta);
  m.impl("reduce_scatter", &reduce_scatter_meta);
  m.impl("all_to_all", &collective_meta);
  m.impl("all_reduce_rmsnorm", &all_reduce_rmsnorm_meta);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "rcclx: collectives over shared memory, as torch operators";
  m.def("create", &create, "Creates a communicator (collective over the group); returns its id", py::arg("rank"),
        py::arg("num_ranks"), py::arg("allgather"), py::arg("buffer_bytes") = 0, py::arg("timeout_s") = 0.0,
        py::arg("check_calls") = -1, py::arg("symmetric_bytes") = 0, py::arg("max_tiles") = 0);
  m.def("destroy", &destroy, "Destroys a communicator", py::arg("id"));
  m.def("symmetric_empty", &symmetric_empty, "A tensor in the communicator's registered pool (collective)",
        py::arg("id"), py::arg("shape"), py::arg("like"));
  m.def("is_symmetric", &is_symmetric, "Does the tensor lie in a registered buffer?", py::arg("id"), py::arg("t"));
  m.def("register_graph_buffers", &register_graph_buffers,
        "After a graph capture: opens the peers' buffers of the captured collectives (collective)", py::arg("id"));
  m.def("kernel_handles", &kernel_handles,
        "The device handles of a symmetric tensor, for your own extension's kernels (a CPU uint8 tensor)",
        py::arg("id"), py::arg("t"));
  m.def("tile_slots", [](std::int64_t id) { const auto e = find(id); return py::make_tuple(e->tile_slots.first, e->tile_slots.max_tiles); },
        "The (first, max_tiles) pad slots kept for tile-protocol kernels", py::arg("id"));
  m.def("time_all_reduce", &time_all_reduce, "bench/torch: seconds for iters AllReduces called from C++ (collective)",
        py::arg("id"), py::arg("t"), py::arg("algorithm"), py::arg("iters"));
  m.def("synchronize", &synchronize, "Waits for the current stream; raises a device-side error", py::arg("id"));
  m.attr("max_ranks") = max_ranks;
  m.attr("backend") = rcclx::current_backend == rcclx::backend::host ? "host" : "cuda";
  m.attr("checks") = rcclx::checks;
}
