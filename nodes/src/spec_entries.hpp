// What the two registries of stoke::nodes share (private): named entries built from spec strings
// "name key=value ...", each declaring its parameters with ParamDoc -- the transforms
// (registry.hpp) and the dataset sources (dataset_registry.hpp). One set of checks, one wording.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stoke/nodes/registry.hpp"

namespace stoke::nodes::detail {

/// `s` cut at every `separator` (n separators: n + 1 parts, empty ones included).
std::vector<std::string_view> split(std::string_view s, char separator);

/// `s` in lower case (ASCII).
std::string lower(std::string_view s);

/// `s` in single quotes.
std::string in_quotes(std::string_view s);

/// `items` separated by `separator`.
std::string join(const std::vector<std::string>& items, std::string_view separator);

/// Checks a new entry before a registry adds it: `adder` names the caller and the kind of entry
/// ("Registry::add: transform"). Throws std::invalid_argument when the name is empty or holds a
/// space, '=' or ';', there is no factory, or a ParamDoc has a bad name, a repeated name, an
/// unknown type or a default that does not parse as its type.
void check_entry(std::string_view adder, const std::string& name, bool has_factory,
                 const std::vector<ParamDoc>& params);

/// Reads parameter `p` of `params` with the getter of its type: throws std::invalid_argument
/// naming the entry, the key and the value when the value does not parse as its type.
void read_as_declared(const Params& params, const ParamDoc& p);

/// "unknown <kind> '<name>'; known: a, b, c; did you mean 'b'?", for a name no entry has.
std::string unknown_name(std::string_view kind, std::string_view name, const std::vector<std::string>& known);

/// The Params an entry's factory gets for `parsed` (Params::parse of `spec`): throws
/// std::invalid_argument naming the entry when the spec gives a key the entry does not declare or
/// leaves out a required one; the result lets the factory read declared keys only.
Params bind(std::string_view spec, const std::string& name, const Params& parsed, const std::vector<ParamDoc>& params);

/// Throws std::logic_error when the factory did not read every parameter the spec gave (a bug in
/// the entry: it declares a parameter it ignores).
void check_all_read(const std::string& name, const Params& params);

/// The help of one entry: "name  doc", then a line per parameter with its type, default and doc.
std::string help_of(const std::string& name, const std::string& doc, const std::vector<ParamDoc>& params);

}  // namespace stoke::nodes::detail
