// bench/rcclx_bench/args.hpp: command-line and JSON utilities shared by rcclx-bench and
// rcclx-bench-nccl (bench/multi_gpu), so both accept the same lists and sizes and write the same JSON.
#pragma once

#include <rcclx/core/error.hpp>
#include <rcclx/dda/select.hpp>  // dda::detail::parse_bytes: K, M and G suffixes

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

// "bf16,float" -> {"bf16", "float"}.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

// Bytes, with K, M and G suffixes (KiB, MiB, GiB); a bad value goes to usage(message), which must
// not return (the tools print their usage and exit).
template <class Usage>
std::size_t parse_size(const std::string& s, Usage&& usage) {
  try {
    return rcclx::dda::detail::parse_bytes("size", s.c_str());
  } catch (const rcclx::error& e) {
    usage(e.what());
  }
  return 0;
}

// A string for a JSON value: quotes and backslashes escaped, control characters dropped.
inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

// A JSON number (6 significant digits), or null for NaN and infinities.
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

}  // namespace bench
