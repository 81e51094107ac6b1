// tests/host/multiprocess.hpp: run a test body in N forked processes (one rank each) and collect
// what each returned. Children never return into Catch2: they report through a pipe and _exit.
// On GPU builds the parent must not touch the GPU before forking (a CUDA/HIP context does not
// survive fork); each child picks the one GPU itself and exits with skip_code when there is none.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <rcclx/core/error.hpp>
#include <rcclx/gpu/runtime.hpp>
#include <rcclx/host/socket_bootstrap.hpp>

namespace rcclx_test {

// RCCLX_TEST_TIMEOUT_SCALE (a whole factor, default 1): the tests' start-up and call bounds times
// that factor, for runs under tools that slow each process down (compute-sanitizer starts the
// processes of a job one after another: scripts/gpu-run's sanitize step sets it).
inline int test_timeout_scale() {
  const char* v = std::getenv("RCCLX_TEST_TIMEOUT_SCALE");
  const int f = v ? std::atoi(v) : 1;
  return f >= 1 ? f : 1;
}

constexpr int skip_code = 77;

struct child_result {
  int rank = -1;
  int exit_code = -1;  // -1: killed by a signal (see signal) or by the timeout
  int signal = 0;
  bool timed_out = false;
  std::string output;  // what the body returned, or the exception it threw
  double seconds = 0;  // from fork to exit
  bool ok() const { return exit_code == 0; }
  bool skipped() const { return exit_code == skip_code; }
};

// A job id no other test run on this machine uses (names the bootstrap socket).
inline std::string unique_job_id(const char* tag) {
  static std::atomic<int> counter{0};
  const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::string("rcclx-test-") + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(static_cast<long long>(t % 1000000007));
}

// A child's set-up on GPU builds: exit with skip_code when no GPU is present; otherwise rank r
// takes GPU r % device_count(): the processes spread over a multi-GPU machine (peers' memory over
// the links), and share the one GPU of a single-GPU machine (real IPC handles between processes).
inline void child_select_device(int rank) {
#if RCCLX_BACKEND_GPU
  const int devices = rcclx::gpu::device_count();
  if (devices == 0) {
    std::fflush(nullptr);
    ::_exit(skip_code);
  }
  rcclx::gpu::set_device(rank % devices);
#else
  (void)rank;
#endif
}

// Host -> device copy that has landed when it returns. cudaMemcpy from pageable memory may return
// before its DMA reaches the device, and the collectives run on non-blocking streams (which do not
// wait for the legacy stream), so an input written with a plain copy can be read stale: by this
// rank's kernel and by peers (zero-copy). Seen on two GPUs with 8 processes; synchronize first.
inline void upload_bytes(void* device, const void* host, std::size_t bytes) {
  rcclx::gpu::copy(device, host, bytes);
  rcclx::gpu::device_synchronize();
}

// Forks `n` processes; child r runs body(r) and exits 0 with its returned string as output, or 1
// with the exception's text. Processes still running after `timeout` are killed (SIGKILL).
inline std::vector<child_result> run_processes(int n, const std::function<std::string(int)>& body,
                                               std::chrono::milliseconds timeout = std::chrono::seconds(180)) {
  struct child {
    pid_t pid;
    int fd;
    bool done;
    std::chrono::steady_clock::time_point start;
  };
  std::vector<child> kids;
  std::vector<child_result> results(static_cast<std::size_t>(n));
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (::pipe(p) != 0) throw std::runtime_error("pipe failed");
    const auto start = std::chrono::steady_clock::now();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::close(p[0]);
      for (auto& k : kids) ::close(k.fd);
      int code = 0;
      std::string out;
      try {
        out = body(r);
      } catch (const rcclx::error& e) {
        out = std::string("rcclx::error: ") + e.what();
        code = 1;
      } catch (const std::exception& e) {
        out = std::string("exception: ") + e.what();
        code = 1;
      } catch (...) {
        out = "unknown exception";
        code = 1;
      }
      const char* d = out.data();
      std::size_t left = out.size();
      while (left > 0) {
        const ssize_t w = ::write(p[1], d, left);
        if (w <= 0) break;
        d += w;
        left -= static_cast<std::size_t>(w);
      }
      ::close(p[1]);
      std::fflush(nullptr);
      ::_exit(code);
    }
    ::close(p[1]);
    kids.push_back(child{pid, p[0], false, start});
    results[static_cast<std::size_t>(r)].rank = r;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout * test_timeout_scale();
  int running = n;
  while (running > 0) {
    // Read what is available, and reap exited children at once (so peers can see them gone).
    std::vector<pollfd> fds;
    for (auto& k : kids)
      if (k.fd >= 0) fds.push_back(pollfd{k.fd, POLLIN, 0});
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 20);
    else std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (int r = 0; r < n; ++r) {
      child& k = kids[static_cast<std::size_t>(r)];
      child_result& res = results[static_cast<std::size_t>(r)];
      if (k.fd >= 0) {
        char buf[4096];
        for (;;) {
          pollfd one{k.fd, POLLIN, 0};
          if (::poll(&one, 1, 0) <= 0) break;
          const ssize_t got = ::read(k.fd, buf, sizeof(buf));
          if (got <= 0) {
            ::close(k.fd);
            k.fd = -1;
            break;
          }
          res.output.append(buf, static_cast<std::size_t>(got));
        }
      }
      if (!k.done) {
        int status = 0;
        if (::waitpid(k.pid, &status, WNOHANG) == k.pid) {
          k.done = true;
          --running;
          res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - k.start).count();
          if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
          if (WIFSIGNALED(status)) res.signal = WTERMSIG(status);
        }
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (auto& k : kids)
        if (!k.done) ::kill(k.pid, SIGKILL);
      for (int r = 0; r < n; ++r) {
        child& k = kids[static_cast<std::size_t>(r)];
        if (k.done) continue;
        int status = 0;
        ::waitpid(k.pid, &status, 0);
        k.done = true;
        results[static_cast<std::size_t>(r)].timed_out = true;
      }
      running = 0;
    }
  }
  for (auto& k : kids)
    if (k.fd >= 0) {
      char buf[4096];
      ssize_t got;
      while ((got = ::read(k.fd, buf, sizeof(buf))) > 0) results[static_cast<std::size_t>(&k - &kids[0])].output.append(buf, static_cast<std::size_t>(got));
      ::close(k.fd);
    }
  return results;
}

