// communicator::allreduce across N processes (rcclx::dda underneath): every type, op and algorithm,
// workspace / registered / in-place / out-of-place, calls larger than the workspace (chunked), and
// graph capture with zero-copy inputs patched after capture. Checked against a float64 reference
// computed here from the same generator. Inputs are multiples of 1/2 small enough that every sum is
// exact in every type (bf16 included), so the comparison is exact: any lost, duplicated or
// misplaced element shows.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/socket_bootstrap.hpp>

#include "../support/catch.hpp"
#include "../support/launchers.hpp"
#include "multiprocess.hpp"
#include "multiprocess_checks.hpp"

namespace {

constexpr int max_r = 8;
using comm_t = rcclx::host::communicator<max_r>;

#if defined(__SANITIZE_THREAD__)
constexpr bool under_tsan = true;
#else
constexpr bool under_tsan = false;
#endif

// Input of rank r, element i, in round k: a multiple of 0.5 in [-7.5, 7.5] (int32: in [-15, 15]).
double input_value(int rank, std::size_t i, int k) {
  const int v = static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13 + static_cast<std::size_t>(k) * 5) % 31) - 15;
  return v * 0.5;
}

template <class T>
T to_t(double v) {
  if constexpr (std::is_same<T, std::int32_t>::value) return static_cast<std::int32_t>(v * 2);
  else return T(static_cast<float>(v));
}

template <class T>
double from_t(T x) {
  if constexpr (std::is_same<T, std::int32_t>::value) return x / 2.0;
  else return static_cast<double>(static_cast<float>(x));
}

double reference(int n, std::size_t i, int k, rcclx::reduce_op op) {
  double acc = input_value(0, i, k);
  for (int r = 1; r < n; ++r) {
    const double x = input_value(r, i, k);
    if (op == rcclx::reduce_op::sum) acc += x;
    else if (op == rcclx::reduce_op::min) acc = std::min(acc, x);
    else acc = std::max(acc, x);
  }
  return acc;
}

template <class T>
void fill(T* device, int rank, std::size_t count, int k) {
  std::vector<T> h(count);
  for (std::size_t i = 0; i < count; ++i) h[i] = to_t<T>(input_value(rank, i, k));
  rcclx_test::upload_bytes(device, h.data(), count * sizeof(T));
}

template <class T>
std::string check(const T* device, int n, std::size_t count, int k, rcclx::reduce_op op) {
  std::vector<T> h(count);
  rcclx::gpu::copy(h.data(), device, count * sizeof(T));
  for (std::size_t i = 0; i < count; ++i) {
    const double ref = reference(n, i, k, op), got = from_t(h[i]);
    if (got != ref)
      return "element " + std::to_string(i) + " of " + std::to_string(count) + " = " + std::to_string(got) +
             ", expected " + std::to_string(ref);
  }
  return {};
}

// The caller's input is intact after an out-of-place call (zero-copy must not write into it).
template <class T>
std::string check_input(const T* device, int rank, std::size_t count, int k) {
  std::vector<T> h(count);
  rcclx::gpu::copy(h.data(), device, count * sizeof(T));
  for (std::size_t i = 0; i < count; ++i)
    if (from_t(h[i]) != input_value(rank, i, k)) return "the input was modified at element " + std::to_string(i);
  return {};
}

rcclx::host::communicator_options options() {
  rcclx::host::communicator_options o;
  o.buffer_bytes = 64 << 10;  // small: calls above 16 Ki floats run in chunks
  o.max_blocks = 64;
  o.timeout_ns = 30ull * 1000 * 1000 * 1000;
  o.max_captured_collectives = 64;
  return o;
}

const rcclx::reduce_op ops[] = {rcclx::reduce_op::sum, rcclx::reduce_op::min, rcclx::reduce_op::max};
const rcclx::algorithm algos[] = {rcclx::algorithm::flat, rcclx::algorithm::tree, rcclx::algorithm::automatic};

// Every op x algorithm x count x buffer mode for one type; "" or the first failure.
template <class T>
std::string sweep(comm_t& comm, rcclx::gpu::stream_t stream, int& k) {
  const int n = comm.num_ranks(), rank = comm.rank();
  // RCCLX_TEST_QUICK (compute-sanitizer): one op and two counts, every algorithm and buffer mode.
  const bool quick = rcclx_test::scaled(100) < 100;
  std::vector<std::size_t> counts = {1, 7, 1000, under_tsan ? 20000u : 40000u};  // the last exceeds the workspace
  std::vector<rcclx::reduce_op> op_list(std::begin(ops), std::end(ops));
  if (quick) {
    counts = {7, 40000};
    op_list = {rcclx::reduce_op::sum};
  }
  const std::size_t max_count = 40000, bytes = max_count * sizeof(T);
  T* in = static_cast<T*>(rcclx::host::shareable_malloc(bytes));
  T* out = static_cast<T*>(rcclx::host::shareable_malloc(bytes));
  T* reg = static_cast<T*>(rcclx::host::shareable_malloc(bytes + 4096));
  comm.register_buffer(reg, bytes + 4096);
  std::string err;
  for (auto op : op_list)
    for (auto algo : algos)
      for (std::size_t count : counts)
        for (int mode = 0; mode < 4 && err.empty(); ++mode) {
          // 0: workspace out of place, 1: workspace in place, 2: registered out of place, 3: registered in place
          T* x = mode < 2 ? in : reg + 256;  // inside the registration, not at its start
          T* y = (mode % 2) ? x : out;
          ++k;
          fill(x, rank, count, k);
          comm.allreduce(x, y, count, op, algo, stream);
          comm.synchronize(stream);
          err = check(y, n, count, k, op);
          if (err.empty() && x != y) err = check_input(x, rank, count, k);
          if (!err.empty())
            err = std::string(rcclx::core::type_name<T>()) + " " + rcclx::to_string(op) + " " + rcclx::to_string(algo) +
                  " count " + std::to_string(count) + " mode " + std::to_string(mode) + ": " + err;
        }
  comm.unregister_buffer(reg);
  rcclx::host::shareable_free(in);
  rcclx::host::shareable_free(out);
  rcclx::host::shareable_free(reg);
  return err;
}

}  // namespace

