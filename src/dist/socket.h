// TCP sockets with deadlines, for the rendezvous and the TcpCommunicator. Private to src/dist.
//
// Every blocking step (accept, connect, send, receive) takes a deadline and throws a
// stoker::Error naming what it was doing and the peer when the deadline passes or the peer
// closes the connection; nothing here waits forever.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace stoker::dist::detail {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds);
// Seconds left until `deadline` (0 when past).
double seconds_left(Clock::time_point deadline);

// An owned file descriptor of a TCP socket (closed by the destructor). Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd, std::string peer = {}) : fd_(fd), peer_(std::move(peer)) {}
  ~Socket();
  Socket(Socket&& o) noexcept;
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // "127.0.0.1:52144" (what it is connected to) or what the creator called it.
  const std::string& peer() const { return peer_; }
  void set_peer(std::string peer) { peer_ = std::move(peer); }
  void close();
  // Both directions shut down: a peer blocked on it wakes up with an error.
  void shutdown();

 private:
  int fd_ = -1;
  std::string peer_;
};

// Listens on every interface at `port` (0: a free port chosen by the system). The listening
// socket is non-blocking (accepted connections are not).
Socket listen_on(int port, int backlog);
// The port a listening socket is bound to.
int bound_port(const Socket& s);
// The next connection, or an invalid Socket when the deadline passes first.
Socket accept_until(const Socket& listener, Clock::time_point deadline);
// A connection waiting to be accepted right now, or an invalid Socket when none is.
Socket accept_ready(const Socket& listener);
// Connects to host:port, retrying while the port refuses (the listener may start later) until
// the deadline; throws with the last error then.
Socket connect_until(const std::string& host, int port, Clock::time_point deadline);

// Exactly n bytes, before the deadline; `what` names the transfer in errors.
void send_all(const Socket& s, const void* data, size_t n, Clock::time_point deadline,
              const std::string& what);
void recv_all(const Socket& s, void* data, size_t n, Clock::time_point deadline,
              const std::string& what);
// Between 1 and n bytes, waiting for the first until the deadline (then it throws); 0 when the
// peer closed the connection first.
size_t recv_some(const Socket& s, void* data, size_t n, Clock::time_point deadline,
                 const std::string& what);

// What a read without waiting found: `bytes` > 0 received, or the peer closed the connection,
// or nothing has arrived yet, or an error (its text). Never throws: for peers that may be
// anything (the rendezvous' unknown connections).
struct ReadNow {
  size_t bytes = 0;
  bool closed = false;
  bool nothing_yet = false;
  std::string error;
};
ReadNow read_now(const Socket& s, void* data, size_t n);

// Reads and drops whatever the peer sends until it closes the connection, an error, or the
// deadline: closing a socket with unread data would reset the connection and could destroy
// what was just sent to the peer (an error report) before it is read.
void discard_until_closed(const Socket& s, Clock::time_point deadline);

// Little-endian encoding of fixed-size protocol fields.
void put_u16(unsigned char* p, uint16_t v);
void put_u32(unsigned char* p, uint32_t v);
void put_u64(unsigned char* p, uint64_t v);
uint16_t get_u16(const unsigned char* p);
uint32_t get_u32(const unsigned char* p);
uint64_t get_u64(const unsigned char* p);

}  // namespace stoker::dist::detail
