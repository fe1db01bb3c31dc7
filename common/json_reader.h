// A JSON request body read flat, without a tree: the API's bodies are a handful of fields, and
// an nlohmann tree for each (a heap node per value, a map per object, a set per object to find
// repeated keys) allocates on every request. simdjson's DOM parser (a reused parser: no
// allocation once warm) does the lexing and the grammar, faster than nlohmann's SAX parser
// (ARCHITECTURE §4 gives the figures); a body simdjson refuses is
// read again by nlohmann's SAX parser, which has the last word on what is JSON (simdjson refuses
// some valid JSON: integers beyond 64 bits, doubles beyond the range). This file only records
// each value, in document order, with its parent and key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dripgate {

class JsonReader {
 public:
  JsonReader();
  ~JsonReader();
  JsonReader(JsonReader&&) noexcept;
  JsonReader& operator=(JsonReader&&) noexcept;

  enum class Kind : uint8_t { kNull, kBool, kInteger, kUnsigned, kFloat, kString, kObject, kArray };
  struct Value {
    Kind kind = Kind::kNull;
    int parent = -1;  // index of the enclosing object or array; -1 for the body itself
    std::string key;  // the member's name (empty in an array)
    bool boolean = false;
    int64_t integer = 0;     // kInteger
    uint64_t unsigned_ = 0;  // kUnsigned: above INT64_MAX or written without a sign
    double number = 0;       // kFloat
    std::string text;        // kString
  };
  enum class Status { kOk, kInvalid, kNotObject, kDuplicate };

  // Reads body. kInvalid: not JSON (or nested deeper than kMaxDepth); kNotObject: valid JSON that
  // is not an object; kDuplicate: a key repeated within one object (duplicate() names the first
  // one), refused rather than resolved: a front that reads the first "tenant" and a back that
  // reads the last would admit one tenant and charge another.
  Status read(std::string_view body);
  const std::string& duplicate() const { return duplicate_; }

  // The body object's index; the values are in document order, the body first.
  static constexpr int kBody = 0;
  size_t size() const { return used_; }
  const Value& operator[](size_t i) const { return values_[i]; }
  // The member `key` of object `parent` (an index), or nullptr.
  const Value* find(int parent, std::string_view key) const;
  int index_of(const Value* v) const { return static_cast<int>(v - values_.data()); }

  // Deeper bodies are refused: nothing the API takes nests more than two levels.
  static constexpr size_t kMaxDepth = 8;

 private:
  friend struct JsonReaderSax;
  friend struct JsonReaderWalk;
  struct Fast;  // simdjson's parser and the padded copy of the body it reads
  Value& add(Kind kind, int parent, std::string_view key);

  // Kept from one read to the next with their strings' capacity (a reader per thread then
  // allocates nothing once warm); the first used_ are this body's.
  std::vector<Value> values_;
  size_t used_ = 0;
  std::string duplicate_;
  std::vector<int> open_;  // the parse's scratch, kept for the same reason
  std::string name_;
  std::unique_ptr<Fast> fast_;
};

}  // namespace dripgate
