#include "dist/rendezvous.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "dist/rendezvous_message.h"
#include "dist_test_util.h"

namespace dist = stoker::dist;
using stoker::test::error_of;
using stoker::test::free_port;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

dist::RendezvousOptions options(int port, double timeout_s) {
  return {.master_addr = "127.0.0.1", .master_port = port, .timeout_s = timeout_s};
}

// A raw TCP client: connects to the port (retrying while nothing listens) and sends `bytes`.
int raw_connect(int port) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

// A raw TCP server on `port` that accepts one connection, reads its hello, answers `reply` and
// keeps the connection open for `hold_ms`.
std::thread fake_server(int port, std::vector<uint8_t> reply, std::promise<void>& listening,
                        int hold_ms = 300) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::listen(fd, 4);
  listening.set_value();
  return std::thread([fd, reply, hold_ms] {
    const int c = ::accept(fd, nullptr, nullptr);
    char hello[20];
    [[maybe_unused]] ssize_t n = ::recv(c, hello, sizeof(hello), MSG_WAITALL);
    n = ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    ::close(c);
    ::close(fd);
  });
}

}  // namespace

TEST(RendezvousTest, RankZeroHandsItsPayloadToEveryRank) {
  const int port = free_port(), world = 4;
  const std::vector<uint8_t> id = {1, 2, 3, 250, 0, 7};
  std::vector<std::future<std::vector<uint8_t>>> got;
  for (int r = world - 1; r >= 0; --r) {  // rank 0 last: the others retry until it listens
    got.push_back(std::async(std::launch::async, [&, r] {
      return dist::rendezvous_broadcast(options(port, 10), r, world,
                                        r == 0 ? id : std::vector<uint8_t>{});
    }));
  }
  for (auto& f : got) EXPECT_EQ(f.get(), id);
}

TEST(RendezvousTest, WorldSizeOneReturnsAtOnce) {
  const std::vector<uint8_t> id(128, 9);
  EXPECT_EQ(dist::rendezvous_broadcast(options(free_port(), 1), 0, 1, id), id);
}

TEST(RendezvousTest, APeerThatNeverConnectsIsNamed) {
  const int port = free_port();
  const auto start = Clock::now();
  auto rank0 = std::async(std::launch::async, [&] {
    return error_of([&] { dist::rendezvous_broadcast(options(port, 0.5), 0, 3, {}); });
  });
  auto rank1 = std::async(std::launch::async, [&] {
    return error_of([&] { dist::rendezvous_broadcast(options(port, 5), 1, 3, {}); });
  });
  const std::string e0 = rank0.get(), e1 = rank1.get();
  EXPECT_LT(seconds_since(start), 4.0);  // rank 1 learns the reason from rank 0, not its timeout
  EXPECT_NE(e0.find("timed out"), std::string::npos) << e0;
  EXPECT_NE(e0.find("never connected: rank 2"), std::string::npos) << e0;
  EXPECT_NE(e0.find("hint:"), std::string::npos) << e0;
  EXPECT_NE(e1.find("rank 0 refused rank 1"), std::string::npos) << e1;
  EXPECT_NE(e1.find("never connected: rank 2"), std::string::npos) << e1;
}

TEST(RendezvousTest, NoRankZeroTimesOutWithAHint) {
  const auto start = Clock::now();
  const std::string e =
      error_of([&] { dist::rendezvous_broadcast(options(free_port(), 0.5), 1, 2, {}); });
  EXPECT_LT(seconds_since(start), 3.0);
  EXPECT_NE(e.find("could not connect to rank 0 at 127.0.0.1:"), std::string::npos) << e;
  EXPECT_NE(e.find("MASTER_ADDR and MASTER_PORT"), std::string::npos) << e;
}

TEST(RendezvousTest, PortInUseIsAClearError) {
  const int port = free_port();
  std::promise<void> listening;
  std::thread server = fake_server(port, {}, listening);
  listening.get_future().wait();
  const std::string e = error_of([&] { dist::rendezvous_broadcast(options(port, 1), 0, 2, {}); });
  EXPECT_NE(e.find("port " + std::to_string(port) + " is already in use"), std::string::npos) << e;
  EXPECT_NE(e.find("MASTER_PORT"), std::string::npos) << e;
  // Let the fake server finish.
  const int fd = raw_connect(port);
  const char junk[20] = {};
  [[maybe_unused]] ssize_t n = ::send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
  server.join();
  ::close(fd);
}

