// communicator's extended collectives across N processes: allreduce and reduce_scatter with
// product, avg and premul_sum; broadcast and reduce from / to every kind of root (in place too);
// barrier; the element types int8, bool, int64 and float64; allgather, reduce_scatter and alltoall
// larger than the workspace (in slices of every block); the uneven AlltoAll (alltoallv); calls larger than the workspace (chunked); and the errors every rank must throw together
// (a bad root, ranks that disagree on the root or the premul factor, ops a path does not take).
// Every rank computes every rank's input from one generator and checks its own output against
// tests/dda/op_reference.hpp (bit for bit against the fp32 rank-order result, and within the float64
// tolerance), so every rank holds the same bits.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/socket_bootstrap.hpp>

#include "../dda/op_reference.hpp"
#include "../support/catch.hpp"
#include "multiprocess.hpp"
#include "multiprocess_checks.hpp"

namespace ext_mp_test {

constexpr int max_r = 8;
using comm_t = rcclx::host::communicator<max_r>;
using rcclx::algorithm;
using rcclx::reduce_op;
using rcclx::reduce_spec;

constexpr std::size_t buffer_bytes = 16 << 10;  // small: 5001 floats run in two chunks, 20011 in five

rcclx::host::communicator_options options() {
  rcclx::host::communicator_options o;
  o.buffer_bytes = buffer_bytes;
  o.timeout_ns = 30ull * 1000 * 1000 * 1000;
  return o;
}

template <class T>
struct dev {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dev(std::size_t count) : p(static_cast<T*>(rcclx::gpu::device_malloc(count * sizeof(T) + 16))), n(count) {}
  ~dev() { rcclx::gpu::device_free(p); }
  dev(const dev&) = delete;
  dev& operator=(const dev&) = delete;
  void upload(const op_ref::host_vec<T>& h) {
    if (!h.empty()) rcclx_test::upload_bytes(p, h.data(), h.size() * sizeof(T));
  }
  op_ref::host_vec<T> download(std::size_t count) const {
    op_ref::host_vec<T> h(count);
    if (count) rcclx::gpu::copy(h.data(), p, count * sizeof(T));
    return h;
  }
};

template <class T>
std::vector<op_ref::host_vec<T>> inputs(int n, std::size_t count, std::uint64_t seed, reduce_op op) {
  std::vector<op_ref::host_vec<T>> in;
  for (int p = 0; p < n; ++p) in.push_back(op_ref::make_input<T>(count, seed + 101 * p, op));
  return in;
}

template <class T>
std::string check_all(const std::vector<op_ref::host_vec<T>>& in, std::size_t base, const op_ref::host_vec<T>& got,
                      const reduce_spec& spec, const std::string& what) {
  for (std::size_t j = 0; j < got.size(); ++j) {
    const std::string e = op_ref::check_element<T>(in, base + j, spec, got[j]);
    if (!e.empty()) return what + ": " + e;
  }
  return {};
}

template <class T>
std::string sweep(comm_t& comm, rcclx::gpu::stream_t stream, const std::vector<reduce_spec>& specs) {
  const int n = comm.num_ranks(), rank = comm.rank();
  const std::string tname = rcclx::core::type_name<T>();
  for (const std::size_t count : {std::size_t{1}, std::size_t{37}, std::size_t{5001}, std::size_t{20011}}) {
    const std::string at = tname + " count " + std::to_string(count);
    // AllReduce (chunked above buffer_bytes) and ReduceScatter (one launch: up to the workspace).
    for (const reduce_spec& spec : specs) {
      const std::string s = at + " op " + rcclx::to_string(spec.op);
      const auto in = inputs<T>(n, count, count + 17, spec.op);
      dev<T> x(count), y(count);
      x.upload(in[rank]);
      for (const algorithm a : {algorithm::flat, algorithm::tree, algorithm::automatic}) {
        comm.allreduce(x.p, y.p, count, spec, a, stream);
        comm.synchronize(stream);
        std::string e = check_all<T>(in, 0, y.download(count), spec, "allreduce " + s + " " + rcclx::to_string(a));
        if (!e.empty()) return e;
      }
      const std::size_t rs = count / static_cast<std::size_t>(n) * static_cast<std::size_t>(n), c = rs / n;
      if (c > 0) {  // above buffer_bytes: in slices of every block
        comm.reduce_scatter(x.p, y.p, rs, spec, algorithm::automatic, stream);
        comm.synchronize(stream);
        std::string e = check_all<T>(in, static_cast<std::size_t>(rank) * c, y.download(c), spec, "reduce_scatter " + s);
        if (!e.empty()) return e;
      }
    }
    // AllGather and AlltoAll: bit copies (above buffer_bytes: in slices of every block), AlltoAll
    // out of place and in place.
    {
      const std::size_t nn = static_cast<std::size_t>(n);
      const auto in = inputs<T>(n, count, count + 29, reduce_op::sum);
      dev<T> x(count), y(count * nn);
      x.upload(in[rank]);
      comm.allgather(x.p, y.p, count, algorithm::automatic, stream);
      comm.synchronize(stream);
      const op_ref::host_vec<T> got = y.download(count * nn);
      for (int p = 0; p < n; ++p)
        if (std::memcmp(got.data() + p * count, in[p].data(), count * sizeof(T)) != 0)
          return "allgather " + at + ": block " + std::to_string(p) + " differs";
      const std::size_t c = count / nn;
      if (c > 0) {
        comm.alltoall(x.p, y.p, c * nn, algorithm::automatic, stream);
        comm.synchronize(stream);
        const op_ref::host_vec<T> a = y.download(c * nn);
        for (int p = 0; p < n; ++p)
          if (std::memcmp(a.data() + p * c, in[p].data() + rank * c, c * sizeof(T)) != 0)
            return "alltoall " + at + ": block " + std::to_string(p) + " differs";
        comm.alltoall(x.p, x.p, c * nn, algorithm::automatic, stream);  // in place
        comm.synchronize(stream);
        const op_ref::host_vec<T> b = x.download(c * nn);
        for (int p = 0; p < n; ++p)
          if (std::memcmp(b.data() + p * c, in[p].data() + rank * c, c * sizeof(T)) != 0)
            return "alltoall in place " + at + ": block " + std::to_string(p) + " differs";
      }
    }
    // Broadcast and Reduce from / to each kind of root.
    for (const int root : {0, n - 1, n / 2}) {
      const std::string s = at + " root " + std::to_string(root);
      const auto in = inputs<T>(n, count, count + 5 + root, reduce_op::sum);
      for (const algorithm a : {algorithm::flat, algorithm::tree, algorithm::automatic}) {
        dev<T> x(count), y(count);
        x.upload(in[rank]);
        comm.broadcast(rank == root ? x.p : static_cast<const T*>(nullptr), y.p, count, root, a, stream);
        comm.synchronize(stream);
        const op_ref::host_vec<T> got = y.download(count);
        if (std::memcmp(got.data(), in[root].data(), count * sizeof(T)) != 0) return "broadcast " + s + ": bits differ";
        comm.broadcast(x.p, x.p, count, root, a, stream);  // in place on every rank
        comm.synchronize(stream);
        if (std::memcmp(x.download(count).data(), in[root].data(), count * sizeof(T)) != 0)
          return "broadcast in place " + s + ": bits differ";
      }
      for (const reduce_spec& spec : specs) {
        const auto rin = inputs<T>(n, count, count + 9 + root, spec.op);
        dev<T> x(count);
        x.upload(rin[rank]);
        for (const algorithm a : {algorithm::flat, algorithm::tree}) {
          x.upload(rin[rank]);
          comm.reduce(x.p, x.p, count, root, spec, a, stream);  // in place on the root
          comm.synchronize(stream);
          const op_ref::host_vec<T> got = x.download(count);
          if (rank == root) {
            std::string e = check_all<T>(rin, 0, got, spec, "reduce " + s + " op " + rcclx::to_string(spec.op));
            if (!e.empty()) return e;
          } else if (std::memcmp(got.data(), rin[rank].data(), count * sizeof(T)) != 0) {
            return "reduce " + s + ": a non-root rank's buffer was written";
          }
        }
      }
    }
  }
  for (int k = 0; k < 5; ++k) comm.barrier(stream);
  comm.synchronize(stream);
  return {};
}

// premul_sum with its factor in device memory: AllReduce (chunked) and ReduceScatter (sliced).
inline std::string device_factor(comm_t& comm, rcclx::gpu::stream_t stream) {
  const int n = comm.num_ranks(), rank = comm.rank();
  const std::size_t count = 5001, c = count / n, rs = c * n;
  const float f = 0.7f;
  dev<float> fd(1);
  fd.upload({f});
  const reduce_spec spec{reduce_op::premul_sum, 0.0, fd.p}, ref{reduce_op::premul_sum, f};
  const auto in = inputs<float>(n, count, 77, reduce_op::premul_sum);
  dev<float> x(count), y(count);
  x.upload(in[rank]);
  comm.allreduce(x.p, y.p, count, spec, algorithm::automatic, stream);
  comm.synchronize(stream);
  std::string e = check_all<float>(in, 0, y.download(count), ref, "allreduce, device factor");
  if (!e.empty()) return e;
  comm.reduce_scatter(x.p, y.p, rs, spec, algorithm::automatic, stream);
  comm.synchronize(stream);
  return check_all<float>(in, static_cast<std::size_t>(rank) * c, y.download(c), ref, "reduce_scatter, device factor");
}

// Uneven AlltoAll: rank r sends split(r, p) elements to rank p (zeros included; the largest above
// the workspace, so several slices), bit copies at the packed offsets.
inline std::size_t split(int r, int p, int k) { return static_cast<std::size_t>(((r * 7 + p * 3 + k) % 5) * 1733 % 4001); }

template <class T>
std::string uneven_alltoall(comm_t& comm, rcclx::gpu::stream_t stream, int k) {
  const int n = comm.num_ranks(), rank = comm.rank();
  std::vector<std::size_t> in_s(n), out_s(n);
  std::size_t in_total = 0, out_total = 0;
  for (int p = 0; p < n; ++p) {
    in_s[p] = split(rank, p, k);
    out_s[p] = split(p, rank, k);
    in_total += in_s[p];
    out_total += out_s[p];
  }
  std::vector<op_ref::host_vec<T>> in;  // every rank's input
  for (int p = 0; p < n; ++p) {
    std::size_t t = 0;
    for (int q = 0; q < n; ++q) t += split(p, q, k);
    in.push_back(op_ref::make_input<T>(t, 1000 + 17 * p + k, reduce_op::sum));
  }
  dev<T> x(in_total + 1), y(out_total + 1);
  x.upload(in[rank]);
  comm.alltoallv(x.p, in_s.data(), y.p, out_s.data(), stream);
  comm.synchronize(stream);
  const op_ref::host_vec<T> got = y.download(out_total);
  std::size_t at = 0;
  for (int p = 0; p < n; ++p) {
    std::size_t from = 0;  // rank p's offset of its block for this rank
    for (int q = 0; q < rank; ++q) from += split(p, q, k);
    if (out_s[p] && std::memcmp(got.data() + at, in[p].data() + from, out_s[p] * sizeof(T)) != 0)
      return "alltoallv " + std::string(rcclx::core::type_name<T>()) + ": the block from rank " + std::to_string(p) +
             " differs";
    at += out_s[p];
  }
  return {};
}

}  // namespace ext_mp_test

