#include "stoker/dist/rendezvous.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

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

// A raw TCP server on `port` that accepts one connection, reads its hello and answers `reply`.
std::thread fake_server(int port, std::vector<uint8_t> reply, std::promise<void>& listening) {
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
  return std::thread([fd, reply] {
    const int c = ::accept(fd, nullptr, nullptr);
    char hello[20];
    [[maybe_unused]] ssize_t n = ::recv(c, hello, sizeof(hello), MSG_WAITALL);
    n = ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
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

TEST(RendezvousTest, WrongMagicOnRankZeroSide) {
  const int port = free_port();
  auto rank0 = std::async(std::launch::async, [&] {
    return error_of([&] { dist::rendezvous_broadcast(options(port, 5), 0, 2, {}); });
  });
  const int fd = raw_connect(port);
  ASSERT_GE(fd, 0);
  const char http[20] = {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'};
  [[maybe_unused]] ssize_t n = ::send(fd, http, sizeof(http), MSG_NOSIGNAL);
  const std::string e = rank0.get();
  ::close(fd);
  EXPECT_NE(e.find("sent magic 0x20544547"), std::string::npos) << e;
  EXPECT_NE(e.find("it is not a stoker rank"), std::string::npos) << e;
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
  EXPECT_NE(e.find("this is not a stoker rendezvous"), std::string::npos) << e;
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
