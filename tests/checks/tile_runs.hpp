// tests/checks/tile_runs.hpp: the tile AllReduce runs of the checked-mode test, built in their own
// translation unit (tile_runs.cpp, without Catch2): nvcc 13's front end does not finish a
// translation unit that holds both Catch2 v3's headers and the checked tile AllReduce kernel.
#pragma once

#include <rcclx/core/error.hpp>
#include <rcclx/fused/epilogue.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace checks_test {

inline constexpr float sentinel = -12345.0f;

// The first recorded error of an emulated world (anything with errors()), as the host would throw
// it ("" if none), and every rank's.
template <class World>
std::string first_error(const World& w, rcclx::errc* code = nullptr) {
  for (const auto& e : w.errors()) {
    if (e.code == 0) continue;
    if (code) *code = static_cast<rcclx::errc>(e.code);
    return rcclx::core::describe(e);
  }
  return "";
}

template <class World>
std::vector<std::string> all_errors(const World& w) {
  std::vector<std::string> v;
  for (const auto& e : w.errors()) v.push_back(e.code ? rcclx::core::describe(e) : std::string());
  return v;
}

// Three emulated ranks, tile slots {0, 64}, an output of 64 x 64 floats per rank plus 64 more (writes
// past its end are seen).
class tile_setup {
 public:
  tile_setup();
  ~tile_setup();
  tile_setup(const tile_setup&) = delete;
  tile_setup& operator=(const tile_setup&) = delete;

  static constexpr int n = 3;
  static constexpr std::size_t out_elems = 64 * 64 + 64;

  void reset();
  // Every block of every rank writes its tiles (rank + 1 everywhere), publishes them, reduces into
  // its rank's output through maps[rank] and calls finish(), unless skip_finish (every block) or the
  // block is skip_block. second_object: the reduce goes through another object of the same call.
  // tile_elems (per rank, empty: the map's). Returns how many output elements changed (the outputs
  // are filled with `sentinel` first).
  std::size_t run(const std::vector<rcclx::fused::tile_map>& maps, bool skip_finish = false,
                  const std::vector<std::size_t>& tile_elems = {}, int skip_block = -1, bool second_object = false);
  // run() with every rank declaring its map declared[rank] (tile_allreduce::declare_map) before it
  // publishes, and reducing with maps[rank].
  std::size_t run_declared(const std::vector<rcclx::fused::tile_map>& declared,
                           const std::vector<rcclx::fused::tile_map>& maps);
  // Rank r's output (out_elems floats).
  std::vector<float> output(int r) const;
  // first_error and all_errors of its world.
  std::string first_error(rcclx::errc* code = nullptr) const;
  std::vector<std::string> all_errors() const;

 private:
  std::size_t run_kernel(const std::vector<rcclx::fused::tile_map>& maps,
                         const std::vector<rcclx::fused::tile_map>& declared, bool skip_finish,
                         const std::vector<std::size_t>& tile_elems, int skip_block, bool second_object);
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace checks_test
