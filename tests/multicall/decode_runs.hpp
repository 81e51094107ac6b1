// tests/multicall/decode_runs.hpp: example 09's decode layer (three collectives in one kernel, one
// region each) on emulated ranks, in a translation unit without Catch2 (decode_runs.cpp; nvcc's
// front end and Catch2 v3 do not mix with the checked tile kernels, as in tests/checks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace multicall_test {

// Which algorithm each of the three calls (merge, o_proj, down_proj) runs.
enum class algos { flat, tree, automatic, mixed /* automatic, tree, flat */ };
const char* name(algos a);

struct layer_run {
  std::string error;            // an error thrown by a launch, if any
  std::size_t checked = 0;      // elements compared with the float64 reference (every rank, out and normed)
  std::size_t out_of_bound = 0;
  std::size_t rank_differ = 0;  // elements of rank r != 0 whose bits differ from rank 0's
  double max_err = 0;
  std::vector<std::uint32_t> bits;  // rank 0's out and normed, as bits
};

// `launches` back-to-back launches of the layer on n emulated ranks (each call alternates its
// buffer halves); the outputs of the last, checked against the float64 reference of the layer.
layer_run run_layer(int n, bool bf16, algos a, std::size_t hidden, int launches);

// One kernel with the ready-made AllReduce + residual + RMSNorm block (allreduce_rmsnorm_block on
// the table narrowed to its region, core::region_table) and a tile AllReduce in a region of its
// own, both of one plan, on n emulated ranks, both calls flat or tree; bf16, 5 tokens of 256.
struct rmsnorm_region_run {
  std::string error;
  std::size_t checked = 0;
  std::size_t out_of_bound = 0;  // RMSNorm outputs and new residuals outside the float64 bound
  std::size_t tile_wrong = 0;    // tile AllReduce sums that differ from the exact float64 sums
  std::size_t rank_differ = 0;   // RMSNorm outputs of rank r != 0 whose bits differ from rank 0's
};
rmsnorm_region_run run_rmsnorm_and_tile(int n, bool tree, int launches);

}  // namespace multicall_test
