#include "stoke/nn/layer_profile.hpp"

#include <algorithm>
#include <stdexcept>

namespace stoke::nn {

void LayerProfile::begin(std::string kind, Pass pass, StreamView stream) {
  stream.synchronize();  // what was queued before belongs to whoever queued it
  open_.push_back({std::move(kind), pass, Clock::now(), 0});
}

void LayerProfile::end(StreamView stream) {
  if (open_.empty()) throw std::logic_error("LayerProfile::end without a begin");
  stream.synchronize();
  Open call = std::move(open_.back());
  open_.pop_back();
  const double inclusive = std::chrono::duration<double>(Clock::now() - call.start).count();
  if (!open_.empty()) open_.back().nested += inclusive;
  Row& row = rows_[{call.kind, call.pass}];
  row.kind = call.kind;
  row.pass = call.pass;
  row.calls += 1;
  row.seconds += std::max(0.0, inclusive - call.nested);
}

std::vector<LayerProfile::Row> LayerProfile::rows() const {
  std::vector<Row> rows;
  rows.reserve(rows_.size());
  for (const auto& [_, row] : rows_) rows.push_back(row);
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  return rows;
}

double LayerProfile::total_seconds() const {
  double total = 0;
  for (const auto& [_, row] : rows_) total += row.seconds;
  return total;
}

void LayerProfile::clear() {
  open_.clear();
  rows_.clear();
}

std::string LayerProfile::kind_of(const std::string& description) {
  const std::size_t end = description.find_first_of("(\n");
  return description.substr(0, end);
}

std::string to_string(LayerProfile::Pass pass) {
  switch (pass) {
    case LayerProfile::Pass::forward: return "forward";
    case LayerProfile::Pass::backward: return "backward";
    case LayerProfile::Pass::other: break;
  }
  return "-";
}

}  // namespace stoke::nn
