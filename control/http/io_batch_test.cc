// IoBatch on real loopback TCP sockets: every operation completes within its submission, with
// the result read() or send() on a non-blocking socket would give.
#include "control/http/io_batch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

namespace dripgate::control {
namespace {

// A connected pair of non-blocking loopback TCP sockets.
struct Pair {
  int a = -1, b = -1;
  Pair() {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof at;
    EXPECT_EQ(bind(l, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
    EXPECT_EQ(listen(l, 1), 0);
    EXPECT_EQ(getsockname(l, reinterpret_cast<sockaddr*>(&at), &len), 0);
    a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(connect(a, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
    b = accept4(l, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    close(l);
    EXPECT_GE(b, 0);
  }
  ~Pair() {
    if (a >= 0) close(a);
    if (b >= 0) close(b);
  }
};

std::unique_ptr<IoBatch> make() {
  std::string why;
  auto io = IoBatch::create(8, why);
  EXPECT_TRUE(io) << why;
  return io;
}

TEST(IoBatch, SendsAndReceivesSeveralSocketsInOneRun) {
  auto io = make();
  ASSERT_TRUE(io);
  EXPECT_EQ(io->capacity(), 8u);
  Pair p1, p2;
  std::string m1 = "first answer", m2 = "second one";
  std::vector<IoBatch::Op> ops = {{p1.b, m1.data(), m1.size(), true, 0},
                                  {p2.b, m2.data(), m2.size(), true, 0}};
  ASSERT_TRUE(io->run(ops));
  EXPECT_EQ(ops[0].result, static_cast<ssize_t>(m1.size()));
  EXPECT_EQ(ops[1].result, static_cast<ssize_t>(m2.size()));
  char got1[64], got2[64];
  EXPECT_EQ(recv(p1.a, got1, sizeof got1, 0), static_cast<ssize_t>(m1.size()));
  EXPECT_EQ(recv(p2.a, got2, sizeof got2, 0), static_cast<ssize_t>(m2.size()));
  EXPECT_EQ(std::string(got1, m1.size()), m1);
  EXPECT_EQ(std::string(got2, m2.size()), m2);

  // Reads: one with bytes waiting, one with none (EAGAIN, not a wait), one whose peer closed.
  ASSERT_EQ(send(p1.a, "request", 7, 0), 7);
  Pair p3;
  shutdown(p3.a, SHUT_WR);
  char r1[16], r2[16], r3[16];
  ops = {{p1.b, r1, sizeof r1, false, 0},
         {p2.b, r2, sizeof r2, false, 0},
         {p3.b, r3, sizeof r3, false, 0}};
  ASSERT_TRUE(io->run(ops));
  EXPECT_EQ(ops[0].result, 7);
  EXPECT_EQ(std::string(r1, 7), "request");
  EXPECT_EQ(ops[1].result, -EAGAIN);
  EXPECT_EQ(ops[2].result, 0);
}

// A peer that does not read: the send writes what the socket takes, then EAGAIN; nothing waits.
TEST(IoBatch, AFullSocketGivesAShortSendThenEagain) {
  auto io = make();
  ASSERT_TRUE(io);
  Pair p;
  std::string big(8 << 20, 'x');
  std::vector<IoBatch::Op> ops = {{p.b, big.data(), big.size(), true, 0}};
  ASSERT_TRUE(io->run(ops));
  EXPECT_GT(ops[0].result, 0);
  EXPECT_LT(ops[0].result, static_cast<ssize_t>(big.size()));
  ops = {{p.b, big.data(), big.size(), true, 0}};
  ASSERT_TRUE(io->run(ops));
  EXPECT_EQ(ops[0].result, -EAGAIN);
}

// An operation's own error is its result, not a failure of the ring; more operations than the
// capacity: the first capacity() run, the rest are left as they were.
TEST(IoBatch, ErrorsAreResultsAndARunTakesAtMostItsCapacity) {
  auto io = make();
  ASSERT_TRUE(io);
  Pair p, gone;
  close(gone.b);
  const int closed = gone.b;
  gone.b = -1;
  char buf[8] = "abc";
  std::vector<IoBatch::Op> ops(10, IoBatch::Op{p.b, buf, 3, true, 99});
  ops[0].fd = closed;
  ASSERT_TRUE(io->run(ops));
  EXPECT_EQ(ops[0].result, -EBADF);
  for (size_t i = 1; i < 8; ++i) EXPECT_EQ(ops[i].result, 3) << i;
  EXPECT_EQ(ops[8].result, 99);
  EXPECT_EQ(ops[9].result, 99);
}

}  // namespace
}  // namespace dripgate::control