TEST_CASE("communicator::allreduce across processes: types x ops x algorithms x buffers", "[host][multiprocess]") {
  const int n = GENERATE(2, 3, 4, 8);
  CAPTURE(n);
  const std::string id = rcclx_test::unique_job_id("allreduce");
  auto rs = rcclx_test::run_communicators<comm_t>(n, id, options(), [](comm_t& comm, rcclx::gpu::stream_t stream, int) {
    int k = 0;
    std::string err = sweep<float>(comm, stream, k);
    if (err.empty()) err = sweep<rcclx::bf16>(comm, stream, k);
    if (err.empty()) err = sweep<rcclx::fp16>(comm, stream, k);
    if (err.empty()) err = sweep<std::int32_t>(comm, stream, k);
    return err;
  }, std::chrono::seconds(500));
  RCCLX_SKIP_IF_NO_GPU(rs);
  rcclx_test::require_all_ok(rs);
}

TEST_CASE("communicator::allreduce in a captured graph, zero-copy inputs patched after capture", "[host][multiprocess]") {
  const int n = GENERATE(2, 4);
  CAPTURE(n);
  const std::string id = rcclx_test::unique_job_id("graph");
  auto rs = rcclx_test::run_communicators<comm_t>(n, id, options(), [n](comm_t& comm, rcclx::gpu::stream_t stream, int rank) {
    const std::size_t small = 3000, large = 30000;  // large: tree, more than the workspace holds
    auto* a = static_cast<float*>(rcclx::host::shareable_malloc(large * sizeof(float)));
    auto* b = static_cast<float*>(rcclx::host::shareable_malloc(large * sizeof(float)));
    auto* c = static_cast<float*>(rcclx::host::shareable_malloc(large * sizeof(float)));
    comm.begin_capture(stream);
    comm.allreduce(a, b, small, rcclx::reduce_op::sum, rcclx::algorithm::flat, stream);   // zero-copy
    comm.allreduce(c, c, large, rcclx::reduce_op::max, rcclx::algorithm::tree, stream);   // zero-copy, in place
    comm.allreduce(a, a, small, rcclx::reduce_op::min, rcclx::algorithm::flat, stream);   // workspace (in place)
    rcclx::host::graph g = comm.end_capture(stream);
    std::string err;
    for (int k = 1; k <= 3 && err.empty(); ++k) {
      fill(a, rank, small, k);
      fill(c, rank, large, 100 + k);
      g.launch(stream);
      comm.synchronize(stream);
      err = check(b, n, small, k, rcclx::reduce_op::sum);
      if (err.empty()) err = check(c, n, large, 100 + k, rcclx::reduce_op::max);
      if (err.empty()) err = check(a, n, small, k, rcclx::reduce_op::min);
      if (!err.empty()) err = "replay " + std::to_string(k) + ": " + err;
    }
    rcclx::host::shareable_free(a);
    rcclx::host::shareable_free(b);
    rcclx::host::shareable_free(c);
    return err;
  });
  RCCLX_SKIP_IF_NO_GPU(rs);
  rcclx_test::require_all_ok(rs);
}

TEST_CASE("communicator::allreduce: ranks that disagree on the op or count all fail at the call",
          "[host][multiprocess][errors]") {
  const int n = 3;
  const std::string id = rcclx_test::unique_job_id("opcheck");
  auto rs = rcclx_test::run_processes(n, [&](int rank) -> std::string {
    rcclx_test::child_select_device(rank);
    rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
    comm_t comm(bs, options());
    auto* x = static_cast<float*>(rcclx::host::shareable_malloc(4096));
    std::string out;
    auto capture_error = [&](const std::function<void()>& f) {
      try {
        f();
        return std::string("no error");
      } catch (const rcclx::error& e) {
        return std::string(rcclx::to_string(e.code())) + "|" + e.what();
      }
    };
    out += capture_error([&] { comm.allreduce(x, x, 64, rank == 1 ? rcclx::reduce_op::max : rcclx::reduce_op::sum); }) + "\n";
    out += capture_error([&] { comm.allreduce(x, x, rank == 0 ? 65 : 64); }) + "\n";
    out += capture_error([&] {  // after the mismatches, a consistent call works on every rank
      comm.allreduce(x, x, 64);
      comm.synchronize();
    }) + "\n";
    comm.synchronize();
    rcclx::host::shareable_free(x);
    return out;
  }, std::chrono::seconds(120));
  RCCLX_SKIP_IF_NO_GPU(rs);
  INFO(rcclx_test::describe(rs));
  for (const auto& r : rs) {
    REQUIRE(r.ok());
    REQUIRE(r.output.find("allreduce call #1: ranks disagree on the reduction op: rank 0: sum, rank 1: max, rank 2: sum") !=
            std::string::npos);
    REQUIRE(r.output.find("allreduce call #2: ranks disagree on the element count: rank 0: 65, rank 1: 64, rank 2: 64") !=
            std::string::npos);
    REQUIRE(r.output.find("no error") != std::string::npos);
  }
}
