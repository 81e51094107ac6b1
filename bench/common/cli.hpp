// bench/common/cli.hpp: the tools' command lines, read one `--name [value]` at a time:
//
//   for (bench::args a(argc, argv, usage, o.command); a.next();) {
//     if (a.is("--emulated")) o.num_ranks = a.integer();
//     else if (a.is("--max-bytes")) o.max_bytes = a.size();          // K, M and G suffixes
//     else if (a.timing(o.timing)) continue;                        // --iters, --warmup, --calls-per-graph
//     else a.unknown();                                             // usage("help" or "unknown argument X")
//   }
// usage(message) must not return (usage_exit: the tools print their usage and exit 2).
#pragma once

#include <rcclx/core/error.hpp>
#include <rcclx/kernel/checks.hpp>  // parse_bytes: the library's reading of K, M and G
#include <rcclx/testing/timing.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;

// "bf16,float" -> {"bf16", "float"}.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

// The tools' usage(why): "tool: why", the usage text, exit status 2.
[[noreturn]] inline void usage_exit(const char* tool, const char* text, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n%s", tool, why.c_str(), text);
  std::exit(2);
}

class args {
 public:
  using usage_fn = void (*)(const std::string&);
  // `command` receives the whole command line, for the reports.
  args(int argc, char** argv, usage_fn usage, std::string& command) : argc_(argc), argv_(argv), usage_(usage) {
    for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  }

  bool next() {
    if (++i_ >= argc_) return false;
    arg_ = argv_[i_];
    return true;
  }
  bool is(const char* name) const { return arg_ == name; }
  const std::string& arg() const { return arg_; }
  [[noreturn]] void unknown() const {
    usage_(arg_ == "-h" || arg_ == "--help" ? "help" : "unknown argument " + arg_);
    std::abort();
  }

  // The current argument's value (the next word).
  std::string str() {
    if (i_ + 1 >= argc_) usage_("missing value after " + arg_);
    return argv_[++i_];
  }
  int integer() { return std::atoi(str().c_str()); }
  std::vector<std::string> list() { return split_list(str()); }
  // Bytes, with K, M and G suffixes (KiB, MiB, GiB).
  std::size_t size() {
    const std::string s = str();
    try {
      return rcclx::kernel::parse_bytes("size", s.c_str());
    } catch (const rcclx::error& e) {
      usage_(e.what());
    }
    return 0;
  }
  // --iters I (at least 1), --warmup W (at least 0), --calls-per-graph K (at least 1).
  bool timing(rcclx::testing::timing_options& t) {
    if (is("--iters")) t.iters = std::max(1, integer());
    else if (is("--warmup")) t.warmup = std::max(0, integer());
    else if (is("--calls-per-graph")) t.calls_per_graph = std::max(1, integer());
    else return false;
    return true;
  }

 private:
  int argc_;
  char** argv_;
  usage_fn usage_;
  int i_ = 0;
  std::string arg_;
};

}  // namespace bench
