// The gRPC front decodes its requests itself: every method is registered raw (its request and
// answer are bytes, grpc::ByteBuffer), and decode() turns the bytes into the message.
//
// Why: a method registered with its message types has gRPC's callback handler parse the request
// before the method runs, and when the bytes are not that message the handler answers
// UNIMPLEMENTED with no message (the sync handler INTERNAL): the caller cannot tell bad input
// from a method the server lacks, nor what was wrong. decode() answers INVALID_ARGUMENT saying
// what could not be decoded, by its place (a field's path and a byte offset), never the bytes.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

namespace google::protobuf {
class Descriptor;
class Message;
}  // namespace google::protobuf

namespace dripgate::control::wire {

// The request in `in` as `out`; INVALID_ARGUMENT "malformed <message type>: <why>" otherwise.
grpc::Status decode(const grpc::ByteBuffer& in, google::protobuf::Message& out);

// `m` as the bytes of a call's answer.
void encode(const google::protobuf::Message& m, grpc::ByteBuffer& out);

// Why `bytes` are not a `type` message, for bytes protobuf's parser refused: the first thing it
// stops at (a truncated field or varint, a varint over 10 bytes, wire type 6 or 7, field
// number 0, a group without its end, invalid UTF-8 in a proto3 string, nesting over 100 deep) as
// "<field path>: <what> at byte <offset>", e.g. "descriptors[0].entries[1].key: invalid UTF-8 in
// a string field at byte 12". A field the type does not know is named by its number.
std::string undecodable(const google::protobuf::Descriptor& type, std::string_view bytes);

}  // namespace dripgate::control::wire
