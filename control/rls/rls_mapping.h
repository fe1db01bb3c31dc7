// Envoy's rate-limit request -> one admission, and the admission's result -> one status per
// descriptor. Plain structs, no protobuf: the gRPC service (rls_service.cc) copies the messages
// in and out, this file decides what they mean.
//
// A domain maps Envoy's descriptor keys to gates (control.rls.domains); the entries of all the
// descriptors of a request together name the tenant, user, api_key, client_ip (gate ip), model
// and tool of one all-or-nothing admission, whose cost is hits_addend (1 request for the buckets,
// hits_addend tokens for the quota).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "control/admission/admission.h"

namespace dripgate::control::rls {

struct Entry {
  std::string key;
  std::string value;
};

struct Descriptor {
  std::vector<Entry> entries;
  std::optional<uint64_t> hits_addend;  // the descriptor's own cost, when Envoy sets one
};

struct Request {
  std::string domain;
  std::vector<Descriptor> descriptors;
  uint32_t hits_addend = 0;
};

// Why a request is not admitted: the message is malformed (kInvalid: gRPC INVALID_ARGUMENT), or
// it names a domain or descriptor key the configuration does not know (kUnknown: answered with
// the overall code UNKNOWN and this text, so Envoy applies its failure mode and the operator
// sees why). `field` is the message path, e.g. "descriptors[1].entries[0].key".
struct Problem {
  enum class Kind { kInvalid, kUnknown };
  Kind kind = Kind::kInvalid;
  std::string field;
  std::string message;
  std::string str() const { return field + ": " + message; }
};

// domain -> { descriptor key -> gate }, as config::Control::rls_domains.
using Domains = std::map<std::string, std::map<std::string, std::string>>;

// The admission a request asks for, and per descriptor the gates its entries named.
struct Mapped {
  AdmitRequest admit;
  std::vector<std::vector<std::string>> gates;
};

// The first problem found, or nullopt with `out` filled. A gate named twice must be named with
// the same value; a request must name its tenant.
std::optional<Problem> map_request(const Domains& domains, const Request& req, Mapped& out);

// A descriptor's status: over the limit when one of its gates refused; `gate` is the gate it
// reports (the refusing one, else the one with the least left; empty when the result holds none).
struct Status {
  bool over_limit = false;
  std::string gate;
  int64_t limit = 0;      // the gate's capacity (buckets), tokens a month (quota), streams
  int64_t remaining = 0;  // whole units left after the decision
  int64_t reset_s = 0;    // over the limit: until a retry can pass; otherwise: until full again
  double window_s = 0;    // the gate's policy window
};

// One per descriptor of `m`, in order; for an allowed or refused result.
std::vector<Status> statuses(const Mapped& m, const AdmitResult& r);

}  // namespace dripgate::control::rls
