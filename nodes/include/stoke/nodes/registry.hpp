// Registry: transforms by name, built from spec strings such as
// "random_resized_crop size=224 scale=0.08:1", each with a one-line doc and typed parameters.
// The apps build their --transform chains from it; plugins (plugin.hpp) add their own entries.
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <opencv2/core/types.hpp>
#include <optional>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// The documentation of one parameter of a registered transform.
///
/// `type` is one of the getter kinds of Params, which also fixes how a value is written:
///   "int"     an integer                                       "16"
///   "double"  a decimal number                                 "0.5"
///   "bool"    true/false, 1/0, yes/no, on/off                  "true"
///   "range"   lo:hi (one number n means n:n)                   "0.08:1"
///   "size"    N (N x N) or WxH, width first                    "224", "224x192"
///   "list"    comma-separated numbers (may be empty)           "0.485,0.456,0.406"
///   "string"  any text without spaces                          "bilinear"
/// Registry::add rejects other types, and defaults that do not parse as their type (an empty
/// default is allowed for every type: "no default" / "computed").
struct ParamDoc {
  std::string name;
  std::string type;
  std::string default_value;  ///< shown by help(); the factory's fallback should match it
  std::string doc;            ///< one line
  bool required = false;      ///< make() refuses a spec that does not give it
};

/// The key=value pairs of one spec, handed to a TransformEntry's factory. The getters parse a
/// value on demand and return `fallback` when the key is absent. A value that does not parse
/// throws std::invalid_argument naming the transform, the key, the value and the expected form:
///   "random_resized_crop: parameter scale='abc' is not a range like 0.08:1".
///
/// Params remembers which keys were read: Registry::make refuses a spec whose keys the factory
/// did not read, so a parameter is never silently ignored. When built by Registry::make it also
/// knows the entry's declared parameters, and reading an undeclared key throws std::logic_error
/// (the entry's ParamDoc list and its factory disagree: a bug in the entry, not in the spec).
///
/// Not thread-safe (the read-tracking is mutable); each make() builds its own.
class Params {
 public:
  Params() = default;
  /// `transform` names the transform in error messages. Keys must be unique and non-empty.
  /// `declared`, when given, is the list of keys the getters may read.
  Params(std::string transform, std::vector<std::pair<std::string, std::string>> values,
         std::optional<std::vector<std::string>> declared = std::nullopt);

  /// Parses "name k=v k=v ..." (whitespace-separated; values cannot contain spaces). Throws
  /// std::invalid_argument quoting the spec when it is empty, a token has no '=' or an empty
  /// key, or a key is repeated. The name is returned through `name`; `kind` names what the spec
  /// is for in those messages ("transform spec 'resize size 224': ...", "source spec ...").
  static Params parse(std::string_view spec, std::string& name, std::string_view kind = "transform");

  int get_int(std::string_view key, int fallback) const;
  double get_double(std::string_view key, double fallback) const;
  /// "lo:hi" -> {lo, hi}; "x" -> {x, x}. lo > hi is an error.
  std::pair<double, double> get_range(std::string_view key, std::pair<double, double> fallback) const;
  /// "224" -> 224x224; "224x192" -> width 224, height 192. Both must be > 0.
  cv::Size get_size(std::string_view key, cv::Size fallback) const;
  /// true/false, 1/0, yes/no, on/off (case-insensitive).
  bool get_bool(std::string_view key, bool fallback) const;
  /// "0.485,0.456,0.406" -> {0.485, 0.456, 0.406}; "" -> {}.
  std::vector<double> get_list(std::string_view key, std::vector<double> fallback) const;
  std::string get_string(std::string_view key, std::string fallback) const;