// Connections that are not stoker ranks (an HTTP client, garbage, one that closes at once, one
// that stays silent) are closed and logged; rank 0 goes on and the real ranks join.
TEST(RendezvousTest, StrayConnectionsAreIgnoredAndTheRanksStillJoin) {
  const int port = free_port(), world = 3;
  const std::vector<uint8_t> id = {4, 5, 6};
  ::testing::internal::CaptureStderr();
  const auto start = Clock::now();
  auto rank0 = std::async(std::launch::async, [&] {
    return dist::rendezvous_broadcast(options(port, 20), 0, world, id);
  });
  const int http = raw_connect(port), closer = raw_connect(port), junk = raw_connect(port),
            silent = raw_connect(port);
  ASSERT_GE(http, 0);
  ASSERT_GE(closer, 0);
  ASSERT_GE(junk, 0);
  ASSERT_GE(silent, 0);
  const std::string get = "GET / HTTP/1.1\r\n\r\n";  // shorter than a hello: waits for a reply
  [[maybe_unused]] ssize_t n = ::send(http, get.data(), get.size(), MSG_NOSIGNAL);
  ::close(closer);
  const std::vector<uint8_t> garbage(20, 0xee);
  n = ::send(junk, garbage.data(), garbage.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the strays come first
  std::vector<std::future<std::vector<uint8_t>>> peers;
  for (int r = 1; r < world; ++r)
    peers.push_back(std::async(std::launch::async, [&, r] {
      return dist::rendezvous_broadcast(options(port, 20), r, world, {});
    }));
  std::string error;
  try {
    EXPECT_EQ(rank0.get(), id);
    for (auto& f : peers) EXPECT_EQ(f.get(), id);
  } catch (const stoker::Error& e) {
    error = e.what();
  }
  const double took = seconds_since(start);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(error, "");
  EXPECT_LT(took, 5.0);  // the silent connection delayed nobody (its hello timeout is 10 s)
  // Rank 0 closed the HTTP client's connection: it reads the end of the stream, no answer.
  char buf[64];
  EXPECT_EQ(::recv(http, buf, sizeof(buf), 0), 0);
  const std::string ignored = "ignored a connection from 127.0.0.1:";
  EXPECT_NE(log.find(ignored), std::string::npos) << log;
  EXPECT_NE(log.find("that is not a stoker rank: its greeting starts with \"GET / HTTP/1.1\\r\\n"
                     "\\r\\n\" instead of the magic \"STKR\""),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("it closed the connection without a greeting"), std::string::npos) << log;
  EXPECT_NE(log.find("\\xee\\xee"), std::string::npos) << log;
  EXPECT_NE(log.find("it had sent 0 of the 20 bytes of a greeting when every rank had joined"),
            std::string::npos)
      << log;
  for (int fd : {http, junk, silent}) ::close(fd);
}

TEST(RendezvousTest, WrongMagicOnPeerSide) {
  const int port = free_port();
  std::promise<void> listening;
  std::vector<uint8_t> reply(12, 0);
  reply[0] = 'S', reply[1] = 'S', reply[2] = 'H', reply[3] = '-';
  std::thread server = fake_server(port, reply, listening);
  listening.get_future().wait();
  const std::string e = error_of([&] { dist::rendezvous_broadcast(options(port, 5), 1, 2, {}); });
  server.join();
  EXPECT_NE(e.find("answered but is not a stoker rendezvous"), std::string::npos) << e;
}

// A rank pointed at a server that answers something else says so at once: no waiting for more
// bytes, for the server to close, or for the timeout.
TEST(RendezvousTest, ARankPointedAtAnotherServerFailsAtOnce) {
  struct Case {
    std::string name, answer, expected;
  };
  const std::vector<Case> cases = {
      {"garbage", "hi!", "its answer starts with \"hi!\" instead of the magic \"STKR\""},
      {"http", "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
       "its answer starts with \"HTTP/1.1 400\" instead of the magic \"STKR\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int port = free_port();
    std::promise<void> listening;
    std::thread server = fake_server(port, std::vector<uint8_t>(c.answer.begin(), c.answer.end()),
                                     listening, /*hold_ms=*/3000);
    listening.get_future().wait();
    const auto start = Clock::now();
    const std::string e =
        error_of([&] { dist::rendezvous_broadcast(options(port, 30), 1, 2, {}); });
    EXPECT_LT(seconds_since(start), 2.0);
    server.join();
    EXPECT_NE(e.find("rendezvous: 127.0.0.1:" + std::to_string(port) +
                     " answered but is not a stoker rendezvous: " + c.expected),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("MASTER_ADDR/MASTER_PORT"), std::string::npos) << e;
  }
}

// The parser on its own: prefixes of a message are incomplete, the first wrong byte is invalid.
TEST(RendezvousTest, MessagesParseIncrementally) {
  namespace detail = dist::detail;
  using Status = detail::RendezvousMessage::Status;
  const auto hello = detail::encode_rendezvous_hello(3, 5, 8);
  for (size_t n = 0; n < hello.size(); ++n) {
    const auto m = detail::parse_rendezvous_message(std::span(hello.data(), n),
                                                    detail::RendezvousMessageKind::hello);
    EXPECT_EQ(m.status, Status::incomplete) << n;
    EXPECT_EQ(m.size, hello.size()) << n;
  }
  auto m = detail::parse_rendezvous_message(hello, detail::RendezvousMessageKind::hello);
  ASSERT_EQ(m.status, Status::complete);
  EXPECT_EQ(m.version, dist::kRendezvousVersion);
  EXPECT_EQ(m.purpose, 3);
  EXPECT_EQ(m.rank, 5);
  EXPECT_EQ(m.world_size, 8);
  const uint8_t g[] = {'G'};
  m = detail::parse_rendezvous_message(g, detail::RendezvousMessageKind::hello);
  EXPECT_EQ(m.status, Status::invalid);
  EXPECT_NE(m.error.find("\"G\""), std::string::npos) << m.error;

  std::vector<uint8_t> reply;
  const auto header = detail::encode_rendezvous_reply_header(0, 3);
  reply.assign(header.begin(), header.end());
  reply.insert(reply.end(), {7, 8, 9});
  m = detail::parse_rendezvous_message(std::span(reply.data(), 13),
                                       detail::RendezvousMessageKind::reply);
  EXPECT_EQ(m.status, Status::incomplete);
  EXPECT_EQ(m.size, 15u);
  m = detail::parse_rendezvous_message(reply, detail::RendezvousMessageKind::reply);
  ASSERT_EQ(m.status, Status::complete);
  EXPECT_EQ(std::vector<uint8_t>(m.payload.begin(), m.payload.end()),
            (std::vector<uint8_t>{7, 8, 9}));
  const auto bad_status = detail::encode_rendezvous_reply_header(9, 0);
  m = detail::parse_rendezvous_message(bad_status, detail::RendezvousMessageKind::reply);
  EXPECT_EQ(m.status, Status::invalid);
  EXPECT_NE(m.error.find("status 9"), std::string::npos) << m.error;
}

TEST(RendezvousTest, AnOversizedPayloadIsRejectedBeforeReading) {
  const int port = free_port();
  std::promise<void> listening;
  std::vector<uint8_t> reply = {0x53, 0x54, 0x4B, 0x52, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f};
  std::thread server = fake_server(port, reply, listening);
  listening.get_future().wait();
  const std::string e = error_of([&] { dist::rendezvous_broadcast(options(port, 5), 1, 2, {}); });
  server.join();
  EXPECT_NE(e.find("a corrupt answer"), std::string::npos) << e;
}

TEST(RendezvousTest, MismatchedWorldSizesAndDuplicateRanksAreRefused) {
  {
    const int port = free_port();
    auto rank0 = std::async(std::launch::async, [&] {
      return error_of([&] { dist::rendezvous_broadcast(options(port, 5), 0, 3, {}); });
    });
    const std::string e1 =
        error_of([&] { dist::rendezvous_broadcast(options(port, 5), 1, 2, {}); });
    const std::string e0 = rank0.get();
    EXPECT_NE(e0.find("rank 1 was told WORLD_SIZE=2 but rank 0 WORLD_SIZE=3"), std::string::npos)
        << e0;
    EXPECT_NE(e1.find("rank 0 refused rank 1"), std::string::npos) << e1;
  }
  {
    const int port = free_port();
    auto rank0 = std::async(std::launch::async, [&] {
      return error_of([&] { dist::rendezvous_broadcast(options(port, 5), 0, 3, {}); });
    });
    auto a = std::async(std::launch::async, [&] {
      return error_of([&] { dist::rendezvous_broadcast(options(port, 5), 2, 3, {}); });
    });
    auto b = std::async(std::launch::async, [&] {
      return error_of([&] { dist::rendezvous_broadcast(options(port, 5), 2, 3, {}); });
    });
    const std::string e0 = rank0.get();
    EXPECT_NE(e0.find("rank 2 joined twice"), std::string::npos) << e0;
    a.get();
    b.get();
  }
  {
    const int port = free_port();
    auto rank0 = std::async(std::launch::async, [&] {
      return error_of([&] {
        dist::rendezvous_broadcast(options(port, 5), 0, 2, {}, dist::RendezvousPurpose::nccl);
      });
    });
    const std::string e1 = error_of([&] {
      dist::rendezvous_broadcast(options(port, 5), 1, 2, {}, dist::RendezvousPurpose::tcp);
    });
    EXPECT_NE(rank0.get().find("joins for backend tcp but rank 0 for nccl"), std::string::npos);
    EXPECT_NE(e1.find("every rank must use the same backend"), std::string::npos) << e1;
  }
}
