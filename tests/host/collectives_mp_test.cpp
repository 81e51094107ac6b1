// communicator's four collectives across N processes (rcclx::dda and rcclx::lpc underneath):
// allreduce, allgather, reduce_scatter and alltoall, plain and algorithm::low_precision, float and
// bf16, counts with tails and calls larger than the workspace (chunked AllReduce), registered
// (zero-copy) and in-place inputs, a captured graph, and the errors every rank must throw together.
// Every rank computes every rank's input from one generator, so each checks its own output against
// a reference computed here without rcclx code: plain copies bit for bit; plain reductions bit for
// bit against an fp32 rank-order reduction rounded to T by this file's own rounding, and within a
// type-derived tolerance of the float64 result; low precision within the bound of docs/numerics.md
// (tests/lpc/reference.hpp). AllReduce and AllGather outputs must also be the same bits on every rank.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/socket_bootstrap.hpp>

#include "../lpc/reference.hpp"
#include "../support/bits.hpp"
#include "../support/catch.hpp"
#include "../support/launchers.hpp"
#include "multiprocess.hpp"
#include "multiprocess_checks.hpp"

namespace {

constexpr int max_r = 8;
using comm_t = rcclx::host::communicator<max_r>;
using rcclx::algorithm;
using rcclx::reduce_op;
using rcclx_test::exact;

constexpr std::size_t buffer_bytes = 64 << 10;  // small: AllReduce above 16 Ki floats runs in chunks

rcclx::host::communicator_options options() {
  rcclx::host::communicator_options o;
  o.buffer_bytes = buffer_bytes;
  o.timeout_ns = 30ull * 1000 * 1000 * 1000;
  o.max_captured_collectives = 16;
  return o;
}

using rcclx_test::mix;
using rcclx_test::bits_of;
using rcclx_test::float_of_bits;


// Input of rank r, element i, round k: uniform in [-1, 1) and exactly representable in T (float: 24
// random bits; bf16: 8 bits, so its encoding below is exact and needs no rcclx converter).
template <class T>
T input_value(int rank, std::size_t i, int k) {
  const std::uint64_t h = mix((static_cast<std::uint64_t>(k) << 40) ^ (static_cast<std::uint64_t>(rank) << 32) ^ i);
  if constexpr (std::is_same<T, float>::value) {
    return static_cast<float>(std::ldexp(static_cast<double>(static_cast<std::int64_t>(h >> 39) - (1 << 24)), -24));
  } else {
    const float f = static_cast<float>(std::ldexp(static_cast<double>(static_cast<std::int64_t>(h >> 55) - 256), -8));
    return rcclx::bf16::from_bits(static_cast<std::uint16_t>(bits_of(f) >> 16));
  }
}

template <class T>
std::vector<T> inputs_of(int rank, std::size_t count, int k) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input_value<T>(rank, i, k);
  return v;
}

template <class T>
std::vector<std::vector<T>> all_inputs(int n, std::size_t count, int k) {
  std::vector<std::vector<T>> in;
  for (int p = 0; p < n; ++p) in.push_back(inputs_of<T>(p, count, k));
  return in;
}

// An fp32 value rounded to T, nearest even (the inputs and sums here are finite).
template <class T>
double round_to(float f) {
  if constexpr (std::is_same<T, float>::value) {
    return f;
  } else {
    std::uint32_t u = bits_of(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return float_of_bits(u & 0xFFFF0000u);
  }
}

template <class T>
void upload(T* device, const std::vector<T>& h) {
  if (!h.empty()) rcclx_test::upload_bytes(device, h.data(), h.size() * sizeof(T));
}

template <class T>
std::vector<T> download(const T* device, std::size_t count) {
  std::vector<T> h(count);
  if (count) rcclx::gpu::copy(h.data(), device, count * sizeof(T));
  return h;
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

std::string element_text(std::size_t i, double got, double want) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "element %zu: got %.9g, expected %.9g", i, got, want);
  return buf;
}

// got[j] = op over ranks of in[p][base + j]: in rank order in fp32, rounded once to T (the plain
// reductions' documented order), and within the float64 tolerance of tests/dda/reference.hpp.
template <class T>
std::string check_reduced(const std::vector<T>& got, const std::vector<std::vector<T>>& in, std::size_t base,
                          reduce_op op) {
  for (std::size_t j = 0; j < got.size(); ++j) {
    float acc = static_cast<float>(exact(in[0][base + j]));
    for (std::size_t p = 1; p < in.size(); ++p) {
      const float x = static_cast<float>(exact(in[p][base + j]));
      acc = op == reduce_op::sum ? acc + x : (x > acc ? x : acc);
    }
    const double g = exact(got[j]), want = round_to<T>(acc);
    if (g != want) return element_text(j, g, want) + " (fp32 rank order)";
    const rcclx_test::expected e = rcclx_test::reference(in, base + j, op);
    if (std::fabs(g - e.value) > e.tol) return element_text(j, g, e.value) + " (float64, tolerance " + std::to_string(e.tol) + ")";
  }
  return {};
}

