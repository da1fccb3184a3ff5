#include "cli.hpp"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <stoke/nodes/dataset_registry.hpp>
#include <utility>

namespace stoke::app {

namespace po = boost::program_options;

namespace {

// "stoke" or "stoke bench graph".
std::string full_name(std::string_view path) {
  std::string name = "stoke";
  if (!path.empty()) {
    name += ' ';
    name += path;
  }
  return name;
}

std::string command_list(std::span<const Subcommand> commands) {
  std::string list;
  for (const Subcommand& command : commands) {
    if (!list.empty()) list += ", ";
    list += command.name;
  }
  return list;
}

}  // namespace

void print_json(const nlohmann::ordered_json& object) {
  // Flushed: a run's per-epoch lines are read while it goes on.
  std::cout << object.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << std::endl;
}

std::string choice_error(std::string_view option, std::string_view value,
                         std::initializer_list<std::string_view> choices) {
  std::string list;
  std::size_t i = 0;
  for (const std::string_view choice : choices) {
    if (choice == value) return "";
    list += std::string(i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(choice);
    ++i;
  }
  return "--" + std::string(option) + " must be " + list + " (got '" + std::string(value) + "')";
}

std::string format_help() {
  return "how to read --data: auto (guess from the path) or a data format, with its parameters as one word: " +
         nodes::DatasetRegistry::builtin().choices() +
         " (e.g. \"coco annotations=instances_val2017.json\"); `stoke bench pipeline --list-formats` lists their "
         "parameters, and a --plugin may add formats";
}

std::string format_error(std::string_view format) {
  try {
    nodes::DatasetRegistry::builtin().check(format);
    return "";
  } catch (const std::invalid_argument& e) {
    return "--format: " + std::string(e.what());
  }
}

void print_usage(std::ostream& out, std::string_view path, std::string_view summary,
                 std::span<const Subcommand> commands) {
  const std::string name = full_name(path);
  out << "usage: " << name << " <command> [options]\n"
      << "       " << name << " <command> --help\n";
  if (path.empty()) out << "       " << name << " --version\n";
  out << '\n' << summary << "\n\ncommands:\n";
  std::size_t width = 0;
  for (const Subcommand& command : commands) width = std::max(width, command.name.size());
  for (const Subcommand& command : commands) {
    out << "  " << command.name << std::string(width - command.name.size() + 3, ' ') << command.doc << '\n';
  }
}

int dispatch(std::string_view path, std::string_view summary, std::span<const Subcommand> commands, int argc,
             char** argv) {
  if (argc < 2) {
    print_usage(std::cerr, path, summary, commands);
    return usage_exit_code;
  }
  const std::string_view requested = argv[1];
  if (requested == "--help" || requested == "-h") {
    print_usage(std::cout, path, summary, commands);
    return 0;
  }
  const auto found = std::find_if(commands.begin(), commands.end(),
                                  [&](const Subcommand& command) { return command.name == requested; });
  if (found == commands.end()) {
    std::cerr << full_name(path) << ": unknown command '" << requested << "' (commands: " << command_list(commands)
              << ")\n";
    return usage_exit_code;
  }

  std::string sub_path(path);
  if (!sub_path.empty()) sub_path += ' ';
  sub_path += found->name;
  try {
    return found->run(argc - 1, argv + 1);
  } catch (const po::error& error) {
    std::cerr << full_name(sub_path) << ": " << error.what() << " (see " << full_name(sub_path) << " --help)\n";
    return usage_exit_code;
  } catch (const std::exception& error) {
    std::cerr << full_name(sub_path) << ": " << error.what() << '\n';
  } catch (...) {
    std::cerr << full_name(sub_path) << ": unknown exception\n";
  }
  return 1;
}

CommandOptions::CommandOptions(std::string path, std::string summary, std::string arguments)
    : path_(std::move(path)), summary_(std::move(summary)), arguments_(std::move(arguments)), options_("options") {
  options_.add_options()("help,h", "show this help");
}

po::options_description_easy_init CommandOptions::add() { return options_.add_options(); }

CommandOptions& CommandOptions::positional(const char* name, int max_count) {
  positional_.add(name, max_count);
  return *this;
}

CommandOptions& CommandOptions::config_file_option(std::string name) {
  config_option_ = std::move(name);
  return *this;
}

std::optional<int> CommandOptions::parse(int argc, char** argv, po::variables_map& values) const {
  try {
    po::store(po::command_line_parser(argc, argv).options(options_).positional(positional_).run(), values);
    if (values.count("help") != 0) {
      print_help(std::cout);
      return 0;
    }
    if (!config_option_.empty() && values.count(config_option_) != 0) {
      const auto file = values[config_option_].as<std::string>();
      std::ifstream in(file);
      if (!in) return usage_error(file + ": cannot read this config file");
      try {
        po::store(po::parse_config_file(in, options_), values);
      } catch (const po::error& error) {
        return usage_error(file + ": " + error.what());
      }
    }
    po::notify(values);
  } catch (const po::error& error) {
    return usage_error(error.what());
  }
  return std::nullopt;
}

void CommandOptions::print_help(std::ostream& out) const {
  out << "usage: " << full_name(path_) << ' ' << arguments_ << "\n\n" << summary_ << "\n\n" << options_;
}

int CommandOptions::usage_error(std::string_view message) const {
  const std::string name = full_name(path_);
  std::cerr << name << ": " << message << " (see " << name << " --help)\n";
  return usage_exit_code;
}

}  // namespace stoke::app
