#include "stoke/nodes/coco_dataset.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace stoke::nodes {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// An integer id, or nullopt when the value is not one.
std::optional<std::int64_t> id_of(const json& value) {
  if (value.is_number_integer()) return value.get<std::int64_t>();
  return std::nullopt;
}

const json& array_named(const json& document, const char* key, const std::string& file) {
  const auto it = document.find(key);
  if (it == document.end() || !it->is_array())
    throw std::runtime_error(file + ": not a COCO annotation file: no '" + key + "' array");
  return *it;
}

struct Box {
  std::int64_t image_position;
  std::array<float, 4> corners;
  std::int32_t cls;
  float crowd;
};

}  // namespace

CocoDataset::CocoDataset(fs::path annotations, fs::path images, CocoOptions options)
    : annotations_(std::move(annotations)), root_(std::move(images)) {
  const std::string file = annotations_.string();
  json document;
  {
    std::ifstream in(annotations_, std::ios::binary);
    if (!in) throw std::runtime_error(file + ": cannot open the annotation file");
    try {
      document = json::parse(in);
    } catch (const json::exception& e) {
      throw std::runtime_error(file + ": not valid JSON: " + e.what());
    }
  }
  if (!document.is_object()) throw std::runtime_error(file + ": not a COCO annotation file: not a JSON object");

  const auto bad = [&](const std::string& what, const std::string& why) {
    if (options.on_bad == CocoOptions::OnBad::fail) throw std::runtime_error(file + ": " + what + ": " + why);
    ignored_.push_back({file + " " + what, why});
  };

  // Categories in id order: a box's class is its category's position.
  std::vector<std::pair<std::int64_t, std::string>> categories;
  for (const json& c : array_named(document, "categories", file)) {
    const auto id = c.is_object() ? id_of(c.value("id", json())) : std::nullopt;
    if (!id) throw std::runtime_error(file + ": a category without an integer id: " + c.dump());
    const json name = c.value("name", json(std::to_string(*id)));
    if (!name.is_string())
      throw std::runtime_error(file + ": category " + std::to_string(*id) +
                               ": its name is not a string: " + name.dump());
    categories.emplace_back(*id, name.get<std::string>());
  }
  std::sort(categories.begin(), categories.end());
  std::unordered_map<std::int64_t, std::int32_t> class_of;
  for (const auto& [id, name] : categories) {
    if (!class_of.emplace(id, static_cast<std::int32_t>(classes_.size())).second)
      throw std::runtime_error(file + ": category id " + std::to_string(id) + " appears twice");
    category_ids_.push_back(id);
    classes_.push_back(name);
  }

  // Images in the file's order; their declared sizes bound their boxes.
  struct Declared {
    std::string file;
    double width, height;
  };
  std::vector<Declared> declared;
  std::unordered_map<std::int64_t, std::int64_t> position_of;
  for (const json& image : array_named(document, "images", file)) {
    const auto id = image.is_object() ? id_of(image.value("id", json())) : std::nullopt;
    const json name = image.is_object() ? image.value("file_name", json()) : json();
    const json width = image.is_object() ? image.value("width", json()) : json();
    const json height = image.is_object() ? image.value("height", json()) : json();
    if (!id || !name.is_string() || !width.is_number() || !height.is_number() || width.get<double>() <= 0 ||
        height.get<double>() <= 0) {
      bad("image entry " + image.dump().substr(0, 120),
          "needs an integer id, a file_name and a positive width and height");
      continue;
    }
    if (!position_of.emplace(*id, static_cast<std::int64_t>(declared.size())).second) {
      bad("image id " + std::to_string(*id), "appears twice");
      continue;
    }
    declared.push_back({name.get<std::string>(), width.get<double>(), height.get<double>()});
  }

  std::vector<Box> boxes;
  for (const json& a : array_named(document, "annotations", file)) {
    const auto id = a.is_object() ? id_of(a.value("id", json())) : std::nullopt;
    const std::string what = "annotation " + (id ? std::to_string(*id) : a.dump().substr(0, 80));
    const auto image_id = a.is_object() ? id_of(a.value("image_id", json())) : std::nullopt;
    const auto category = a.is_object() ? id_of(a.value("category_id", json())) : std::nullopt;
    const json bbox = a.is_object() ? a.value("bbox", json()) : json();
    if (!image_id || !position_of.contains(*image_id)) {
      bad(what, "its image_id is not an image of the file");
      continue;
    }
    if (!category || !class_of.contains(*category)) {
      bad(what, "its category_id is not a category of the file");
      continue;
    }
    if (!bbox.is_array() || bbox.size() != 4 || !std::all_of(bbox.begin(), bbox.end(), [](const json& v) {
          return v.is_number() && std::isfinite(v.get<double>());
        })) {
      bad(what, "its bbox is not [x, y, width, height] of 4 numbers: " + bbox.dump());
      continue;
    }
    const double x = bbox[0].get<double>(), y = bbox[1].get<double>();
    const double w = bbox[2].get<double>(), h = bbox[3].get<double>();
    const Declared& image = declared[static_cast<std::size_t>(position_of[*image_id])];
    if (w < 0 || h < 0) {
      bad(what, "its bbox has a negative width or height: " + bbox.dump());
      continue;
    }
    constexpr double slack = 0.5;  // COCO's own boxes overshoot by rounding now and then
    if (x < -slack || y < -slack || x + w > image.width + slack || y + h > image.height + slack) {
      // %.0f, not a cast to an integer: a declared size is any JSON number (fuzz: 3e78).
      char size[80];
      std::snprintf(size, sizeof size, "%.0fx%.0f", image.width, image.height);
      bad(what, "its bbox " + bbox.dump() + " reaches outside its image " + image.file + " (" + size + ")");
      continue;
    }
    const json iscrowd = a.value("iscrowd", json(0));
    if (!iscrowd.is_number() && !iscrowd.is_boolean()) {
      bad(what, "its iscrowd is not a number: " + iscrowd.dump());
      continue;
    }
    const float crowd = std::trunc(iscrowd.get<double>()) != 0 ? 1.0f : 0.0f;
    if (crowd > 0 && !options.keep_crowd) continue;
    const auto clamp = [](double v, double hi) { return static_cast<float>(std::clamp(v, 0.0, hi)); };
    boxes.push_back(
        {position_of[*image_id],
         {clamp(x, image.width), clamp(y, image.height), clamp(x + w, image.width), clamp(y + h, image.height)},
         class_of[*category],
         crowd});
  }
  document = json();  // the DOM goes before the flat arrays grow

  // Boxes grouped by image, in annotation order within an image.
  std::stable_sort(boxes.begin(), boxes.end(),
                   [](const Box& a, const Box& b) { return a.image_position < b.image_position; });
  std::size_t next = 0;
  for (std::size_t p = 0; p < declared.size(); ++p) {
    const std::size_t first = next;
    while (next < boxes.size() && boxes[next].image_position == static_cast<std::int64_t>(p)) ++next;
    if (first == next && !options.keep_empty) continue;
    images_.push_back({std::move(declared[p].file), static_cast<std::uint32_t>(classes_of_boxes_.size()),
                       static_cast<std::uint32_t>(next - first)});
    for (std::size_t b = first; b < next; ++b) {
      corners_.insert(corners_.end(), boxes[b].corners.begin(), boxes[b].corners.end());
      classes_of_boxes_.push_back(boxes[b].cls);
      crowd_.push_back(boxes[b].crowd);
    }
  }
}

std::string CocoDataset::name(std::size_t i) const { return (root_ / images_.at(i).file).string(); }

Sample CocoDataset::read(std::size_t i) const {
  const ImageEntry& image = images_.at(i);
  Sample sample;
  sample.name = name(i);
  sample.bytes = Bytes(read_file(sample.name));
  sample.index = i;
  sample.boxes.extras = 1;
  for (std::uint32_t b = image.first_box; b < image.first_box + image.boxes; ++b) {
    const float* c = &corners_[4 * std::size_t{b}];
    sample.boxes.add({c[0], c[1], c[2], c[3]}, classes_of_boxes_[b], {&crowd_[b], 1});
  }
  return sample;
}

}  // namespace stoke::nodes
