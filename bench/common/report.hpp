// bench/common/report.hpp: what the tools write besides their tables: JSON values, output files,
// and the performance targets every report ends with (reported, never enforced).
#pragma once

#include <rcclx/core/error.hpp>
#include <rcclx/gpu/arch.hpp>  // device_name() for the reports

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace bench {

using rcclx::gpu::device_name;

// "host", "cuda" or "hip": the reports' backend.
constexpr const char* backend_label() {
  return rcclx::current_backend == rcclx::backend::host ? "host"
         : rcclx::current_backend == rcclx::backend::cuda ? "cuda" : "hip";
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

// One value of a report row, as JSON writes it: a number (null when not finite), an integer, a
// string (quoted, escaped) or a flag.
struct cell {
  std::string text;
  bool quoted = false;
  cell(double v) : text(json_number(v)) {}
  cell(int v) : text(std::to_string(v)) {}
  cell(unsigned long v) : text(std::to_string(v)) {}
  cell(unsigned long long v) : text(std::to_string(v)) {}
  cell(bool v) : text(v ? "true" : "false") {}
  cell(const std::string& v) : text("\"" + json_escape(v) + "\""), quoted(true) {}
  cell(const char* v) : cell(std::string(v)) {}
};
// A report row: its fields in order.
using fields = std::vector<std::pair<std::string, cell>>;

inline fields operator+(fields a, const fields& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// {"key": value, ...}
inline std::string json_object(const fields& f) {
  std::string s = "{";
  for (std::size_t i = 0; i < f.size(); ++i) s += (i ? ", \"" : "\"") + f[i].first + "\": " + f[i].second.text;
  return s + "}";
}

// An object's members before its arrays: `  "key": value,` a line each.
inline void write_json_members(std::ostream& o, const fields& f) {
  for (const auto& m : f) o << "  \"" << m.first << "\": " << m.second.text << ",\n";
}

// The members every tool's report opens with.
inline fields report_head(const std::string& tool, const std::string& command) {
  return {{"tool", tool}, {"command", command}, {"backend", backend_label()}, {"device", device_name()},
          {"arch", rcclx::gpu::to_string(rcclx::gpu::current_arch())}};
}

// A JSON array's rows, one object a line after `indent`.
template <class Row, class Fields>
void write_json_rows(std::ostream& o, const std::vector<Row>& rows, Fields&& fields_of, const char* indent = "    ") {
  for (std::size_t i = 0; i < rows.size(); ++i)
    o << indent << json_object(fields_of(rows[i])) << (i + 1 < rows.size() ? "," : "") << "\n";
}

// A file to write a report to (rcclx::error if it cannot be opened).
inline std::ofstream open_output(const std::string& path) {
  std::ofstream f(path);
  if (!f) throw rcclx::error(rcclx::errc::runtime, "cannot write " + path);
  return f;
}

// A target measured against a floor of the same run: `worst` is the worst value among the rows in
// its range (see: the lowest, or the highest where higher_is_worse), `at` where it was seen.
struct target {
  std::string name, target, result{};
  double worst = 0;
  bool evaluated = false, pass = false, higher_is_worse = false;
  std::string at{};

  void see(double v, const std::string& where = "") {
    if (!evaluated || (higher_is_worse ? v > worst : v < worst)) worst = v, at = where;
    evaluated = true;
  }
  // After the rows: pass = ok once evaluated; result = fmt's text of (scale * worst, at), or `none`.
  void close(bool ok, const char* fmt, double scale = 1.0, const char* none = "not measured (no row in range)") {
    char buf[256];
    std::snprintf(buf, sizeof(buf), fmt, scale * worst, at.c_str());
    pass = evaluated && ok;
    result = evaluated ? buf : none;
  }
};

// The end of a JSON report: its "acceptance" array (the targets), and the closing brace.
inline void end_json_report(std::ostream& f, const std::vector<target>& acc) {
  f << "  \"acceptance\": [\n";
  write_json_rows(f, acc, [](const target& t) {
    return fields{{"name", t.name}, {"target", t.target}, {"evaluated", t.evaluated},
                  {"pass", t.evaluated && t.pass}, {"result", t.result}};
  });
  f << "  ]\n}\n";
}

// A CSV file: the header `columns` (comma-separated names), then a line per row with the value of
// each column: the field of that name (`name=key`: the field `key`), strings unquoted except in a
// column written "name" in quotes (quoted and escaped as in JSON).
template <class Row, class Fields>
void write_csv(const std::string& path, const std::string& columns, const std::vector<Row>& rows, Fields&& fields_of) {
  struct column {
    std::string name, key;
    bool quoted;
  };
  std::vector<column> cols;
  std::ofstream o = open_output(path);
  std::string header;
  for (std::size_t b = 0; b <= columns.size();) {
    std::size_t e = columns.find(',', b);
    if (e == std::string::npos) e = columns.size();
    std::string c = columns.substr(b, e - b);
    const bool quoted = c.size() > 1 && c.front() == '"';
    if (quoted) c = c.substr(1, c.size() - 2);
    const std::size_t eq = c.find('=');
    cols.push_back({c.substr(0, eq), eq == std::string::npos ? c : c.substr(eq + 1), quoted});
    header += (b ? "," : "") + cols.back().name;
    b = e + 1;
  }
  o << header << "\n";
  for (const Row& r : rows) {
    const fields f = fields_of(r);
    for (std::size_t i = 0; i < cols.size(); ++i) {
      auto it = f.begin();
      while (it != f.end() && it->first != cols[i].key) ++it;
      if (it == f.end()) throw rcclx::error(rcclx::errc::invalid_argument, "no field " + cols[i].key + " for " + path);
      const cell& c = it->second;
      o << (i ? "," : "") << (c.quoted && !cols[i].quoted ? c.text.substr(1, c.text.size() - 2) : c.text);
    }
    o << "\n";
  }
}

}  // namespace bench
