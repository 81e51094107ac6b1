// rcclx-bench-checks: the checked mode's cost alone (checks_cost.hpp; the table of
// `rcclx-bench --checks-cost-only`, in a tool that builds in seconds).
//   rcclx-bench-checks [--ranks N] [--type float,bf16] [--rounds R]
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <rcclx/gpu/runtime.hpp>

#include "checks_cost.hpp"

int main(int argc, char** argv) {
  bench::checks_cost_args args;
  args.num_ranks = 8;
  args.warmup = 20;
  args.iters = 50;
  args.calls_per_graph = 20;
  std::vector<std::string> types{"bf16", "float"};
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--ranks" && v) args.num_ranks = std::atoi(argv[++i]);
    else if (a == "--rounds" && v) rounds = std::atoi(argv[++i]);
    else if (a == "--type" && v) {
      types.clear();
      std::stringstream ss(argv[++i]);
      for (std::string t; std::getline(ss, t, ',');) types.push_back(t);
    } else {
      std::fprintf(stderr, "usage: rcclx-bench-checks [--ranks N (2..8)] [--type float,bf16] [--rounds R]\n");
      return 2;
    }
  }
  if (args.num_ranks < 2 || args.num_ranks > 8 || rounds < 1) {
    std::fprintf(stderr, "rcclx-bench-checks: --ranks takes 2..8, --rounds at least 1\n");
    return 2;
  }
  args.bytes = bench::checks_cost_bytes();
  std::string type;
  const double worst = bench::print_checks_cost(args, types, rounds, &type);
  std::printf("# checks_cost_8KiB: target on/off <= 1.05: %s (worst %.3f, %s)\n",
              worst <= 0 ? "NOT EVALUATED" : worst <= 1.05 ? "PASS" : "MISS", worst, type.c_str());
  return 0;
}
