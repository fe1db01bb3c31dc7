// The Prometheus text exposition format (version 0.0.4), read for one metric: what a model
// gate's saturation follows (config::Saturation), e.g. vLLM's `vllm:num_requests_waiting`.
// Only what that needs: sample lines `name{label="value",...} value [timestamp]`, comments
// and blank lines skipped; every sample line is checked, so a body that is not the format
// (an HTML error page served with 200) is an error, not a metric found absent. Linear in the
// body, no allocation per line beyond the matching series' labels.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dripgate::common {

// A metric name and label equalities: `vllm:num_requests_waiting{model_name="llama"}`. A
// series matches when it has the name and every listed label with that value (it may have
// more labels).
struct PromSelector {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;

  bool operator==(const PromSelector&) const = default;
};

// `text` parsed; on failure nullopt and, when why is given, what is wrong.
std::optional<PromSelector> parse_prom_selector(std::string_view text, std::string* why = nullptr);

// How the values of several matching series make one signal.
enum class PromAggregate { kMax, kSum };
// "max", "sum".
std::string_view prom_aggregate_name(PromAggregate a);
std::optional<PromAggregate> parse_prom_aggregate(std::string_view name);

struct PromReading {
  enum class Status {
    kOk,      // value holds the aggregate
    kParse,   // a line is not the format (error says which and why)
    kAbsent,  // no series matches
    kNan,     // every matching series is NaN
  };
  Status status = Status::kAbsent;
  double value = 0;
  size_t series = 0;  // matching series, NaN ones included
  std::string error;
};

// The aggregate over the series of `body` that `sel` matches; NaN samples are left out of it
// (a gauge not measured yet), +Inf and -Inf are values like any other.
PromReading read_prom_metric(std::string_view body, const PromSelector& sel, PromAggregate agg);

}  // namespace dripgate::common
