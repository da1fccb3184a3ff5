#include "stoke/train/json.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace stoke::train {

using Json = nlohmann::ordered_json;

Json json_number(std::optional<double> value) {
  if (!value || !std::isfinite(*value)) return nullptr;
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", *value);
  const double rounded = std::strtod(text, nullptr);
  if (rounded == std::trunc(rounded) && std::fabs(rounded) < 1e15) return static_cast<std::int64_t>(rounded);
  return rounded;
}

Json left_out_files_json(const LeftOut& left_out) {
  Json files = Json::array();
  for (const nodes::IgnoredFile& f : left_out.files) files.push_back({{"file", f.path}, {"reason", f.reason}});
  return files;
}

Json network_json(const std::optional<nodes::NetworkStats>& network) {
  if (!network) return nullptr;
  const nodes::NetworkStats& n = *network;
  Json out = {{"requests", n.requests},
              {"retries", n.retries},
              {"bytes", n.bytes},
              {"wait_s", json_number(n.wait_seconds)},
              {"cached", n.cached}};
  if (n.cached) {
    out["cache_hits"] = n.cache_hits;
    out["cache_misses"] = n.cache_misses;
    out["cache_prefetched"] = n.cache_prefetched;
    out["cache_evictions"] = n.cache_evictions;
    out["cache_bytes"] = n.cache_bytes;
    out["cache_peak_bytes"] = n.cache_peak_bytes;
    out["cache_budget"] = n.cache_budget;
  }
  if (n.stream_budget > 0) {
    out["stream_shards"] = n.stream_shards;
    out["stream_peak_bytes"] = n.stream_peak_bytes;
    out["stream_budget"] = n.stream_budget;
  }
  return out;
}

Json to_json(const EpochSummary& s) {
  Json out = {{"epoch", s.epoch},
              {"train_loss", json_number(s.train_loss)},
              {"train_top1", json_number(s.train_top1)},
              {"val_top1", json_number(s.val_top1)},
              {"val_top5", json_number(s.val_top5)},
              {"images_per_sec", json_number(s.images_per_sec)},
              {"compute_busy", json_number(s.train.compute_busy)},
              {"bottleneck", s.train.bottleneck},
              {"skipped", s.skipped},
              {"checkpoint", s.checkpoint.string()},
              {"interrupted", s.interrupted}};
  if (!s.rank_images_per_sec.empty()) {  // data-parallel
    Json rates = Json::array();
    for (const double r : s.rank_images_per_sec) rates.push_back(json_number(r));
    out["rank_images_per_sec"] = std::move(rates);
    out["allreduce_seconds"] = json_number(s.allreduce_seconds);
    out["allreduce_exposed_seconds"] = json_number(s.allreduce_exposed_seconds);
    out["allreduce_hidden"] = json_number(allreduce_hidden(s));
  }
  return out;
}

Json to_json(const FitResult& r) {
  Json files = Json::array();
  for (const SkippedFile& f : r.skipped_files)
    files.push_back({{"file", f.file}, {"reason", f.reason}, {"epochs", f.epochs}});
  Json stalls = Json::array();
  for (const graph::Stall& s : r.stalls) {
    stalls.push_back({{"stage", s.stage},
                      {"item", s.index},
                      {"file", s.item},
                      {"seconds", json_number(std::chrono::duration<double>(s.running).count())}});
  }
  return {{"final", true},
          {"epochs", r.epochs},
          {"val_top1", json_number(r.val_top1.value_or(0))},
          {"val_top5", json_number(r.val_top5.value_or(0))},
          {"best_val_top1", json_number(r.best_val_top1.value_or(0))},
          {"images", r.images},
          {"seconds", json_number(r.seconds)},
          {"images_per_sec", json_number(r.images_per_sec())},
          {"skipped", r.skipped},
          {"skipped_files", std::move(files)},
          {"left_out", r.left_out.count},
          {"left_out_files", left_out_files_json(r.left_out)},
          {"network", network_json(r.network)},
          {"stalls", std::move(stalls)},
          {"checkpoint", r.checkpoint.string()},
          {"interrupted", r.interrupted}};
}

Json to_json(const Evaluation& e, const ModelCard& card) {
  Json files = Json::array();
  for (const SkippedFile& skip : e.skipped_files) files.push_back(skip.file);
  return {{"model", card.model},
          {"top1", json_number(e.top1)},
          {"top5", json_number(e.top5)},
          {"loss", json_number(e.loss)},
          {"images", e.images},
          {"skipped", e.skipped},
          {"skipped_files", std::move(files)},
          {"left_out", e.left_out.count},
          {"left_out_files", left_out_files_json(e.left_out)},
          {"classes", card.classes},
          {"confusion", e.confusion.rows()}};
}

}  // namespace stoke::train
