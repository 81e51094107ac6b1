// A consumer's own kernel: every emulated rank adds its rank to its input and AllReduces the result
// with rcclx::dda::flat_allreduce inside the kernel; the host checks the sums. Built for the backend
// chosen by rcclx_add_kernel_sources (tests/package/kernel_consumer/CMakeLists.txt).
#include <rcclx/dda/flat.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstdio>
#include <vector>

#ifdef RCCLX_CONSUMER_EXPECT_CHECKS  // rcclx_add_kernel_sources(... CHECKS ON|OFF) reached the sources
static_assert(rcclx::checks == (RCCLX_CONSUMER_EXPECT_CHECKS != 0), "CHECKS did not reach the kernel sources");
#endif

struct add_then_allreduce {
  const rcclx::core::peer_table<float, 4>* tables;
  float* out[4];
  std::size_t count;
  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, rcclx::testing::launch_index ix) const {
    const auto& t = tables[ix.rank];
    float* mine = t.data[ix.rank];  // the input lives in the symmetric buffer
    for (std::size_t i = g.thread_rank(); i < count; i += g.size()) mine[i] = static_cast<float>(ix.rank) + 1.0f;
    g.sync();
    (void)rcclx::dda::flat_allreduce<rcclx::core::op_sum>(g, t, mine, out[ix.rank], count, ix.block, ix.num_blocks);
  }
};

int main() {
  constexpr int ranks = 4;
  constexpr std::size_t count = 1000;
  if (rcclx::current_backend != rcclx::backend::host && rcclx::gpu::device_count() == 0) {
    std::printf("kernel_consumer: built for a GPU, none present\n");
    return 0;
  }
  rcclx::testing::emulated_world<ranks> world(ranks, count * sizeof(float), 1);
  add_then_allreduce k{world.device_tables<float>(), {}, count};
  for (int r = 0; r < ranks; ++r) k.out[r] = static_cast<float*>(rcclx::gpu::device_malloc(count * sizeof(float)));
  rcclx::testing::launch_emulated(ranks, 1, rcclx::current_backend == rcclx::backend::host ? 1 : 128, k);
  rcclx::gpu::device_synchronize();
  world.throw_if_error();
  int bad = 0;
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> got(count);
    rcclx::gpu::copy(got.data(), k.out[r], count * sizeof(float));
    for (float x : got) bad += x != 10.0f;  // 1 + 2 + 3 + 4
    rcclx::gpu::device_free(k.out[r]);
  }
  std::printf("kernel_consumer: %s (checked mode %s)\n", bad ? "WRONG" : "sums ok", rcclx::checks ? "on" : "off");
  return bad ? 1 : 0;
}
