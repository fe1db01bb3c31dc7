// The Prometheus text exposition format (version 0.0.4), written: families with their HELP and
// TYPE lines, samples with escaped label values, histograms from cumulative bucket counts. What
// the dataplane's /metrics and dripgate-iat's `serve` render; the control daemon's registry
// (control/metrics/) writes its families' series itself, with the escaping, the numbers and the
// HELP/TYPE lines from here.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dripgate::common {

// The parts of the format every writer of it here shares, the control daemon's registry
// (control/metrics/) among them, which writes its families' series itself.
// `v` escaped as a label value (backslash, double quote, newline) or, with label_value false, as
// HELP text (backslash, newline).
void append_prom_escaped(std::string& out, std::string_view v, bool label_value);
// `# HELP name help` and `# TYPE name type` (counter, gauge, histogram).
void append_prom_family(std::string& out, std::string_view name, std::string_view type,
                        std::string_view help);

class PromWriter {
 public:
  using Label = std::pair<std::string_view, std::string_view>;
  // Labels with an empty value are left out: in Prometheus an empty label is no label.
  using Labels = std::initializer_list<Label>;

  // `# HELP name help` and `# TYPE name type` (counter, gauge, histogram); each family once,
  // before its samples.
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, Labels labels, uint64_t value);
  void sample(std::string_view name, Labels labels, double value);

  // One histogram's series under `labels`: name_bucket{le} for each upper bound (ascending) with
  // its cumulative count, le="+Inf" with `count`, then name_sum and name_count.
  void histogram(std::string_view name, Labels labels, const std::vector<double>& bounds,
                 const std::vector<uint64_t>& cumulative, double sum, uint64_t count);

  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }

  // A sample value or an `le` bound as the format spells it: the shortest decimal that reads
  // back as the same double, in printf's %g style (0.0001, 1e-05: as Prometheus's own client
  // libraries write them), "+Inf", "-Inf", "NaN".
  static std::string number(double v);

 private:
  void series(std::string_view name, Labels labels, std::string_view le = {});
  std::string out_;
};

}  // namespace dripgate::common