// got[j] has the bits of want[j].
template <class T>
std::string check_copied(const std::vector<T>& got, const std::vector<T>& want) {
  for (std::size_t j = 0; j < got.size(); ++j)
    if (!same_bits(got[j], want[j])) return element_text(j, exact(got[j]), exact(want[j])) + " (bitwise copy)";
  return {};
}

lpc_test::quant_model model() {
  using config = rcclx::lpc::default_config;
  return {lpc_test::info<typename config::format>(), config::scale == rcclx::fp8::scale_kind::e8m0, config::block_size};
}

template <class T>
std::uint64_t hash_of(const std::vector<T>& v) {  // FNV-1a of the bytes
  std::uint64_t h = 0xCBF29CE484222325ull;
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ b[i]) * 0x100000001B3ull;
  return h;
}

// Collective (through the bootstrap): every rank learns whether any failed, so all stop together;
// with `same`, the outputs' hashes must agree across ranks.
std::string settle(comm_t& comm, const std::string& err, std::uint64_t hash, bool same) {
  const std::uint64_t mine[2] = {err.empty() ? 0u : 1u, hash};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(comm.num_ranks()));
  comm.get_bootstrap().allgather(mine, all.data(), sizeof(mine));
  if (!err.empty()) return err;
  for (int r = 0; r < comm.num_ranks(); ++r) {
    if (all[2 * static_cast<std::size_t>(r)]) return "rank " + std::to_string(r) + " failed (see its output)";
    if (same && all[2 * static_cast<std::size_t>(r) + 1] != all[1])
      return "the output differs between rank 0 and rank " + std::to_string(r);
  }
  return {};
}

// Where a case's input lives.
enum class placement { out_of_place, in_place, registered };

const char* to_string(placement p) {
  return p == placement::out_of_place ? "out of place" : p == placement::in_place ? "in place" : "registered";
}

template <class T>
struct buffers {
  T* in;
  T* out;
  T* reg;  // inside a registered buffer (zero-copy inputs)
};

template <class T>
T* input_of(const buffers<T>& b, placement where) {
  return where == placement::registered ? b.reg : b.in;
}
template <class T>
T* output_of(const buffers<T>& b, placement where) {
  return where == placement::in_place ? b.in : b.out;
}

// One call of `c` with round k's inputs; "" or what is wrong with this rank's output.
template <class T>
std::string run_case(comm_t& comm, rcclx::gpu::stream_t stream, const buffers<T>& b, rcclx::lpc::collective c,
                     algorithm algo, reduce_op op, std::size_t count, placement where, int k) {
  namespace lpc = rcclx::lpc;
  const int n = comm.num_ranks(), rank = comm.rank();
  const bool low = algo == algorithm::low_precision;
  const std::size_t nn = static_cast<std::size_t>(n), c_elems = count / nn;
  T* x = input_of(b, where);
  T* y = output_of(b, where);
  upload(x, inputs_of<T>(rank, count, k));
  std::size_t out_count = count;
  switch (c) {
    case lpc::collective::allreduce: comm.allreduce(x, y, count, op, algo, stream); break;
    case lpc::collective::allgather:
      comm.allgather(x, y, count, algo, stream);
      out_count = count * nn;
      break;
    case lpc::collective::reduce_scatter:
      comm.reduce_scatter(x, y, count, op, algo, stream);
      out_count = c_elems;
      break;
    case lpc::collective::alltoall: comm.alltoall(x, y, count, algo, stream); break;
  }
  comm.synchronize(stream);
  const std::vector<T> got = download(y, out_count);
  const auto in = all_inputs<T>(n, count, k);
  std::string err;
  if (low) {
    const auto m = model();
    switch (c) {
      case lpc::collective::allreduce: err = lpc_test::first_violation(got, lpc_test::allreduce(in, m, op)); break;
      case lpc::collective::allgather: err = lpc_test::first_violation(got, lpc_test::allgather(in, m)); break;
      case lpc::collective::reduce_scatter: err = lpc_test::first_violation(got, lpc_test::reduce_scatter(in, rank, m, op)); break;
      case lpc::collective::alltoall: err = lpc_test::first_violation(got, lpc_test::alltoall(in, rank, m)); break;
    }
  } else {
    std::vector<T> want;
    switch (c) {
      case lpc::collective::allreduce: err = check_reduced(got, in, 0, op); break;
      case lpc::collective::reduce_scatter: err = check_reduced(got, in, static_cast<std::size_t>(rank) * c_elems, op); break;
      case lpc::collective::allgather:
        for (int p = 0; p < n; ++p) want.insert(want.end(), in[p].begin(), in[p].end());
        err = check_copied(got, want);
        break;
      case lpc::collective::alltoall:
        for (int p = 0; p < n; ++p)
          want.insert(want.end(), in[p].begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rank) * c_elems),
                      in[p].begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rank + 1) * c_elems));
        err = check_copied(got, want);
        break;
    }
  }
  if (err.empty() && where != placement::in_place) {  // zero-copy and the workspace copy leave the input alone
    const auto now = download(x, count);
    if (hash_of(now) != hash_of(in[static_cast<std::size_t>(rank)])) err = "the input was modified";
  }
  const bool same = c == lpc::collective::allreduce || c == lpc::collective::allgather;
  return settle(comm, err, hash_of(got), same);
}

