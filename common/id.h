// The one identifier rule of dripgate: tenants, users, API keys, models, tools, plans and
// classes are `[A-Za-z0-9._-]{1,64}`. Every id that reaches a Redis key passes it, so no input
// can name another tenant's key (no `{`, `}`, `:` or spaces).
#pragma once

#include <string_view>

namespace dripgate::common {

bool valid_id(std::string_view id);

}  // namespace dripgate::common
