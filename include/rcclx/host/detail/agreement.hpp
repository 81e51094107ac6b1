// rcclx/host/detail/agreement.hpp: how the ranks of a communicator agree. Every exchange carries
// each rank's local error, so an error on one rank (a bad pointer, a failed allocation) is thrown
// on every rank with the same message and no rank is left waiting in the next exchange; values
// that must match are compared into one message naming every rank's value; and before each call
// its descriptor (call_check.hpp) is gathered, so ranks that disagree fail together.
//
//   rcclx::host::detail::agreement agree(bootstrap, /*check_calls=*/true);
//   auto sizes = agree.exchange(my_size, local_error, rcclx::errc::invalid_argument);  // throws everywhere
//   agree.require_equal("register_buffer: ranks disagree on bytes:", sizes, [](auto s) { return s; });
//   agree.check_call(rcclx::host::detail::make_descriptor<float>(collective_kind::allreduce, count));
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/error.hpp"
#include "../bootstrap.hpp"
#include "call_check.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

// One rank's part of an exchange: its local error (if any) and its payload.
template <class P>
struct envelope {
  std::uint32_t failed;
  std::uint32_t code;
  char message[248];
  P payload;
};

// "rcclx: <code>: message" -> "message": a local error's text, to be thrown again on every rank.
inline std::string strip_prefix(const std::string& w) {
  if (w.compare(0, 7, "rcclx: ") != 0) return w;
  const auto colon = w.find(": ", 7);
  return colon == std::string::npos ? w : w.substr(colon + 2);
}

class agreement {
 public:
  agreement(bootstrap& bs, bool check_calls) : bs_(bs), n_(bs.num_ranks()), check_calls_(check_calls) {}
  agreement(const agreement&) = delete;
  agreement& operator=(const agreement&) = delete;

  bootstrap& get_bootstrap() const { return bs_; }
  bool checks_calls() const { return check_calls_; }

  // Collective: gathers every rank's `mine` (rank order). If any rank passed a local error, every
  // rank throws the first failing rank's (with `code` as that rank gave it), naming how many failed.
  template <class P>
  std::vector<P> exchange(const P& mine, const std::string& local_error, errc code) {
    static_assert(std::is_trivially_copyable<P>::value, "exchanged payloads are raw bytes");
    envelope<P> e{};
    e.failed = local_error.empty() ? 0u : 1u;
    e.code = static_cast<std::uint32_t>(code);
    copy_name(e.message, local_error.c_str());
    e.payload = mine;
    const auto all = bs_.allgather_value(e);
    int failures = 0, first = -1;
    for (int r = 0; r < n_; ++r)
      if (all[static_cast<std::size_t>(r)].failed) {
        if (first < 0) first = r;
        ++failures;
      }
    if (first >= 0) {
      const auto& f = all[static_cast<std::size_t>(first)];
      std::string m = "rank " + std::to_string(first) + ": " + f.message;
      if (failures > 1) m += " (and " + std::to_string(failures - 1) + " more rank(s) failed)";
      throw error(static_cast<errc>(f.code), m);
    }
    std::vector<P> out;
    out.reserve(all.size());
    for (const auto& x : all) out.push_back(x.payload);
    return out;
  }

  // "" when every rank's get(value) equals rank 0's; else `what` followed by every rank's value.
  template <class Seq, class Get>
  static std::string differing(const std::string& what, const Seq& all, Get get) {
    for (std::size_t r = 1; r < all.size(); ++r)
      if (get(all[r]) != get(all[0]))
        return what + per_rank(all, [&](const auto& v) { return std::to_string(get(v)); });
    return {};
  }

  // Throws errc::mismatch with differing()'s message when the ranks' values differ.
  template <class Seq, class Get>
  static void require_equal(const std::string& what, const Seq& all, Get get) {
    const std::string m = differing(what, all, get);
    if (!m.empty()) throw error(errc::mismatch, m);
  }

  // Collective unless call checks are off: numbers the call (d.seq) and gathers every rank's
  // descriptor and local error; a local error anywhere or a field that differs is thrown on every
  // rank. Without call checks only this rank's local error is thrown (invalid_argument).
  void check_call(call_descriptor d, const std::string& local_error = std::string()) {
    d.seq = ++calls_;
    if (!check_calls_) {
      if (!local_error.empty()) throw error(errc::invalid_argument, local_error);
      return;
    }
    const auto all = exchange(d, local_error, errc::invalid_argument);
    const std::string m = compare_descriptors(all);
    if (!m.empty()) throw error(errc::mismatch, m);
  }

 private:
  bootstrap& bs_;
  int n_;
  bool check_calls_;
  std::uint64_t calls_ = 0;
};

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
