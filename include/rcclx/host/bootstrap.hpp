// rcclx/host/bootstrap.hpp: how the processes of one node find each other: an allgather of bytes.
// rcclx needs nothing else from a launcher. Built in: socket_bootstrap (a Unix-domain-socket
// rendezvous configured from torchrun's variables, see socket_bootstrap.hpp); for any other
// launcher, callback_bootstrap adapts the user's own allgather (MPI, torch.distributed, ...).
//
//   rcclx::host::callback_bootstrap bs(rank, size, [](const void* in, void* out, std::size_t n) {
//     MPI_Allgather(in, (int)n, MPI_BYTE, out, (int)n, MPI_BYTE, MPI_COMM_WORLD);
//   });
//   std::vector<int> pids(bs.num_ranks());
//   int pid = getpid();
//   bs.allgather(&pid, pids.data(), sizeof(int));   // pids[r] = rank r's pid
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

class bootstrap {
 public:
  virtual ~bootstrap() = default;
  virtual int rank() const = 0;
  virtual int num_ranks() const = 0;

  // Collective: every rank passes `bytes` bytes at `in`; `out` receives num_ranks() * bytes, rank r's
  // contribution at out + r * bytes. Every rank must pass the same `bytes`. Errors (a peer that
  // died, a timeout, ranks that disagree on `bytes`) are rcclx::error, reported on every rank the
  // implementation can reach.
  virtual void allgather(const void* in, void* out, std::size_t bytes) = 0;

  // Collective: returns when every rank has entered.
  virtual void barrier() {
    const char c = 1;
    std::vector<char> all(static_cast<std::size_t>(num_ranks()));
    allgather(&c, all.data(), 1);
  }

  // Convenience: gathers one trivially copyable value per rank.
  template <class T>
  std::vector<T> allgather_value(const T& v) {
    std::vector<T> all(static_cast<std::size_t>(num_ranks()));
    allgather(&v, all.data(), sizeof(T));
    return all;
  }
};

// Adapts a user-supplied allgather (MPI_Allgather on MPI_BYTE, torch.distributed.all_gather_into_tensor
// on a byte tensor, ...). The callback must be collective across the same processes, in rank order.
class callback_bootstrap final : public bootstrap {
 public:
  using allgather_fn = std::function<void(const void* in, void* out, std::size_t bytes)>;

  callback_bootstrap(int rank, int num_ranks, allgather_fn fn)
      : rank_(rank), num_ranks_(num_ranks), fn_(std::move(fn)) {
    if (num_ranks < 1)
      throw error(errc::invalid_argument, "callback_bootstrap: num_ranks = " + std::to_string(num_ranks) + " must be >= 1");
    if (rank < 0 || rank >= num_ranks)
      throw error(errc::invalid_argument, "callback_bootstrap: rank = " + std::to_string(rank) + " is outside [0, " +
                                              std::to_string(num_ranks) + ")");
    if (!fn_) throw error(errc::invalid_argument, "callback_bootstrap: the allgather callback is empty");
  }

  int rank() const override { return rank_; }
  int num_ranks() const override { return num_ranks_; }
  void allgather(const void* in, void* out, std::size_t bytes) override { fn_(in, out, bytes); }

 private:
  int rank_;
  int num_ranks_;
  allgather_fn fn_;
};

}  // namespace host
RCCLX_NAMESPACE_END
