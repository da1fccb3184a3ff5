// A minimal writer of one-line JSON objects, for the `--json` output of the commands.
//
//   Json j;                       // {
//   j.field("images", 1024);      //   "images":1024,
//   j.begin_array("files");       //   "files":[
//   j.value("a.jpg");             //     "a.jpg"
//   j.end_array();                //   ]
//   std::cout << j.str();         // }
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace stoke::app {

class Json {
 public:
  Json() { open('{'); }

  void field(std::string_view key, std::string_view value) {
    this->key(key);
    quote(value);
  }
  void field(std::string_view key, const char* value) { field(key, std::string_view(value)); }
  void field(std::string_view key, const std::string& value) { field(key, std::string_view(value)); }
  void field(std::string_view key, double value) {
    this->key(key);
    number(value);
  }
  void field(std::string_view key, std::uint64_t value) {
    this->key(key);
    out_ += std::to_string(value);
  }
  void field(std::string_view key, int value) {
    this->key(key);
    out_ += std::to_string(value);
  }
  void field(std::string_view key, bool value) {
    this->key(key);
    out_ += value ? "true" : "false";
  }
  /// "key":null, for a value that does not exist (e.g. an accuracy without a validation split).
  void null_field(std::string_view key) {
    this->key(key);
    out_ += "null";
  }

  void value(std::string_view value) {
    separate();
    quote(value);
  }
  void value(double value) {
    separate();
    number(value);
  }
  void value(std::uint64_t value) {
    separate();
    out_ += std::to_string(value);
  }
  void begin_object() {
    separate();
    open('{');
  }
  void begin_object(std::string_view key) {
    this->key(key);
    open('{');
  }
  void end_object() { close('}'); }
  void begin_array(std::string_view key) {
    this->key(key);
    open('[');
  }
  /// An array inside an array (a row of a matrix).
  void begin_array() {
    separate();
    open('[');
  }
  void end_array() { close(']'); }

  /// The document, closing whatever is still open.
  std::string str() const {
    std::string s = out_;
    for (auto it = open_.rbegin(); it != open_.rend(); ++it) s += *it == '{' ? '}' : ']';
    return s;
  }

 private:
  void open(char c) {
    out_ += c;
    open_.push_back(c);
    first_.push_back(true);
  }
  void close(char c) {
    out_ += c;
    open_.pop_back();
    first_.pop_back();
  }
  void separate() {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
  void key(std::string_view key) {
    separate();
    quote(key);
    out_ += ':';
  }
  void number(double v) {
    if (!std::isfinite(v)) {
      out_ += "null";
      return;
    }
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.6g", v);
    out_ += buffer;
  }
  void quote(std::string_view s) {
    out_ += '"';
    for (const char c : s) {
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buffer[8];
            std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
            out_ += buffer;
          } else {
            out_ += c;
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<char> open_;
  std::vector<bool> first_;
};

}  // namespace stoke::app
