// communicator_options::from_environment: RCCLX_CHECK_CALLS, RCCLX_COLLECTIVE_BLOCKS and
// RCCLX_FLAT_THREADS override the options; a value that does not parse or is out of range is an
// rcclx::error (invalid_argument) naming the variable and its value, also from the communicator's
// constructor (before any exchange); procs_argument takes a whole number too. No GPU needed.
#include <cstdlib>
#include <string>

#include <rcclx/host/communicator.hpp>
#include <rcclx/host/fork_ranks.hpp>
#include <rcclx/host/options.hpp>

#include "../support/catch.hpp"

namespace {

using options = rcclx::host::communicator_options;

// Sets (or, with null, unsets) one variable for a scope, then puts back what was there.
class scoped_variable {
 public:
  scoped_variable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  scoped_variable(const scoped_variable&) = delete;
  scoped_variable& operator=(const scoped_variable&) = delete;
  ~scoped_variable() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// The message of the rcclx::error that from_environment throws (code invalid_argument), or "".
std::string rejection(const options& base = {}) {
  try {
    (void)options::from_environment(base);
  } catch (const rcclx::error& e) {
    REQUIRE(e.code() == rcclx::errc::invalid_argument);
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("communicator_options::from_environment: unset or empty variables keep the options", "[host][options]") {
  scoped_variable a("RCCLX_CHECK_CALLS", nullptr), b("RCCLX_COLLECTIVE_BLOCKS", ""), c("RCCLX_FLAT_THREADS", nullptr);
  options base;
  base.check_calls = false;
  base.collective_blocks = 7;
  base.flat_threads = 64;
  const options o = options::from_environment(base);
  REQUIRE(o.check_calls == false);
  REQUIRE(o.collective_blocks == 7);
  REQUIRE(o.flat_threads == 64);
  REQUIRE(options::from_environment().collective_blocks == options{}.collective_blocks);
}

TEST_CASE("communicator_options::from_environment: valid values override the options", "[host][options]") {
  scoped_variable b("RCCLX_COLLECTIVE_BLOCKS", "64"), t("RCCLX_FLAT_THREADS", "256");
  const options o = options::from_environment();
  REQUIRE(o.collective_blocks == 64);
  REQUIRE(o.flat_threads == 256);
  for (const char* off : {"0", "false", "OFF", "no"}) {
    scoped_variable c("RCCLX_CHECK_CALLS", off);
    REQUIRE(options::from_environment().check_calls == false);
  }
  for (const char* on : {"1", "true", "On", "YES"}) {
    scoped_variable c("RCCLX_CHECK_CALLS", on);
    options base;
    base.check_calls = false;
    REQUIRE(options::from_environment(base).check_calls == true);
  }
  scoped_variable zero("RCCLX_FLAT_THREADS", "0");  // 0: the by-size rule
  REQUIRE(options::from_environment().flat_threads == 0);
}

TEST_CASE("communicator_options::from_environment: a value that does not parse or is out of range names the variable",
          "[host][options]") {
  struct bad {
    const char* name;
    const char* value;
  };
  const bad cases[] = {
      {"RCCLX_COLLECTIVE_BLOCKS", "abc"},         {"RCCLX_COLLECTIVE_BLOCKS", "12x"},
      {"RCCLX_COLLECTIVE_BLOCKS", "-1"},          {"RCCLX_COLLECTIVE_BLOCKS", "99999999999"},
      {"RCCLX_COLLECTIVE_BLOCKS", "1.5"},         {"RCCLX_FLAT_THREADS", "12x"},
      {"RCCLX_FLAT_THREADS", "abc"},              {"RCCLX_FLAT_THREADS", "2048"},
      {"RCCLX_FLAT_THREADS", "100"},              {"RCCLX_FLAT_THREADS", "-32"},
      {"RCCLX_FLAT_THREADS", "99999999999"},      {"RCCLX_CHECK_CALLS", "maybe"},
      {"RCCLX_CHECK_CALLS", "2"},
  };
  for (const bad& b : cases) {
    scoped_variable v(b.name, b.value);
    const std::string m = rejection();
    INFO(b.name << "=" << b.value << ": " << m);
    REQUIRE(m.find(std::string(b.name) + " = '" + b.value + "'") != std::string::npos);
  }
}

TEST_CASE("communicator: a bad environment variable fails the constructor before any exchange", "[host][options]") {
  scoped_variable v("RCCLX_COLLECTIVE_BLOCKS", "abc");
  int exchanges = 0;
  rcclx::host::callback_bootstrap bs(0, 2, [&](const void*, void*, std::size_t) { ++exchanges; });
  REQUIRE_THROWS_WITH(rcclx::host::communicator<8>(bs), RCCLX_CONTAINS("RCCLX_COLLECTIVE_BLOCKS = 'abc'"));
  REQUIRE(exchanges == 0);
}

TEST_CASE("procs_argument: --procs N takes a whole number in [2, max_ranks]", "[host][options]") {
  scoped_variable w("WORLD_SIZE", nullptr);  // not started by a launcher
  const auto procs = [](const char* n) {
    char prog[] = "prog", flag[] = "--procs", rest[] = "x";
    std::string value(n);
    char* args[] = {prog, flag, &value[0], rest, nullptr};
    int argc = 4;
    char** argv = args;
    const int p = rcclx::host::procs_argument(argc, argv, 8);
    REQUIRE(argc == 2);
    REQUIRE(std::string(argv[1]) == "x");
    return p;
  };
  REQUIRE(procs("4") == 4);
  for (const char* bad : {"4x", "abc", "1", "9", ""})
    REQUIRE_THROWS_WITH(procs(bad), RCCLX_CONTAINS(std::string("--procs N: N = ") + bad + " must be in [2, 8]"));
}
