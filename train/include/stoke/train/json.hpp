// The results of fit and evaluate as JSON objects (nlohmann::ordered_json, keys in a fixed order):
// what `stoke train --json` and `stoke evaluate --json` print, for any program that logs or
// compares runs.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "stoke/train/evaluate.hpp"
#include "stoke/train/fit.hpp"
#include "stoke/train/loader.hpp"
#include "stoke/train/model_card.hpp"

namespace stoke::train {

/// A measured number for a JSON report: 6 significant digits (printf's %.6g), a whole number
/// without a fraction (1, not 1.0), null when absent or not finite.
nlohmann::ordered_json json_number(std::optional<double> value);

/// The files `left_out` lists, as [{file, reason}] (the "left_out_files" beside a "left_out" count
/// in every object below that has them, and in `stoke bench pipeline --json`).
nlohmann::ordered_json left_out_files_json(const LeftOut& left_out);

/// What a dataset read over the network (nodes::NetworkStats): requests, retries, bytes, wait_s,
/// cached, and with a cache cache_hits, cache_misses, cache_prefetched, cache_evictions, cache_bytes,
/// cache_peak_bytes, cache_budget, and with shards streamed into memory stream_shards,
/// stream_peak_bytes, stream_budget; null for a dataset on local disk. The "network" of every object
/// below that reads data, and of `stoke bench pipeline --json`.
nlohmann::ordered_json network_json(const std::optional<nodes::NetworkStats>& network);

/// One epoch: epoch, train_loss, train_top1, val_top1, val_top5 (null without a validation pass),
/// images_per_sec, compute_busy, bottleneck, skipped, checkpoint, interrupted.
nlohmann::ordered_json to_json(const EpochSummary& summary);

/// The run: final (true), epochs, val_top1, val_top5, best_val_top1 (0 without validation),
/// images, seconds, images_per_sec, skipped (one per file and epoch), skipped_files [{file, reason,
/// epochs}] (each file once, with the epochs from 1 it was skipped in), left_out (what the training
/// and validation sets left out when they opened: never read, apart from skipped), left_out_files
/// [{file, reason}] (the first max_listed_left_out), network (the training set's), stalls [{stage,
/// item, file, seconds}], checkpoint, interrupted.
nlohmann::ordered_json to_json(const FitResult& result);

/// One move of the scheduler (this and the next are defined in loader.cpp): at_s, kind, stage ("in-flight" for the
/// in-flight limit), from, to, why, revert.
nlohmann::ordered_json to_json(const graph::Decision& decision);

/// A Loader's stats and position: loader, batches, images, seconds, waited_s, bottleneck, epoch,
/// position, skipped, skipped_files [{file, reason, epochs}] (each file once, with the epochs from 0
/// it was skipped in), left_out, left_out_files [{file, reason}] (what the dataset left out when it
/// opened), network, max_in_flight, stages [{name, items_out,
/// skipped, busy_s, starved_s, blocked_s, concurrency}], decisions. What Loader::write_report
/// writes and stoke.Loader.stats() returns.
nlohmann::ordered_json to_json(const LoaderStats& stats, const LoaderPosition& position);

/// An evaluation of the model `card` describes: model, top1, top5, loss, images, skipped,
/// skipped_files (the files' names), left_out, left_out_files [{file, reason}] (what the dataset
/// left out when it opened), classes, confusion (rows: true class, columns: predicted).
nlohmann::ordered_json to_json(const Evaluation& evaluation, const ModelCard& card);

}  // namespace stoke::train
