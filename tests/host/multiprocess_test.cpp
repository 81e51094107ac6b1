// Multi-process tests of the host layer: N forked processes, one rank each, find each other through
// the socket bootstrap, share memory (POSIX shared memory on the host backend; real CUDA/HIP IPC
// handles between processes on one GPU on GPU builds), run collectives and check the results
// against a float64 reference computed independently here. Also every error case: ranks that
// disagree, a process that dies, a stale socket, a duplicate or bad rank number.
//
// The parent never touches the GPU (contexts do not survive fork); children choose it.
#include <dirent.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/socket_bootstrap.hpp>

#include "../support/catch.hpp"
#include "multiprocess.hpp"
#include "multiprocess_checks.hpp"
#include "rank_kernel.hpp"

namespace {

using rcclx_test::child_result;
using rcclx_test::expect_error;
using rcclx_test::require_all_ok;
using rcclx_test::run_processes;
constexpr int max_r = 8;
using comm_t = rcclx::host::communicator<max_r>;

#if defined(__SANITIZE_THREAD__)
constexpr bool under_tsan = true;
#else
constexpr bool under_tsan = false;
#endif


float input_value(int rank, std::size_t i, int round) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(round) * 13) % 101) - 50) * 0.25f *
         static_cast<float>(rank + 1);
}

// Reference: the sum over ranks in float64, from the same generator.
double reference_sum(int n, std::size_t i, int round) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += static_cast<double>(input_value(r, i, round));
  return s;
}

std::vector<float> host_input(int rank, std::size_t count, int round) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input_value(rank, i, round);
  return v;
}

// "" if out matches the reference, else the first mismatch.
std::string check_sum(const float* device_out, int n, std::size_t count, int round) {
  std::vector<float> out(count);
  rcclx::gpu::copy(out.data(), device_out, count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) {
    const double ref = reference_sum(n, i, round);
    if (std::fabs(static_cast<double>(out[i]) - ref) > 1e-6 * (1.0 + std::fabs(ref)))
      return "element " + std::to_string(i) + " = " + std::to_string(out[i]) + ", expected " + std::to_string(ref);
  }
  return {};
}

#if RCCLX_BACKEND_HOST
// Mappings of other processes' rcclx shared segments in this process (host backend).
int peer_segment_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line))
    if (line.find("/dev/shm/rcclx.") != std::string::npos) ++n;
  return n;
}

// /dev/shm entries created by process `pid`.
int shm_entries_of(int pid) {
  int n = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    const std::string prefix = "rcclx." + std::to_string(pid) + ".";
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) ++n;
    ::closedir(d);
  }
  return n;
}
#endif

rcclx::host::communicator_options small_options() {
  rcclx::host::communicator_options o;
  o.buffer_bytes = 1 << 16;
  o.max_blocks = 8;
  o.timeout_ns = 20ull * 1000 * 1000 * 1000;
  o.cache_capacity = 8;
  o.max_captured_collectives = 64;
  return o;
}

}  // namespace

TEST_CASE("bootstrap: allgather and barrier among 2..8 processes", "[host][multiprocess]") {
  const int n = GENERATE(2, 3, 5, 8);
  CAPTURE(n);
  const std::string id = rcclx_test::unique_job_id("ag");
  const int rounds = rcclx_test::scaled(under_tsan ? 20 : 200);
  auto rs = run_processes(n, [&](int rank) -> std::string {
    rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
    if (bs.rank() != rank || bs.num_ranks() != n) return "bad rank/size";
    for (int k = 0; k < rounds; ++k) {
      const std::size_t words = 1 + static_cast<std::size_t>(k % 7) * 100;  // 4 B .. 2.4 KB per rank
      std::vector<std::uint32_t> mine(words), all(words * static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < words; ++i) mine[i] = static_cast<std::uint32_t>(rank * 1000003 + k * 31 + i);
      bs.allgather(mine.data(), all.data(), words * sizeof(std::uint32_t));
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < words; ++i)
          if (all[static_cast<std::size_t>(r) * words + i] != static_cast<std::uint32_t>(r * 1000003 + k * 31 + i))
            throw std::runtime_error("allgather round " + std::to_string(k) + ": wrong word from rank " + std::to_string(r));
      if (k % 10 == 0) bs.barrier();
    }
    for (int r = 0; r < n; ++r)
      if (bs.pids()[static_cast<std::size_t>(r)] <= 0) return "pid of rank " + std::to_string(r) + " unknown";
    return {};
  });
  require_all_ok(rs);
}

