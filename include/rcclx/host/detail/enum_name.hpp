// rcclx/host/detail/enum_name.hpp: the name of a value of a small enum numbered 0..N-1, read from
// one table of names in value order, so a to_string is its table and nothing else.
//
//   enum class hop { exact, engine_reduce };
//   inline const char* to_string(hop h) {
//     static constexpr const char* names[] = {"exact", "engine_reduce"};   // by value
//     return rcclx::host::detail::enum_name(h, names, "invalid");
//   }
#pragma once

#include <cstddef>
#include <type_traits>

#include "../../config.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

// names[e], or `otherwise` for a value outside the table (a negative value included).
template <class E, std::size_t N>
constexpr const char* enum_name(E e, const char* const (&names)[N], const char* otherwise) {
  static_assert(std::is_enum<E>::value, "enum_name names the values of an enum");
  const auto i = static_cast<std::make_unsigned_t<std::underlying_type_t<E>>>(e);
  return i < N ? names[i] : otherwise;
}

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
