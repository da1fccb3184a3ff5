#include "stoke/train/evaluate.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/loss.hpp>
#include <stoke/nodes/sample.hpp>
#include <utility>

namespace stoke::train {

namespace {

std::string quoted_list(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + ("'" + item + "'");
  return "[" + out + "]";
}

// A list file's classes are its labels as numbers ("0", "1", ...), which index the checkpoint's.
bool numbered_labels(const std::vector<std::string>& classes) {
  for (std::size_t i = 0; i < classes.size(); ++i) {
    if (classes[i] != std::to_string(i)) return false;
  }
  return true;
}

// The image files of classify_files as a dataset without labels: item i is files[i].
class ImageFiles final : public nodes::Dataset {
 public:
  explicit ImageFiles(std::vector<std::string> files) : files_(std::move(files)) {}
  std::size_t size() const noexcept override { return files_.size(); }
  int label(std::size_t) const override { return -1; }
  std::string name(std::size_t i) const override { return files_.at(i); }
  nodes::Sample read(std::size_t i) const override {
    nodes::Sample sample;
    sample.bytes = nodes::Bytes(nodes::read_file(files_.at(i)));
    sample.index = i;
    sample.name = files_[i];
    return sample;
  }

 private:
  std::vector<std::string> files_;
};

// The input of evaluation and prediction: the card's size and transforms, every item once in order,
// converted into the model's layout.
InputConfig inference_input(const InferenceModel& model, std::size_t batch_size) {
  const ModelCard& card = model.card;
  InputConfig config;
  config.convert_layout = model.model->layout();
  config.batch_size = batch_size;
  config.size = card.image_size;
  config.transforms = card.eval_transforms;
  config.decode = default_decode_options(card.color == "keep" ? nodes::DecodeColor::keep : nodes::DecodeColor::rgb);
  config.shuffle = false;
  config.drop_last = false;
  return config;
}

}  // namespace

void check_classes(const nodes::Dataset& dataset, const std::string& data, const ModelCard& card,
                   const std::string& checkpoint) {
  const std::vector<std::string>& mine = dataset.classes();
  if (mine == card.classes) return;
  if (!mine.empty() && numbered_labels(mine) && mine.size() <= card.classes.size()) return;
  std::string difference;
  if (mine.size() <= 10 && card.classes.size() <= 10) {
    difference = quoted_list(mine) + " here, " + quoted_list(card.classes) + " in the checkpoint";
  } else {
    std::size_t i = 0;
    while (i < mine.size() && i < card.classes.size() && mine[i] == card.classes[i]) ++i;
    difference = std::to_string(mine.size()) + " here, " + std::to_string(card.classes.size()) +
                 " in the checkpoint; the first difference is class " + std::to_string(i) + ": " +
                 (i < mine.size() ? "'" + mine[i] + "'" : "none") + " here, " +
                 (i < card.classes.size() ? "'" + card.classes[i] + "'" : "none") + " in the checkpoint";
  }
  throw std::runtime_error(data + ": its classes differ from those of " + checkpoint + " (" + difference +
                           "); evaluate needs the classes the model was trained on, in the same order");
}

Evaluation evaluate(const InferenceModel& model, const nodes::DatasetPtr& dataset, nn::Backend& backend,
                    const EvaluateOptions& options) {
  if (!dataset) throw std::invalid_argument("evaluate: no dataset");
  InputConfig config = inference_input(model, options.batch_size);
  config.threads = options.threads;
  config.tuning.target = "evaluate";

  const std::size_t classes = model.card.classes.size();
  Evaluation result{.confusion = ConfusionMatrix(classes)};
  nn::Context ctx{.backend = backend, .mode = nn::Mode::eval};
  const nn::SoftmaxCrossEntropy loss;
  const auto step = [&](const BatchTensors& t) {
    StepResult r;
    r.logits = model.model->forward(t.images, ctx);
    r.loss = loss.forward(r.logits, t.labels, ctx);
    r.on_result = [&](const StepOutcome& o) {
      for (std::size_t i = 0; i < o.size(); ++i) {
        const std::int32_t label = o.labels[i];
        if (label < 0 || static_cast<std::size_t>(label) >= classes) {
          throw std::runtime_error(dataset->name(static_cast<std::size_t>(o.indices[i])) + ": the label " +
                                   std::to_string(label) + " is outside the " + std::to_string(classes) +
                                   " classes of the checkpoint");
        }
        result.confusion.add(static_cast<std::size_t>(label), argmax(o.row(i)));
      }
    };
    return r;
  };
  const EpochTotals totals =
      run_epoch(dataset, config, backend, step, {.stage = "evaluate", .progress = options.progress, .window = {}});

  result.images = totals.images;
  result.skipped = totals.skipped;
  result.skipped_files = totals.skipped_files;
  result.left_out = left_out_of(*dataset);
  if (totals.images > 0) {
    const auto images = static_cast<double>(totals.images);
    result.top1 = static_cast<double>(result.confusion.correct()) / images;
    result.top5 = static_cast<double>(totals.correct_top5) / images;
    result.loss = totals.loss_sum / images;
  }
  return result;
}

std::vector<FilePrediction> classify_files(const InferenceModel& model, const std::vector<std::string>& files,
                                           nn::Backend& backend, std::size_t batch_size) {
  if (files.empty()) return {};
  InputConfig config = inference_input(model, std::min(batch_size, files.size()));
  config.autotune = false;
  config.on_error = graph::OnError::skip;
  const auto dataset = std::make_shared<const ImageFiles>(files);
  nn::Context ctx{.backend = backend, .mode = nn::Mode::eval};
  const std::size_t classes = model.card.classes.size();
  std::vector<FilePrediction> out(files.size());
  const EpochTotals totals = run_epoch(
      dataset, config, backend,
      [&](const BatchTensors& t) {
        StepResult r{.loss = {}, .logits = model.model->forward(t.images, ctx), .on_result = {}};
        r.on_result = [&](const StepOutcome& o) {
          const std::vector<float> probabilities = softmax_rows(o.logits, classes);
          for (std::size_t i = 0; i < o.size(); ++i) {
            const auto row = probabilities.begin() + static_cast<std::ptrdiff_t>(i * classes);
            out.at(o.indices[i]).probabilities.assign(row, row + static_cast<std::ptrdiff_t>(classes));
          }
        };
        return r;
      },
      {.stage = "classify", .progress = {}, .window = {}});
  const graph::RunReport& report = totals.report;

  // Why each file failed; the pipeline's positions are the items' indices (no shuffling), and
  // skipped_files lists each file once (a file given twice fails twice, for the same reason).
  for (const graph::SkippedItem& item : report.skipped_items) {
    if (item.index >= out.size()) continue;
    const std::string& file = dataset->name(static_cast<std::size_t>(item.index));
    const auto it = std::find_if(totals.skipped_files.begin(), totals.skipped_files.end(),
                                 [&](const SkippedFile& f) { return f.file == file; });
    if (it != totals.skipped_files.end()) out[item.index].error = it->reason;
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    out[i].file = files[i];
    if (out[i].probabilities.empty() && out[i].error.empty()) out[i].error = "could not be read or decoded";
  }
  return out;
}

}  // namespace stoke::train
