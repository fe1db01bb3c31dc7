#include "control/redis/reply_arena.h"

#include <cstring>
#include <new>

namespace dripgate::control {

redisReplyObjectFunctions ReplyArena::functions = hiredis::reply_functions(
    &ReplyArena::create_string, &ReplyArena::create_array, &ReplyArena::create_integer,
    &ReplyArena::create_nil, &ReplyArena::free_object);

ReplyArena::ReplyArena(std::pmr::memory_resource* upstream)
    : mem_(buffer_, sizeof buffer_, upstream) {}

void ReplyArena::attach(redisReader* reader) {
  reader->fn = &functions;
  reader->privdata = this;
}

redisReply* ReplyArena::make(const redisReadTask* task, int type, size_t extra) {
  auto* self = static_cast<ReplyArena*>(task->privdata);
  if (!task->parent) self->mem_.release();  // a new top-level reply: the last one is done
  void* p;
  try {
    // The string or the element pointers follow the reply in the same block.
    p = self->mem_.allocate(sizeof(redisReply) + extra, alignof(redisReply));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  auto* r = static_cast<redisReply*>(p);
  *r = redisReply{};
  r->type = type;
  if (task->parent) {
    auto* parent = static_cast<redisReply*>(task->parent->obj);
    parent->element[task->idx] = r;
  }
  return r;
}

void* ReplyArena::create_string(const redisReadTask* task, char* str, size_t len) {
  redisReply* r = make(task, task->type, len + 1);
  if (!r) return nullptr;
  r->str = reinterpret_cast<char*>(r + 1);
  std::memcpy(r->str, str, len);
  r->str[len] = '\0';
  r->len = len;
  return r;
}

void* ReplyArena::create_array(const redisReadTask* task, hiredis::ReplyArrayCount elements) {
  size_t n = elements > 0 ? static_cast<size_t>(elements) : 0;
  redisReply* r = make(task, REDIS_REPLY_ARRAY, n * sizeof(redisReply*));
  if (!r) return nullptr;
  // As hiredis's own: no element array for an empty one (its elements are filled in as they
  // are read, so a partial reply never holds a stray pointer).
  if (n > 0) {
    r->element = reinterpret_cast<redisReply**>(r + 1);
    std::memset(r->element, 0, n * sizeof(redisReply*));
  }
  r->elements = n;
  return r;
}

void* ReplyArena::create_integer(const redisReadTask* task, long long value) {
  redisReply* r = make(task, REDIS_REPLY_INTEGER, 0);
  if (r) r->integer = value;
  return r;
}

void* ReplyArena::create_nil(const redisReadTask* task) {
  return make(task, REDIS_REPLY_NIL, 0);
}

void ReplyArena::free_object(void*) {}

}  // namespace dripgate::control