TEST_CASE("bootstrap: the rendezvous works in any start order", "[host][multiprocess]") {
  // Ranks arrive before, with and after rank 0 (connect retries, accepts racing with binds).
  const int n = 4;
  for (int trial = 0; trial < (under_tsan ? 5 : 20); ++trial) {
    CAPTURE(trial);
    const std::string id = rcclx_test::unique_job_id("order");
    auto rs = run_processes(n, [&](int rank) -> std::string {
      const int delay_us = static_cast<int>(((rank * 7 + trial * 3) % 5) * 20000);  // 0..80 ms
      ::usleep(static_cast<useconds_t>(delay_us));
      rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
      const int mine = rank * 10 + trial;
      const auto all = bs.allgather_value(mine);
      for (int r = 0; r < n; ++r)
        if (all[static_cast<std::size_t>(r)] != r * 10 + trial) return "wrong value from rank " + std::to_string(r);
      return {};
    });
    require_all_ok(rs);
  }
}

TEST_CASE("communicator: set-up, device barrier and peers' workspaces across 2..8 processes", "[host][multiprocess]") {
  const int n = GENERATE(2, 3, 4, 6, 8);
  CAPTURE(n);
  const std::string id = rcclx_test::unique_job_id("ws");
  auto rs = run_processes(n, [&](int rank) -> std::string {
    rcclx_test::child_select_device(rank);
    rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
    {
      comm_t comm(bs, small_options());
      if (comm.rank() != rank || comm.num_ranks() != n) return "bad communicator rank/size";
      const auto t = comm.device_handle<std::uint32_t>();
      if (t.capacity_bytes != comm.options().buffer_bytes) return "capacity";
      const std::size_t words = 4096;
      for (int round = 0; round < rcclx_test::scaled(under_tsan ? 5 : 50); ++round) {
        std::vector<std::uint32_t> v(words);
        for (std::size_t i = 0; i < words; ++i) v[i] = static_cast<std::uint32_t>(rank * 7919 + round * 104729 + i);
        rcclx_test::upload_bytes(t.data[rank], v.data(), words * sizeof(std::uint32_t));
        comm.barrier();
        comm.synchronize();
        for (int p = 0; p < n; ++p) {
          rcclx::gpu::copy(v.data(), t.data[p], words * sizeof(std::uint32_t));
          for (std::size_t i = 0; i < words; ++i)
            if (v[i] != static_cast<std::uint32_t>(p * 7919 + round * 104729 + i))
              return "round " + std::to_string(round) + ": rank " + std::to_string(p) + "'s word " + std::to_string(i) +
                     " reads " + std::to_string(v[i]);
        }
        comm.barrier();  // nobody overwrites its buffer while a peer still reads it
      }
      // The device copy of the table matches the host one.
      rcclx::core::peer_table<std::uint32_t, max_r> dev{};
      rcclx::gpu::copy(&dev, comm.device_table<std::uint32_t>(), sizeof(dev));
      for (int p = 0; p < n; ++p)
        if (dev.data[p] != t.data[p]) return "device table differs from host table";
      const auto s = comm.cache_stats();
      if (s.open_now != static_cast<std::size_t>(2 * (n - 1)) || s.pinned != s.open_now)
        return "expected 2 pinned handles per peer, have " + std::to_string(s.open_now);
    }
#if RCCLX_BACKEND_HOST
    if (peer_segment_mappings() != 0) return "peer segments still mapped after teardown";
    if (shm_entries_of(static_cast<int>(::getpid())) != 0) return "this process left /dev/shm entries";
#endif
    return {};
  });
  RCCLX_SKIP_IF_NO_GPU(rs);
  require_all_ok(rs);
}

