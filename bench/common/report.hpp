// bench/common/report.hpp: what the tools write besides their tables: JSON values, output files,
// and the performance targets every report ends with (reported, never enforced).
#pragma once

#include <rcclx/core/error.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

namespace bench {

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

// A file to write a report to (rcclx::error if it cannot be opened).
inline std::ofstream open_output(const std::string& path) {
  std::ofstream f(path);
  if (!f) throw rcclx::error(rcclx::errc::runtime, "cannot write " + path);
  return f;
}

// A target measured against a floor of the same run.
struct target {
  std::string name, target, result;
  double worst = 0;
  bool evaluated = false, pass = false;
};

// The rows of the JSON "acceptance" array.
inline void write_targets_json(std::ostream& f, const std::vector<target>& acc) {
  for (std::size_t i = 0; i < acc.size(); ++i)
    f << "    {\"name\": \"" << acc[i].name << "\", \"target\": \"" << json_escape(acc[i].target)
      << "\", \"evaluated\": " << (acc[i].evaluated ? "true" : "false") << ", \"pass\": "
      << (acc[i].evaluated && acc[i].pass ? "true" : "false") << ", \"result\": \"" << json_escape(acc[i].result)
      << "\"}" << (i + 1 < acc.size() ? "," : "") << "\n";
}

}  // namespace bench
