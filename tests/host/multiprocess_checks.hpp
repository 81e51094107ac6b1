// tests/host/multiprocess_checks.hpp: the Catch2 side of the multi-process tests (multiprocess.hpp
// forks and collects): skip without a GPU, require every child's success, capture an expected error.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <rcclx/core/error.hpp>

#include "../support/catch.hpp"
#include "multiprocess.hpp"

// Leaves the test case (with a warning) when a child found no GPU.
#define RCCLX_SKIP_IF_NO_GPU(rs)                                        \
  do {                                                                  \
    if (rcclx_test::any_skipped(rs)) {                                  \
      WARN("no GPU present: multi-process GPU test skipped");           \
      return;                                                           \
    }                                                                   \
  } while (0)

namespace rcclx_test {

// A body returns "" or what went wrong (or throws it: exit status 1): both must say success.
inline void require_all_ok(const std::vector<child_result>& rs) {
  INFO(describe(rs));
  for (const auto& r : rs) {
    REQUIRE(r.ok());
    REQUIRE(r.output.empty());
  }
}

// Outcome of a body that expects an rcclx::error: "code|message", or "no error".
inline std::string expect_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const rcclx::error& e) {
    return std::string(rcclx::to_string(e.code())) + "|" + e.what();
  }
  return "no error";
}

}  // namespace rcclx_test
