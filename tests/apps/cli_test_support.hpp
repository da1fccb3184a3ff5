// Running the `stoke` executable from a test. STOKE_CLI is its path (tests/apps/CMakeLists.txt).
#pragma once

#include <sys/wait.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef STOKE_CLI
#error "STOKE_CLI must be the path of the stoke executable"
#endif

namespace stoke::test {

/// What a run of `stoke` gave: its exit code (-1 if it did not exit normally) and its output.
struct CliResult {
  int exit_code;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A safetensors file with one tensor and no metadata: what safetensors' save_file writes, not a
/// checkpoint of `stoke train`.
inline std::vector<std::byte> plain_safetensors() {
  std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::vector<std::byte> bytes(8 + header.size() + 4, std::byte{0});
  for (std::size_t i = 0; i < 8; ++i) bytes[i] = static_cast<std::byte>((header.size() >> (8 * i)) & 0xff);
  for (std::size_t i = 0; i < header.size(); ++i) bytes[8 + i] = static_cast<std::byte>(header[i]);
  return bytes;
}

/// The non-empty lines of a command's output.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

/// Runs `stoke <args>` (each argument single-quoted for the shell), capturing stdout and stderr
/// in files under `scratch`.
inline CliResult run_stoke(const std::filesystem::path& scratch, const std::vector<std::string>& args) {
  std::string command = std::string("'") + STOKE_CLI + "'";
  for (const std::string& arg : args) command += " '" + arg + "'";
  const auto out = scratch / "stdout.txt", err = scratch / "stderr.txt";
  command += " >'" + out.string() + "' 2>'" + err.string() + "'";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

}  // namespace stoke::test