  /// Whether the spec gave `key` (does not count as reading it).
  bool has(std::string_view key) const noexcept;
  /// The transform's name as given to the constructor.
  const std::string& transform() const noexcept { return transform_; }
  /// The key=value pairs in spec order.
  const std::vector<std::pair<std::string, std::string>>& values() const noexcept { return values_; }
  /// The keys given in the spec that no getter has read yet, in spec order.
  std::vector<std::string> unread() const;

 private:
  const std::string* lookup(std::string_view key) const;
  [[noreturn]] void bad_value(std::string_view key, const std::string& value, std::string_view expected) const;

  std::string transform_;
  std::vector<std::pair<std::string, std::string>> values_;
  std::optional<std::vector<std::string>> declared_;
  mutable std::set<std::string, std::less<>> read_;
};

/// One registered transform: its name, a one-line doc, its parameters and a factory. The factory
/// reads its parameters from Params (every one it declares, so that none is ignored) and returns
/// a new immutable Transform; it may throw std::invalid_argument for values out of range.
struct TransformEntry {
  std::string name;
  std::string doc;
  std::vector<ParamDoc> params;
  std::function<TransformPtr(const Params&)> make;
};

/// Transforms by name.
///
/// Spec syntax: "name key=value key=value", whitespace-separated. A list of specs is separated by
/// ';' (e.g. "random_resized_crop size=224; hflip; normalize") — ';' rather than '|' because
/// ',' and ':' already occur inside values and '|' reads as a pipe in shell snippets.
///
/// Errors (std::invalid_argument), each naming what exists:
///   unknown name       -> "unknown transform 'random_crop'; known: center_crop, ... (did you mean ...?)"
///   undeclared key     -> "hflip: unknown parameter 'q'; hflip takes: p (double, default 0.5)"
///   missing required   -> "window: missing required parameter 'center'; ..."
///   malformed spec     -> quotes the spec
///   duplicate add()    -> "transform 'hflip' is already registered; registered: ..."
///
/// Thread-safety: every member is safe to call concurrently (add() takes a writer lock, the rest
/// a reader lock); the intended use is add() during startup and make() from any thread after.
/// Entries are never removed, so the pointer find() returns stays valid for the registry's life.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  /// Registers `entry`. Throws std::invalid_argument when the name is empty or already taken,
  /// the factory is empty, or a ParamDoc has an unknown type, a repeated name or a default that
  /// does not parse as its type.
  void add(TransformEntry entry);

  /// Builds one transform from "name k=v ...". Throws as listed above; errors the factory throws
  /// are passed through.
  TransformPtr make(std::string_view spec) const;
  /// One transform per spec, in order.
  std::vector<TransformPtr> make_list(std::span<const std::string> specs) const;
  /// make_list({"random_resized_crop size=224", "random_horizontal_flip"}): one transform per spec.
  /// (Without it, two string literals in braces would make one string_view of the bytes between
  /// them.)
  std::vector<TransformPtr> make_list(std::initializer_list<std::string_view> specs) const;
  /// Specs separated by ';'. Empty (whitespace-only) segments are skipped, so "" gives {} and a
  /// trailing ';' is harmless.
  std::vector<TransformPtr> make_list(std::string_view specs) const;

  /// The entry called `name`, or nullptr.
  const TransformEntry* find(std::string_view name) const;
  /// Every registered name, sorted.
  std::vector<std::string> names() const;
  /// Human-readable reference of every entry, sorted by name: name and doc, then one line per
  /// parameter with its type, default (or "required") and doc.
  std::string help() const;

  /// The process-wide registry with the built-in transforms (register_builtin_transforms)
  /// already added; created on first use (thread-safe). Plugins loaded by the apps add to it.
  static Registry& builtin();

 private:
  mutable std::shared_mutex mutex_;
  std::map<std::string, TransformEntry, std::less<>> entries_;
};

/// Adds the built-in transforms (crops, resize, flip, colour, normalize) to `registry`.
/// Defined in builtin_transforms.cpp.
void register_builtin_transforms(Registry& registry);

}  // namespace stoke::nodes
