// rcclx/host/fork_ranks.hpp: one process per rank on one node without a launcher: fork the ranks
// from main(), or, when a launcher (torchrun, scripts/launch) started this process, run as its rank.
//
//   int main() {
//     return rcclx::host::run_ranks(4, [](const rcclx::host::launch_config& cfg) {
//       rcclx::host::socket_bootstrap bs(cfg);          // cfg.rank, cfg.num_ranks, cfg.unique_id
//       rcclx::host::communicator<8> comm(bs);
//       ...
//       return 0;                                       // this rank's exit code
//     });
//   }
//
// Without WORLD_SIZE in the environment, run_ranks forks `num_ranks` children before any GPU call
// (a GPU context does not survive fork), gives child r rank r, device r (RCCLX_DEVICE, if set,
// pins every rank to one GPU) and a job id unique to this parent, waits for all of them and
// returns 0 if every child exited 0, 1 otherwise. With WORLD_SIZE set it calls fn once with
// launch_config::from_env() and returns its code. An exception leaving fn is printed with the rank
// ("[rank 2] ...") and becomes exit code 2; a rank that fails makes its peers' bootstrap or device
// waits fail too (bounded), so a broken job ends instead of hanging.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "../config.hpp"
#include "../core/error.hpp"
#include "../gpu/runtime.hpp"
#include "detail/env.hpp"
#include "socket_bootstrap.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

namespace detail {
template <class F>
int run_rank_guarded(const launch_config& cfg, F& fn) {
  try {
    return fn(cfg);
  } catch (const std::exception& e) {
    std::printf("[rank %d] %s\n", cfg.rank, e.what());
    return 2;
  }
}
}  // namespace detail

// Is this process one rank of a launcher-started job (WORLD_SIZE set)?
inline bool launched_by_launcher() { return std::getenv("WORLD_SIZE") != nullptr; }

// The rank count of a program that runs either as emulated ranks in one process or as processes:
// a leading `--procs N` (taken out of argc / argv) gives N, which must be in [2, max_ranks]; a
// launcher-started process gives -1 (run_ranks then ignores the count); otherwise 0 (no processes).
//
//   int procs = rcclx::host::procs_argument(argc, argv, 8);   // before any GPU call
//   if (procs != 0) return rcclx::host::run_ranks(procs, run_rank);
inline int procs_argument(int& argc, char**& argv, int max_ranks) {
  int procs = 0;
  if (argc >= 3 && std::string(argv[1]) == "--procs") {
    long long n = 0;
    if (!detail::parse_int(argv[2], 2, max_ranks, n))
      throw error(errc::invalid_argument, "--procs N: N = " + std::string(argv[2]) + " must be in [2, " +
                                              std::to_string(max_ranks) + "]");
    procs = static_cast<int>(n);
    argc -= 2;
    argv += 2;
  }
  return launched_by_launcher() ? -1 : procs;
}

// procs_argument for a main(): a bad `--procs` is printed (as run_ranks prints a rank's exception)
// and gives false, so main() can return 2 without a try block of its own:
//
//   int procs = 0;
//   if (!rcclx::host::procs_argument(argc, argv, 8, procs)) return 2;
inline bool procs_argument(int& argc, char**& argv, int max_ranks, int& procs) {
  try {
    procs = procs_argument(argc, argv, max_ranks);
    return true;
  } catch (const error& e) {
    std::printf("%s\n", e.what());
    return false;
  }
}

// In a rank's process (after the fork): make cfg.device modulo the GPU count this thread's device.
// Throws errc::unsupported on a GPU backend with no GPU present; nothing on the host backend.
inline void use_device(const launch_config& cfg) {
  if (current_backend == backend::host) return;
  const int gpus = gpu::device_count();
  if (gpus == 0)
    throw error(errc::unsupported, std::string("built for ") + backend_name() + " but no GPU is present; rebuild with "
                                   "RCCLX_BACKEND=host");
  gpu::set_device(cfg.device % gpus);
}

// See the file comment. num_ranks must be in [1, 4096] (ignored under a launcher).
template <class F>
int run_ranks(int num_ranks, F&& fn) {
  if (launched_by_launcher()) {
    const launch_config cfg = launch_config::from_env();
    return detail::run_rank_guarded(cfg, fn);
  }
  if (num_ranks < 1 || num_ranks > 4096)
    throw error(errc::invalid_argument, "run_ranks: num_ranks = " + std::to_string(num_ranks) + " is outside [1, 4096]");
  std::fflush(nullptr);  // nothing buffered is printed twice by the children
  const std::string id = "rcclx-ranks-" + std::to_string(::getpid());
  (void)launch_config::env_int("RCCLX_DEVICE", 0);  // a bad value fails here, before any fork
  std::vector<pid_t> kids;
  for (int r = 0; r < num_ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      // The ranks already forked will fail at the bootstrap (a missing peer) and exit.
      std::printf("run_ranks: fork of rank %d failed\n", r);
      break;
    }
    if (pid == 0) {
      launch_config cfg;
      cfg.rank = cfg.local_rank = r;
      cfg.device = launch_config::env_int("RCCLX_DEVICE", r);
      cfg.num_ranks = num_ranks;
      cfg.unique_id = id;
      const int rc = detail::run_rank_guarded(cfg, fn);
      std::fflush(nullptr);
      std::_Exit(rc);
    }
    kids.push_back(pid);
  }
  int failed = static_cast<int>(num_ranks - static_cast<int>(kids.size()));
  for (const pid_t pid : kids) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed ? 1 : 0;
}

}  // namespace host
RCCLX_NAMESPACE_END
