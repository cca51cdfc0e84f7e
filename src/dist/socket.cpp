#include "dist/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "stoker/core/error.h"

namespace stoker::dist::detail {

namespace {

std::string errno_text(int e) { return std::string(std::strerror(e)); }

int poll_ms(Clock::time_point deadline) {
  const double left = seconds_left(deadline);
  return static_cast<int>(std::min(left * 1000.0 + 1.0, 1000.0));  // wake at least every second
}

std::string address_text(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// One accept4 on `listener`: the connection (TCP_NODELAY set, named by the peer's address), or
// an invalid Socket with accept4's errno in `error`.
Socket accept_one(const Socket& listener, int& error) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  const int fd = ::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
  if (fd < 0) {
    error = errno;
    return Socket();
  }
  set_nodelay(fd);
  return Socket(fd, address_text(reinterpret_cast<sockaddr*>(&ss)));
}

}  // namespace

Clock::time_point deadline_after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double seconds_left(Clock::time_point deadline) {
  const double s = std::chrono::duration<double>(deadline - Clock::now()).count();
  return s > 0 ? s : 0.0;
}

Socket::~Socket() { close(); }

Socket::Socket(Socket&& o) noexcept : fd_(o.fd_), peer_(std::move(o.peer_)) { o.fd_ = -1; }

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    peer_ = std::move(o.peer_);
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Socket listen_on(int port, int backlog) {
  STOKER_CHECK(port >= 0 && port <= 65535, "rendezvous: port ", port, " is not in 0..65535");
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  STOKER_CHECK(fd >= 0, "rendezvous: socket() failed: ", errno_text(errno));
  Socket s(fd, "port " + std::to_string(port));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // TIME_WAIT of a previous run
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    STOKER_CHECK_HINT(e != EADDRINUSE,
                      "another job (or a previous run that is still alive) listens there: choose "
                      "another MASTER_PORT (stoker launch --master-port), or stop that process",
                      "rendezvous: port ", port, " is already in use");
    STOKER_THROW("rendezvous: cannot bind port ", port, ": ", errno_text(e));
  }
  STOKER_CHECK(::listen(fd, backlog) == 0, "rendezvous: listen on port ", port,
               " failed: ", errno_text(errno));
  // Non-blocking: a connection reset between poll() and accept() must not block accept().
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
  return s;
}

int bound_port(const Socket& s) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  STOKER_CHECK(getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len) == 0,
               "rendezvous: getsockname failed: ", errno_text(errno));
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

Socket accept_until(const Socket& listener, Clock::time_point deadline) {
  for (;;) {
    pollfd p{listener.fd(), POLLIN, 0};
    const int r = ::poll(&p, 1, poll_ms(deadline));
    if (r < 0 && errno != EINTR) STOKER_THROW("rendezvous: poll failed: ", errno_text(errno));
    if (r > 0) {
      int error = 0;
      Socket s = accept_one(listener, error);
      if (s.valid()) return s;
      if (error != EINTR && error != EAGAIN && error != ECONNABORTED)
        STOKER_THROW("rendezvous: accept failed: ", errno_text(error));
    }
    if (Clock::now() >= deadline) return Socket();
  }
}

Socket accept_ready(const Socket& listener) {
  for (;;) {
    int error = 0;
    Socket s = accept_one(listener, error);
    if (s.valid()) return s;
    if (error == EINTR || error == ECONNABORTED) continue;
    if (error == EAGAIN || error == EWOULDBLOCK) return Socket();
    STOKER_THROW("rendezvous: accept failed: ", errno_text(error));
  }
}

Socket connect_until(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  std::string last_error = "no attempt";
  const std::string where = host + ":" + std::to_string(port);
  for (;;) {
    addrinfo* res = nullptr;
    const int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      last_error = std::string("cannot resolve host: ") + gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        Socket s(fd, where);
        const int flags = fcntl(fd, F_GETFL, 0);
        fcntl(fd, F_SETFL, flags | O_NONBLOCK);
        int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
          pollfd p{fd, POLLOUT, 0};
          const int pr = ::poll(&p, 1, poll_ms(deadline));
          if (pr > 0) {
            int err = 0;
            socklen_t len = sizeof(err);
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            rc = err == 0 ? 0 : -1;
            errno = err;
          } else {
            errno = pr == 0 ? ETIMEDOUT : errno;
            rc = -1;
          }
        }
        if (rc == 0) {
          fcntl(fd, F_SETFL, flags);
          set_nodelay(fd);
          freeaddrinfo(res);
          return s;
        }
        last_error = errno_text(errno);
      }
      freeaddrinfo(res);
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(
        static_cast<int>(std::min(100.0, seconds_left(deadline) * 1000.0))));
  }
  STOKER_CHECK_HINT(
      false,
      "check that rank 0 started and that every rank has the same MASTER_ADDR and MASTER_PORT",
      "rendezvous: could not connect to rank 0 at ", where,
      " before the timeout (last error: ", last_error, ")");
  return Socket();
}

