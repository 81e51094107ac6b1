// rcclx/testing/node_job.hpp: one process of a multi-node job, for tests and benchmarks of
// rcclx::multinode: where it sits (node_topology), the node's socket bootstrap and communicator
// (none when the node has one rank), the engine across nodes (the G processes of this local rank,
// set by the caller: MPI, NCCL, ...), optionally an engine over every rank, and an allgather of one
// value over every rank in global rank order that needs nothing else (the node's bootstrap, then
// the engine across nodes). share_through_file hands a value (an engine's unique id) to processes
// that share a directory before any of that exists.
//
//   rcclx::testing::node_job<8> j(topo, "job-id", comm_options);   // the node's communicator if L > 1
//   j.across = std::make_unique<rcclx::multinode::mpi_engine>(across_comm);
//   rcclx::multinode::hierarchical<8> h = j.comm ? ...(*j.comm, *j.across, j.topo) : ...(*j.across, j.topo);
//   const std::vector<std::uint64_t> all = j.gather(v);              // every rank's v (collective)
//   ncclUniqueId id = rt::share_through_file(dir + "/id", node == 0, make_id);   // before any engine exists
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "../gpu/runtime.hpp"
#include "../host/communicator.hpp"
#include "../host/socket_bootstrap.hpp"
#include "../multinode/engine.hpp"
#include "../multinode/topology.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

template <int MaxLocal = max_ranks>
struct node_job {
  multinode::node_topology topo;
  std::unique_ptr<host::socket_bootstrap> node_bs;     // L > 1: the node's ranks, named after the job and node
  std::unique_ptr<host::communicator<MaxLocal>> comm;  // L > 1
  std::unique_ptr<multinode::engine> across;           // the G processes of this local rank
  std::unique_ptr<multinode::engine> everyone;         // all G * L ranks, or null:
  std::string everyone_missing;                        //   why
  std::vector<std::function<void()>> cleanup;          // run after the engines go (their communicators)

  node_job(const multinode::node_topology& t, const std::string& job_id, const host::communicator_options& o) : topo(t) {
    if (t.local_ranks < 2) return;
    node_bs = std::make_unique<host::socket_bootstrap>(t.local_rank, t.local_ranks, job_id + "-node" + std::to_string(t.node));
    comm = std::make_unique<host::communicator<MaxLocal>>(*node_bs, o);
  }
  ~node_job() {
    everyone.reset();
    across.reset();
    comm.reset();
    node_bs.reset();
    gpu::device_free(gather_dev_);
    for (auto it = cleanup.rbegin(); it != cleanup.rend(); ++it) (*it)();
  }
  node_job(const node_job&) = delete;
  node_job& operator=(const node_job&) = delete;

  // Every rank's value, in global rank order (collective): the node's through its bootstrap, then
  // every node's through the engine across nodes (device memory on GPUs).
  std::vector<std::uint64_t> gather(std::uint64_t v) {
    const std::size_t l = static_cast<std::size_t>(topo.local_ranks), g = static_cast<std::size_t>(topo.num_nodes);
    std::vector<std::uint64_t> node(l, v);
    if (node_bs) node = node_bs->allgather_value(v);
    if (!gather_dev_) gather_dev_ = gpu::device_malloc((g + 1) * l * sizeof(std::uint64_t));
    auto* d = static_cast<std::uint64_t*>(gather_dev_);
    gpu::copy(d + g * l, node.data(), l * sizeof(std::uint64_t));
    across->allgather(d + g * l, d, l * sizeof(std::uint64_t), gpu::stream_t{});
    gpu::stream_synchronize(gpu::stream_t{});
    std::vector<std::uint64_t> all(g * l);
    gpu::copy(all.data(), d, g * l * sizeof(std::uint64_t));
    return all;
  }
  void barrier() { (void)gather(0); }

 private:
  void* gather_dev_ = nullptr;
};

// A trivially copyable value from one process to others that share a directory but nothing else yet
// (an engine's unique id before its communicator exists): the writer stores make() in `path`
// (written whole, then renamed) and returns it; the others wait for the file, at most `timeout`.
template <class Make>
auto share_through_file(const std::string& path, bool writer, Make&& make,
                        std::chrono::seconds timeout = std::chrono::seconds(120)) {
  decltype(make()) v{};
  if (writer) {
    v = make();
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    FILE* f = std::fopen(tmp.c_str(), "wb");
    const bool written = f && std::fwrite(&v, sizeof(v), 1, f) == 1;
    if (!f || std::fclose(f) != 0 || !written || std::rename(tmp.c_str(), path.c_str()) != 0)
      throw error(errc::runtime, "share_through_file: cannot write " + path);
    return v;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      const bool got = std::fread(&v, sizeof(v), 1, f) == 1;
      std::fclose(f);
      if (got) return v;
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw error(errc::runtime, "share_through_file: nothing at " + path + " after " + std::to_string(timeout.count()) +
                                     " s (is the directory shared by every process?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace testing
RCCLX_NAMESPACE_END
