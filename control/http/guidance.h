// What a refused client is told to do, by the refusal's reason: machine-readable fields and one
// human sentence, as the `guidance` object of a 429 (api.cc). Clients of an LLM gateway differ
// in what helps: a rate limit passes (back off), a spent quota does not (stop, or degrade), a
// busy tool can be skipped, a full set of streams frees up when one ends.
#pragma once

#include <cstdint>
#include <string>

#include "common/json_writer.h"
#include "control/admission/admission.h"

namespace dripgate::control::guidance {

// Exponential back-off beyond retry_after_ms: each further refusal doubles the wait, drawn
// with full jitter (uniform in [0, wait]), up to this.
inline constexpr int64_t kMaxBackoffMs = 60000;

// "backoff" | "stop" | "skip_tool" | "wait_for_stream" | "settle_open_requests"
std::string_view action(const AdmitResult& r);

// Writes `"guidance": {...}` for a refusal r at unix time now_s (when the quota resets is said
// as a UTC time).
void write(JsonWriter& w, const AdmitResult& r, int64_t now_s);

// "YYYY-MM-DDTHH:MM:SSZ"
std::string utc_iso8601(int64_t unix_s);

}  // namespace dripgate::control::guidance
