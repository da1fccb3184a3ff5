// The report's page: the summary, tables and settings as HTML, the recorded run as a JSON blob,
// and the CSS and script that draw it (train/src/report/, embedded at build time).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <stoke/base/byte_size.hpp>
#include <string_view>
#include <utility>

#include "report/assets.hpp"
#include "stoke/train/report.hpp"

namespace stoke::train {

namespace {

using Json = nlohmann::ordered_json;

// ---- text

/// `text` with each character `replacements` names replaced by its text.
std::string replaced(std::string_view text, std::initializer_list<std::pair<char, std::string_view>> replacements) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto* it =
        std::find_if(replacements.begin(), replacements.end(), [c](const auto& r) { return r.first == c; });
    if (it == replacements.end()) {
      out += c;
    } else {
      out += it->second;
    }
  }
  return out;
}

std::string html_escape(std::string_view s) {
  return replaced(s, {{'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&quot;"}, {'\'', "&#39;"}});
}

/// `v` with `decimals` digits after the point.
std::string fixed(double v, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, v);
  return buffer;
}

std::string percent(double fraction) { return fixed(100 * fraction, 1) + "%"; }

/// "3.4 s", "2 min 05 s", "1 h 02 min".
std::string duration_text(double s) {
  char buffer[64];
  if (s < 120) {
    std::snprintf(buffer, sizeof buffer, "%.1f s", s);
  } else if (s < 7200) {
    const long total = std::lround(s);
    std::snprintf(buffer, sizeof buffer, "%ld min %02ld s", total / 60, total % 60);
  } else {
    const long total = std::lround(s / 60);
    std::snprintf(buffer, sizeof buffer, "%ld h %02ld min", total / 60, total % 60);
  }
  return buffer;
}

