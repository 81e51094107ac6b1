// Hierarchical collectives across simulated nodes: run under mpirun with G * L processes, argument L
// (ranks per node). World rank p is node p / L, local rank p % L; a node's ranks share memory through
// the host backend (socket_bootstrap + POSIX shared memory), the nodes talk through MPI (one
// sub-communicator per local rank). AllReduce, AllGather and ReduceScatter, float / bf16 / fp16,
// every inter_node hop, counts with tails and calls larger than the workspace (chunks), each checked
// against a reference computed here without rcclx code: exact against this file's own fp32 emulation
// of the documented order (bit for bit) and within a tolerance of float64; engine_reduce within the
// tolerance; low_precision within the documented FP8 bound (tests/lpc/reference.hpp's q), around the
// float64 sum of the node partials. Every output must be the same bits on every rank (AllReduce,
// AllGather). Also: a node topology with uneven nodes is refused, and ranks that disagree on count
// fail together. Argument "die": local rank 1 of node 0 is killed before an AllReduce; its node peer
// must report the intra-node bounded wait's error naming it (then MPI_Abort ends the job).
// L = 1 (one rank per node): no intra-node communicator, the hop on the caller's buffers.
// Registration: the collectives run over a checking engine (the MPI adapter behind an engine that
// registers through multinode::registration_cache, recording every live registration) that fails
// any engine operation on a buffer not registered (the 256-byte call descriptors aside, unregistered
// by design), checks that repeated calls register nothing, that nothing is registered with
// register_buffers off, and that every registration is deregistered at the end. The plain MPI
// adapter (registers nothing) runs the float cases too.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <type_traits>
#include <vector>

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/socket_bootstrap.hpp>
#include <rcclx/multinode/hierarchical.hpp>
#include <rcclx/multinode/mpi_engine.hpp>
#include <rcclx/multinode/registration.hpp>

#include "../lpc/reference.hpp"
#include "../support/bits.hpp"

