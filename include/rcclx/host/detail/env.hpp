// rcclx/host/detail/env.hpp: reading the environment strictly. A variable that is set must parse
// whole (no trailing characters, no overflow, within its range): a typo becomes an error that names
// the variable and its value, never a silent 0 as std::atoi gives.
//
//   long long v = 0;
//   if (const char* s = rcclx::host::detail::env_text("RCCLX_COLLECTIVE_BLOCKS"))
//     if (!rcclx::host::detail::parse_int(s, 0, 4096, v)) throw ...;   // the caller words the error
//   bool check = rcclx::host::detail::env_flag("RCCLX_CHECK_CALLS", true);
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>

#include "../../core/error.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

// The variable's value, or null when it is unset or empty (both mean "keep the default").
inline const char* env_text(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// Whether `text` is a whole decimal integer (an optional sign, digits, nothing after) in [lo, hi];
// its value goes to `out`. The callers word their own errors (each names its variable and range).
inline bool parse_int(const char* text, long long lo, long long hi, long long& out) noexcept {
  if (!text || !*text) return false;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || x < lo || x > hi) return false;
  out = x;
  return true;
}

// An on/off variable: 0 or 1 (also false/true, off/on, no/yes, in any case); unset or empty: `fallback`.
inline bool env_flag(const char* name, bool fallback) {
  const char* v = env_text(name);
  if (!v) return fallback;
  std::string s(v);
  for (char& c : s) c = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  for (const char* on : {"1", "true", "on", "yes"})
    if (s == on) return true;
  for (const char* off : {"0", "false", "off", "no"})
    if (s == off) return false;
  throw error(errc::invalid_argument,
              std::string(name) + " = '" + v + "' is not a switch (0 or 1; also false/true, off/on, no/yes)");
}

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
