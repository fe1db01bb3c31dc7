// Two profiles side by side: every figure of each, with the change from A to B.
#pragma once

#include <string>

#include "tools/iat/profile.h"

namespace dripgate::iat {

std::string render_compare(const Profile& a, const Profile& b, const std::string& name_a,
                           const std::string& name_b);

}  // namespace dripgate::iat
