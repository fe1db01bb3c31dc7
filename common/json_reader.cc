#include "common/json_reader.h"

#include <simdjson.h>

#include <nlohmann/json.hpp>

namespace dripgate {

struct JsonReader::Fast {
  simdjson::dom::parser parser;  // its buffers sized by the largest body so far, then reused
  // The body followed by the zero bytes simdjson reads past the end; parse() would otherwise
  // allocate a padded copy on every call.
  std::string padded;
};

JsonReader::JsonReader() = default;
JsonReader::~JsonReader() = default;
JsonReader::JsonReader(JsonReader&&) noexcept = default;
JsonReader& JsonReader::operator=(JsonReader&&) noexcept = default;

JsonReader::Value& JsonReader::add(Kind kind, int parent, std::string_view key) {
  if (used_ == values_.size()) values_.emplace_back();
  Value& v = values_[used_++];
  v.kind = kind;
  v.parent = parent;
  v.key.assign(key);
  v.text.clear();
  v.boolean = false;
  v.integer = 0;
  v.unsigned_ = 0;
  v.number = 0;
  return v;
}

// simdjson's document, walked in document order. The kinds are nlohmann's: a non-negative
// integer is unsigned (nlohmann's "written without a sign"; "-0" alone reads as unsigned 0 here
// and as integer 0 there, the same number).
struct JsonReaderWalk {
  using Kind = JsonReader::Kind;
  using Type = simdjson::dom::element_type;
  JsonReader& r;

  // False: nested deeper than kMaxDepth, refused as by nlohmann's reader.
  bool value(simdjson::dom::element e, int parent, std::string_view key, size_t depth) {
    switch (e.type()) {
      case Type::OBJECT: {
        if (depth >= JsonReader::kMaxDepth) return false;
        r.add(Kind::kObject, parent, key);
        const int self = static_cast<int>(r.used_) - 1;
        simdjson::dom::object members;
        if (e.get(members) != simdjson::SUCCESS) return false;  // cannot fail: the type is OBJECT
        for (simdjson::dom::key_value_pair m : members) {
          if (r.duplicate_.empty() && r.find(self, m.key)) r.duplicate_ = m.key;
          if (!value(m.value, self, m.key, depth + 1)) return false;
        }
        return true;
      }
      case Type::ARRAY: {
        if (depth >= JsonReader::kMaxDepth) return false;
        r.add(Kind::kArray, parent, key);
        const int self = static_cast<int>(r.used_) - 1;
        simdjson::dom::array items;
        if (e.get(items) != simdjson::SUCCESS) return false;  // cannot fail: the type is ARRAY
        for (simdjson::dom::element v : items)
          if (!value(v, self, {}, depth + 1)) return false;
        return true;
      }
      case Type::INT64: {
        const int64_t i = e.get_int64().value_unsafe();
        if (i >= 0)
          r.add(Kind::kUnsigned, parent, key).unsigned_ = static_cast<uint64_t>(i);
        else
          r.add(Kind::kInteger, parent, key).integer = i;
        return true;
      }
      case Type::UINT64:
        r.add(Kind::kUnsigned, parent, key).unsigned_ = e.get_uint64().value_unsafe();
        return true;
      case Type::DOUBLE:
        r.add(Kind::kFloat, parent, key).number = e.get_double().value_unsafe();
        return true;
      case Type::STRING: {
        const std::string_view s = e.get_string().value_unsafe();
        r.add(Kind::kString, parent, key).text.assign(s);
        return true;
      }
      case Type::BOOL:
        r.add(Kind::kBool, parent, key).boolean = e.get_bool().value_unsafe();
        return true;
      case Type::NULL_VALUE:
        r.add(Kind::kNull, parent, key);
        return true;
    }
    return false;
  }
};

// nlohmann's SAX interface: each event appends a value (or opens or closes a container).
// Returning false stops the parse, which then reports failure.
struct JsonReaderSax {
  using Kind = JsonReader::Kind;

  JsonReader& r;
  std::vector<int>& open;  // the containers being filled, innermost last
  std::string& name;       // the member name the next value takes, when `named`
  bool named = false;

  JsonReader::Value& add(Kind kind) {
    const int parent = open.empty() ? -1 : open.back();
    const bool had_name = named;
    named = false;
    return r.add(kind, parent, had_name ? std::string_view(name) : std::string_view());
  }

  bool null() { return add(Kind::kNull), true; }
  bool boolean(bool b) { return add(Kind::kBool).boolean = b, true; }
  bool number_integer(int64_t i) { return add(Kind::kInteger).integer = i, true; }
  bool number_unsigned(uint64_t u) { return add(Kind::kUnsigned).unsigned_ = u, true; }
  bool number_float(double d, const std::string&) { return add(Kind::kFloat).number = d, true; }
  bool string(std::string& s) { return add(Kind::kString).text.assign(s), true; }
  bool binary(nlohmann::json::binary_t&) { return false; }  // the text parser makes none
  bool start_object(size_t) { return start(Kind::kObject); }
  bool start_array(size_t) { return start(Kind::kArray); }
  bool end_object() { return open.pop_back(), true; }
  bool end_array() { return open.pop_back(), true; }
  // A member's name arrives before its value, which takes it.
  bool key(std::string& k) {
    if (r.duplicate_.empty() && r.find(open.back(), k)) r.duplicate_ = k;
    name.assign(k);
    named = true;
    return true;
  }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

  bool start(Kind kind) {
    if (open.size() >= JsonReader::kMaxDepth) return false;
    add(kind);
    open.push_back(static_cast<int>(r.used_) - 1);
    return true;
  }
};

JsonReader::Status JsonReader::read(std::string_view body) {
  used_ = 0;
  duplicate_.clear();
  open_.clear();
  if (!fast_) fast_ = std::make_unique<Fast>();
  Fast& f = *fast_;
  f.padded.assign(body);
  f.padded.append(simdjson::SIMDJSON_PADDING, '\0');
  simdjson::dom::element root;
  if (f.parser.parse(f.padded.data(), body.size(), /*realloc_if_needed=*/false).get(root) ==
      simdjson::SUCCESS) {
    if (!JsonReaderWalk{*this}.value(root, -1, {}, 0)) return Status::kInvalid;
  } else {
    // Rare (malformed bodies, mostly): nlohmann decides.
    used_ = 0;
    duplicate_.clear();
    JsonReaderSax sax{*this, open_, name_};
    if (!nlohmann::json::sax_parse(body.begin(), body.end(), &sax)) return Status::kInvalid;
  }
  if (!duplicate_.empty()) return Status::kDuplicate;
  if (used_ == 0 || values_[0].kind != Kind::kObject) return Status::kNotObject;
  return Status::kOk;
}

const JsonReader::Value* JsonReader::find(int parent, std::string_view key) const {
  for (size_t i = static_cast<size_t>(parent) + 1; i < used_; ++i)
    if (values_[i].parent == parent && values_[i].key == key) return &values_[i];
  return nullptr;
}

}  // namespace dripgate
