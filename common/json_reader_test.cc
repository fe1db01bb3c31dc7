#include "common/json_reader.h"

#include <gtest/gtest.h>

#include <string>

namespace dripgate {
namespace {

using Kind = JsonReader::Kind;
using Status = JsonReader::Status;

TEST(JsonReader, ReadsEveryKindInDocumentOrderWithParentsAndKeys) {
  JsonReader r;
  ASSERT_EQ(r.read(R"({"s":"x\u00e9","n":null,"t":true,"i":-3,"u":18446744073709551615,
                       "f":2.5,"o":{"a":1},"l":["p",2]})"),
            Status::kOk);
  ASSERT_EQ(r.size(), 12u);
  EXPECT_EQ(r[0].kind, Kind::kObject);
  EXPECT_EQ(r[0].parent, -1);
  EXPECT_EQ(r.find(JsonReader::kBody, "s")->text, "x\xc3\xa9");
  EXPECT_EQ(r.find(JsonReader::kBody, "n")->kind, Kind::kNull);
  EXPECT_TRUE(r.find(JsonReader::kBody, "t")->boolean);
  EXPECT_EQ(r.find(JsonReader::kBody, "i")->integer, -3);
  EXPECT_EQ(r.find(JsonReader::kBody, "u")->unsigned_, 18446744073709551615u);
  EXPECT_EQ(r.find(JsonReader::kBody, "f")->number, 2.5);
  const JsonReader::Value* o = r.find(JsonReader::kBody, "o");
  ASSERT_EQ(o->kind, Kind::kObject);
  EXPECT_EQ(r.find(r.index_of(o), "a")->unsigned_, 1u);
  EXPECT_EQ(r.find(JsonReader::kBody, "a"), nullptr) << "a member of o, not of the body";
  const JsonReader::Value* l = r.find(JsonReader::kBody, "l");
  ASSERT_EQ(l->kind, Kind::kArray);
  EXPECT_EQ(r[static_cast<size_t>(r.index_of(l)) + 1].text, "p");
  EXPECT_EQ(r[static_cast<size_t>(r.index_of(l)) + 1].key, "");
  EXPECT_EQ(r[11].parent, r.index_of(l));
}

// JSON that the fast parser refuses but is valid (an integer beyond 64 bits, a double's range
// edge) is read by the second one, with the same result a tree would have; what both refuse
// stays refused, and a reader that took the second path reads the next body the fast way.
TEST(JsonReader, ValidJsonTheFastParserRefusesIsReadAllTheSame) {
  JsonReader r;
  ASSERT_EQ(r.read(R"({"big":123456789012345678901234567890,"k":[{"x":-9223372036854775809}]})"),
            Status::kOk);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r.find(JsonReader::kBody, "big")->kind, Kind::kFloat);
  EXPECT_DOUBLE_EQ(r.find(JsonReader::kBody, "big")->number, 1.2345678901234568e29);
  EXPECT_EQ(r[4].key, "x");
  EXPECT_EQ(r[4].kind, Kind::kFloat);
  EXPECT_EQ(r[4].parent, 3);
  EXPECT_EQ(r.read(R"({"big":1e400})"), Status::kInvalid) << "out of a double's range";
  EXPECT_EQ(r.read(R"({"a":1,"big":1e99999999999999999999,"a":2})"), Status::kInvalid);
  EXPECT_EQ(r.read(R"({"a":1,"big":123456789012345678901234567890,"a":2})"), Status::kDuplicate);
  EXPECT_EQ(r.duplicate(), "a");
  ASSERT_EQ(r.read(R"({"i":-3})"), Status::kOk);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(r.find(JsonReader::kBody, "i")->integer, -3);
}

TEST(JsonReader, RefusesARepeatedKeyInAnyObjectButNotTheSameKeyInTwoObjects) {
  JsonReader r;
  EXPECT_EQ(r.read(R"({"a":1,"b":2,"a":3})"), Status::kDuplicate);
  EXPECT_EQ(r.duplicate(), "a");
  EXPECT_EQ(r.read(R"({"f":{"x":1,"x":2}})"), Status::kDuplicate);
  EXPECT_EQ(r.duplicate(), "x");
  EXPECT_EQ(r.read(R"({"x":1,"f":{"x":2}})"), Status::kOk);
  EXPECT_EQ(r.duplicate(), "");
}

TEST(JsonReader, RefusesWhatIsNotOneJsonObject) {
  JsonReader r;
  for (const char* bad : {"", "{", R"({"a":})", R"({"a":1}x)", R"({"a":1} {})", "{'a':1}",
                          R"({"a":01})", "\xff", R"({"a":"\ud800"})"})
    EXPECT_EQ(r.read(bad), Status::kInvalid) << bad;
  for (const char* other : {"[]", "1", "\"s\"", "null"})
    EXPECT_EQ(r.read(other), Status::kNotObject) << other;
  EXPECT_EQ(
      r.read(std::string(JsonReader::kMaxDepth, '[') + std::string(JsonReader::kMaxDepth, ']')),
      Status::kNotObject);
  EXPECT_EQ(r.read("{\"a\":" + std::string(JsonReader::kMaxDepth, '[') +
                   std::string(JsonReader::kMaxDepth, ']') + "}"),
            Status::kInvalid)
      << "nested deeper than kMaxDepth";
}

// The reader is reused per thread: a read sees nothing of the one before.
TEST(JsonReader, AReadForgetsTheBodyBefore) {
  JsonReader r;
  ASSERT_EQ(r.read(R"({"tenant":"a-long-tenant-name-beyond-sso","tokens":5,"flow":{"src":"x"}})"),
            Status::kOk);
  ASSERT_EQ(r.read(R"({"tokens":7})"), Status::kOk);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(r.find(JsonReader::kBody, "tenant"), nullptr);
  EXPECT_EQ(r.find(JsonReader::kBody, "flow"), nullptr);
  EXPECT_EQ(r.find(JsonReader::kBody, "tokens")->unsigned_, 7u);
  ASSERT_EQ(r.read(R"({"a":[1]})"), Status::kOk);
  EXPECT_EQ(r[2].key, "") << "an array element reusing a named slot has no name";
}

}  // namespace
}  // namespace dripgate