struct case_list {
  rcclx::lpc::collective c;
  std::vector<algorithm> algos;
  std::vector<reduce_op> ops;
  std::vector<std::size_t> counts;  // per rank (ReduceScatter, AlltoAll: blocks of C, times N below)
  std::vector<placement> places;
  bool per_block;                   // counts are C, the call takes N * C
};

// Every case for one type; "" or the first failure.
template <class T>
std::string sweep(comm_t& comm, rcclx::gpu::stream_t stream, int& k) {
  namespace lpc = rcclx::lpc;
  const bool quick = rcclx_test::quick();
  const std::size_t n = static_cast<std::size_t>(comm.num_ranks());
  const std::vector<algorithm> both = {algorithm::automatic, algorithm::low_precision};
  const std::vector<reduce_op> sum_max = quick ? std::vector<reduce_op>{reduce_op::sum}
                                               : std::vector<reduce_op>{reduce_op::sum, reduce_op::max};
  const std::vector<placement> out_in = {placement::out_of_place, placement::in_place};
  // 70001: more than the workspace holds, plain and low precision, at every N (chunks); 1037 and
  // 5001: not multiples of the LPC block (32) or of 16 bytes; 20000 registered: an AllGather only
  // zero-copy can run (80 KB of floats above the 64 KiB workspace).
  const std::vector<case_list> cases = {
      {lpc::collective::allreduce, both, sum_max, quick ? std::vector<std::size_t>{7, 70001} : std::vector<std::size_t>{1, 7, 1037, 70001}, out_in, false},
      {lpc::collective::allreduce, {algorithm::tree}, {reduce_op::sum}, {70001}, {placement::registered}, false},
      {lpc::collective::allgather, both, {reduce_op::sum}, quick ? std::vector<std::size_t>{7, 5001} : std::vector<std::size_t>{1, 7, 1037, 5001}, {placement::out_of_place}, false},
      {lpc::collective::allgather, {algorithm::flat}, {reduce_op::sum}, {1037, 20000}, {placement::registered}, false},
      {lpc::collective::reduce_scatter, both, sum_max, quick ? std::vector<std::size_t>{7} : std::vector<std::size_t>{1, 7, 1037}, {placement::out_of_place}, true},
      {lpc::collective::reduce_scatter, {algorithm::tree}, {reduce_op::sum}, {1037}, {placement::registered}, true},
      {lpc::collective::alltoall, both, {reduce_op::sum}, quick ? std::vector<std::size_t>{7} : std::vector<std::size_t>{1, 7, 1037}, out_in, true},
      {lpc::collective::alltoall, {algorithm::automatic}, {reduce_op::sum}, {1037}, {placement::registered}, true},
  };
  const std::size_t max_elems = 70001 + 20000 * n;
  buffers<T> b{};
  b.in = static_cast<T*>(rcclx::host::shareable_malloc(max_elems * sizeof(T)));
  b.out = static_cast<T*>(rcclx::host::shareable_malloc(max_elems * sizeof(T)));
  T* reg = static_cast<T*>(rcclx::host::shareable_malloc(max_elems * sizeof(T) + 1024));
  comm.register_buffer(reg, max_elems * sizeof(T) + 1024);
  b.reg = reg + 64;  // inside the registration, not at its start
  std::string err;
  for (const case_list& cl : cases)
    for (algorithm algo : cl.algos)
      for (reduce_op op : cl.ops)
        for (std::size_t count : cl.counts)
          for (placement where : cl.places) {
            if (!err.empty()) break;
            const std::size_t call_count = cl.per_block ? count * n : count;
            err = run_case(comm, stream, b, cl.c, algo, op, call_count, where, ++k);
            if (!err.empty())
              err = std::string(rcclx::lpc::to_string(cl.c)) + " " + rcclx_test::type_info<T>::name + " " +
                    rcclx::to_string(algo) + " " + rcclx::to_string(op) + " count " + std::to_string(call_count) + " " +
                    to_string(where) + ": " + err;
          }
  comm.unregister_buffer(reg);
  rcclx::host::shareable_free(b.in);
  rcclx::host::shareable_free(b.out);
  rcclx::host::shareable_free(reg);
  return err;
}

}  // namespace