void send_all(const Socket& s, const void* data, size_t n, Clock::time_point deadline,
              const std::string& what) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    pollfd pf{s.fd(), POLLOUT, 0};
    const int r = ::poll(&pf, 1, poll_ms(deadline));
    if (r < 0 && errno != EINTR) STOKER_THROW(what, ": poll failed: ", errno_text(errno));
    if (r > 0) {
      const ssize_t k = ::send(s.fd(), p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        p += k;
        n -= static_cast<size_t>(k);
        continue;
      }
      if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        STOKER_THROW(what, ": sending to ", s.peer(), " failed: ", errno_text(errno),
                     " (the peer closed the connection: it failed or aborted)");
    }
    if (Clock::now() >= deadline)
      STOKER_THROW(what, ": sending to ", s.peer(), " timed out (", n, " bytes left)");
  }
}

void recv_all(const Socket& s, void* data, size_t n, Clock::time_point deadline,
              const std::string& what) {
  auto* p = static_cast<unsigned char*>(data);
  while (n > 0) {
    pollfd pf{s.fd(), POLLIN, 0};
    const int r = ::poll(&pf, 1, poll_ms(deadline));
    if (r < 0 && errno != EINTR) STOKER_THROW(what, ": poll failed: ", errno_text(errno));
    if (r > 0) {
      const ssize_t k = ::recv(s.fd(), p, n, MSG_DONTWAIT);
      if (k > 0) {
        p += k;
        n -= static_cast<size_t>(k);
        continue;
      }
      if (k == 0)
        STOKER_THROW(what, ": ", s.peer(),
                     " closed the connection (that process failed, aborted or exited)");
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        STOKER_THROW(what, ": receiving from ", s.peer(), " failed: ", errno_text(errno));
    }
    if (Clock::now() >= deadline)
      STOKER_THROW(what, ": nothing from ", s.peer(), " before the timeout (", n,
                   " bytes still expected)");
  }
}

size_t recv_some(const Socket& s, void* data, size_t n, Clock::time_point deadline,
                 const std::string& what) {
  for (;;) {
    pollfd pf{s.fd(), POLLIN, 0};
    const int r = ::poll(&pf, 1, poll_ms(deadline));
    if (r < 0 && errno != EINTR) STOKER_THROW(what, ": poll failed: ", errno_text(errno));
    if (r > 0) {
      const ssize_t k = ::recv(s.fd(), data, n, MSG_DONTWAIT);
      if (k >= 0) return static_cast<size_t>(k);
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        STOKER_THROW(what, ": receiving from ", s.peer(), " failed: ", errno_text(errno));
    }
    if (Clock::now() >= deadline)
      STOKER_THROW(what, ": nothing from ", s.peer(), " before the timeout");
  }
}

ReadNow read_now(const Socket& s, void* data, size_t n) {
  ReadNow r;
  for (;;) {
    const ssize_t k = ::recv(s.fd(), data, n, MSG_DONTWAIT);
    if (k > 0) {
      r.bytes = static_cast<size_t>(k);
    } else if (k == 0) {
      r.closed = n > 0;
      r.nothing_yet = n == 0;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      r.nothing_yet = true;
    } else {
      r.error = errno_text(errno);
    }
    return r;
  }
}

void discard_until_closed(const Socket& s, Clock::time_point deadline) {
  char buf[4096];
  while (s.valid()) {
    pollfd pf{s.fd(), POLLIN, 0};
    const int r = ::poll(&pf, 1, poll_ms(deadline));
    if (r < 0 && errno != EINTR) return;
    if (r > 0) {
      const ssize_t k = ::recv(s.fd(), buf, sizeof(buf), MSG_DONTWAIT);
      if (k == 0) return;  // closed
      if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return;
    }
    if (Clock::now() >= deadline) return;
  }
}

void put_u16(unsigned char* p, uint16_t v) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
}
void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint16_t get_u16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace stoker::dist::detail
