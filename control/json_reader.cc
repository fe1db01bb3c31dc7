#include "control/json_reader.h"

#include <nlohmann/json.hpp>

namespace dripgate::control {

// nlohmann's SAX interface: each event appends a value (or opens or closes a container).
// Returning false stops the parse, which then reports failure.
struct JsonReaderSax {
  using Kind = JsonReader::Kind;

  JsonReader& r;
  std::vector<int>& open;  // the containers being filled, innermost last
  std::string& name;       // the member name the next value takes, when `named`
  bool named = false;

  JsonReader::Value& add(Kind kind) {
    if (r.used_ == r.values_.size()) r.values_.emplace_back();
    JsonReader::Value& v = r.values_[r.used_++];
    v.kind = kind;
    v.parent = open.empty() ? -1 : open.back();
    if (named) {
      v.key.assign(name);
      named = false;
    } else {
      v.key.clear();
    }
    v.text.clear();
    v.boolean = false;
    v.integer = 0;
    v.unsigned_ = 0;
    v.number = 0;
    return v;
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
  JsonReaderSax sax{*this, open_, name_};
  if (!nlohmann::json::sax_parse(body.begin(), body.end(), &sax)) return Status::kInvalid;
  if (!duplicate_.empty()) return Status::kDuplicate;
  if (used_ == 0 || values_[0].kind != Kind::kObject) return Status::kNotObject;
  return Status::kOk;
}

const JsonReader::Value* JsonReader::find(int parent, std::string_view key) const {
  for (size_t i = static_cast<size_t>(parent) + 1; i < used_; ++i)
    if (values_[i].parent == parent && values_[i].key == key) return &values_[i];
  return nullptr;
}

}  // namespace dripgate::control