TEST_CASE("callback_bootstrap: a communicator over a user-supplied allgather", "[host][multiprocess]") {
  const int n = 3;
  const std::string id = rcclx_test::unique_job_id("cb");
  auto rs = run_processes(n, [&](int rank) -> std::string {
    rcclx_test::child_select_device(rank);
    // The "user's" allgather (MPI_Allgather in real life): here another bootstrap's, with a count.
    rcclx::host::socket_bootstrap transport(rank, n, id, rcclx_test::test_socket_options());
    int calls = 0;
    rcclx::host::callback_bootstrap bs(rank, n, [&](const void* in, void* out, std::size_t bytes) {
      ++calls;
      transport.allgather(in, out, bytes);
    });
    comm_t comm(bs, small_options());
    const auto t = comm.device_handle<std::uint32_t>();
    const std::uint32_t mine = 1000u + static_cast<std::uint32_t>(rank);
    rcclx_test::upload_bytes(t.data[rank], &mine, sizeof(mine));
    comm.barrier();
    comm.synchronize();
    for (int p = 0; p < n; ++p) {
      std::uint32_t v = 0;
      rcclx::gpu::copy(&v, t.data[p], sizeof(v));
      if (v != 1000u + static_cast<std::uint32_t>(p)) return "wrong value from rank " + std::to_string(p);
    }
    comm.barrier();
    comm.synchronize();
    if (calls < 3) return "the callback was not used";
    return {};
  });
  RCCLX_SKIP_IF_NO_GPU(rs);
  require_all_ok(rs);
  // and its own argument checks
  auto noop = [](const void*, void*, std::size_t) {};
  REQUIRE_THROWS_AS(rcclx::host::callback_bootstrap(2, 2, noop), rcclx::error);
  REQUIRE_THROWS_AS(rcclx::host::callback_bootstrap(0, 2, nullptr), rcclx::error);
}

TEST_CASE("communicator: a flat allreduce through workspace, registered and graph-captured buffers",
          "[host][multiprocess]") {
  const int n = GENERATE(2, 3, 4, 8);
  CAPTURE(n);
  const std::string id = rcclx_test::unique_job_id("ar");
  auto rs = run_processes(n, [&](int rank) -> std::string {
    rcclx_test::child_select_device(rank);
    rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
    comm_t comm(bs, small_options());
    rcclx::gpu::stream_t stream = rcclx::gpu::stream_create();
    const std::size_t count = 5000;  // not a multiple of the block count
    const std::size_t bytes = count * sizeof(float);
    auto* in = static_cast<float*>(rcclx::host::shareable_malloc(bytes + 4096));
    auto* out = static_cast<float*>(rcclx::host::shareable_malloc(bytes));
    auto run = [&](const float* x, bool zero_copy) {
      comm.launch(x, count, zero_copy, stream, rcclx_test::naive_launcher<float, max_r>{x, out, count, 4, stream});
    };
    std::string err;
    // 1. workspace path (unregistered input).
    for (int round = 0; round < 3 && err.empty(); ++round) {
      const auto h = host_input(rank, count, round);
      rcclx_test::upload_bytes(in, h.data(), bytes);
      run(in, true);
      comm.synchronize(stream);
      err = check_sum(out, n, count, round);
      if (!err.empty()) err = "workspace: " + err;
    }
    // 2. registered (zero-copy) path; the buffer starts 1 KiB into its allocation, to check that
    //    the allocation base (not the pointer) is what gets shared.
    float* reg = in + 256;
    comm.register_buffer(reg, bytes);
    if (!comm.is_registered(reg, bytes)) return "not registered";
    for (int round = 3; round < 6 && err.empty(); ++round) {
      const auto h = host_input(rank, count, round);
      rcclx_test::upload_bytes(reg, h.data(), bytes);
      run(reg, true);
      comm.synchronize(stream);
      err = check_sum(out, n, count, round);
      if (!err.empty()) err = "registered: " + err;
      const auto t = comm.buffer_handle(reg, count);
      if (t.data[rank] != reg) err = "buffer_handle: own entry is not the buffer";
    }
    comm.unregister_buffer(reg);
    // 3. graph capture: two collectives on unregistered buffers, patched after capture, replayed.
    float* in2 = in + 512;
    comm.begin_capture(stream);
    run(in, true);
    run(in2, true);
    rcclx::host::graph g = comm.end_capture(stream);
    for (int round = 6; round < 9 && err.empty(); ++round) {
      // in2 overlaps in: fill in first. The second collective's result (in2's) is the one kept.
      rcclx_test::upload_bytes(in, host_input(rank, count, 99).data(), bytes);
      const auto h = host_input(rank, count, round);
      rcclx_test::upload_bytes(in2, h.data(), bytes);
      g.launch(stream);
      comm.synchronize(stream);
      err = check_sum(out, n, count, round);
      if (!err.empty()) err = "graph replay: " + err;
    }
    // 4. the same without zero-copy capture: the workspace path inside the graph.
    {
      rcclx::host::communicator_options o = small_options();
      o.zero_copy_capture = false;
      comm_t comm2(bs, o);
      comm2.begin_capture(stream);
      comm2.launch(in, count, true, stream, rcclx_test::naive_launcher<float, max_r>{in, out, count, 4, stream});
      rcclx::host::graph g2 = comm2.end_capture(stream);
      for (int round = 9; round < 11 && err.empty(); ++round) {
        rcclx_test::upload_bytes(in, host_input(rank, count, round).data(), bytes);
        g2.launch(stream);
        comm2.synchronize(stream);
        err = check_sum(out, n, count, round);
        if (!err.empty()) err = "graph replay (workspace): " + err;
      }
    }
    rcclx::gpu::stream_destroy(stream);
    rcclx::host::shareable_free(in);
    rcclx::host::shareable_free(out);
    return err;
  });
  RCCLX_SKIP_IF_NO_GPU(rs);
  require_all_ok(rs);
}