TEST_CASE("communicator: product, avg, premul_sum; broadcast, reduce, barrier; int8, bool, int64, float64; across processes",
          "[host][multiprocess][extended]") {
  using namespace ext_mp_test;
  const int n = GENERATE(2, 3, 5);
  CAPTURE(n);
  const std::string id = rcclx_test::unique_job_id("ext");
  auto rs = rcclx_test::run_communicators<comm_t>(n, id, options(), [](comm_t& comm, rcclx::gpu::stream_t stream, int) {
    const std::vector<reduce_spec> f_specs = {reduce_spec{reduce_op::sum}, reduce_spec{reduce_op::product},
                                              reduce_spec{reduce_op::avg}, reduce_spec{reduce_op::premul_sum, 0.37f}};
    std::string err = sweep<float>(comm, stream, f_specs);
    if (err.empty()) err = sweep<rcclx::bf16>(comm, stream, {reduce_spec{reduce_op::avg}, reduce_spec{reduce_op::premul_sum, -2.5f}});
    if (err.empty()) err = sweep<std::int32_t>(comm, stream, {reduce_spec{reduce_op::max}, reduce_spec{reduce_op::avg}});
    if (err.empty()) err = sweep<std::int8_t>(comm, stream, {reduce_spec{reduce_op::sum}, reduce_spec{reduce_op::min}});
    if (err.empty()) err = sweep<bool>(comm, stream, {reduce_spec{reduce_op::sum}, reduce_spec{reduce_op::product}});
    if (err.empty()) err = sweep<std::int64_t>(comm, stream, {reduce_spec{reduce_op::sum}, reduce_spec{reduce_op::avg}});
    if (err.empty()) err = sweep<double>(comm, stream, {reduce_spec{reduce_op::avg}, reduce_spec{reduce_op::premul_sum, 0.1}});
    if (err.empty()) err = device_factor(comm, stream);
    for (int k = 0; k < 3 && err.empty(); ++k) err = uneven_alltoall<float>(comm, stream, k);
    if (err.empty()) err = uneven_alltoall<std::int8_t>(comm, stream, 1);
    if (err.empty()) err = uneven_alltoall<double>(comm, stream, 2);
    return err;
  }, std::chrono::seconds(300));
  RCCLX_SKIP_IF_NO_GPU(rs);
  rcclx_test::require_all_ok(rs);
}