TEST_CASE("communicator: allreduce, allgather, reduce_scatter, alltoall, plain and low precision, across processes",
          "[host][multiprocess]") {
  const int n = GENERATE(2, 3, 4, 8);
  CAPTURE(n);
  if (rcclx_test::quick() && n > 4) return;  // RCCLX_TEST_QUICK (compute-sanitizer): 2 to 4 processes
  const std::string id = rcclx_test::unique_job_id("collectives");
  auto rs = rcclx_test::run_communicators<comm_t>(n, id, options(), [](comm_t& comm, rcclx::gpu::stream_t stream, int) {
    int k = 0;
    std::string err = sweep<float>(comm, stream, k);
    if (err.empty()) err = sweep<rcclx::bf16>(comm, stream, k);
    return err;
  }, std::chrono::seconds(500));
  RCCLX_SKIP_IF_NO_GPU(rs);
  rcclx_test::require_all_ok(rs);
}

TEST_CASE("communicator: the four collectives in a captured graph, replayed with new inputs", "[host][multiprocess]") {
  const int n = GENERATE(2, 4);
  CAPTURE(n);
  const std::string id = rcclx_test::unique_job_id("graph4");
  auto rs = rcclx_test::run_communicators<comm_t>(n, id, options(), [n](comm_t& comm, rcclx::gpu::stream_t stream, int rank) {
    const std::size_t nn = static_cast<std::size_t>(n), big = 70001, gathered = 3001, blocks = 7 * nn;
    auto alloc = [](std::size_t elems) { return static_cast<float*>(rcclx::host::shareable_malloc(elems * sizeof(float))); };
    float *a = alloc(big), *a_out = alloc(big), *g = alloc(gathered), *g_out = alloc(gathered * nn);
    float *s = alloc(blocks), *s_out = alloc(7), *t = alloc(blocks), *t_out = alloc(blocks);
    comm.begin_capture(stream);
    comm.allreduce(a, a_out, big, reduce_op::sum, algorithm::low_precision, stream);      // workspace, chunks
    comm.allgather(g, g_out, gathered, algorithm::automatic, stream);                       // zero-copy (captured)
    comm.reduce_scatter(s, s_out, blocks, reduce_op::max, algorithm::low_precision, stream);
    comm.alltoall(t, t_out, blocks, algorithm::flat, stream);                               // zero-copy (captured)
    rcclx::host::graph gr = comm.end_capture(stream);
    std::string err;
    const auto m = model();
    for (int k = 1; k <= 2 && err.empty(); ++k) {
      upload(a, inputs_of<float>(rank, big, 10 * k));
      upload(g, inputs_of<float>(rank, gathered, 10 * k + 1));
      upload(s, inputs_of<float>(rank, blocks, 10 * k + 2));
      upload(t, inputs_of<float>(rank, blocks, 10 * k + 3));
      gr.launch(stream);
      comm.synchronize(stream);
      err = lpc_test::first_violation(download(a_out, big), lpc_test::allreduce(all_inputs<float>(n, big, 10 * k), m, reduce_op::sum));
      if (err.empty()) {
        const auto in = all_inputs<float>(n, gathered, 10 * k + 1);
        std::vector<float> want;
        for (const auto& v : in) want.insert(want.end(), v.begin(), v.end());
        err = check_copied(download(g_out, gathered * nn), want);
      }
      if (err.empty())
        err = lpc_test::first_violation(download(s_out, 7),
                                        lpc_test::reduce_scatter(all_inputs<float>(n, blocks, 10 * k + 2), rank, m, reduce_op::max));
      if (err.empty()) {
        const auto in = all_inputs<float>(n, blocks, 10 * k + 3);
        std::vector<float> want;
        for (const auto& v : in) want.insert(want.end(), v.begin() + 7 * rank, v.begin() + 7 * (rank + 1));
        err = check_copied(download(t_out, blocks), want);
      }
      if (!err.empty()) err = "replay " + std::to_string(k) + ": " + err;
    }
    for (float* p : {a, a_out, g, g_out, s, s_out, t, t_out}) rcclx::host::shareable_free(p);
    return err;
  });
  RCCLX_SKIP_IF_NO_GPU(rs);
  rcclx_test::require_all_ok(rs);
}

