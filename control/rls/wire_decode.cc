#include "control/rls/wire_decode.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/stubs/common.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace dripgate::control::wire {
namespace {

namespace pb = google::protobuf;

// protobuf's default recursion limit: deeper input is refused by its parser too.
constexpr int kMaxDepth = 100;

std::string join(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

// A walk over the wire format of one message, with its descriptor for the names and for what
// protobuf checks inside a field (nested messages, UTF-8 of proto3 strings). It stops at the
// first problem and keeps its description; offsets are from the message's first byte.
class Walk {
 public:
  explicit Walk(std::string_view in) : in_(in) {}

  // The fields in [at, end) of a `type` message (null: a group or an unknown field, walked for
  // structure only) at `path`. `group`: the field number whose end-group tag closes these
  // fields, its start tag at `group_at` (0: none, the fields run to `end`).
  bool fields(const pb::Descriptor* type, size_t& at, size_t end, const std::string& path,
              int group, size_t group_at, int depth) {
    if (depth > kMaxDepth) return fail(path, "nested more than 100 deep", at);
    std::map<int, int> seen;  // each repeated field's occurrences so far: its next [index]
    while (at < end) {
      const size_t field_at = at;
      auto tag = varint(at, end, path);
      if (!tag) return false;
      if (*tag > UINT32_MAX) return fail(path, "tag out of range", field_at);
      const int number = static_cast<int>(*tag >> 3), wire_type = static_cast<int>(*tag & 7);
      if (number == 0) return fail(path, "field number 0", field_at);
      const pb::FieldDescriptor* f = type ? type->FindFieldByNumber(number) : nullptr;
      std::string fpath = join(path, f ? f->name() : "field " + std::to_string(number));
      if (f && f->is_repeated()) fpath += "[" + std::to_string(seen[number]++) + "]";
      switch (wire_type) {
        case 0:
          if (!varint(at, end, fpath)) return false;
          break;
        case 1:
        case 5:
          if (end - at < (wire_type == 1 ? 8u : 4u))
            return fail(fpath, wire_type == 1 ? "truncated fixed64" : "truncated fixed32",
                        field_at);
          at += wire_type == 1 ? 8 : 4;
          break;
        case 2:
          if (!length_delimited(f, at, end, fpath, depth)) return false;
          break;
        case 3: {
          const bool typed = f && f->type() == pb::FieldDescriptor::TYPE_GROUP;
          if (!fields(typed ? f->message_type() : nullptr, at, end, fpath, number, field_at,
                      depth + 1))
            return false;
          break;
        }
        case 4:
          if (number != group)
            return fail(fpath,
                        group ? "end-group tag inside the group of field " + std::to_string(group)
                              : std::string("end-group tag without its start-group tag"),
                        field_at);
          return true;
        default:
          return fail(fpath, "invalid wire type " + std::to_string(wire_type), field_at);
      }
    }
    if (group) return fail(path, "group without its end-group tag", group_at);
    return true;
  }

  const std::string& problem() const { return problem_; }

 private:
  bool fail(const std::string& path, const std::string& what, size_t at) {
    problem_ = (path.empty() ? "" : path + ": ") + what + " at byte " + std::to_string(at);
    return false;
  }

  // The varint at `at`, which moves past it.
  std::optional<uint64_t> varint(size_t& at, size_t end, const std::string& path) {
    const size_t start = at;
    uint64_t v = 0;
    for (int i = 0; i < 10; ++i) {
      if (at >= end) {
        fail(path, "truncated varint", start);
        return std::nullopt;
      }
      auto b = static_cast<uint8_t>(in_[at++]);
      v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if (!(b & 0x80)) return v;
    }
    fail(path, "varint longer than 10 bytes", start);
    return std::nullopt;
  }

  // A length and that many bytes: a nested message is walked, a proto3 string's bytes must be
  // UTF-8 (protobuf's own check, so this finds what its parser refused).
  bool length_delimited(const pb::FieldDescriptor* f, size_t& at, size_t end,
                        const std::string& path, int depth) {
    const size_t len_at = at;
    auto len = varint(at, end, path);
    if (!len) return false;
    if (*len > end - at)
      return fail(path,
                  "length " + std::to_string(*len) + " runs past the end (" +
                      std::to_string(end - at) + " bytes left)",
                  len_at);
    const size_t body = at, body_end = at + *len;
    at = body_end;
    if (!f) return true;
    if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
      size_t p = body;
      return fields(f->message_type(), p, body_end, path, 0, 0, depth + 1);
    }
    if (f->type() == pb::FieldDescriptor::TYPE_STRING &&
        f->file()->syntax() == pb::FileDescriptor::SYNTAX_PROTO3 &&
        !pb::internal::IsStructurallyValidUTF8(in_.data() + body, static_cast<int>(*len)))
      return fail(path, "invalid UTF-8 in a string field", body);
    return true;
  }

  std::string_view in_;
  std::string problem_;
};

}  // namespace

std::string undecodable(const pb::Descriptor& type, std::string_view bytes) {
  Walk walk(bytes);
  size_t at = 0;
  if (!walk.fields(&type, at, bytes.size(), "", 0, 0, 0)) return walk.problem();
  // The walk checks what protobuf's parser checks; should they ever differ, still an answer.
  return "not a valid message";
}

grpc::Status decode(const grpc::ByteBuffer& in, pb::Message& out) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (in.Dump(&slices).ok())
    for (const grpc::Slice& s : slices)
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (out.ParseFromString(bytes)) return grpc::Status::OK;
  const pb::Descriptor& type = *out.GetDescriptor();
  return {grpc::StatusCode::INVALID_ARGUMENT,
          "malformed " + type.full_name() + ": " + undecodable(type, bytes)};
}

void encode(const pb::Message& m, grpc::ByteBuffer& out) {
  bool own_buffer = false;
  grpc::SerializationTraits<pb::Message>::Serialize(m, &out, &own_buffer);
}

}  // namespace dripgate::control::wire
