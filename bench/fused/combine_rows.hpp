// bench/fused/combine_rows.hpp: rcclx-bench-fused's cross-rank combine rows (combine_rows.cpp):
// fused::combine with the built-in lse_merge, argmax and topk against rcclx's own AllGather of the
// partial results followed by a merge kernel, with the AllGather alone as the floor.
//
//   std::vector<combine_bench::shape> shapes{{combine_bench::kind::attention, 8, 0},
//                                            {combine_bench::kind::topk, 64, 131072}};
//   const auto rows = combine_bench::run(8, rcclx::testing::timing_options{}, shapes, combine_bench::print_row);
//
// A translation unit of its own: its kernels compile in parallel with main.cpp's.
#pragma once

#include <rcclx/testing/timing.hpp>

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "../common/report.hpp"

namespace combine_bench {

// Shared by rcclx-bench-fused's translation units: up to 8 emulated ranks; the pads' first 64 slots
// for the unfused paths' DDA collectives (the fused kernels' tiles come after); the DDA launch shape
// of rcclx-bench's emulated rows (8 ranks sharing one GPU; the host backend: a block is a thread).
inline constexpr int max_r = 8;
inline constexpr int barrier_blocks = 64;
inline constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
inline constexpr int dda_threads = on_host ? 1 : 256;
inline constexpr int dda_max_blocks = on_host ? 4 : 48;

enum class kind { attention, argmax, topk };

// The attention rows' heads and head dimension (bf16 O, float L) and the top-k rows' K.
inline constexpr int heads = 32;
inline constexpr int head_dim = 128;
inline constexpr int top_k = 50;

struct shape {
  kind what;
  std::size_t batch;  // tokens (attention) or rows (argmax, top-k): the decode batch
  std::size_t vocab;  // argmax, top-k: the vocabulary, split over the ranks (attention: unused)
};

struct row {
  std::string kind;   // "attn_merge", "argmax" or "topk50"
  std::string shape;  // attn_merge: tokens x heads x head_dim; argmax, topk: rows x vocabulary
  std::size_t batch = 0, vocab = 0;
  std::size_t records = 0;         // records per rank per call
  std::size_t exchange_bytes = 0;  // partial records per rank: what the AllGather gathers from each rank
  std::string fused_auto_algo{};   // flat or tree: algorithm::automatic for this message
  int fused_blocks = 0, gather_blocks = 0;  // blocks per rank: the fused kernel, the AllGather
  double fused_flat_us = 0, fused_tree_us = 0, fused_auto_us = 0;
  double unfused_us = 0;  // (argmax, topk: the local scan kernel +) AllGather + merge kernel
  double floor_us = 0;    // the AllGather of the partial records alone
  double local_us = 0;    // argmax, topk: the local scan kernel alone (attn_merge: 0)
  double read_us = 0;     // argmax, topk: every rank's logits read once, nothing kept (the scan's floor)
  double speedup = 0;       // unfused / fused_auto
  double speedup_best = 0;  // unfused / min(fused_flat, fused_tree)
  double max_err = 0;       // attn_merge: |O - float64| (argmax, topk: exact, 0)
  bool identical = true, ref_ok = true;
  std::string timing{}, error{};
};

// Every row of `shapes`, each passed to `print` as soon as it is measured.
std::vector<row> run(int num_ranks, const rcclx::testing::timing_options& t, const std::vector<shape>& shapes,
                     void (*print)(const row&));

bool correct(const row& r);
void print_header();
void print_row(const row& r);

// The targets: fused >= 1.25x faster than unfused at every decode row (reported, not enforced).
std::vector<bench::target> evaluate(const std::vector<row>& rows);

// JSON: the `"combine_definitions": {...}, "combine_rows": [...]` members (no surrounding braces).
void write_json_members(std::ostream& f, const std::vector<row>& rows);
void write_csv(const std::string& path, const std::vector<row>& rows);

}  // namespace combine_bench
