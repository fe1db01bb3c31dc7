// Redis key names. Every tenant-scoped key carries the tenant as its hash tag ({t:<tenant>}),
// so one admission touches one cluster slot; global gates carry their own tag. Callers pass
// validated ids only ([A-Za-z0-9._-]), so no input can name a key outside its tenant's slot.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dripgate::control::keys {

// "dg:{t:<tenant>}:" — the prefix every tenant-scoped key starts with.
std::string tenant_prefix(std::string_view tenant);
// "dg:{t:<tenant>}:tb:<gate>" for gate "tenant", "dg:{t:<tenant>}:tb:<gate>:<id>" otherwise
// (gate "user", "key" for api keys, "ip" for a client address as common::client_ip_key
// writes it: the tenant's hash tag keeps the ip gate in the tenant's one admit.lua call).
std::string bucket(std::string_view tenant, std::string_view gate, std::string_view id = {});
// "dg:{t:<tenant>}:q:"; the script appends the UTC month "YYYY-MM" of Redis TIME.
std::string quota_prefix(std::string_view tenant);
// "dg:{t:<tenant>}:q:<YYYY-MM>" (for tests and tools; the engine never builds it).
std::string quota(std::string_view tenant, std::string_view month);
// A UTC calendar month: "YYYY-MM", its first second and the next month's (unix s), as strings
// for admit.lua, which takes them as a hint and keeps Redis TIME the judge of the month.
struct Month {
  std::string name, start_s, end_s;
  int64_t start = 0, end = 0;
};
Month month_of(int64_t unix_s);
// The month of the system clock, kept per thread until it ends (no formatting per request).
const Month& current_month();
// "dg:{t:<tenant>}:r:": the reservation windows' prefix; the scripts append "<ttl>:<window>"
// (lua/lib_reservation.lua).
std::string reservations(std::string_view tenant);
// "dg:{t:<tenant>}:leases"
std::string leases(std::string_view tenant);
// "dg:{g:<kind>:<name>}:tb", kind "model" or "tool".
std::string global_bucket(std::string_view kind, std::string_view name);
// "dg:{g:total}:tb": the bucket of every admission of every tenant.
std::string total_bucket();
// "dg:{g:total}:a:<attempt>": as global_attempt, when the total gate is the call's first bucket.
std::string total_attempt(std::string_view attempt);
// "dg:{g:<kind>:<name>}:a:<attempt>": what became of one gates.lua call (ran, undone,
// cancelled), in the slot of its first bucket.
std::string global_attempt(std::string_view kind, std::string_view name, std::string_view attempt);

// The tenant of an engine-generated request id "<tenant>.<16 hex>": everything before the last
// '.', or empty when the id has no '.'.
std::string_view tenant_of_request_id(std::string_view request_id);

}  // namespace dripgate::control::keys