TEST_CASE("communicator: 10^4 register/unregister cycles leave no open handle", "[host][multiprocess]") {
  const int n = GENERATE(2, 4);
  CAPTURE(n);
  const int cycles = rcclx_test::scaled(under_tsan ? 1000 : 10000);
  const std::string id = rcclx_test::unique_job_id("reg");
  auto rs = run_processes(n, [&](int rank) -> std::string {
    rcclx_test::child_select_device(rank);
    rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
    rcclx::host::communicator_options o = small_options();
    o.cache_capacity = 6;
    o.check_calls = false;
    std::string err;
    {
      comm_t comm(bs, o);
      rcclx::gpu::stream_t stream = rcclx::gpu::stream_create();
      // More allocations than the cache holds: a round robin evicts and reopens.
      constexpr int pool = 9;
      const std::size_t count = 1024, bytes = count * sizeof(float);
      std::vector<float*> bufs(pool);
      for (auto& b : bufs) b = static_cast<float*>(rcclx::host::shareable_malloc(2 * bytes));
      auto* out = static_cast<float*>(rcclx::host::shareable_malloc(bytes));
      const std::size_t workspace_handles = static_cast<std::size_t>(2 * (n - 1));
      for (int c = 0; c < cycles && err.empty(); ++c) {
        // Two registrations of one allocation (different offsets): the second is a cache hit.
        float* a = bufs[static_cast<std::size_t>(c % pool)];
        comm.register_buffer(a, bytes);
        comm.register_buffer(a + count, bytes);
        if (c % 1000 == 0) {  // the mapping is right: a collective through it
          rcclx_test::upload_bytes(a + count, host_input(rank, count, c).data(), bytes);
          comm.launch(a + count, count, true, stream, rcclx_test::naive_launcher<float, max_r>{a + count, out, count, 2, stream});
          comm.synchronize(stream);
          err = check_sum(out, n, count, c);
        }
        comm.unregister_buffer(a);
        comm.unregister_buffer(a + count);
        const auto s = comm.cache_stats();
        if (s.pinned != workspace_handles) err = "cycle " + std::to_string(c) + ": pinned = " + std::to_string(s.pinned);
        if (s.open_now > workspace_handles + o.cache_capacity) err = "cache above capacity";
      }
      const auto s = comm.cache_stats();
      const std::size_t peers = static_cast<std::size_t>(n - 1);
      if (err.empty() && s.opens != s.closes + s.open_now) err = "opens != closes + open";
      if (err.empty() && s.hits < static_cast<std::uint64_t>(cycles) * peers) err = "too few cache hits";
      if (err.empty() && s.evictions == 0) err = "no evictions";
      comm.trim_cache();
      const auto t = comm.cache_stats();
      if (err.empty() && t.open_now != workspace_handles) err = "after trim: open = " + std::to_string(t.open_now);
      std::ostringstream os;
      os << "opens " << s.opens << " closes " << s.closes << " hits " << s.hits << " evictions " << s.evictions;
      if (!err.empty()) err += " (" + os.str() + ")";
      for (auto* b : bufs) rcclx::host::shareable_free(b);
      rcclx::host::shareable_free(out);
      rcclx::gpu::stream_destroy(stream);
    }
#if RCCLX_BACKEND_HOST
    if (err.empty() && peer_segment_mappings() != 0) err = "segments still mapped after teardown";
    if (err.empty() && shm_entries_of(static_cast<int>(::getpid())) != 0) err = "/dev/shm entries left";
#endif
    return err;
  });
  RCCLX_SKIP_IF_NO_GPU(rs);
  require_all_ok(rs);
}

