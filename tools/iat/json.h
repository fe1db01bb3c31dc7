// A profile as JSON, every figure and the raw buckets: what `--json` writes and `compare` reads.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "tools/iat/profile.h"

namespace dripgate::iat {

nlohmann::json to_json(const Profile& p);
// Reads what to_json wrote; throws std::runtime_error naming the missing or bad field.
Profile from_json(const nlohmann::json& j);

}  // namespace dripgate::iat