inline std::string describe(const std::vector<child_result>& rs) {
  std::string s;
  for (const auto& r : rs) {
    s += "rank " + std::to_string(r.rank) + ": exit " + std::to_string(r.exit_code);
    if (r.signal) s += " signal " + std::to_string(r.signal);
    if (r.timed_out) s += " TIMED OUT";
    char t[32];
    std::snprintf(t, sizeof(t), " (%.2f s)", r.seconds);
    s += t;
    s += ": " + r.output + "\n";
  }
  return s;
}

inline bool any_skipped(const std::vector<child_result>& rs) {
  for (const auto& r : rs)
    if (r.skipped()) return true;
  return false;
}

// Bootstrap options for tests: short start-up bound (all processes start together).
inline rcclx::host::socket_options test_socket_options() {
  rcclx::host::socket_options o;
  o.connect_timeout = std::chrono::seconds(30 * test_timeout_scale());
  o.timeout = std::chrono::seconds(60 * test_timeout_scale());
  return o;
}

// The usual body of a communicator test, in child `rank` of `n`: select the GPU, join job `id`'s
// bootstrap, build a Comm with `opts` and a stream, run body(comm, stream, rank), which returns ""
// or what is wrong. What it returns is thrown, so the child's exit status is the verdict.
template <class Comm, class Options, class Body>
std::vector<child_result> run_communicators(int n, const std::string& id, const Options& opts, Body body,
                                            std::chrono::milliseconds timeout = std::chrono::seconds(180)) {
  return run_processes(n, [&](int rank) -> std::string {
    child_select_device(rank);
    rcclx::host::socket_bootstrap bs(rank, n, id, test_socket_options());
    Comm comm(bs, opts);
    rcclx::gpu::stream_t stream = rcclx::gpu::stream_create();
    std::string err = body(comm, stream, rank);
    rcclx::gpu::stream_destroy(stream);
    if (!err.empty()) throw std::runtime_error(err);
    return err;
  }, timeout);
}

}  // namespace rcclx_test
