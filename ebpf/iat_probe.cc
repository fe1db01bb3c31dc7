#include "ebpf/iat_probe.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

// The generated skeleton is C; it trips -Wextra in C++ (missing initializers, casts).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#include "ebpf/iat.skel.h"
#pragma GCC diagnostic pop

namespace dripgate::ebpf {

IatProbe::IatProbe(const Options& options)
    : options_(options), attachments_(TcSlot{options.tc_handle, options.tc_priority}) {
  iat_filter filter = options.filter.to_bpf();  // validates before touching the kernel
  install_libbpf_print();
  skel_ = iat__open();
  if (!skel_) throw_errno("cannot open the BPF probe object", errno);
  skel_->rodata->cfg_filter = filter;
  for (unsigned i = 0; i < IAT_WINDOWS; ++i)
    skel_->rodata->cfg_window_ns[i] = options.windows_ns[i];
  skel_->rodata->cfg_use_skb_tstamp = options.use_skb_tstamp ? 1 : 0;
  if (int err = iat__load(skel_); err != 0) {
    iat__destroy(skel_);
    skel_ = nullptr;
    std::string what = "cannot load the BPF probe";
    // The probe needs neither kernel BTF nor bpffs (no CO-RE, nothing pinned); an old kernel
    // is the usual cause of EINVAL here.
    if (err == -EINVAL || err == -ENOTSUP || err == -EOPNOTSUPP)
      what +=
          " (needs Linux >= 5.12: BPF atomic exchange and compare-and-swap, mmap-able global data;"
          " the verifier log above says which instruction failed)";
    throw_errno(what, err);
  }
}

IatProbe::~IatProbe() {
  detach();
  if (skel_) iat__destroy(skel_);
}

int IatProbe::tc_prog_fd() const {
  return bpf_program__fd(skel_->progs.iat_tc);
}
int IatProbe::xdp_prog_fd() const {
  return bpf_program__fd(skel_->progs.iat_xdp);
}
uint32_t IatProbe::tc_prog_id() const {
  return prog_id(tc_prog_fd());
}
uint32_t IatProbe::xdp_prog_id() const {
  return prog_id(xdp_prog_fd());
}

void IatProbe::attach_tc(const Interface& at, Direction dir) {
  attachments_.attach_tc(tc_prog_fd(), at, dir);
}

void IatProbe::attach_xdp(const Interface& at, uint32_t flags) {
  attachments_.attach_xdp(xdp_prog_fd(), at, flags);
}

void IatProbe::detach() noexcept {
  attachments_.detach();
}

Counters IatProbe::snapshot() const {
  Counters s;
  // The .bss is mmap'ed; counters are read while the probe may update them, each u64 is read
  // whole (aligned), so a snapshot is at worst a few packets out of step between fields.
  const auto* bss = skel_->bss;
  std::memcpy(&s.totals, &bss->totals, sizeof(s.totals));
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) throw_errno("cannot count the possible CPUs", ncpu);
  std::vector<iat_cpu_counters> cpus(static_cast<size_t>(ncpu));
  static_assert(sizeof(iat_cpu_counters) % 8 == 0, "per-CPU values are 8-byte aligned");
  uint32_t key = 0;
  if (int err = bpf_map_lookup_elem(bpf_map__fd(skel_->maps.iat_cpu), &key, cpus.data()); err != 0)
    throw_errno("cannot read the per-CPU counters", err);
  s.totals.packets = s.totals.bytes = s.totals.filtered_out = 0;
  for (const iat_cpu_counters& c : cpus) {
    s.totals.packets += c.packets;
    s.totals.bytes += c.bytes;
    s.totals.filtered_out += c.filtered_out;
    for (unsigned b = 0; b < IAT_BUCKETS; ++b) s.hist[b] += c.hist[b];
  }
  static_assert(sizeof(s.count_hist) == sizeof(bss->count_hist));
  std::memcpy(s.count_hist.data(), bss->count_hist, sizeof(bss->count_hist));
  for (unsigned i = 0; i < IAT_WINDOWS; ++i) {
    const iat_window_state& st = bss->win[i];
    const uint64_t state =
        __atomic_load_n(&st.state, __ATOMIC_RELAXED);  // index and count together
    iat_window& w = s.windows[i];
    w.width_ns = options_.windows_ns[i];
    w.cur_count = state & IAT_WIN_COUNT_MASK;
    // The state keeps the window index modulo 2^40 only; the last packet is in the open window.
    if (w.width_ns && w.cur_count)
      w.cur_start_ns = s.totals.last_ns - s.totals.last_ns % w.width_ns;
    w.max_count = st.max_count;
    w.windows = st.windows;
    s.window_lost[i] = st.lost;
  }
  return s;
}

std::array<uint64_t, IAT_WINDOWS> IatProbe::take_window_peaks() {
  std::array<uint64_t, IAT_WINDOWS> peaks{};
  // The .bss is shared with the programs: an atomic exchange here and their compare-and-swap
  // there see each other whole.
  for (unsigned i = 0; i < IAT_WINDOWS; ++i)
    peaks[i] = __atomic_exchange_n(&skel_->bss->win[i].max_count, uint64_t{0}, __ATOMIC_RELAXED);
  return peaks;
}

}  // namespace dripgate::ebpf
