// Running the `stoke` executable from a test. STOKE_CLI is its path (tests/apps/CMakeLists.txt).
#pragma once

#include <sys/wait.h>

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
