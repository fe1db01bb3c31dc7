// The Prometheus text exposition format (version 0.0.4), read for one metric: what a model
// gate's saturation follows (config::Saturation), e.g. vLLM's `vllm:num_requests_waiting`; or
// for a few metrics' series with their labels (the status page's dataplane and receiver).
// Only what that needs: sample lines `name{label="value",...} value [timestamp]`, comments
// and blank lines skipped; every sample line is checked, so a body that is not the format
// (an HTML error page served with 200) is an error, not a metric found absent. Linear in the
// body, no allocation per line beyond the matching series' labels.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
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

// One sample of a metric with its labels, in the order the body gives them.
struct PromSample {
  std::string_view name;  // one of the names asked for
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

// Every sample of `body` whose metric name is in `names` (a histogram's series by their own
// names: `x_bucket`, `x_sum`), into out; "" when the body is the format, else why not (out
// empty).
std::string read_prom_samples(std::string_view body, std::span<const std::string_view> names,
                              std::vector<PromSample>& out);

}  // namespace dripgate::common
