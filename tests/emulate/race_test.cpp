// Under ThreadSanitizer, with every thread emulated: two threads of one block that touch a
// block-shared word with no block sync between them are a data race the sanitizer reports ("racy"),
// and the same accesses on either side of g.sync() (or a warp shuffle) are not ("synced").
// tests/emulate/CMakeLists.txt runs both in the ThreadSanitizer tree. Exit code 0 when the kernel ran.
#include <rcclx/gpu/shared.hpp>
#include <rcclx/gpu/warp.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstdio>
#include <cstring>

namespace emulate_race {

struct shared_word {
  bool synced;
  int* out;
  template <class G>
  void operator()(const G& g, rcclx::testing::launch_index ix) const {
    int(&w)[2] = rcclx::gpu::block_shared<int[2], struct race_tag>();
    if (g.thread_rank() == 0) w[0] = ix.block + 1;
    if (synced) g.sync();
    if (g.thread_rank() == 1) out[ix.block] = w[0];
    // A shuffle orders its lanes too.
    if (g.thread_rank() == 2) w[1] = 5;
    const int v = rcclx::gpu::shuffle(g.thread_rank(), 0);
    if (g.thread_rank() == 3) out[ix.block] += w[1] * 0 + v;
    g.sync();
  }
};

}  // namespace emulate_race

int main(int argc, char** argv) {
  const bool synced = argc > 1 && std::strcmp(argv[1], "synced") == 0;
  int out[4] = {};
  rcclx::testing::launch_emulated(1, 4, 64, emulate_race::shared_word{synced, out});
  std::printf("%s: %d %d %d %d\n", synced ? "synced" : "racy", out[0], out[1], out[2], out[3]);
  return 0;
}
