// Helpers shared by the `stoke` subcommands: dispatch by name, option parsing, --help and usage
// errors, all with the same wording and exit codes (0 success, 1 failure, 2 usage error).
#pragma once

// GCC 12 reports a false null dereference inside Boost.Program_options' typed_value<std::string>.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <boost/program_options.hpp>
#pragma GCC diagnostic pop
#include <initializer_list>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace stoke::app {

/// Exit code of a command-line mistake (unknown command or option, bad value).
inline constexpr int usage_exit_code = 2;

/// One entry of a command table: its name, a one-line description, and its implementation
/// (see commands.hpp for the calling convention).
struct Subcommand {
  std::string_view name;
  std::string_view doc;
  int (*run)(int argc, char** argv);
};

/// Runs the subcommand named by argv[1] with (argc - 1, argv + 1). `path` is the command that owns
/// the table as typed after "stoke" ("" for the top level, "bench" for `stoke bench`).
/// - no argument: prints the usage to stderr, returns 2; `--help`/`-h`: prints it to stdout, returns 0;
/// - an unknown name: "stoke <path>: unknown command 'x' (commands: a, b)" on stderr, returns 2;
/// - an exception from the subcommand: "stoke <path> <name>: <what>" on stderr, returns 1
///   (a boost::program_options::error is a usage error instead: returns 2).
int dispatch(std::string_view path, std::string_view summary, std::span<const Subcommand> commands, int argc,
             char** argv);

/// Prints `object` on stdout as one JSON line (the commands' --json output); invalid UTF-8 in
/// strings (a file name) becomes U+FFFD instead of an error.
void print_json(const nlohmann::ordered_json& object);

/// "" when `value` is one of `choices`, else the usage error for it:
/// "--autotune must be on or off (got 'maybe')".
std::string choice_error(std::string_view option, std::string_view value,
                         std::initializer_list<std::string_view> choices);

/// The help of `--format`: the data formats of nodes::DatasetRegistry::builtin(), as spec strings.
std::string format_help();

/// "" when DatasetRegistry::builtin() takes `format` ("auto", "tar", "coco annotations=a.json"), else
/// the usage error naming what is wrong: "--format: unknown data format 'zip'; known: ...". Load the
/// --plugin libraries first: they may add formats.
std::string format_error(std::string_view format);

/// The help of `--channels-last`, which every command that runs a model takes.
inline constexpr const char* channels_last_help =
    "the layout the model computes in: on (NHWC images and filters), off (NCHW) or auto (on for bf16 / fp16 on "
    "CUDA, where the tensor cores want it; off otherwise). Checkpoints are NCHW either way. On the CPU `on` "
    "computes through NCHW copies: the same numbers, slower";

/// Prints the usage of a command table (what `dispatch` prints for --help).
void print_usage(std::ostream& out, std::string_view path, std::string_view summary,
                 std::span<const Subcommand> commands);

/// The options of one command, with `--help`/`-h` built in.
///
///   CommandOptions cli("bench graph", "Measure the graph executor.");
///   cli.add()("items", po::value<int>()->default_value(100000), "items per run");
///   po::variables_map vm;
///   if (auto exit_code = cli.parse(argc, argv, vm)) return *exit_code;
class CommandOptions {
 public:
  /// `path`: the command as typed after "stoke" (e.g. "bench graph"); `summary`: what it does,
  /// printed under the usage line; `arguments`: the usage line's argument synopsis.
  CommandOptions(std::string path, std::string summary, std::string arguments = "[options]");

  /// Adds options, boost::program_options style: add()("name,n", value<T>(), "doc")...
  boost::program_options::options_description_easy_init add();
  /// Positional arguments fill the option `name` (max_count -1: any number).
  CommandOptions& positional(const char* name, int max_count);

  /// Lets the option `name` (added by the caller, a string) name a config file of the same
  /// options, read by parse() after the command line, which wins: "key = value" lines, '#'
  /// comments, a key repeated for a list.
  CommandOptions& config_file_option(std::string name);

  /// Parses argv[1..argc) into `values` (and runs notify()). Returns the exit code when the command
  /// must end now: 0 after printing --help, 2 after reporting a parse error; nullopt to go on.
  std::optional<int> parse(int argc, char** argv, boost::program_options::variables_map& values) const;

  /// The --help text: usage line, summary, options.
  void print_help(std::ostream& out) const;
  /// Prints "stoke <path>: <message> (see stoke <path> --help)" to stderr; returns 2.
  int usage_error(std::string_view message) const;

  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  std::string summary_;
  std::string arguments_;
  std::string config_option_;
  boost::program_options::options_description options_;
  boost::program_options::positional_options_description positional_;
};

}  // namespace stoke::app