namespace {

namespace mn = rcclx::multinode;
using comm_t = rcclx::host::communicator<8>;
constexpr std::size_t buffer_bytes = 64 << 10;  // AllReduce above 16 Ki floats runs in chunks

int world_rank = 0;
int failures = 0;
int checks = 0;

void fail(const std::string& what) {
  if (++failures <= 10) std::printf("[rank %d] FAIL %s\n", world_rank, what.c_str());
}

using rcclx_test::mix;
using rcclx_test::bits_of;
using rcclx_test::float_of_bits;


// fp32 -> T, nearest even, and back: this file's own rounding (finite values only).
template <class T>
float round_to(float f) {
  if constexpr (std::is_same<T, float>::value) {
    return f;
  } else if constexpr (std::is_same<T, rcclx::bf16>::value) {
    std::uint32_t u = bits_of(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return float_of_bits(u & 0xFFFF0000u);
  } else {
    // fp16: the inputs and sums here stay within [2^-14, 2^15] or are 0 (no fp16 denormals).
    if (f == 0.0f) return f;
    int e;
    std::frexp(f, &e);
    const float step = std::ldexp(1.0f, e - 11);
    return static_cast<float>(std::nearbyint(f / step) * step);
  }
}
template <class T>
T make(float f) {
  if constexpr (std::is_same<T, float>::value) return f;
  else return T(f);  // f is representable: exact
}
template <class T>
float value(T x) {
  return static_cast<float>(x);
}

// Rank p's element i in round k: in [-1, 1), representable in T (float 24 bits, bf16 8, fp16 10).
template <class T>
float input_value(int p, std::size_t i, int k) {
  const std::uint64_t h = mix((static_cast<std::uint64_t>(k) << 40) ^ (static_cast<std::uint64_t>(p) << 32) ^ i);
  const int bits = std::is_same<T, float>::value ? 24 : std::is_same<T, rcclx::bf16>::value ? 8 : 10;
  return static_cast<float>(std::ldexp(static_cast<double>(static_cast<std::int64_t>(h >> (64 - bits - 1)) - (1ll << bits)), -bits));
}

template <class T>
double unit_roundoff() {
  return std::is_same<T, float>::value ? 0x1p-24 : std::is_same<T, rcclx::bf16>::value ? 0x1p-8 : 0x1p-11;
}

template <class T>
bool same_on_all_ranks(const std::vector<T>& out) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const unsigned char*>(out.data());
  for (std::size_t i = 0; i < out.size() * sizeof(T); ++i) h = (h ^ b[i]) * 1099511628211ull;
  std::uint64_t lo = h, hi = h;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

struct job {
  int g_n, l_n, node, local;
  mn::hierarchical<8>& h;
};

// ---- an engine that registers, and checks that every operation's buffers are registered ----------

struct recording_registrar {
  std::map<std::uintptr_t, std::pair<std::uintptr_t, std::size_t>>* live;  // handle -> registered range
  std::uintptr_t* next;
  void* register_memory(void* base, std::size_t bytes) {
    const std::uintptr_t h = ++*next;
    (*live)[h] = {reinterpret_cast<std::uintptr_t>(base), bytes};
    return reinterpret_cast<void*>(h);
  }
  void deregister_memory(void* h) {
    if (live->erase(reinterpret_cast<std::uintptr_t>(h)) != 1) fail("deregistered a handle that is not registered");
  }
};

class checking_engine final : public mn::engine {
 public:
  explicit checking_engine(mn::engine& inner) : inner_(inner), cache_(16, recording_registrar{&live_, &next_}) {}
  ~checking_engine() override {
    cache_.clear();
    ++checks;
    if (!live_.empty()) fail(std::to_string(live_.size()) + " registrations left after the engine's teardown");
  }
  int rank() const override { return inner_.rank(); }
  int num_ranks() const override { return inner_.num_ranks(); }
  const char* name() const override { return "checking"; }
  bool registers_buffers() const override { return true; }
  mn::registration register_buffer(void* p, std::size_t bytes) override { return cache_.acquire(p, bytes); }
  void forget_buffer(const void* p) override { cache_.forget(p); }
  mn::registration_stats registrations() const override { return cache_.stats(); }

  void allreduce(const void* in, void* out, std::size_t count, mn::data_type type, rcclx::gpu::stream_t s) override {
    check(in, count * mn::size_of(type), "allreduce input");
    check(out, count * mn::size_of(type), "allreduce output");
    inner_.allreduce(in, out, count, type, s);
  }
  void allgather(const void* in, void* out, std::size_t bytes, rcclx::gpu::stream_t s) override {
    if (bytes != 256) {  // the call descriptors (256 bytes) are not registered, by design
      check(in, bytes, "allgather input");
      check(out, bytes * static_cast<std::size_t>(num_ranks()), "allgather output");
    }
    inner_.allgather(in, out, bytes, s);
  }
  std::size_t live() const { return live_.size(); }

 private:
  void check(const void* p, std::size_t bytes, const char* what) {
    if (!expect_registered) return;
    ++checks;
    const auto x = reinterpret_cast<std::uintptr_t>(p);
    for (const auto& kv : live_)
      if (x >= kv.second.first && x + bytes <= kv.second.first + kv.second.second) return;
    fail(std::string("the engine's ") + what + " (" + std::to_string(bytes) + " bytes) is not in a registered buffer");
  }

 public:
  bool expect_registered = true;

 private:
  mn::engine& inner_;
  std::map<std::uintptr_t, std::pair<std::uintptr_t, std::size_t>> live_;
  std::uintptr_t next_ = 0;
  mn::registration_cache<recording_registrar> cache_;
};

const lpc_test::quant_model wire_model{lpc_test::info<rcclx::lpc::default_config::format>(), false,
                                       rcclx::lpc::default_config::block_size};

// Largest |v[j]| over the quantization block of v holding position `pos` (blocks from v's start).
double block_amax(const std::vector<float>& v, std::size_t pos) {
  const std::size_t b = static_cast<std::size_t>(wire_model.block), first = pos / b * b;
  double a = 0;
  for (std::size_t j = first; j < v.size() && j < first + b; ++j) a = std::max(a, std::fabs(static_cast<double>(v[j])));
  return a;
}

// Node g's partial of element i over [first, first + n) of a buffer (inputs of round k): T(fp32 sum
// over the node's local ranks in order), as the intra-node ReduceScatter / AllReduce compute it.
template <class T>
float node_partial(const job& j, int g, std::size_t i, int k) {
  float s = input_value<T>(g * j.l_n, i, k);
  for (int l = 1; l < j.l_n; ++l) s += input_value<T>(g * j.l_n + l, i, k);
  return round_to<T>(s);
}

// Checks one reduced element: exact (bits of the node-order emulation), engine_reduce (float64
// tolerance) or low_precision (the FP8 bound over the node partials' quantization blocks).
template <class T>
void check_reduced(const std::string& what, std::size_t i, float got, const std::vector<float>& partials,
                   const std::vector<double>& amax, mn::inter_node hop, double abs_sum) {
  ++checks;
  double ref = 0;
  float order = partials[0];
  for (std::size_t g = 0; g < partials.size(); ++g) {
    ref += partials[g];
    if (g) order += partials[g];
  }
  const double u = unit_roundoff<T>();
  double tol = 0;
  if (hop == mn::inter_node::exact) {
    if (bits_of(got) != bits_of(round_to<T>(order)))
      return fail(what + " element " + std::to_string(i) + ": got " + std::to_string(got) + ", the node-order sum is " +
                  std::to_string(round_to<T>(order)));
    tol = (partials.size() * 0x1p-23) * abs_sum + u * std::fabs(ref);
  } else if (hop == mn::inter_node::engine_reduce) {
    tol = partials.size() * u * 2 * abs_sum;
  } else {
    double q = 0;
    for (double a : amax) q += wire_model.q(a);
    tol = q + partials.size() * 0x1p-23 * (abs_sum + q) + u * (std::fabs(ref) + q);
  }
  if (!(std::fabs(static_cast<double>(got) - ref) <= tol))
    fail(what + " element " + std::to_string(i) + ": got " + std::to_string(got) + ", float64 " + std::to_string(ref) +
         ", bound " + std::to_string(tol));
}

template <class T>
void test_allreduce(job& j, std::size_t count, mn::inter_node hop, int k) {
  const int p = j.node * j.l_n + j.local;
  std::vector<T> in(count), out(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = make<T>(input_value<T>(p, i, k));
  j.h.allreduce(in.data(), out.data(), count, hop);
  const std::string what = std::string("allreduce ") + rcclx::core::value_traits<T>::name() + " count " +
                           std::to_string(count) + " " + mn::to_string(hop);
  // The documented cut: chunks of whole L-element rows within buffer_bytes, each shard C_c = chunk / L
  // quantized from its start; the count % L tail as one buffer.
  const std::size_t l = static_cast<std::size_t>(j.l_n), chunk = buffer_bytes / sizeof(T) / l * l, main = count / l * l;
  std::vector<std::vector<float>> shard_of(static_cast<std::size_t>(j.g_n));
  std::size_t shard_start = static_cast<std::size_t>(-1), shard_len = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t start, len;  // the shard (or tail) holding element i, in element indices
    if (i < main) {
      const std::size_t off = i / chunk * chunk, c = std::min(chunk, main - off) / l;
      start = off + (i - off) / c * c;
      len = c;
    } else {
      start = main;
      len = count - main;
    }
    if (start != shard_start) {
      shard_start = start;
      shard_len = len;
      for (int g = 0; g < j.g_n; ++g) {
        auto& s = shard_of[static_cast<std::size_t>(g)];
        s.resize(len);
        for (std::size_t e = 0; e < len; ++e) s[e] = node_partial<T>(j, g, start + e, k);
      }
    }
    std::vector<float> parts;
    std::vector<double> amax;
    double abs_sum = 0;
    for (int g = 0; g < j.g_n; ++g) {
      parts.push_back(shard_of[static_cast<std::size_t>(g)][i - shard_start]);
      amax.push_back(block_amax(shard_of[static_cast<std::size_t>(g)], i - shard_start));
      for (int q = 0; q < j.l_n; ++q) abs_sum += std::fabs(input_value<T>(g * j.l_n + q, i, k));
    }
    (void)shard_len;
    check_reduced<T>(what, i, value(out[i]), parts, amax, hop, abs_sum);
    if (failures > 10) break;
  }
  ++checks;
  if (!same_on_all_ranks(out)) fail(what + ": outputs differ between ranks");
}

template <class T>
void test_allgather(job& j, std::size_t count, mn::inter_node hop, int k) {
  const int p = j.node * j.l_n + j.local, n = j.g_n * j.l_n;
  std::vector<T> in(count), out(count * static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < count; ++i) in[i] = make<T>(input_value<T>(p, i, k));
  j.h.allgather(in.data(), out.data(), count, hop);
  const std::string what = std::string("allgather ") + rcclx::core::value_traits<T>::name() + " count " +
                           std::to_string(count) + " " + mn::to_string(hop);
  const std::size_t node_elems = static_cast<std::size_t>(j.l_n) * count;
  for (int g = 0; g < j.g_n; ++g) {
    std::vector<float> block(node_elems);  // node g's block, as quantized
    for (std::size_t e = 0; e < node_elems; ++e)
      block[e] = input_value<T>(g * j.l_n + static_cast<int>(e / count), e % count, k);
    for (std::size_t e = 0; e < node_elems && failures <= 10; ++e) {
      ++checks;
      const float got = value(out[static_cast<std::size_t>(g) * node_elems + e]), x = block[e];
      if (hop != mn::inter_node::low_precision) {
        if (bits_of(got) != bits_of(x))
          fail(what + " element " + std::to_string(g * node_elems + e) + ": got " + std::to_string(got) + ", want " +
               std::to_string(x));
        continue;
      }
      const double q = wire_model.q(block_amax(block, e)), tol = q + unit_roundoff<T>() * (std::fabs(x) + q);
      if (!(std::fabs(static_cast<double>(got) - x) <= tol))
        fail(what + " element " + std::to_string(g * node_elems + e) + ": got " + std::to_string(got) + ", want " +
             std::to_string(x) + " within " + std::to_string(tol));
    }
  }
  ++checks;
  if (!same_on_all_ranks(out)) fail(what + ": outputs differ between ranks");
}

template <class T>
void test_reduce_scatter(job& j, std::size_t per_rank, mn::inter_node hop, int k) {
  const int p = j.node * j.l_n + j.local, n = j.g_n * j.l_n;
  const std::size_t count = per_rank * static_cast<std::size_t>(n), l = static_cast<std::size_t>(j.l_n);
  std::vector<T> in(count), out(per_rank);
  for (std::size_t i = 0; i < count; ++i) in[i] = make<T>(input_value<T>(p, i, k));
  j.h.reduce_scatter(in.data(), out.data(), count, hop);
  const std::string what = std::string("reduce_scatter ") + rcclx::core::value_traits<T>::name() + " count " +
                           std::to_string(count) + " " + mn::to_string(hop);
  // Node g's partials: G * C elements, block d (destination node d) = sum over its ranks of element
  // (d * L + local) * C + i of the inputs.
  std::vector<std::vector<float>> partial(static_cast<std::size_t>(j.g_n), std::vector<float>(static_cast<std::size_t>(j.g_n) * per_rank));
  for (int g = 0; g < j.g_n; ++g)
    for (int d = 0; d < j.g_n; ++d)
      for (std::size_t i = 0; i < per_rank; ++i)
        partial[static_cast<std::size_t>(g)][static_cast<std::size_t>(d) * per_rank + i] =
            node_partial<T>(j, g, (static_cast<std::size_t>(d) * l + static_cast<std::size_t>(j.local)) * per_rank + i, k);
  for (std::size_t i = 0; i < per_rank && failures <= 10; ++i) {
    const std::size_t pos = static_cast<std::size_t>(j.node) * per_rank + i;
    const std::size_t elem = static_cast<std::size_t>(p) * per_rank + i;
    std::vector<float> parts;
    std::vector<double> amax;
    double abs_sum = 0;
    for (int g = 0; g < j.g_n; ++g) {
      parts.push_back(partial[static_cast<std::size_t>(g)][pos]);
      amax.push_back(block_amax(partial[static_cast<std::size_t>(g)], pos));
      for (int q = 0; q < j.l_n; ++q) abs_sum += std::fabs(input_value<T>(g * j.l_n + q, elem, k));
    }
    check_reduced<T>(what, i, value(out[i]), parts, amax, hop, abs_sum);
  }
}

template <class T>
void run_all(job& j) {
  const mn::inter_node hops[] = {mn::inter_node::exact, mn::inter_node::engine_reduce, mn::inter_node::low_precision};
  int k = 0;
  for (mn::inter_node hop : hops) {
    if (hop == mn::inter_node::low_precision && std::is_same<T, rcclx::fp16>::value) continue;
    for (std::size_t count : {std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(3 * 40000 + 5)})
      test_allreduce<T>(j, count, hop, ++k);
    for (std::size_t count : {std::size_t(1), std::size_t(33), std::size_t(1000)}) test_allgather<T>(j, count, hop, ++k);
    for (std::size_t per_rank : {std::size_t(1), std::size_t(33), std::size_t(500)})
      test_reduce_scatter<T>(j, per_rank, hop, ++k);
  }
}

// Expects `f` to throw an rcclx::error whose message contains `part`.
template <class F>
void expect_error(const std::string& what, const char* part, F f) {
  ++checks;
  try {
    f();
    fail(what + ": no error");
  } catch (const rcclx::error& e) {
    if (!std::strstr(e.what(), part)) fail(what + ": the error '" + e.what() + "' lacks '" + part + "'");
  }
}

void test_topology_env() {
  const auto with_env = [](const char* world, const char* local_world) {
    setenv("WORLD_SIZE", world, 1);
    setenv("LOCAL_WORLD_SIZE", local_world, 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("GROUP_RANK", "1", 1);
    unsetenv("RANK");
    return mn::node_topology::from_env();
  };
  expect_error("uneven nodes from the environment", "uneven nodes", [&] { with_env("5", "2"); });
  ++checks;
  const mn::node_topology t = with_env("6", "2");
  if (t.num_nodes != 3 || t.node != 1 || t.rank() != 2) fail("node_topology::from_env: 6 / 2, node 1, local 0");
  for (const char* v : {"WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK"}) unsetenv(v);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int l_n = argc > 1 ? std::atoi(argv[1]) : 2;
  const bool die = argc > 2 && std::strcmp(argv[2], "die") == 0;
  if (l_n < 1 || world % l_n != 0 || (die && l_n < 2)) {
    if (world_rank == 0) std::printf("usage: mpirun -np G*L %s L [die] (L >= 1 ranks per node; die: L >= 2)\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const int g_n = world / l_n, node = world_rank / l_n, local = world_rank % l_n;
  int job_id = static_cast<int>(::getpid());
  MPI_Bcast(&job_id, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Comm across;
  MPI_Comm_split(MPI_COMM_WORLD, local, node, &across);
  try {
    // L = 1: no intra-node communicator (a communicator has 2 ranks or more).
    std::unique_ptr<rcclx::host::socket_bootstrap> bs;
    std::unique_ptr<comm_t> comm;
    if (l_n > 1) {
      bs = std::make_unique<rcclx::host::socket_bootstrap>(local, l_n, "rcclx-mpi-" + std::to_string(job_id) + "-node" +
                                                                          std::to_string(node));
      rcclx::host::communicator_options o;
      o.buffer_bytes = buffer_bytes;
      o.timeout_ns = die ? 2ull * 1000 * 1000 * 1000 : 30ull * 1000 * 1000 * 1000;
      o.check_calls = !die;  // die: the kernels' bounded waits, not the per-call exchange, notice the death
      comm = std::make_unique<comm_t>(*bs, o);
    }
    mn::mpi_engine eng(across);
    const mn::node_topology topo{node, g_n, local, l_n};
    mn::hierarchical_options ho;
    ho.chunk_bytes = buffer_bytes;  // L = 1 chunks like L > 1 (the reference's cut)
    const auto make = [&](mn::engine& e, mn::hierarchical_options opts) {
      return comm ? std::make_unique<mn::hierarchical<8>>(*comm, e, topo, opts) : std::make_unique<mn::hierarchical<8>>(e, topo, opts);
    };
    if (die) {
      auto h = make(eng, ho);
      std::vector<float> x(4096, 1.0f), y(4096);
      h->allreduce(x.data(), y.data(), x.size());  // everyone alive once
      if (node == 0 && local == 1) raise(SIGKILL);
      h->allreduce(x.data(), y.data(), x.size());
      std::printf("[rank %d] FAIL: the allreduce after a peer's death returned\n", world_rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    test_topology_env();
    checking_engine chk(eng);
    {
      auto h = make(chk, ho);  // registers every buffer the engine touches; chk checks each operation
      job j{g_n, l_n, node, local, *h};
      run_all<float>(j);
      run_all<rcclx::bf16>(j);
      run_all<rcclx::fp16>(j);
      // Ranks that disagree fail together: node 0's rank 0 passes a different count.
      std::vector<float> x(64, 1.0f), y(64);
      expect_error("a count that differs on one rank", "disagree",
                   [&] { h->allreduce(x.data(), y.data(), world_rank == 0 ? 32 : 64); });
      expect_error("reduce_scatter with count not a multiple of the ranks", "not a multiple",
                   [&] { h->reduce_scatter(x.data(), y.data(), static_cast<std::size_t>(world) + 1); });
      test_allreduce<float>(j, 1000, mn::inter_node::exact, 99);  // still usable after refused calls
      // Repeated calls on the same buffers register nothing (the first call of each kind may).
      // (AllGather through the intra-node workspace: at most buffer_bytes per rank.)
      std::vector<float> in(3 * 40000 + 5, 0.5f), out(in.size()), gathered(1000 * static_cast<std::size_t>(world));
      const mn::inter_node hops[] = {mn::inter_node::exact, mn::inter_node::engine_reduce, mn::inter_node::low_precision};
      for (auto hop : hops) {
        h->allreduce(in.data(), out.data(), in.size(), hop);
        h->allgather(in.data(), gathered.data(), 1000, hop);
      }
      const auto before = chk.registrations();
      for (int rep = 0; rep < 3; ++rep)
        for (auto hop : hops) {
          h->allreduce(in.data(), out.data(), in.size(), hop);
          h->allgather(in.data(), gathered.data(), 1000, hop);
        }
      const auto after = chk.registrations();
      ++checks;
      if (after.opens != before.opens || after.hits <= before.hits)
        fail("repeated calls registered again: " + std::to_string(after.opens - before.opens) + " registrations, " +
             std::to_string(after.hits - before.hits) + " hits");
    }
    {  // register_buffers off: the same engine registers nothing
      mn::hierarchical_options off = ho;
      off.register_buffers = false;
      chk.expect_registered = false;
      const auto before = chk.registrations().opens;
      auto h = make(chk, off);
      job j{g_n, l_n, node, local, *h};
      for (auto hop : {mn::inter_node::exact, mn::inter_node::engine_reduce, mn::inter_node::low_precision}) {
        test_allreduce<float>(j, 3 * 40000 + 5, hop, 100);
        test_allgather<float>(j, 1000, hop, 101);
      }
      ++checks;
      if (chk.registrations().opens != before) fail("register_buffers = false registered buffers");
      chk.expect_registered = true;
      // Nodes that disagree on registration are refused at set-up, on every rank.
      mn::hierarchical_options odd = ho;
      odd.register_buffers = world_rank != 0;
      expect_error("register_buffers that differs on one rank", "register_buffers", [&] { make(chk, odd); });
    }
    {  // the MPI adapter itself (registers nothing)
      auto h = make(eng, ho);
      job j{g_n, l_n, node, local, *h};
      run_all<float>(j);
    }
  } catch (const std::exception& e) {
    std::printf("[rank %d] error: %s\n", world_rank, e.what());
    std::fflush(stdout);
    // die runs under mpirun --enable-recovery (so the kill does not end the job before this report),
    // where MPI_Abort ends only this process and the ranks blocked in MPI on the dead one would stay:
    // end the job through mpirun, this process's parent on a single machine.
    if (die) ::kill(::getppid(), SIGTERM);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int total_failures = 0, total_checks = 0;
  MPI_Allreduce(&failures, &total_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&checks, &total_checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0)
    std::printf("hierarchical_mpi_test %d nodes x %d ranks: %d checks, %d failures: %s\n", g_n, l_n, total_checks,
                total_failures, total_failures ? "FAILED" : "passed");
  MPI_Comm_free(&across);
  MPI_Finalize();
  return total_failures ? 1 : 0;
}
