// OpenAI's rate-limit headers (x-ratelimit-{limit,remaining,reset}-{requests,tokens}), written
// beside the IETF RateLimit fields so that clients built for OpenAI's API (and the proxies and
// SDK wrappers that pace on them) read dripgate's limits without knowing its headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "control/admission/admission.h"

namespace dripgate::control::api {

// The gates the headers speak for: of the request's plan, the request gate (tenant, user,
// api_key, ip) and the token-rate gate (tenant_tokens, user_tokens, api_key_tokens) with the
// lowest remaining, the one that binds first (on a tie, the one that takes longer to reset).
// The global gates are shared by every tenant, so not the client's own limit: they stay in the
// IETF fields. Null when the answer has no such gate.
struct OpenAiLimits {
  const Remaining* requests = nullptr;
  const Remaining* tokens = nullptr;
};
OpenAiLimits openai_limits(const std::vector<Remaining>& remaining);

// A duration as OpenAI's headers write it (Go's time.Duration text) to the millisecond: "0s",
// "20ms", "1s", "1.5s", "6m0s", "1h2m3.04s".
void append_go_duration(std::string& out, int64_t ms);
std::string go_duration(int64_t ms);

// How long until the gate is back to its full limit (ms): reset_ms, or reset_s when the gate
// knows it only to the second.
int64_t reset_ms_of(const Remaining& r);

}  // namespace dripgate::control::api
