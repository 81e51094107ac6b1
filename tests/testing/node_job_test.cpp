// testing/node_job.hpp: one node of two forked ranks (the node's communicator over its bootstrap)
// and a node of one rank (none), each with an engine across nodes of one process: the gather gives
// every rank's value in rank order; a value shared through a file reaches three processes. The
// parent never touches the GPU; each child picks its device.
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/testing/node_job.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
namespace mn = rcclx::multinode;

// The engine of a job of one node: allgather and allreduce over one process are copies.
struct single_node_engine : mn::engine {
  int rank() const override { return 0; }
  int num_ranks() const override { return 1; }
  void allreduce(const void* in, void* out, std::size_t count, mn::data_type t, rcclx::gpu::stream_t) override {
    rcclx::gpu::copy(out, in, count * (t == mn::data_type::float32 ? 4 : 2));
  }
  void allgather(const void* in, void* out, std::size_t bytes, rcclx::gpu::stream_t) override {
    rcclx::gpu::copy(out, in, bytes);
  }
  const char* name() const override { return "single node"; }
};

TEST_CASE("node_job: the node's communicator and a gather over every rank", "[testing][multinode]") {
  const int failed = rcclx::host::run_ranks(2, [](const rcclx::host::launch_config& cfg) {
    if (rcclx::current_backend != rcclx::backend::host && rcclx::gpu::device_count() == 0) return 0;  // no GPU: skip
    rcclx::host::use_device(cfg);
    rcclx::host::communicator_options o;
    o.buffer_bytes = 4096;
    rt::node_job<4> j(mn::node_topology{0, 1, cfg.rank, 2}, cfg.unique_id, o);
    j.across = std::make_unique<single_node_engine>();
    const auto all = j.gather(100 + static_cast<std::uint64_t>(cfg.rank));
    j.barrier();
    return j.comm && j.comm->num_ranks() == 2 && all == std::vector<std::uint64_t>{100, 101} ? 0 : 1;
  });
  REQUIRE(failed == 0);
  if (rcclx::current_backend == rcclx::backend::host) {  // a node of one rank: no communicator
    rt::node_job<4> j(mn::node_topology{0, 1, 0, 1}, "rcclx-node-job-test", rcclx::host::communicator_options{});
    j.across = std::make_unique<single_node_engine>();
    CHECK_FALSE(j.comm);
    CHECK(j.gather(7) == std::vector<std::uint64_t>{7});
  }
}

TEST_CASE("share_through_file: the writer's value reaches the readers; nothing there is an error", "[testing][multinode]") {
  struct id {
    char bytes[128];
  };
  const std::string path = "/tmp/rcclx-share-test-" + std::to_string(::getpid());
  const int failed = rcclx::host::run_ranks(3, [&](const rcclx::host::launch_config& cfg) {
    const id got = rt::share_through_file(path, cfg.rank == 1, [] {
      id v{};
      for (int i = 0; i < 128; ++i) v.bytes[i] = static_cast<char>(i * 7);
      return v;
    });
    for (int i = 0; i < 128; ++i)
      if (got.bytes[i] != static_cast<char>(i * 7)) return 1;
    return 0;
  });
  std::remove(path.c_str());
  REQUIRE(failed == 0);
  CHECK_THROWS_AS(rt::share_through_file(path + "-none", false, [] { return 0; }, std::chrono::seconds(0)),
                  rcclx::error);
}

}  // namespace