// ---- error cases ------------------------------------------------------------------------------

TEST_CASE("errors: ranks started with different world sizes all fail, naming it", "[host][multiprocess][errors]") {
  const std::string id = rcclx_test::unique_job_id("ws-mismatch");
  auto rs = run_processes(4, [&](int rank) -> std::string {
    const int world = rank == 3 ? 5 : 4;  // rank 3 was told a different WORLD_SIZE
    return expect_error([&] { rcclx::host::socket_bootstrap bs(rank, world, id, rcclx_test::test_socket_options()); });
  });
  INFO(rcclx_test::describe(rs));
  for (const auto& r : rs) {
    REQUIRE(r.ok());
    REQUIRE(r.output.rfind("mismatch|", 0) == 0);
    REQUIRE(r.output.find("world size mismatch") != std::string::npos);
    REQUIRE(r.output.find("WORLD_SIZE = 5") != std::string::npos);
    REQUIRE(r.seconds < 20);
  }
}

TEST_CASE("errors: a duplicate rank is reported to every process", "[host][multiprocess][errors]") {
  const int dup = GENERATE(0, 1);  // a second rank 0 (it finds the socket taken) or a second rank 1
  CAPTURE(dup);
  const std::string id = rcclx_test::unique_job_id("dup");
  auto rs = run_processes(3, [&](int rank) -> std::string {
    const int claimed = rank == 2 ? dup : rank;
    if (claimed == 0 && rank == 2) ::usleep(300 * 1000);  // let the real rank 0 bind first
    return expect_error([&] { rcclx::host::socket_bootstrap bs(claimed, 3, id, rcclx_test::test_socket_options()); });
  });
  INFO(rcclx_test::describe(rs));
  for (const auto& r : rs) {
    REQUIRE(r.ok());
    REQUIRE(r.output.find("duplicate rank: rank " + std::to_string(dup)) != std::string::npos);
    REQUIRE(r.seconds < 20);
  }
}

TEST_CASE("errors: a bad rank number fails that process and every other", "[host][multiprocess][errors]") {
  const std::string id = rcclx_test::unique_job_id("badrank");
  auto rs = run_processes(3, [&](int rank) -> std::string {
    const int claimed = rank == 2 ? 7 : rank;
    return expect_error([&] { rcclx::host::socket_bootstrap bs(claimed, 3, id, rcclx_test::test_socket_options()); });
  });
  INFO(rcclx_test::describe(rs));
  for (const auto& r : rs) {
    REQUIRE(r.ok());
    REQUIRE(r.output.rfind("invalid_argument|", 0) == 0);
    REQUIRE(r.output.find("bad rank number") != std::string::npos);
    REQUIRE(r.output.find("7") != std::string::npos);
    REQUIRE(r.seconds < 20);
  }
  // Locally, without any peer: the same clear error.
  rcclx::host::socket_options o;
  o.connect_timeout = std::chrono::milliseconds(200);
  try {
    rcclx::host::socket_bootstrap bs(-1, 4, rcclx_test::unique_job_id("neg"), o);
    FAIL("no error");
  } catch (const rcclx::error& e) {
    REQUIRE(e.code() == rcclx::errc::invalid_argument);
    REQUIRE(std::string(e.what()).find("rank = -1 is outside [0, 4)") != std::string::npos);
  }
}

TEST_CASE("errors: a stale socket file is a clear error", "[host][multiprocess][errors]") {
  char dir_template[] = "/tmp/rcclx-test-XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string path = std::string(dir_template) + "/bootstrap.sock";
  {  // a socket file nobody listens on: what a crashed rank 0 leaves behind
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    ::close(fd);
  }
  auto rs = run_processes(2, [&](int rank) -> std::string {
    rcclx::host::socket_options o = rcclx_test::test_socket_options();
    o.path = path;
    o.connect_timeout = std::chrono::milliseconds(1500);
    return expect_error([&] { rcclx::host::socket_bootstrap bs(rank, 2, "stale", o); });
  });
  ::unlink(path.c_str());
  ::rmdir(dir_template);
  INFO(rcclx_test::describe(rs));
  REQUIRE(rs[0].ok());
  REQUIRE(rs[0].output.find("stale bootstrap socket " + path) != std::string::npos);
  REQUIRE(rs[1].ok());
  REQUIRE(rs[1].output.rfind("timeout|", 0) == 0);
  REQUIRE(rs[1].output.find("could not reach rank 0 at " + path) != std::string::npos);
  REQUIRE(rs[1].output.find("stale") != std::string::npos);
}

