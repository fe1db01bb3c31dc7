// Every use of hiredis 0.14's own struct layout, in one place: the reply-building functions a
// reader takes (reply_arena.cc), the event hooks and fields of an async context
// (redis_client.cc). The rest of the client uses hiredis's public calls only, which 1.x keeps.
//
// For hiredis 1.x (Debian 13 ships 1.2), change this file and meson's version pin:
// * redisReplyObjectFunctions gains createDouble(task, double, char*, size_t) after
//   createInteger and createBool(task, int) after createNil (RESP3), and createArray takes the
//   element count as size_t: ReplyArrayCount becomes size_t and reply_functions() fills the
//   two new fields (a double or bool reply made like an integer; RESP2, which the daemon
//   speaks, sends neither).
// * an async context's `ev` gains scheduleTimer(privdata, timeval); install_events() sets it to
//   nullptr (the client keeps its own deadlines on the loop).
// * redisReadTask's `elements` becomes long long; reply_arena.cc reads only type, idx, obj,
//   parent and privdata, which stay.
#pragma once

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

static_assert(HIREDIS_MAJOR == 0 && HIREDIS_MINOR >= 14,
              "control/redis/hiredis_shim.h is written for hiredis 0.14; see its comment for 1.x");

namespace dripgate::control::hiredis {

// The type of createArray's element count.
using ReplyArrayCount = int;

// The reader's reply functions, in 0.14's field order.
inline redisReplyObjectFunctions reply_functions(
    void* (*create_string)(const redisReadTask*, char*, size_t),
    void* (*create_array)(const redisReadTask*, ReplyArrayCount),
    void* (*create_integer)(const redisReadTask*, long long),
    void* (*create_nil)(const redisReadTask*), void (*free_object)(void*)) {
  return {create_string, create_array, create_integer, create_nil, free_object};
}

// Replaces an async context's event hooks; data is handed to each, and cleanup runs when
// hiredis frees the context.
struct EventHooks {
  void (*add_read)(void*);
  void (*del_read)(void*);
  void (*add_write)(void*);
  void (*del_write)(void*);
  void (*cleanup)(void*);
};
inline void install_events(redisAsyncContext* ac, void* data, const EventHooks& h) {
  ac->ev.data = data;
  ac->ev.addRead = h.add_read;
  ac->ev.delRead = h.del_read;
  ac->ev.addWrite = h.add_write;
  ac->ev.delWrite = h.del_write;
  ac->ev.cleanup = h.cleanup;
}

inline int socket_of(const redisAsyncContext* ac) {
  return ac->c.fd;
}
inline redisReader* reader_of(redisAsyncContext* ac) {
  return ac->c.reader;
}
// Being torn down by hiredis (an error, an EOF, or redisAsyncFree).
inline bool closing(const redisAsyncContext* ac) {
  return ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING);
}

}  // namespace dripgate::control::hiredis
