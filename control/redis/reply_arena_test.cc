#include "control/redis/reply_arena.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>

namespace dripgate::control {
namespace {

// Counts what the arena takes from upstream beyond its own buffer.
class CountingResource : public std::pmr::memory_resource {
 public:
  int allocations = 0;
  int live = 0;

 private:
  void* do_allocate(size_t bytes, size_t align) override {
    ++allocations;
    ++live;
    return std::pmr::new_delete_resource()->allocate(bytes, align);
  }
  void do_deallocate(void* p, size_t bytes, size_t align) override {
    --live;
    std::pmr::new_delete_resource()->deallocate(p, bytes, align);
  }
  bool do_is_equal(const memory_resource& other) const noexcept override { return this == &other; }
};

struct ReaderFree {
  void operator()(redisReader* r) const { redisReaderFree(r); }
};

class ReplyArenaTest : public ::testing::Test {
 protected:
  ReplyArenaTest() : arena(&upstream), reader(redisReaderCreate()) { arena.attach(reader.get()); }

  // Feeds `wire` and returns the one reply it completes (nullptr when it is still partial).
  const redisReply* read(std::string_view wire) {
    EXPECT_EQ(redisReaderFeed(reader.get(), wire.data(), wire.size()), REDIS_OK);
    void* r = nullptr;
    EXPECT_EQ(redisReaderGetReply(reader.get(), &r), REDIS_OK);
    if (r) reader->fn->freeObject(r);  // as hiredis's async loop does after the callback
    return static_cast<const redisReply*>(r);
  }

  CountingResource upstream;
  ReplyArena arena;  // declared before the reader: it must outlive it
  std::unique_ptr<redisReader, ReaderFree> reader;
};

TEST_F(ReplyArenaTest, BuildsEveryKindOfReplyAsHiredisDoes) {
  const redisReply* r = read("+OK\r\n");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, REDIS_REPLY_STATUS);
  EXPECT_EQ(std::string(r->str, r->len), "OK");

  r = read("-NOSCRIPT No matching script\r\n");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, REDIS_REPLY_ERROR);
  EXPECT_STREQ(r->str, "NOSCRIPT No matching script");

  r = read(":-42\r\n");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, REDIS_REPLY_INTEGER);
  EXPECT_EQ(r->integer, -42);

  r = read("$-1\r\n");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, REDIS_REPLY_NIL);

  r = read(std::string("$5\r\na\0b\r\n\r\n", 11));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, REDIS_REPLY_STRING);
  EXPECT_EQ(std::string(r->str, r->len), std::string("a\0b\r\n", 5));
  EXPECT_EQ(r->str[r->len], '\0');

  r = read("*0\r\n");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, REDIS_REPLY_ARRAY);
  EXPECT_EQ(r->elements, 0u);
  EXPECT_EQ(r->element, nullptr);

  r = read("*-1\r\n");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, REDIS_REPLY_NIL);
}

TEST_F(ReplyArenaTest, NestsArraysAndKeepsEachElement) {
  const redisReply* r = read("*4\r\n:1\r\n$3\r\nabc\r\n*2\r\n$-1\r\n+x\r\n*0\r\n");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(r->elements, 4u);
  EXPECT_EQ(r->element[0]->type, REDIS_REPLY_INTEGER);
  EXPECT_EQ(r->element[0]->integer, 1);
  EXPECT_EQ(std::string(r->element[1]->str, r->element[1]->len), "abc");
  const redisReply* inner = r->element[2];
  ASSERT_EQ(inner->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(inner->elements, 2u);
  EXPECT_EQ(inner->element[0]->type, REDIS_REPLY_NIL);
  EXPECT_EQ(inner->element[1]->type, REDIS_REPLY_STATUS);
  EXPECT_STREQ(inner->element[1]->str, "x");
  EXPECT_EQ(r->element[3]->elements, 0u);
}

TEST_F(ReplyArenaTest, AReplySplitOverReadsIsWholeOnceComplete) {
  EXPECT_EQ(read("*2\r\n$5\r\nhel"), nullptr);
  EXPECT_EQ(read("lo\r\n:"), nullptr);
  const redisReply* r = read("7\r\n");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->elements, 2u);
  EXPECT_EQ(std::string(r->element[0]->str, r->element[0]->len), "hello");
  EXPECT_EQ(r->element[1]->integer, 7);
}

TEST_F(ReplyArenaTest, PipelinedRepliesEachReadWholeAndTheSteadyStateAllocatesNothing) {
  // The admit call's shape: an array of short strings and integers, many times over.
  std::string one = "*20\r\n";
  for (int i = 0; i < 10; ++i)
    one += ":" + std::to_string(i * 1000003) + "\r\n$8\r\nreq-" + std::to_string(1000 + i) + "\r\n";
  std::string wire;
  for (int i = 0; i < 50; ++i) wire += one;
  ASSERT_EQ(redisReaderFeed(reader.get(), wire.data(), wire.size()), REDIS_OK);
  for (int n = 0; n < 50; ++n) {
    void* p = nullptr;
    ASSERT_EQ(redisReaderGetReply(reader.get(), &p), REDIS_OK);
    auto* r = static_cast<const redisReply*>(p);
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->elements, 20u);
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(r->element[2 * i]->integer, i * 1000003);
      EXPECT_EQ(std::string(r->element[2 * i + 1]->str), "req-" + std::to_string(1000 + i));
    }
    reader->fn->freeObject(p);
  }
  EXPECT_EQ(upstream.allocations, 0);
}

TEST_F(ReplyArenaTest, AReplyLargerThanTheBufferIsWholeAndItsMemoryGoesBackAfterIt) {
  std::string big(3 * ReplyArena::kBuffer, 'z');
  std::string wire =
      "*3\r\n$" + std::to_string(big.size()) + "\r\n" + big + "\r\n:5\r\n$1\r\ny\r\n";
  const redisReply* r = read(wire);
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->elements, 3u);
  EXPECT_EQ(std::string(r->element[0]->str, r->element[0]->len), big);
  EXPECT_EQ(r->element[1]->integer, 5);
  EXPECT_STREQ(r->element[2]->str, "y");
  EXPECT_GT(upstream.live, 0);
  int before = upstream.allocations;

  r = read(":9\r\n");  // the next reply rewinds to the arena's own buffer
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->integer, 9);
  EXPECT_EQ(upstream.live, 0);
  EXPECT_EQ(upstream.allocations, before);
}

TEST_F(ReplyArenaTest, AProtocolErrorIsReportedAndAPartialReplyIsDroppedWithItsReader) {
  EXPECT_EQ(read("*3\r\n:1\r\n"), nullptr);  // left partial: freed with the reader below
  ASSERT_EQ(redisReaderFeed(reader.get(), "?\r\n", 3), REDIS_OK);
  void* p = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader.get(), &p), REDIS_ERR);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(reader->err, 0);
}

}  // namespace
}  // namespace dripgate::control
