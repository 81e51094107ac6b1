// rcclx/host/detail/socket.hpp: Unix-domain stream sockets with a deadline on every operation:
// connect, accept, send and receive never block longer than the caller allows.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "../../core/error.hpp"
#include "shm.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

using clock_type = std::chrono::steady_clock;
using deadline_type = clock_type::time_point;

inline int ms_left(deadline_type d) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - clock_type::now()).count();
  if (left <= 0) return 0;
  return left > 1000000000 ? 1000000000 : static_cast<int>(left);
}

// An owned file descriptor.
class fd_handle {
 public:
  fd_handle() = default;
  explicit fd_handle(int fd) : fd_(fd) {}
  fd_handle(fd_handle&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  fd_handle& operator=(fd_handle&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  fd_handle(const fd_handle&) = delete;
  fd_handle& operator=(const fd_handle&) = delete;
  ~fd_handle() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A socket address: a filesystem path, or (path empty) a name in Linux's abstract namespace, which
// vanishes with the last socket bound to it, so a crashed job can leave nothing stale behind.
struct socket_address {
  sockaddr_un addr{};
  socklen_t len = 0;
  std::string path;        // empty for abstract names
  std::string printable;   // for messages

  static socket_address make(const std::string& path, const std::string& abstract_name) {
    socket_address a;
    a.addr.sun_family = AF_UNIX;
    constexpr std::size_t cap = sizeof(a.addr.sun_path);
    if (!path.empty()) {
      if (path.size() >= cap)
        throw error(errc::invalid_argument, "bootstrap socket path '" + path + "' is " + std::to_string(path.size()) +
                                                " bytes; the limit is " + std::to_string(cap - 1));
      std::memcpy(a.addr.sun_path, path.data(), path.size());
      a.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
      a.path = path;
      a.printable = path;
    } else {
      std::string name = abstract_name.substr(0, cap - 2);
      a.addr.sun_path[0] = '\0';
      std::memcpy(a.addr.sun_path + 1, name.data(), name.size());
      a.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
      a.printable = "@" + name;
    }
    return a;
  }
};

inline fd_handle make_socket() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw error(errc::runtime, "socket(AF_UNIX) failed: " + errno_text(errno));
  return fd_handle(fd);
}

// Waits until `fd` is ready for `events`; false on timeout. POLLHUP/POLLERR count as ready (the
// following read or write reports them).
inline bool wait_ready(int fd, short events, deadline_type deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) throw error(errc::runtime, "poll failed: " + errno_text(errno));
  }
}

enum class io_status { ok, closed, timeout };

inline io_status send_all(int fd, const void* data, std::size_t bytes, deadline_type deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLOUT, deadline)) return io_status::timeout;
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return io_status::closed;
    throw error(errc::runtime, "send on the bootstrap socket failed: " + errno_text(errno));
  }
  return io_status::ok;
}

inline io_status recv_all(int fd, void* data, std::size_t bytes, deadline_type deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return io_status::closed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLIN, deadline)) return io_status::timeout;
      continue;
    }
    if (errno == ECONNRESET) return io_status::closed;
    throw error(errc::runtime, "recv on the bootstrap socket failed: " + errno_text(errno));
  }
  return io_status::ok;
}

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
