// One rank of checks_setting_test.cpp built without the checked mode (the rest of the test is built
// with RCCLX_CHECKS=1): the communicator's set-up must refuse the pair on both ranks.
#undef RCCLX_CHECKS
#define RCCLX_CHECKS 0

#include <chrono>
#include <exception>
#include <string>

#include <rcclx/gpu/runtime.hpp>
#include <rcclx/host/communicator.hpp>
#include <rcclx/host/socket_bootstrap.hpp>

static_assert(!rcclx::checks, "this file is built with RCCLX_CHECKS=0");

namespace checks_setting {

// Rank `rank` of `n` in job `id` with an unchecked communicator: "" if set-up succeeded, else the error.
std::string unchecked_rank(int rank, int n, const std::string& id) {
#if RCCLX_BACKEND_GPU
  rcclx::gpu::set_device(rank % rcclx::gpu::device_count());
#endif
  rcclx::host::socket_options so;
  so.connect_timeout = std::chrono::seconds(30);
  so.timeout = std::chrono::seconds(60);
  rcclx::host::socket_bootstrap bs(rank, n, id, so);
  try {
    rcclx::host::communicator<8> comm(bs, rcclx::host::communicator_options{});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace checks_setting
