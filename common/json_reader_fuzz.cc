// libFuzzer target: arbitrary bytes as a request body, read by JsonReader and, for comparison,
// by nlohmann's tree parser. It must never crash; both must agree on what is valid JSON (within
// the reader's depth), an object's members must be what the tree holds, and a reused reader must
// give the same answer as a new one.
// Run: tools/fuzz.sh json_reader 30 common/json_reader_fuzz.cc common/json_reader.cc (the meson
// test `json_reader_fuzz` in suite 'fuzz' does it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/json_reader.h"

namespace {

using dripgate::JsonReader;

size_t depth(const nlohmann::json& j) {
  size_t d = 0;
  if (j.is_structured())
    for (const auto& v : j) d = std::max(d, depth(v));
  return j.is_structured() ? d + 1 : 0;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  static JsonReader reused;
  JsonReader fresh;
  const JsonReader::Status st = fresh.read(body);
  check(reused.read(body) == st);
  check(reused.size() == fresh.size());
  // Duplicate keys are resolved by the tree (the last wins), refused by the reader.
  const nlohmann::json tree = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (tree.is_discarded() || depth(tree) > JsonReader::kMaxDepth) {
    check(st == JsonReader::Status::kInvalid || st == JsonReader::Status::kDuplicate);
    return 0;
  }
  if (st == JsonReader::Status::kDuplicate) return 0;
  check(st != JsonReader::Status::kInvalid);
  check((st == JsonReader::Status::kOk) == tree.is_object());
  if (st != JsonReader::Status::kOk) return 0;
  for (size_t i = 1; i < fresh.size(); ++i)
    check(fresh[i].parent >= 0 && static_cast<size_t>(fresh[i].parent) < i);
  size_t members = 0;
  for (size_t i = 1; i < fresh.size(); ++i) {
    if (fresh[i].parent != JsonReader::kBody) continue;
    ++members;
    const auto it = tree.find(fresh[i].key);
    check(it != tree.end());
    if (fresh[i].kind == JsonReader::Kind::kString) check(*it == fresh[i].text);
  }
  check(members == tree.size());
  return 0;
}
