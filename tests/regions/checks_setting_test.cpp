// The communicator's set-up compares every rank's RCCLX_CHECKS setting: a checked and an unchecked
// process (checks_setting_unchecked.cpp, this binary's other half) both fail set-up with an error
// naming each rank's setting, instead of timing out later in the call check.
#include <string>

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/socket_bootstrap.hpp>

#include "../host/multiprocess.hpp"
#include "../host/multiprocess_checks.hpp"
#include "../support/catch.hpp"

static_assert(rcclx::checks, "this test is built with RCCLX_CHECKS=1");

namespace checks_setting {
std::string unchecked_rank(int rank, int n, const std::string& id);
}

TEST_CASE("communicator set-up: ranks built with different RCCLX_CHECKS settings are refused on every rank",
          "[host][multiprocess][regions]") {
  const int n = 2;
  const std::string id = rcclx_test::unique_job_id("checkset");
  auto rs = rcclx_test::run_processes(n, [&](int rank) -> std::string {
    if (rank == 0) return checks_setting::unchecked_rank(rank, n, id);
    rcclx_test::child_select_device(rank);
    rcclx::host::socket_bootstrap bs(rank, n, id, rcclx_test::test_socket_options());
    try {
      rcclx::host::communicator<8> comm(bs, rcclx::host::communicator_options{});
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  });
  RCCLX_SKIP_IF_NO_GPU(rs);
  INFO(rcclx_test::describe(rs));
  for (const auto& r : rs) {
    REQUIRE(r.ok());
    REQUIRE(r.output == "rcclx: mismatch: communicator set-up: rank 1 was built with RCCLX_CHECKS=1, rank 0 with 0: "
                        "every rank must use the same setting");
  }
}
