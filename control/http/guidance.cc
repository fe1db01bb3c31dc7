#include "control/http/guidance.h"

#include <ctime>

#include <fmt/format.h>

namespace dripgate::control::guidance {

std::string_view action(const AdmitResult& r) {
  if (r.reason == "quota") return "stop";
  if (r.reason == "concurrency") return "wait_for_stream";
  if (r.reason == "reservations") return "settle_open_requests";
  if (r.gate == "tool") return "skip_tool";
  return "backoff";
}

std::string utc_iso8601(int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

// A quota's periods begin at a local midnight (or hour) of the plan's quota_timezone, on a
// quarter hour in UTC (every zone's offset is a multiple of 15 minutes: +05:30, +05:45), a
// minute quota's on a minute: the reset time of the refusing quota, read as now + the seconds
// Redis says are left, is rounded to it, so clock skew between the gateway and Redis does not
// show.
int64_t quota_reset_at(const AdmitResult& r, int64_t now_s) {
  const int64_t step = r.gate == "quota_minute" ? 60 : 900;
  for (const Remaining& q : r.remaining)
    if (q.gate == r.gate) return (now_s + q.reset_s + step / 2) / step * step;
  return 0;
}

// How the refusing quota is named in a sentence: "monthly" for "quota", "daily" for "quota_day".
std::string_view period_word(std::string_view gate) {
  if (gate == "quota_minute") return "per-minute";
  if (gate == "quota_hour") return "hourly";
  if (gate == "quota_day") return "daily";
  if (gate == "quota_week") return "weekly";
  return "monthly";
}

std::string sentence(const AdmitResult& r, std::string_view act, int64_t reset_at) {
  const int64_t ms = r.retry_after_ms;
  if (act == "stop") {
    std::string s = fmt::format(
        "The plan's {} LLM-token quota is spent: this request needs {} tokens more than "
        "are left, and retrying will not help before the quota resets at {}.",
        period_word(r.gate), r.tokens_missing, utc_iso8601(reset_at));
    if (!r.degrade_model.empty()) s += fmt::format(" Use model {} instead.", r.degrade_model);
    if (!r.upgrade_url.empty()) s += fmt::format(" Upgrade the plan at {}.", r.upgrade_url);
    return s;
  }
  if (act == "wait_for_stream")
    return fmt::format(
        "All of the tenant's concurrent streams are in use: retry when one ends (released or "
        "settled), at the latest in {} ms when the oldest lease runs out.",
        ms);
  if (act == "settle_open_requests")
    return "Too many admitted requests are not settled yet: settle or release the finished "
           "ones, then retry (unsettled ones lapse after the plan's reservation_ttl_s).";
  if (act == "skip_tool")
    return fmt::format(
        "This tool is rate-limited for all tenants: use another tool or go on without it; it "
        "has room again in {} ms.",
        ms);
  std::string s = fmt::format(
      "The {} rate limit is reached: wait {} ms before retrying, then, if refused again, back "
      "off exponentially (doubling, full jitter, at most {} s).",
      r.gate, ms, kMaxBackoffMs / 1000);
  if (!r.degrade_model.empty()) s += fmt::format(" Or use model {}.", r.degrade_model);
  return s;
}

}  // namespace

void write(JsonWriter& w, const AdmitResult& r, int64_t now_s) {
  const std::string_view act = action(r);
  const int64_t reset_at = act == "stop" ? quota_reset_at(r, now_s) : 0;
  w.key("guidance").begin_object();
  w.key("action").string(act).key("retry").boolean(act != "stop");
  if (act == "backoff" || act == "skip_tool" || act == "wait_for_stream") {
    w.key("backoff").begin_object();
    w.key("initial_ms").integer(std::max<int64_t>(r.retry_after_ms, 1));
    w.key("multiplier").integer(2).key("max_ms").integer(kMaxBackoffMs);
    w.key("jitter").string("full").end_object();
  }
  if (act == "stop") {
    w.key("tokens_missing").integer(r.tokens_missing);
    w.key("resets_at").string(utc_iso8601(reset_at));
    w.key("resets_in_s").integer(std::max<int64_t>(0, reset_at - now_s));
  }
  if (!r.degrade_model.empty()) w.key("fallback_model").string(r.degrade_model);
  if (!r.upgrade_url.empty()) w.key("upgrade_url").string(r.upgrade_url);
  w.key("message").string(sentence(r, act, reset_at));
  w.end_object();
}

}  // namespace dripgate::control::guidance