TEST_CASE("errors: ranks that disagree on count, type or buffers fail together at the call",
          "[host][multiprocess][errors]") {
  const int n = 3;
  const std::string id = rcclx_test::unique_job_id("callcheck");
  auto rs = run_processes(n, [&](int rank) -> std::string {
    rcclx_test::child_select_device(rank);
    rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
    comm_t comm(bs, small_options());
    auto* buf = static_cast<float*>(rcclx::host::shareable_malloc(8192));
    auto noop = [](const auto&, bool) {};
    std::string out;
    // count: rank 2 passes 100, the others 64
    out += expect_error([&] { comm.launch(buf, rank == 2 ? 100 : 64, true, {}, noop); }) + "\n";
    // type: rank 1 calls with int32 elements
    out += expect_error([&] {
      if (rank == 1)
        comm.launch(reinterpret_cast<std::int32_t*>(buf), 64, true, {}, noop);
      else
        comm.launch(buf, 64, true, {}, noop);
    }) + "\n";
    // buffers: registered on every rank, but rank 1 passes an input outside its registration
    comm.register_buffer(buf, 4096);
    out += expect_error([&] { comm.launch(rank == 1 ? buf + 1024 : buf, 64, true, {}, noop); }) + "\n";
    // and at another offset inside it
    out += expect_error([&] { comm.launch(rank == 0 ? buf + 16 : buf, 64, true, {}, noop); }) + "\n";
    // after all that, the communicator still works: the checks stopped every rank before a launch
    comm.barrier();
    comm.synchronize();
    comm.unregister_buffer(buf);
    // register_buffer with different sizes
    out += expect_error([&] { comm.register_buffer(buf, rank == 0 ? 4096 : 2048); }) + "\n";
    // a local error on one rank (an unshareable pointer on the host backend, a null one anywhere)
    out += expect_error([&] { comm.register_buffer(rank == 2 ? nullptr : buf, 4096); }) + "\n";
    comm.barrier();
    comm.synchronize();
    rcclx::host::shareable_free(buf);
    return out;
  }, std::chrono::seconds(60));
  RCCLX_SKIP_IF_NO_GPU(rs);
  INFO(rcclx_test::describe(rs));
  for (const auto& r : rs) {
    REQUIRE(r.ok());
    std::vector<std::string> lines;
    std::istringstream is(r.output);
    for (std::string l; std::getline(is, l);) lines.push_back(l);
    REQUIRE(lines.size() == 6);
    REQUIRE(lines[0].rfind("mismatch|", 0) == 0);
    REQUIRE(lines[0].find("ranks disagree on the element count: rank 0: 64, rank 1: 64, rank 2: 100") != std::string::npos);
    REQUIRE(lines[1].find("ranks disagree on the element type: rank 0: float32, rank 1: int32, rank 2: float32") != std::string::npos);
    REQUIRE(lines[2].find("ranks disagree on where the input lives") != std::string::npos);
    REQUIRE(lines[2].find("rank 1: workspace (copy)") != std::string::npos);
    REQUIRE(lines[3].find("ranks disagree on the registered buffer") != std::string::npos);
    REQUIRE(lines[3].find("rank 0: #1 +64, rank 1: #1 +0") != std::string::npos);
    REQUIRE(lines[4].find("register_buffer: ranks disagree on bytes: rank 0: 4096, rank 1: 2048") != std::string::npos);
    REQUIRE(lines[5].rfind("invalid_argument|", 0) == 0);
    REQUIRE(lines[5].find("rank 2: register_buffer: ptr must be non-null") != std::string::npos);
  }
}

