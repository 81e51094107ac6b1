// Example 01: DDA AllReduce (flat, tree and the automatic choice) on 8 emulated ranks, on the GPU
// this was built for or on host threads, each result checked against a float64 reference.
//
//   rcclx_example_allreduce [count]
#include <rcclx/testing/emulated_peers.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

// Runs every algorithm on random inputs and returns the number of elements outside tolerance.
template <class T>
int run(const char* type, int n, std::size_t count, double unit_roundoff) {
  rcclx::testing::emulated_peers<T> peers(n, count);
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<double> ref(count, 0.0), mag(count, 0.0);
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      const T x = T(dist(gen));
      peers.input(r)[i] = x;
      ref[i] += static_cast<double>(static_cast<float>(x));  // float64 reference, in rank order
      mag[i] += std::fabs(static_cast<double>(static_cast<float>(x)));
    }
  }
  int bad = 0;
  for (const auto algo : {rcclx::algorithm::flat, rcclx::algorithm::tree, rcclx::algorithm::automatic}) {
    const auto t0 = std::chrono::steady_clock::now();
    peers.allreduce(algo, rcclx::reduce_op::sum);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double max_err = 0;
    int wrong = 0;
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) {
        const double got = static_cast<double>(static_cast<float>(peers.output(r)[i]));
        const double err = std::fabs(got - ref[i]);
        // fp32 accumulation of n terms, then one rounding to T.
        const double acc = 2.0 * (n - 1) * 0x1p-24 * mag[i];
        if (!(err <= unit_roundoff * (std::fabs(ref[i]) + acc) + acc + 0x1p-25)) ++wrong;
        if (err > max_err) max_err = err;
      }
    }
    std::printf("  %-5s %9zu elements  %-9s -> %-4s %3d blocks/rank  max |err| %.3g  %s  (%.2f ms incl. copies)\n", type,
                count, rcclx::to_string(algo), rcclx::to_string(peers.last_algorithm()), peers.last_blocks_per_rank(),
                max_err, wrong ? "WRONG" : "ok", ms);
    bad += wrong;
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (rcclx::current_backend != rcclx::backend::host && rcclx::gpu::device_count() == 0) {
    std::printf("built for %s but no GPU is present; rebuild with RCCLX_BACKEND=host\n", rcclx::backend_name());
    return 0;
  }
  const int n = 8;
  const bool gpu = rcclx::current_backend != rcclx::backend::host;
  std::vector<std::size_t> counts{1000, 100003};
  if (argc > 1) counts = {static_cast<std::size_t>(std::strtoull(argv[1], nullptr, 10))};
  else if (gpu) counts.push_back(std::size_t{1} << 22);
  std::printf("rcclx DDA AllReduce on %s: %d emulated ranks, sum, checked against a float64 reference\n",
              rcclx::backend_name(), n);
  int bad = 0;
  for (const std::size_t c : counts) {
    bad += run<float>("float", n, c, 0x1p-24);
    bad += run<rcclx::bf16>("bf16", n, c, 0x1p-8);
  }
  std::printf(bad ? "FAILED: %d elements outside tolerance\n" : "all results within tolerance\n", bad);
  return bad ? 1 : 0;
}
