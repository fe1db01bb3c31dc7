#include "tools/iat/pcap.h"

#include <pcap/pcap.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "tools/iat/builder.h"

namespace dripgate::iat {

namespace {

struct PcapCloser {
  void operator()(pcap_t* p) const { pcap_close(p); }
};
using PcapHandle = std::unique_ptr<pcap_t, PcapCloser>;

// Owns a compiled filter program; pcap_freecode only after a successful pcap_compile.
class FilterProgram {
 public:
  FilterProgram(pcap_t* p, const std::string& expr) {
    if (pcap_compile(p, &prog_, expr.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0)
      throw PcapError(fmt::format("filter '{}' does not parse: {}", expr, pcap_geterr(p)));
    compiled_ = true;
  }
  ~FilterProgram() {
    if (compiled_) pcap_freecode(&prog_);
  }
  FilterProgram(const FilterProgram&) = delete;
  FilterProgram& operator=(const FilterProgram&) = delete;
  bpf_program* get() { return &prog_; }

 private:
  bpf_program prog_{};
  bool compiled_ = false;
};

uint32_t load32(const unsigned char* p, bool swap) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return swap ? __builtin_bswap32(v) : v;
}
uint16_t load16(const unsigned char* p, bool swap) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return swap ? __builtin_bswap16(v) : v;
}

// libpcap scales every file to the precision asked for and does not say what the file held;
// the header does. pcap: the magic number; pcapng: if_tsresol of the first interface
// (default 10^-6). Returns 1 when it cannot tell.
uint64_t file_ts_resolution_ns(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char h[28];
  if (!f.read(reinterpret_cast<char*>(h), sizeof(h))) return 1;
  uint32_t magic;
  std::memcpy(&magic, h, 4);
  if (magic == 0xa1b2c3d4 || magic == 0xd4c3b2a1) return 1000;
  if (magic == 0xa1b23c4d || magic == 0x4d3cb2a1) return 1;
  if (magic != 0x0A0D0D0A) return 1;
  uint32_t bom;
  std::memcpy(&bom, h + 8, 4);
  const bool swap = bom == 0x4D3C2B1A;
  uint64_t off = load32(h + 4, swap);
  for (int blocks = 0; blocks < 16; ++blocks) {
    unsigned char bh[8];
    f.seekg(static_cast<std::streamoff>(off));
    if (!f.read(reinterpret_cast<char*>(bh), 8)) return 1;
    uint32_t type = load32(bh, swap), len = load32(bh + 4, swap);
    if (len < 12 || len > (1u << 24)) return 1;
    if (type != 1) {
      off += len;
      continue;
    }
    std::vector<unsigned char> body(len - 8);
    if (!f.read(reinterpret_cast<char*>(body.data()), static_cast<std::streamsize>(body.size())))
      return 1;
    size_t o = 8;  // linktype, reserved, snaplen
    while (o + 4 <= body.size() - 4) {
      uint16_t code = load16(&body[o], swap), olen = load16(&body[o + 2], swap);
      if (code == 0) break;
      if (code == 9 && olen >= 1 && o + 4 < body.size()) {
        unsigned v = body[o + 4];
        double per_s = (v & 0x80) ? std::ldexp(1.0, static_cast<int>(v & 0x7f))
                                  : std::pow(10.0, static_cast<double>(v));
        double ns = 1e9 / per_s;
        return ns < 1 ? 1 : static_cast<uint64_t>(std::llround(ns));
      }
      o += 4 + ((olen + 3u) & ~3u);
    }
    return 1000;
  }
  return 1;
}

}  // namespace

Profile profile_pcap(const std::string& path, const PcapOptions& options) {
  char err[PCAP_ERRBUF_SIZE] = {};
  PcapHandle p(
      pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err));
  if (!p) throw PcapError(fmt::format("cannot read capture '{}': {}", path, err));
  std::string source = "pcap " + path;
  if (!options.filter.empty()) {
    FilterProgram prog(p.get(), options.filter);
    if (pcap_setfilter(p.get(), prog.get()) != 0)
      throw PcapError(
          fmt::format("cannot apply filter '{}': {}", options.filter, pcap_geterr(p.get())));
    source += " filter '" + options.filter + "'";
  }
  ProfileBuilder builder(options.windows_ns);
  builder.set_ts_resolution_ns(file_ts_resolution_ns(path));
  builder.set_interval_ns(options.interval_ns);
  pcap_pkthdr* hdr = nullptr;
  const u_char* data = nullptr;
  for (;;) {
    int rc = pcap_next_ex(p.get(), &hdr, &data);
    if (rc == 1) {
      // With nanosecond precision requested, tv_usec holds nanoseconds.
      uint64_t ns = static_cast<uint64_t>(hdr->ts.tv_sec) * 1'000'000'000ull +
                    static_cast<uint64_t>(hdr->ts.tv_usec);
      builder.add(ns, hdr->len);
    } else if (rc == PCAP_ERROR_BREAK) {
      break;  // end of file
    } else if (rc == 0) {
      continue;  // cannot happen offline; harmless
    } else {
      throw PcapError(fmt::format("error reading '{}': {}", path, pcap_geterr(p.get())));
    }
  }
  return builder.finish(std::move(source), "pcap");
}

}  // namespace dripgate::iat