// A rank that exits after set-up. With call checks, the others learn it from the bootstrap at once
// (its socket closed); without, from the bounded device barrier, which also says the process is gone.
TEST_CASE("errors: a process that dies makes every other fail within a bounded time", "[host][multiprocess][errors]") {
  const int n = 4;
  const int victim = GENERATE(0, 2);
  const bool check_calls = GENERATE(true, false);
  CAPTURE(victim, check_calls);
  const std::string id = rcclx_test::unique_job_id("dead");
  auto rs = run_processes(n, [&](int rank) -> std::string {
    rcclx_test::child_select_device(rank);
    rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
    rcclx::host::communicator_options o = small_options();
    o.check_calls = check_calls;
    o.timeout_ns = 1000ull * 1000 * 1000;  // 1 s
    comm_t comm(bs, o);
    comm.barrier();
    comm.synchronize();
    if (rank == victim) {
      std::fflush(nullptr);
      ::_exit(3);  // dies without a word
    }
    ::usleep(100 * 1000);  // let it die first
    const auto t0 = std::chrono::steady_clock::now();
    std::string r = expect_error([&] {
      for (int k = 0; k < 3; ++k) {
        comm.barrier();
        comm.synchronize();
      }
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // a later call reports the earlier failure instead of hanging
    r += "\n" + expect_error([&] { comm.barrier(); });
    return r + "\nseconds " + std::to_string(s);
  }, std::chrono::seconds(60));
  RCCLX_SKIP_IF_NO_GPU(rs);
  INFO(rcclx_test::describe(rs));
  for (const auto& r : rs) {
    if (r.rank == victim) {
      REQUIRE(r.exit_code == 3);
      continue;
    }
    REQUIRE(r.ok());
    const std::string v = std::to_string(victim);
    if (check_calls) {
      // every survivor names the dead rank: rank 0 sees its socket close, the others hear it from
      // rank 0 (or, when rank 0 is the one that died, see rank 0's socket close)
      REQUIRE(r.output.rfind("peer_failure|", 0) == 0);
      REQUIRE(r.output.find("rank " + v + " (pid") != std::string::npos);
      REQUIRE(r.output.find("closed") != std::string::npos);
    } else {
      REQUIRE(r.output.rfind("timeout|", 0) == 0);
      REQUIRE(r.output.find("waiting for rank " + v) != std::string::npos);
      REQUIRE(r.output.find("is no longer running") != std::string::npos);
    }
    REQUIRE(r.output.find("unusable after an earlier error") != std::string::npos);
    REQUIRE(r.seconds < 20);
  }
}

TEST_CASE("launch_config: torchrun variables and their errors", "[host]") {
  // Children, so the variables never leak into other test cases.
  auto rs = run_processes(1, [](int) -> std::string {
    ::setenv("WORLD_SIZE", "4", 1);
    ::setenv("RANK", "2", 1);
    ::setenv("LOCAL_RANK", "2", 1);
    ::setenv("MASTER_ADDR", "10.0.0.1", 1);
    ::setenv("MASTER_PORT", "29500", 1);
    ::unsetenv("LOCAL_WORLD_SIZE");
    ::unsetenv("RCCLX_BOOTSTRAP_ID");
    ::unsetenv("RCCLX_DEVICE");
    auto c = rcclx::host::launch_config::from_env();
    std::string out = std::to_string(c.rank) + " " + std::to_string(c.num_ranks) + " " + std::to_string(c.local_rank) +
                      " " + std::to_string(c.device) + " " + c.unique_id + "\n";
    ::setenv("LOCAL_WORLD_SIZE", "2", 1);  // two nodes of 2: the communicator covers this node
    ::setenv("RANK", "3", 1);
    ::setenv("LOCAL_RANK", "1", 1);
    ::setenv("RCCLX_DEVICE", "5", 1);
    c = rcclx::host::launch_config::from_env();
    out += std::to_string(c.rank) + " " + std::to_string(c.num_ranks) + " " + std::to_string(c.device) + "\n";
    ::setenv("RANK", "two", 1);
    out += expect_error([] { rcclx::host::launch_config::from_env(); }) + "\n";
    ::setenv("RANK", "1", 1);
    ::unsetenv("MASTER_PORT");
    out += expect_error([] { rcclx::host::launch_config::from_env(); }) + "\n";
    return out;
  });
  INFO(rcclx_test::describe(rs));
  REQUIRE(rs[0].ok());
  std::istringstream is(rs[0].output);
  std::vector<std::string> lines;
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  REQUIRE(lines.size() == 4);
  REQUIRE(lines[0] == "2 4 2 2 10.0.0.1:29500");
  REQUIRE(lines[1] == "1 2 5");
  REQUIRE(lines[2].find("RANK = 'two' is not a rank number") != std::string::npos);
  REQUIRE(lines[3].find("MASTER_PORT is not set") != std::string::npos);
}
