// What a test keeps of one asynchronous Redis reply (RedisClient, RedisCluster): into(result)
// is the callback that fills it.
#pragma once

#include <hiredis/hiredis.h>

#include <functional>
#include <string>
#include <string_view>

namespace dripgate::testing {

struct RedisResult {
  bool done = false;
  int type = 0;
  std::string str;  // a string, status or error reply
  long long integer = 0;
  std::string error;  // why no reply came

  std::function<void(const redisReply*, std::string_view)> into() {
    return [this](const redisReply* r, std::string_view why) {
      done = true;
      error = std::string(why);
      if (!r) return;
      type = r->type;
      if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
          r->type == REDIS_REPLY_ERROR)
        str.assign(r->str, r->len);
      if (r->type == REDIS_REPLY_INTEGER) integer = r->integer;
    };
  }
};

}  // namespace dripgate::testing
