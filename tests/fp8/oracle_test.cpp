// FP8 encode against PyTorch: tests/fp8/data/fp8_oracle_<format>.bin hold the bytes that
// PyTorch's x.to(torch.float8_*) produced (scripts/gen_fp8_oracle.py, run on the GPU machine with
// PyTorch 2.11) for every bf16 pattern and ~45000 boundary and random float32 inputs. PyTorch's
// conversion does not saturate, so it is compared with encode<Format, overflow::propagate>; the
// test's own reference (reference.hpp) is checked against the same bytes.
//
// The files are found in RCCLX_FP8_ORACLE_DIR (environment variable, else the source tree's
// tests/fp8/data set at build time). Missing files: the test says so with a WARN and passes.
#include <rcclx/fp8/fp8.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../support/catch.hpp"
#include "reference.hpp"

#ifndef RCCLX_FP8_ORACLE_DIR
#  error "RCCLX_FP8_ORACLE_DIR must name tests/fp8/data (set by tests/fp8/CMakeLists.txt)"
#endif

namespace {
namespace f8 = rcclx::fp8;
using formats = std::tuple<f8::e4m3, f8::e5m2, f8::e4m3_fnuz, f8::e5m2_fnuz>;

struct oracle {
  std::vector<std::uint32_t> inputs;
  std::vector<std::uint8_t> results;
};

std::uint32_t read_u32(std::istream& in) {
  unsigned char b[4] = {};
  in.read(reinterpret_cast<char*>(b), 4);
  return b[0] | (b[1] << 8) | (b[2] << 16) | (std::uint32_t(b[3]) << 24);
}

// Returns false if the file does not exist; fails the test if it exists but is malformed.
bool load(const std::string& path, oracle& o) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  char magic[8] = {};
  in.read(magic, 8);
  REQUIRE(std::string(magic, 8) == "RFP8ORC1");
  const std::uint32_t n_bf16 = read_u32(in);
  REQUIRE(n_bf16 == 65536u);
  std::vector<char> r(n_bf16);
  in.read(r.data(), n_bf16);
  for (std::uint32_t i = 0; i < n_bf16; ++i) {
    o.inputs.push_back(i << 16);
    o.results.push_back(static_cast<std::uint8_t>(r[i]));
  }
  const std::uint32_t n = read_u32(in);
  REQUIRE(n < 10000000u);
  for (std::uint32_t i = 0; i < n; ++i) {
    o.inputs.push_back(read_u32(in));
    char c = 0;
    in.read(&c, 1);
    o.results.push_back(static_cast<std::uint8_t>(c));
  }
  REQUIRE(in.good());
  in.peek();
  REQUIRE(in.eof());  // nothing after the records
  return true;
}

std::string oracle_dir() {
  const char* env = std::getenv("RCCLX_FP8_ORACLE_DIR");
  return env && *env ? env : RCCLX_FP8_ORACLE_DIR;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("fp8 encode (propagate) equals PyTorch's .to(float8) on the oracle vectors", "[fp8][oracle]",
                        formats) {
  const std::string name = f8::format_traits<TestType>::name;
  const std::string path = oracle_dir() + "/fp8_oracle_" + name + ".bin";
  oracle o;
  if (!load(path, o)) {
    WARN("PyTorch oracle file missing: " << path << " -- run `python3 scripts/gen_fp8_oracle.py` on a machine with "
                                            "PyTorch >= 2.1 and commit tests/fp8/data; comparison skipped");
    return;
  }
  const auto& ref = fp8_ref::table_of<TestType>();
  std::uint64_t bad = 0, bad_ref = 0;
  std::ostringstream first;
  for (std::size_t i = 0; i < o.inputs.size(); ++i) {
    const float x = fp8_ref::from_bits(o.inputs[i]);
    const std::uint8_t got = f8::encode<TestType, f8::overflow::propagate>(x);
    const std::uint8_t sw = f8::encode<TestType, f8::overflow::propagate, f8::path::software>(x);
    if ((got != o.results[i] || sw != o.results[i]) && bad++ < 10) {
      char line[128];
      std::snprintf(line, sizeof line, "  input 0x%08X: rcclx 0x%02X, PyTorch 0x%02X\n", o.inputs[i], got, o.results[i]);
      first << line;
    }
    bad_ref += ref.encode(x, fp8_ref::mode::propagate) != o.results[i];
  }
  INFO(name << ": " << o.inputs.size() << " oracle inputs from " << path << "\n" << first.str());
  REQUIRE(o.inputs.size() > 65536);
  REQUIRE(bad == 0);
  REQUIRE(bad_ref == 0);  // the test's own reference agrees with PyTorch too
}
