// Consumer smoke test: includes the umbrella header and runs a barrier between two host ranks.
#include <rcclx/rcclx.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <cstdio>

struct two_barriers {
  const rcclx::core::peer_table<int, 2>* tables;
  template <class G>
  void operator()(const G& g, rcclx::testing::launch_index ix) const {
    const auto& t = tables[ix.rank];
    t.data[ix.rank][0] = 40 + ix.rank;
    if (!rcclx::core::barrier(g, t.signals, ix.block, rcclx::core::barrier_kind::start)) return;
    t.data[ix.rank][1] = t.data[0][0] + t.data[1][0];
    (void)rcclx::core::barrier(g, t.signals, ix.block, rcclx::core::barrier_kind::end);
  }
};

int main() {
  rcclx::testing::emulated_world<2> world(2, 64, 1);
  rcclx::testing::launch_emulated(2, 1, 1, two_barriers{world.device_tables<int>()});
  world.throw_if_error();
  const int a = static_cast<int*>(world.buffer(0))[1], b = static_cast<int*>(world.buffer(1))[1];
  std::printf("rcclx %d.%d consumer: %d %d\n", rcclx::version_major, rcclx::version_minor, a, b);
  return (a == 81 && b == 81) ? 0 : 1;
}