std::string thousands(std::uint64_t n) {
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

std::string move_text(const graph::Decision& d) {
  return (d.stage.empty() ? std::string("in-flight") : d.stage) + " " + std::to_string(d.from) + " -> " +
         std::to_string(d.to);
}

/// A table folded in <details> (open for 20 rows or fewer) under `summary`: the header row, the
/// `listed` rows, and a note counting those not listed when `total` is more.
std::string folded_table(const std::string& summary, std::string_view header, const std::string& rows,
                         std::size_t listed, std::uint64_t total) {
  std::string h = "<details" + std::string(listed <= 20 ? " open" : "") + "><summary>" + summary +
                  "</summary>\n<table>\n" + std::string(header) + rows + "</table>\n";
  if (total > listed) h += "<p class=\"note\">and " + thousands(total - listed) + " more, not listed</p>\n";
  return h + "</details>\n";
}

/// `v` rounded to `digits` significant digits, as the page's numbers are written (it stays
/// small); a whole number as an integer (128, not 128.0), and null when not finite.
Json rounded(double v, int digits = 4) {
  if (!std::isfinite(v)) return nullptr;
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.*g", digits, v);
  const double r = std::strtod(buffer, nullptr);
  if (r == std::trunc(r) && std::fabs(r) < 1e15) return static_cast<std::int64_t>(r);
  return r;
}

Json rounded(std::optional<double> v, int digits = 4) { return v ? rounded(*v, digits) : Json(nullptr); }

/// `json` as text for a <script> element: '<', '>' and '&' (which JSON has only inside strings)
/// become \u escapes, so that no embedded text can end the element ("</script>") or open a
/// comment in it. Bytes that are not UTF-8 (a file name) become U+FFFD.
std::string script_safe(const Json& json) {
  return replaced(json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  {{'<', "\\u003c"}, {'>', "\\u003e"}, {'&', "\\u0026"}});
}

// The samples' series, one array per field ("t", "dt", "phase", "ips", "gpu", "compute").
Json samples_json(const std::vector<RunRecorder::Sample>& all) {
  Json samples = {{"t", Json::array()},   {"dt", Json::array()},  {"phase", Json::array()},
                  {"ips", Json::array()}, {"gpu", Json::array()}, {"compute", Json::array()}};
  for (const RunRecorder::Sample& s : all) {
    samples["t"].push_back(rounded(s.seconds, 9));
    samples["dt"].push_back(rounded(s.interval, 5));
    samples["phase"].push_back(s.phase);
    samples["ips"].push_back(rounded(s.images_per_sec, 5));
    samples["gpu"].push_back(rounded(s.gpu_busy));
    samples["compute"].push_back(rounded(s.compute_busy));
  }
  return samples;
}

// Each stage's series over the samples, null where the stage was not in the pipeline.
Json stages_over_time_json(const std::vector<RunRecorder::Sample>& all) {
  std::vector<std::string> names;
  for (const RunRecorder::Sample& s : all)
    for (const StageSample& st : s.stages)
      if (std::find(names.begin(), names.end(), st.name) == names.end()) names.push_back(st.name);
  Json out = Json::array();
  for (const std::string& name : names) {
    Json stage = {{"name", name}};
    for (const auto& [key, field] : {std::pair{"busy", &StageSample::busy}, std::pair{"starved", &StageSample::starved},
                                     std::pair{"blocked", &StageSample::blocked}}) {
      Json series = Json::array();
      for (const RunRecorder::Sample& s : all) {
        auto it = std::find_if(s.stages.begin(), s.stages.end(), [&](const StageSample& x) { return x.name == name; });
        series.push_back(it == s.stages.end() ? Json(nullptr) : rounded((*it).*field));
      }
      stage[key] = std::move(series);
    }
    out.push_back(std::move(stage));
  }
  return out;
}

// One row per epoch, with the ranks' figures when there were ranks.
Json epochs_json(const std::vector<RunRecorder::EpochRow>& epochs) {
  Json out = Json::array();
  for (const RunRecorder::EpochRow& e : epochs) {
    Json row = {{"epoch", e.epoch},
                {"train_loss", rounded(e.train_loss, 6)},
                {"train_top1", rounded(e.train_top1, 6)},
                {"val_top1", rounded(e.val_top1, 6)},
                {"val_top5", rounded(e.val_top5, 6)},
                {"images_per_sec", rounded(e.images_per_sec, 6)},
                {"compute_busy", rounded(e.compute_busy)},
                {"skipped", e.skipped}};
    if (!e.rank_images_per_sec.empty()) {
      row["rank_images_per_sec"] = Json::array();
      for (const double r : e.rank_images_per_sec) row["rank_images_per_sec"].push_back(rounded(r, 6));
      row["allreduce_seconds"] = rounded(e.allreduce_seconds, 6);
      row["allreduce_hidden"] = rounded(e.allreduce_hidden);
    }
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

std::string RunRecorder::json_locked() const {
  const std::vector<Sample> all = all_samples_locked();
  double run_seconds = 0;
  for (const Phase& p : phases_) run_seconds = std::max({run_seconds, p.start, p.end});
  if (!all.empty()) run_seconds = std::max(run_seconds, all.back().seconds);
  for (const Move& m : moves_) run_seconds = std::max(run_seconds, m.seconds);

  Json out;
  out["run_seconds"] = rounded(run_seconds, 9);
  out["gpu_known"] = std::any_of(all.begin(), all.end(), [](const Sample& s) { return s.gpu_busy.has_value(); });
  out["samples"] = samples_json(all);
  out["stages_over_time"] = stages_over_time_json(all);
  out["phases"] = Json::array();
  for (const Phase& p : phases_) {
    Json stages = Json::array();
    for (std::size_t k = 0; k < p.totals.size(); ++k) {
      stages.push_back({{"name", p.totals[k].name},
                        {"busy", rounded(p.totals[k].busy)},
                        {"starved", rounded(p.totals[k].starved)},
                        {"blocked", rounded(p.totals[k].blocked)},
                        {"concurrency", p.concurrency[k]}});
    }
    out["phases"].push_back({{"epoch", p.epoch},
                             {"name", p.name},
                             {"start", rounded(p.start, 9)},
                             {"end", rounded(p.end, 9)},
                             {"elapsed", rounded(p.end >= p.start ? p.end - p.start : 0, 9)},
                             {"images", p.images},
                             {"stopped", p.stopped},
                             {"stages", std::move(stages)}});
  }
  out["moves"] = Json::array();
  for (const Move& m : moves_) {
    out["moves"].push_back({{"t", rounded(m.seconds, 9)},
                            {"phase", m.phase},
                            {"kind", graph::to_string(m.decision.kind)},
                            {"stage", m.decision.stage},
                            {"from", m.decision.from},
                            {"to", m.decision.to},
                            {"why", m.decision.why},
                            {"revert", m.decision.revert}});
  }
  out["epochs"] = epochs_json(epochs_);
  return script_safe(out);
}

std::vector<std::pair<std::string, std::string>> RunRecorder::cards_locked(bool& gpu) const {
  // The summary.
  double run_seconds = 0, train_seconds = 0;
  std::int64_t train_images = 0, all_images = 0;
  for (const Phase& p : phases_) {
    run_seconds = std::max({run_seconds, p.start, p.end});
    all_images += p.images;
    if (p.name == "train" && p.end >= p.start) {
      train_seconds += p.end - p.start;
      train_images += p.images;
    }
  }
  if (!samples_.empty()) run_seconds = std::max(run_seconds, samples_.back().seconds);
  if (pending_) run_seconds = std::max(run_seconds, pending_->seconds);
  // The mean busy while training (over every phase when none is named "train"), weighted by time:
  // the compute stage's, as the epoch table and the CLI give it, and the GPU's (NVML) when known.
  double busy_sum = 0, busy_time = 0, gpu_sum = 0, gpu_time = 0;
  const bool any_train = std::any_of(phases_.begin(), phases_.end(), [](const Phase& p) { return p.name == "train"; });
  for (const Sample& s : all_samples_locked()) {
    if (any_train && phases_[static_cast<std::size_t>(s.phase)].name != "train") continue;
    busy_sum += s.compute_busy * s.interval;
    busy_time += s.interval;
    if (s.gpu_busy) {
      gpu_sum += *s.gpu_busy * s.interval;
      gpu_time += s.interval;
    }
  }
  gpu = gpu_time > 0;
  std::optional<double> best_val;
  for (const EpochRow& e : epochs_)
    if (e.val_top1) best_val = std::max(best_val.value_or(0), *e.val_top1);

  std::vector<std::pair<std::string, std::string>> cards;
  cards.emplace_back("run time", duration_text(run_seconds));
  cards.emplace_back("epochs", std::to_string(epochs_.size()));
  cards.emplace_back("images trained", thousands(static_cast<std::uint64_t>(std::max<std::int64_t>(0, train_images))));
  cards.emplace_back("train images/s",
                     train_seconds > 0 ? fixed(static_cast<double>(train_images) / train_seconds, 0) : "-");
  cards.emplace_back("compute busy, training", busy_time > 0 ? percent(busy_sum / busy_time) : "-");
  if (gpu) cards.emplace_back("GPU busy (NVML), training", percent(gpu_sum / gpu_time));
  if (!epochs_.empty() && epochs_.back().val_top1)
    cards.emplace_back("last val top-1", percent(*epochs_.back().val_top1));
  if (best_val) cards.emplace_back("best val top-1", percent(*best_val));
  cards.emplace_back("scheduler moves", std::to_string(moves_total_));
  cards.emplace_back("files skipped", thousands(skips_.size()) + (skips_total_ > skips_listed_ ? "+" : ""));
  if (left_out_total_ > 0) cards.emplace_back("left out of the data", thousands(left_out_total_));
  if (network_) {
    cards.emplace_back("read over the network", base::byte_size_text(network_->bytes));
    cards.emplace_back("waiting on the network", duration_text(network_->wait_seconds));
    if (network_->cached) {
      cards.emplace_back("shard cache hits / misses",
                         thousands(network_->cache_hits) + " / " + thousands(network_->cache_misses));
    }
    if (network_->stream_budget > 0)
      cards.emplace_back("shards streamed into memory", thousands(network_->stream_shards));
  }
  if (all_images != train_images)
    cards.emplace_back("images evaluated",
                       thousands(static_cast<std::uint64_t>(std::max<std::int64_t>(0, all_images - train_images))));

  return cards;
}

std::string RunRecorder::epochs_table_locked() const {
  if (epochs_.empty()) return "";
  // Data-parallel runs add each rank's throughput and the all-reduce's time and overlap.
  const bool ranks =
      std::any_of(epochs_.begin(), epochs_.end(), [](const EpochRow& e) { return !e.rank_images_per_sec.empty(); });
  std::string rows;
  for (const EpochRow& e : epochs_) {
    std::string per_rank;
    for (const double r : e.rank_images_per_sec) per_rank += (per_rank.empty() ? "" : " / ") + fixed(r, 0);
    const std::string dist_cells = !ranks ? std::string()
                                          : "</td><td class=\"n\">" + (per_rank.empty() ? "-" : per_rank) +
                                                "</td><td class=\"n\">" + fixed(e.allreduce_seconds, 2) +
                                                "</td><td class=\"n\">" + percent(e.allreduce_hidden);
    rows += "<tr><td class=\"n\">" + std::to_string(e.epoch) + "</td><td class=\"n\">" + fixed(e.train_loss, 4) +
            "</td><td class=\"n\">" + percent(e.train_top1) + "</td><td class=\"n\">" +
            (e.val_top1 ? percent(*e.val_top1) : "-") + "</td><td class=\"n\">" +
            (e.val_top5 ? percent(*e.val_top5) : "-") + "</td><td class=\"n\">" + fixed(e.images_per_sec, 0) +
            "</td><td class=\"n\">" + percent(e.compute_busy) + "</td><td class=\"n\">" + thousands(e.skipped) +
            dist_cells + "</td></tr>\n";
  }
  return folded_table(std::to_string(epochs_.size()) + (epochs_.size() == 1 ? " epoch" : " epochs"),
                      "<tr><th class=\"n\">epoch</th><th class=\"n\">train loss</th><th class=\"n\">train top-1</th>"
                      "<th class=\"n\">val top-1</th><th class=\"n\">val top-5</th><th class=\"n\">images/s</th>"
                      "<th class=\"n\">compute busy</th><th class=\"n\">skipped</th>" +
                          std::string(ranks ? "<th class=\"n\">images/s by rank</th><th class=\"n\">all-reduce s</th>"
                                              "<th class=\"n\">hidden</th>"
                                            : "") +
                          "</tr>\n",
                      rows, epochs_.size(), epochs_.size());
}

std::string RunRecorder::moves_table_locked() const {
  if (moves_total_ == 0) {
    return "<p class=\"note\">None: the scheduler was off (--autotune off) or found nothing to change.</p>\n";
  }
  std::string rows;
  for (const Move& m : moves_) {
    const Phase& p = phases_[static_cast<std::size_t>(m.phase)];
    rows += "<tr><td class=\"n\">" + fixed(m.seconds, 1) + " s" + "</td><td>" +
            html_escape("epoch " + std::to_string(p.epoch) + " " + p.name) + "</td><td><code>" +
            html_escape(move_text(m.decision)) + (m.decision.revert ? " (revert)" : "") +
            "</code></td><td class=\"why\">" + html_escape(m.decision.why) + "</td></tr>\n";
  }
  return folded_table(std::to_string(moves_total_) + " move" + (moves_total_ == 1 ? "" : "s"),
                      "<tr><th class=\"n\">time</th><th>phase</th><th>move</th><th>why</th></tr>\n", rows,
                      moves_.size(), moves_total_);
}

std::string RunRecorder::skips_table_locked() const {
  if (skips_total_ == 0) return "<p class=\"note\">None.</p>\n";
  std::string rows;
  for (const Skip& s : skips_) {
    std::string when;
    for (const int index : s.phases) {
      const Phase& p = phases_[static_cast<std::size_t>(index)];
      when += (when.empty() ? "" : ", ") + ("epoch " + std::to_string(p.epoch) + " " + p.name);
    }
    rows += "<tr><td>" + html_escape(s.file) + "</td><td>" + html_escape(when) + "</td><td>" + html_escape(s.reason) +
            "</td></tr>\n";
  }
  std::string summary = thousands(skips_.size()) + (skips_.size() == 1 ? " file" : " files");
  if (skips_total_ != skips_.size()) summary += ", " + thousands(skips_total_) + " skips in all";
  return folded_table(summary, "<tr><th>file</th><th>skipped in</th><th>why</th></tr>\n", rows, skips_.size(),
                      skips_.size()) +
         (skips_total_ > skips_listed_ ? "<p class=\"note\">and " + thousands(skips_total_ - skips_listed_) +
                                             " more skips, of files not listed</p>\n"
                                       : "");
}

std::string RunRecorder::left_out_table_locked() const {
  if (left_out_total_ == 0) return "<p class=\"note\">None.</p>\n";
  std::string rows;
  for (const LeftOutFile& f : left_out_) {
    rows += "<tr><td>" + html_escape(f.file.path) + "</td><td>" + html_escape(f.dataset) + "</td><td>" +
            html_escape(f.file.reason) + "</td></tr>\n";
  }
  return folded_table(thousands(left_out_total_) + (left_out_total_ == 1 ? " file" : " files"),
                      "<tr><th>file</th><th>left out of</th><th>why</th></tr>\n", rows, left_out_.size(),
                      left_out_total_);
}

std::string RunRecorder::html(const std::string& title,
                              const std::vector<std::pair<std::string, std::string>>& settings) const {
  std::lock_guard lock(mutex_);

  bool gpu = false;
  const std::vector<std::pair<std::string, std::string>> cards = cards_locked(gpu);

  char written[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc) != nullptr) std::strftime(written, sizeof written, "%Y-%m-%d %H:%M UTC", &utc);

  std::string h;
  h.reserve(64 * 1024);
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>" + html_escape(title) + "</title>\n<style>\n" + std::string(assets::report_css) + "</style>\n";
  h += "<script>\n" + std::string(assets::report_error_js) + "</script>\n</head>\n<body>\n<main>\n";
  h += "<h1>" + html_escape(title) + "</h1>\n<div class=\"sub\">written " + html_escape(written) + "</div>\n";
  h += "<div id=\"report-error\"></div>\n";

  h += "<div class=\"cards\">\n";
  for (const auto& [k, v] : cards)
    h += "<div class=\"card\"><div class=\"k\">" + html_escape(k) + "</div><div class=\"v\">" + html_escape(v) +
         "</div></div>\n";
  h += "</div>\n";

  h += "<h2>Throughput</h2>\n<p class=\"note\">Images per second over the run, and how busy the compute step was "
       "(its busy time over wall time, as the epoch table and the command line give it)";
  h += gpu ? " and the GPU (NVML utilization)" : "";
  h += "; evaluation passes are shaded. Triangles above the plot are the scheduler's moves: hover for why.</p>\n";
  h += "<div id=\"plot-throughput\" class=\"plot\"></div>\n";

  h += "<h2>Stages over time</h2>\n<div class=\"controls\">";
  for (const char* metric : {"busy", "starved", "blocked"})
    h += std::string("<label><input type=\"radio\" name=\"stage-metric\" value=\"") + metric + "\"" +
         (std::string_view(metric) == "busy" ? " checked" : "") + "> " + metric + "</label>";
  h += "</div>\n<div id=\"plot-stage-time\" class=\"plot\"></div>\n";

  h += "<h2>Where each stage spent its time</h2>\n<p class=\"note\">Busy: time inside the stage's work over wall "
       "time and its allowed concurrent calls. Starved: waiting for input. Blocked: holding output with no room "
       "downstream. Other: running fewer calls than allowed, or done.</p>\n";
  h += "<div class=\"controls\"><label>phase <select id=\"stage-phase\"></select></label></div>\n";
  h += "<div id=\"plot-stage-bars\" class=\"plot\"></div>\n";

  h += "<h2>Loss and accuracy</h2>\n<div class=\"row\"><div id=\"plot-loss\" class=\"plot\"></div>"
       "<div id=\"plot-accuracy\" class=\"plot\"></div></div>\n";
  h += epochs_table_locked();

  h += "<h2>Scheduler moves</h2>\n";
  h += moves_table_locked();

  h += "<h2>Settings</h2>\n<table>\n";
  for (const auto& [k, v] : settings)
    h += "<tr><th>" + html_escape(k) + "</th><td><code>" + html_escape(v) + "</code></td></tr>\n";
  h += "</table>\n";

  h += "<h2>Skipped files</h2>\n";
  h += skips_table_locked();

  h += "<h2>Left out of the dataset</h2>\n<p class=\"note\">What the datasets left out when they opened (a "
       "file outside a class folder, a link, a sample without an image or with a label that is not a number, ...): "
       "never read, so neither trained on nor counted among the skipped files.</p>\n";
  h += left_out_table_locked();

  h += "</main>\n<div id=\"tip\"></div>\n";
  h += "<script type=\"application/json\" id=\"report-data\">" + json_locked() + "</script>\n";
  h += "<script>\n" + std::string(assets::report_js) + "</script>\n</body>\n</html>\n";
  return h;
}

}  // namespace stoke::train
