// A profile as an SVG chart: the inter-arrival histogram on a log time axis, then one panel per
// burst window.
#pragma once

#include <string>

#include "tools/iat/profile.h"

namespace dripgate::iat {

std::string render_svg(const Profile& p);

}  // namespace dripgate::iat
