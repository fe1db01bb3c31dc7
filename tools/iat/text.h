// The human report of a profile: figures plus bpftrace-style histograms merged to powers of two.
#pragma once

#include <string>

#include "tools/iat/profile.h"

namespace dripgate::iat {

std::string render_text(const Profile& p);

}  // namespace dripgate::iat
