// rcclx-bench-checks: the checked mode's cost alone (checks_cost.hpp; the table of
// `rcclx-bench --checks-cost-only`, in a tool that builds in seconds).
//   rcclx-bench-checks [--ranks N] [--type float,bf16] [--rounds R]
#include <cstdio>
#include <string>
#include <vector>

#include "../common/cli.hpp"
#include "checks_cost.hpp"

namespace {
constexpr const char* usage_text = "usage: rcclx-bench-checks [--ranks N (2..8)] [--type float,bf16] [--rounds R]\n";
[[noreturn]] void usage(const std::string& why) { bench::usage_exit("rcclx-bench-checks", usage_text, why); }
}  // namespace

int main(int argc, char** argv) {
  bench::checks_cost_args args{"", 8, bench::checks_cost_bytes(), 20, 50, 20};  // warm-up, iterations, calls per graph
  std::vector<std::string> types{"bf16", "float"};
  int rounds = 3;
  std::string command;
  for (bench::args a(argc, argv, usage, command); a.next();) {
    if (a.is("--ranks")) args.num_ranks = a.integer();
    else if (a.is("--rounds")) rounds = a.integer();
    else if (a.is("--type")) types = a.list();
    else a.unknown();
  }
  if (args.num_ranks < 2 || args.num_ranks > 8 || rounds < 1) usage("--ranks takes 2..8, --rounds at least 1");
  std::string type;
  const double worst = bench::print_checks_cost(args, types, rounds, &type);
  std::printf("# checks_cost_8KiB: target on/off <= 1.05: %s (worst %.3f, %s)\n",
              worst <= 0 ? "NOT EVALUATED" : worst <= 1.05 ? "PASS" : "MISS", worst, type.c_str());
  return 0;
}
