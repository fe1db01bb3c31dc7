// Builds the replies of one hiredis reader in a per-connection buffer. hiredis's default reply
// functions make a heap object per reply element (a calloc for the reply, a malloc for its
// string, a calloc for an array's element pointers) and free them one by one after the callback,
// several allocations per admission on the request path. hiredis
// takes custom redisReplyObjectFunctions (their layout is hiredis_shim.h's), so the same redisReply
// structs are laid out here instead, in a std::pmr::monotonic_buffer_resource over a buffer the
// arena owns: building a reply is a pointer bump, and the buffer is rewound when the reader starts
// the next reply.
//
// Why rewinding at the next reply is safe: hiredis's async loop hands a finished reply to its
// callback and frees it before it parses the next one, and a reply is never used after its
// callback returned (the default functions free it then), so when the reader starts a new
// top-level reply (a read task without a parent) nothing points into the arena any more.
// freeObject is therefore a no-op: a partial reply dropped with its reader (an error, a
// disconnect) is just left behind and overwritten by the next reply. A reply larger than the
// buffer takes memory from the upstream resource, which the rewind gives back.
//
// The arena must outlive every reader attached to it; two readers may share one only if at most
// one of them still parses (a connection being torn down beside its replacement). Not
// thread-safe.
#pragma once

#include <hiredis/hiredis.h>

#include <cstddef>
#include <memory_resource>

#include "control/redis/hiredis_shim.h"

namespace dripgate::control {

class ReplyArena {
 public:
  // Bytes held by the arena itself: the admit call's reply (about 20 short elements) and the
  // other calls' replies fit, so the steady state allocates nothing.
  static constexpr size_t kBuffer = 4096;

  explicit ReplyArena(std::pmr::memory_resource* upstream = std::pmr::new_delete_resource());
  ReplyArena(const ReplyArena&) = delete;
  ReplyArena& operator=(const ReplyArena&) = delete;

  // From now on `reader` builds its replies in this arena; they stay valid until the reader
  // starts its next reply.
  void attach(redisReader* reader);

  // The functions attach() installs (reader->privdata must be the arena).
  static redisReplyObjectFunctions functions;

 private:
  static void* create_string(const redisReadTask* task, char* str, size_t len);
  static void* create_array(const redisReadTask* task, hiredis::ReplyArrayCount elements);
  static void* create_integer(const redisReadTask* task, long long value);
  static void* create_nil(const redisReadTask* task);
  static void free_object(void* reply);

  // A new reply of `type` linked into its parent's element array; nullptr when out of memory
  // (hiredis turns that into a reader error).
  static redisReply* make(const redisReadTask* task, int type, size_t extra);

  alignas(std::max_align_t) std::byte buffer_[kBuffer];
  std::pmr::monotonic_buffer_resource mem_;
};

}  // namespace dripgate::control