TEST_CASE("communicator: bad or mismatched collective calls fail on every rank, then a good call works",
          "[host][multiprocess][errors]") {
  const int n = 3;
  const std::string id = rcclx_test::unique_job_id("collerr");
  auto rs = rcclx_test::run_processes(n, [&](int rank) -> std::string {
    rcclx_test::child_select_device(rank);
    rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
    comm_t comm(bs, options());
    const std::size_t too_many = buffer_bytes / sizeof(float) + 1;
    auto* x = static_cast<float*>(rcclx::host::shareable_malloc(too_many * sizeof(float)));
    auto* y = static_cast<float*>(rcclx::host::shareable_malloc(too_many * sizeof(float) * n));
    auto* xi = reinterpret_cast<std::int32_t*>(x);
    auto* yi = reinterpret_cast<std::int32_t*>(y);
    auto* xh = reinterpret_cast<rcclx::fp16*>(x);
    auto* yh = reinterpret_cast<rcclx::fp16*>(y);
    std::string out;
    auto capture_error = [&](const char* tag, const std::function<void()>& f) {
      out += std::string(tag) + ": " + rcclx_test::expect_error([&] {
        f();
        comm.synchronize();
      }) + "\n";
    };
    capture_error("big", [&] { comm.allgather(x, y, too_many); });
    capture_error("divide", [&] { comm.reduce_scatter(x, y, 3 * 7 + 1); });
    capture_error("lp-int", [&] { comm.allreduce(xi, yi, 64, reduce_op::sum, algorithm::low_precision); });
    capture_error("lp-fp16", [&] { comm.alltoall(xh, yh, 66, algorithm::low_precision); });
    capture_error("count", [&] { comm.allgather(x, y, rank == 0 ? 65 : 64); });
    capture_error("op", [&] { comm.reduce_scatter(x, y, 66, rank == 2 ? reduce_op::max : reduce_op::sum); });
    capture_error("algo", [&] { comm.alltoall(x, y, 66, rank == 1 ? algorithm::low_precision : algorithm::flat); });
    capture_error("good", [&] { comm.allgather(x, y, 64, algorithm::low_precision); });
    rcclx::host::shareable_free(x);
    rcclx::host::shareable_free(y);
    return out;
  }, std::chrono::seconds(120));
  RCCLX_SKIP_IF_NO_GPU(rs);
  INFO(rcclx_test::describe(rs));
  // Each call's line on every rank: the error (rcclx: <code>: message) or "no error".
  const std::pair<const char*, std::string> expected[] = {
      {"big", "no error"},  // larger than the workspace: in slices (tests/host/extended_mp_test.cpp checks the bits)
      {"divide", "count = 22 is not a multiple of num_ranks = 3"},
      {"lp-int", "allreduce: algorithm::low_precision takes float or bf16 elements, not int32"},
      {"lp-fp16", "alltoall: algorithm::low_precision takes float or bf16 elements, not float16"},
      {"count", "mismatch: allgather call #5: ranks disagree on the element count: rank 0: 65, rank 1: 64, rank 2: 64"},
      {"op", "mismatch: reduce_scatter call #6: ranks disagree on the reduction op: rank 0: sum, rank 1: sum, rank 2: max"},
      {"algo", "mismatch: alltoall call #7: ranks disagree on the algorithm: rank 0: flat, rank 1: low_precision, rank 2: flat"},
      {"good", "no error"},
  };
  for (const auto& r : rs) {
    REQUIRE(r.ok());
    for (const auto& e : expected) {
      const std::string tag = std::string(e.first) + ": ";
      const std::size_t at = r.output.find(tag);
      const std::string line = at == std::string::npos ? "" : r.output.substr(at, r.output.find('\n', at) - at);
      CAPTURE(r.rank, line, e.second);
      REQUIRE(line.find(e.second) != std::string::npos);
    }
  }
}
