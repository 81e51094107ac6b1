// Every public device-side header compiles with every thread emulated, checked and not (the
// umbrella header: tests/compile checks that it holds them all).
#include <rcclx/rcclx.hpp>
#include <rcclx/testing/launch.hpp>

static_assert(rcclx::emulate_threads, "built with RCCLX_EMULATE_THREADS=1");
static_assert(std::is_same<rcclx::gpu::default_group, rcclx::gpu::block_group>::value,
              "emulated threads: kernels get a block_group");
