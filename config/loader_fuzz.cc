// libFuzzer target: arbitrary bytes as a config file. load_string must return (never crash,
// never throw); what it accepts must survive to_yaml() -> load_string() unchanged, and every
// error must carry a message. Run: tools/fuzz.sh config_loader 30 config/loader_fuzz.cc ...
// (the meson test `config_loader_fuzz` in suite 'fuzz' does it).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dripgate::config;
  const std::string text(reinterpret_cast<const char*>(data), size);
  LoadResult r = load_string(text, "fuzz.yaml");
  if (r.config.has_value() == !r.errors.empty()) std::abort();  // exactly one of the two
  for (const Error& e : r.errors) {
    if (e.message.empty() || e.str().empty()) std::abort();
  }
  if (r.config) {
    const std::string again = to_yaml(*r.config);
    LoadResult back = load_string(again, "fuzz.yaml");
    if (!back.config || !(*back.config == *r.config)) {
      std::fprintf(stderr, "round trip changed the config:\n%s\n", again.c_str());
      for (const Error& e : back.errors) std::fprintf(stderr, "%s\n", e.str().c_str());
      std::abort();
    }
  }
  return 0;
}