TEST_CASE("communicator: bad roots, mismatched roots or factors, ops a path does not take: every rank throws",
          "[host][multiprocess][extended][errors]") {
  using namespace ext_mp_test;
  const int n = 3;
  const std::string id = rcclx_test::unique_job_id("exterr");
  auto rs = rcclx_test::run_processes(n, [&](int rank) -> std::string {
    rcclx_test::child_select_device(rank);
    rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
    comm_t comm(bs, options());
    dev<float> x(64), y(64);
    dev<std::int32_t> xi(64), yi(64);
    std::string out;
    auto capture_error = [&](const char* tag, const std::function<void()>& f) {
      out += std::string(tag) + ": " + rcclx_test::expect_error([&] {
        f();
        comm.synchronize();
      }) + "\n";
    };
    capture_error("root", [&] { comm.broadcast(x.p, y.p, 64, 3); });
    capture_error("root-mismatch", [&] { comm.reduce(x.p, y.p, 64, rank == 1 ? 1 : 0); });
    capture_error("factor", [&] {
      comm.allreduce(x.p, y.p, 64, reduce_spec{reduce_op::premul_sum, rank == 2 ? 0.5f : 0.25f});
    });
    capture_error("premul-int", [&] { comm.reduce_scatter(xi.p, yi.p, 63, reduce_spec{reduce_op::premul_sum, 2.0f}); });
    capture_error("lp-avg", [&] { comm.allreduce(x.p, y.p, 64, reduce_op::avg, algorithm::low_precision); });
    capture_error("splits", [&] {
      std::size_t in_s[3] = {4, 4, 4}, out_s[3] = {4, rank == 0 ? 5u : 4u, 4};
      comm.alltoallv(x.p, in_s, y.p, out_s);
    });
    capture_error("good", [&] { comm.reduce(x.p, y.p, 64, 2, reduce_op::avg); });
    return out;
  }, std::chrono::seconds(120));
  RCCLX_SKIP_IF_NO_GPU(rs);
  INFO(rcclx_test::describe(rs));
  const std::pair<const char*, std::string> expected[] = {
      {"root", "invalid_argument: rank 0: broadcast: root = 3 is outside [0, 3)"},
      {"root-mismatch", "mismatch: reduce call #2: ranks disagree on the root: rank 0: 0, rank 1: 1, rank 2: 0"},
      {"factor", "ranks disagree on the premul_sum factor: rank 0: 0.250000, rank 1: 0.250000, rank 2: 0.500000"},
      {"premul-int", "reduce_scatter: op = premul_sum is not defined for int32 elements"},
      {"lp-avg", "allreduce: op = avg is not supported here (sum, min, max)"},
      {"splits", "mismatch|rcclx: mismatch: alltoallv: rank 0 expects 5 elements from rank 1, which sends 4"},
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
