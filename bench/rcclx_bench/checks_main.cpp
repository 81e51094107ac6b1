// rcclx-bench-checks: the checked mode's cost alone (checks_cost.hpp; the table of
// `rcclx-bench --checks-cost-only`, in a tool that builds in seconds), and the same for a tile
// AllReduce kernel (fused::tile_allreduce flat, 4 blocks x one 2 KiB tile per rank) and for the
// fused AllReduce + residual + RMSNorm (1 x 4096 bf16). The summary gives each row's worst on/off
// ratio and flags those over 1.10 (the target is the 8 KiB rows').
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
  std::vector<bench::checks_cost_row> rows;
  const double worst = bench::print_checks_cost(args, types, rounds, &type);
  rows.push_back({"dda flat AllReduce 8 KiB", worst, type});
  rows.push_back(bench::print_tile_checks_cost(args, types, rounds));
  rows.push_back(bench::print_rmsnorm_checks_cost(args, rounds));
  const bool ok = bench::print_checks_cost_summary(rows, 1.10);
  std::printf("# checks_cost_8KiB: target on/off <= 1.10: %s\n", ok ? "PASS" : "MISS");
  return 0;
}
