// Plugins: loading the example plugin and running its transform, and refusing libraries that are
// missing, not libraries, not stoke plugins, or built for another ABI, stoke or standard library.
// Paths of the plugins come from CMake (STOKE_EXAMPLE_PLUGIN, STOKE_BAD_PLUGIN_<fault>).
#include "stoke/nodes/plugin.hpp"
#ifdef STOKE_TEST_DICOM_DIR
#include "stoke/nodes/dicom_codec.hpp"
#endif

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <string>

namespace {

namespace sn = stoke::nodes;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string load_error(const fs::path& path, sn::Registry& registry,
                       sn::DatasetRegistry& formats = sn::DatasetRegistry::builtin()) {
  try {
    sn::load_plugin(path, registry, formats);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "load_plugin(" << path << ") did not throw std::runtime_error";
  return {};
}

// The window transform's mapping for center 128, width 64: [96, 160] -> [0, 255].
int window_128_64(int v) { return std::clamp(static_cast<int>(std::lround((v - 96) * 255.0 / 64.0)), 0, 255); }

sn::Image ramp_image() {
  // Row of values chosen away from .5 rounding ties: below, inside and above the window.
  const int values[] = {0, 95, 96, 100, 127, 150, 159, 160, 161, 255};
  cv::Mat pixels(1, 10, CV_8UC3);
  for (int x = 0; x < 10; ++x) {
    pixels.at<cv::Vec3b>(0, x) = cv::Vec3b(static_cast<uchar>(values[x]), static_cast<uchar>(255 - values[x]), 128);
  }
  sn::Image image;
  image.pixels = pixels;
  return image;
}

TEST(Plugin, HeaderVersionMatchesTheProject) { EXPECT_STREQ(STOKE_PLUGIN_STOKE_VERSION, STOKE_PROJECT_VERSION); }

TEST(Plugin, LoadsTheExamplePluginAndDescribesIt) {
  sn::Registry registry;
  const sn::Plugin plugin = sn::load_plugin(STOKE_EXAMPLE_PLUGIN, registry);
  EXPECT_EQ(plugin.path, fs::path(STOKE_EXAMPLE_PLUGIN));
  EXPECT_EQ(plugin.name, "stoke_example_plugin");
  EXPECT_EQ(plugin.version, "1.0.0");
  EXPECT_EQ(plugin.stoke_version, STOKE_PLUGIN_STOKE_VERSION);
  EXPECT_EQ(plugin.transforms, (std::vector<std::string>{"window"}));
  EXPECT_NE(plugin.handle, nullptr);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"window"}));
  EXPECT_THAT(registry.help(), HasSubstr("window  intensity windowing"));
}

TEST(Plugin, ExampleWindowTransformMapsEachChannelThroughTheWindow) {
  sn::Registry registry;
  sn::load_plugin(STOKE_EXAMPLE_PLUGIN, registry);
  const sn::TransformPtr window = registry.make("window center=128 width=64");
  EXPECT_EQ(window->name(), "window");
  EXPECT_EQ(window->describe(), "window center=128 width=64 mode=channels invert=false");

  sn::Image image = ramp_image();
  const cv::Mat before = image.pixels.clone();
  sn::ItemRng rng(1, 0, 0);
  (*window)(image, rng);
  ASSERT_EQ(image.pixels.type(), CV_8UC3);
  ASSERT_EQ(image.pixels.size(), before.size());
  for (int x = 0; x < before.cols; ++x) {
    for (int c = 0; c < 3; ++c) {
      const int v = before.at<cv::Vec3b>(0, x)[c];
      EXPECT_EQ(image.pixels.at<cv::Vec3b>(0, x)[c], window_128_64(v)) << "x=" << x << " c=" << c << " v=" << v;
    }
  }
  // Spot checks against hand-computed values: below, at the edges, inside, above.
  EXPECT_EQ(image.pixels.at<cv::Vec3b>(0, 0)[0], 0);
  EXPECT_EQ(image.pixels.at<cv::Vec3b>(0, 3)[0], 16);   // (100 - 96) * 255 / 64 = 15.94
  EXPECT_EQ(image.pixels.at<cv::Vec3b>(0, 5)[0], 215);  // (150 - 96) * 255 / 64 = 215.16
  EXPECT_EQ(image.pixels.at<cv::Vec3b>(0, 9)[0], 255);
}

// A window in the pixels' own units: int16 values as CT's Hounsfield units, a preset, float out.
TEST(Plugin, ExampleWindowTakesSignedValuesInTheirOwnUnits) {
  sn::Registry registry;
  sn::load_plugin(STOKE_EXAMPLE_PLUGIN, registry);
  const cv::Mat hu = (cv::Mat_<std::int16_t>(1, 6) << -1000, -1350, -600, 0, 150, 1000);  // air .. bone, HU
  sn::Image image;
  image.pixels = hu.clone();
  sn::ItemRng rng(1, 0, 0);
  const sn::TransformPtr lung = registry.make("window preset=lung");  // -600 +- 750 HU
  EXPECT_EQ(lung->describe(), "window center=-600 width=1500 mode=channels invert=false");
  (*lung)(image, rng);
  ASSERT_EQ(image.pixels.type(), CV_8UC1);
  // (hu + 1350) / 1500 * 255, clamped: 59.5 -> 60 (half away), 0, 127.5 -> 128, 229.5 -> 230, 255, 255.
  const std::vector<int> expected{60, 0, 128, 230, 255, 255};
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(image.pixels.at<std::uint8_t>(0, i), expected[static_cast<std::size_t>(i)], 1)
        << hu.at<std::int16_t>(0, i);
  image.pixels = hu.clone();
  (*registry.make("window center=40 width=400 output=float"))(image, rng);  // soft tissue
  ASSERT_EQ(image.pixels.type(), CV_32FC1);
  EXPECT_FLOAT_EQ(image.pixels.at<float>(0, 3), 0.4f);  // (0 + 160) / 400
  EXPECT_FLOAT_EQ(image.pixels.at<float>(0, 0), 0.0f);
  EXPECT_FLOAT_EQ(image.pixels.at<float>(0, 5), 1.0f);
  // mode=luma needs RGB; unknown presets and outputs are refused by name.
  image.pixels = hu.clone();
  image.name = "ct/1.dcm";
  try {
    (*registry.make("window mode=luma"))(image, rng);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("ct/1.dcm is CV_16SC1"));
  }
  EXPECT_THROW(registry.make("window preset=liver"), std::invalid_argument);
  EXPECT_THROW(registry.make("window output=double"), std::invalid_argument);
}

#ifdef STOKE_TEST_DICOM_DIR
// On a real CT slice (pydicom's CT_small.dcm through stoke::dicom): every pixel is the lung window
// of its Hounsfield units, computed here in double.
TEST(Plugin, ExampleWindowOnARealCtSliceInHounsfieldUnits) {
  sn::Registry registry;
  sn::load_plugin(STOKE_EXAMPLE_PLUGIN, registry);
  const std::vector<std::byte> bytes = sn::read_file(std::string(STOKE_TEST_DICOM_DIR) + "/CT_small.dcm");
  const cv::Mat hu = sn::decode_dicom(bytes, "CT_small.dcm");
  ASSERT_EQ(hu.type(), CV_16SC1);
  double lowest = 0;
  double highest = 0;
  cv::minMaxLoc(hu, &lowest, &highest);
  EXPECT_LT(lowest, -600);  // air and lung in the slice, as well as tissue
  EXPECT_GT(highest, 40);
  sn::Image image{.pixels = hu.clone(), .name = "CT_small.dcm"};
  sn::ItemRng rng(1, 0, 0);
  (*registry.make("window preset=lung"))(image, rng);
  ASSERT_EQ(image.pixels.type(), CV_8UC1);
  int off_by_one = 0;
  for (int y = 0; y < hu.rows; ++y) {
    for (int x = 0; x < hu.cols; ++x) {
      const double t = std::clamp((hu.at<std::int16_t>(y, x) + 1350.0) / 1500.0, 0.0, 1.0) * 255.0;
      const int got = image.pixels.at<std::uint8_t>(y, x);
      ASSERT_LE(std::abs(got - t), 0.5 + 1e-3) << "(" << x << ", " << y << ") HU " << hu.at<std::int16_t>(y, x);
      if (got != static_cast<int>(std::lround(t))) ++off_by_one;  // float rounding at .5
    }
  }
  EXPECT_LT(off_by_one, hu.total() / 100);
}
#endif

TEST(Plugin, ExampleWindowLumaModeWritesGreyAndInvertFlips) {
  sn::Registry registry;
  sn::load_plugin(STOKE_EXAMPLE_PLUGIN, registry);
  sn::Image image;
  image.pixels = cv::Mat(2, 3, CV_8UC3, cv::Scalar(100, 100, 100));  // grey: luma 100
  sn::ItemRng rng(1, 0, 0);
  (*registry.make("window center=128 width=64 mode=luma invert=true"))(image, rng);
  EXPECT_EQ(image.pixels.at<cv::Vec3b>(1, 2), cv::Vec3b(255 - 16, 255 - 16, 255 - 16));

  EXPECT_THROW(registry.make("window mode=sideways"), std::invalid_argument);
  EXPECT_THROW(registry.make("window width=0"), std::invalid_argument);
}

TEST(Plugin, TheSameLibraryCanFeedSeveralRegistriesButNotOneTwice) {
  sn::Registry first;
  sn::Registry second;
  sn::load_plugin(STOKE_EXAMPLE_PLUGIN, first);
  sn::load_plugin(STOKE_EXAMPLE_PLUGIN, second);
  EXPECT_NE(second.find("window"), nullptr);
  const std::string message = load_error(STOKE_EXAMPLE_PLUGIN, first);
  EXPECT_THAT(message, HasSubstr(STOKE_EXAMPLE_PLUGIN));
  EXPECT_THAT(message, HasSubstr("registers transform 'window', which is already registered"));
}

// What a second stoke.Loader with the same plugins does: the built-in registries take a library
// once, and loading it again returns its first load's description.
TEST(Plugin, LoadingALibraryAgainIntoTheBuiltinRegistriesIsANoOp) {
  const sn::Plugin first = sn::load_plugin(STOKE_TEST_FORMAT_PLUGIN, sn::Registry::builtin());
  const sn::Plugin again = sn::load_plugin(STOKE_TEST_FORMAT_PLUGIN, sn::Registry::builtin());
  EXPECT_EQ(again.formats, first.formats);
  EXPECT_EQ(again.handle, first.handle);
  EXPECT_NE(sn::DatasetRegistry::builtin().find("stripes"), nullptr);
}

TEST(Plugin, RelativePathIsTakenFromTheCurrentDirectory) {
  const fs::path plugin(STOKE_EXAMPLE_PLUGIN);
  const fs::path before = fs::current_path();
  fs::current_path(plugin.parent_path());
  sn::Registry registry;
  // A bare file name: dlopen alone would search the library path and not find it.
  EXPECT_NO_THROW(sn::load_plugin(plugin.filename(), registry));
  fs::current_path(before);
  EXPECT_NE(registry.find("window"), nullptr);
}

TEST(Plugin, WrongAbiIsRefusedNamingTheFileAndBothNumbers) {
  sn::Registry registry;
  const std::string message = load_error(STOKE_BAD_PLUGIN_ABI, registry);
  EXPECT_THAT(message, HasSubstr(STOKE_BAD_PLUGIN_ABI));
  EXPECT_THAT(message, HasSubstr("built for stoke plugin ABI " + std::to_string(STOKE_PLUGIN_ABI + 1)));
  EXPECT_THAT(message, HasSubstr("has plugin ABI " + std::to_string(STOKE_PLUGIN_ABI)));
  EXPECT_THAT(message, HasSubstr("rebuild the plugin against stoke 0.1"));
  EXPECT_TRUE(registry.names().empty());
}

TEST(Plugin, OtherStokeReleaseIsRefusedNamingBothVersions) {
  sn::Registry registry;
  const std::string message = load_error(STOKE_BAD_PLUGIN_VERSION, registry);
  EXPECT_THAT(message, HasSubstr(STOKE_BAD_PLUGIN_VERSION));
  EXPECT_THAT(
      message,
      HasSubstr("(bad_plugin 0.0.1) was built against stoke 9.9.0, but this is stoke " STOKE_PLUGIN_STOKE_VERSION));
  EXPECT_THAT(message, HasSubstr("rebuild the plugin against stoke 0.1"));
  EXPECT_TRUE(registry.names().empty());
}

TEST(Plugin, OtherStandardLibraryAbiIsRefused) {
  sn::Registry registry;
  const std::string message = load_error(STOKE_BAD_PLUGIN_STDLIB, registry);
  EXPECT_THAT(message, HasSubstr(STOKE_BAD_PLUGIN_STDLIB));
  const std::string flag =
      std::string(STOKE_PLUGIN_STDLIB) == "libc++" ? "_LIBCPP_ABI_VERSION=" : "_GLIBCXX_USE_CXX11_ABI=";
  EXPECT_THAT(message, HasSubstr(flag + std::to_string(1 - STOKE_PLUGIN_STDLIB_ABI) + ", but this stoke with"));
  EXPECT_THAT(message, HasSubstr(flag + std::to_string(STOKE_PLUGIN_STDLIB_ABI) + "; C++ objects cannot cross"));
  EXPECT_TRUE(registry.names().empty());
}

TEST(Plugin, LibraryWithoutEntryPointIsRefused) {
  sn::Registry registry;
  const std::string message = load_error(STOKE_BAD_PLUGIN_NO_ENTRY, registry);
  EXPECT_THAT(message, HasSubstr(STOKE_BAD_PLUGIN_NO_ENTRY));
  EXPECT_THAT(message, HasSubstr("has no entry point stoke_plugin_v1 ("));
  EXPECT_THAT(message, HasSubstr("undefined symbol: stoke_plugin_v1"));  // dlerror's text
  EXPECT_THAT(message, HasSubstr("STOKE_PLUGIN(name, version, register_function)"));
}

TEST(Plugin, FailingRegistrationLeavesTheRegistryUnchanged) {
  sn::Registry registry;
  const std::string message = load_error(STOKE_BAD_PLUGIN_THROWS, registry);
  EXPECT_THAT(message, HasSubstr(STOKE_BAD_PLUGIN_THROWS));
  EXPECT_THAT(message, HasSubstr("registering its transforms failed: deliberate failure after one add"));
  EXPECT_EQ(registry.find("test_partial"), nullptr);
}

TEST(Plugin, FailingFormatRegistrationLeavesBothRegistriesUnchanged) {
  sn::Registry registry;
  sn::DatasetRegistry formats;
  try {
    sn::load_plugin(STOKE_BAD_PLUGIN_FORMATS_THROW, registry, formats);
    ADD_FAILURE() << "the plugin whose register_formats throws was loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("registering its data formats failed: deliberate failure after one data format"));
  }
  EXPECT_EQ(registry.find("test_partial"), nullptr);  // its register_nodes had succeeded
  EXPECT_TRUE(formats.names().empty());
}

// The test format plugin adds "stripes" (tests/nodes/plugins/format_plugin.cpp): a list of labels.
TEST(Plugin, AFormatPluginsSourceOpensByNameAndByGuess) {
  sn::Registry registry;
  sn::DatasetRegistry formats;
  const bool in_builtin = sn::DatasetRegistry::builtin().find("stripes") != nullptr;  // another test's load
  const sn::Plugin plugin = sn::load_plugin(STOKE_TEST_FORMAT_PLUGIN, registry, formats);
  EXPECT_EQ(plugin.name, "stoke_test_format_plugin");
  EXPECT_TRUE(plugin.transforms.empty());
  EXPECT_EQ(plugin.formats, std::vector<std::string>{"stripes"});
  EXPECT_TRUE(registry.names().empty());
  EXPECT_THAT(formats.help(), HasSubstr("stripes  test plugin:"));

  const fs::path file = fs::temp_directory_path() / ("stoke_plugin_test_" + std::to_string(::getpid()) + ".stripes");
  std::ofstream(file) << "0\n1\n9\n1\n";
  const sn::DatasetPtr guessed = formats.open(file);
  ASSERT_EQ(guessed->size(), 3u);
  EXPECT_EQ(guessed->classes(), (std::vector<std::string>{"stripe0", "stripe1"}));
  ASSERT_EQ(guessed->ignored().size(), 1u);                            // the 9
  EXPECT_EQ(sn::DatasetRegistry::builtin().find("stripes") != nullptr, in_builtin);  // it went where it was told
  const sn::Sample sample = guessed->read(1);
  EXPECT_EQ(sample.label, 1);
  EXPECT_EQ(sample.width, 8);
  EXPECT_EQ(static_cast<int>(sample.bytes.data()[0]), 40);
  EXPECT_EQ(formats.open(file, "stripes side=16")->read(0).width, 16);
  EXPECT_THAT(load_error(STOKE_TEST_FORMAT_PLUGIN, registry, formats),
              HasSubstr("registers data format 'stripes', which is already registered"));
  fs::remove(file);
}

class PluginFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoke_plugin_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(PluginFiles, MissingFileIsReportedWithItsPath) {
  sn::Registry registry;
  const fs::path missing = dir_ / "libnope.so";
  const std::string message = load_error(missing, registry);
  EXPECT_EQ(message, "plugin '" + missing.string() + "': no such file; pass the path of the plugin's .so file");
}

TEST_F(PluginFiles, NonLibraryFileIsReportedWithDlerrorText) {
  const fs::path text = dir_ / "notes.so";
  std::ofstream(text) << std::string(200, 'x') << "\nnot a shared library\n";
  sn::Registry registry;
  const std::string message = load_error(text, registry);
  EXPECT_THAT(message, HasSubstr("plugin '" + text.string() + "': cannot load it: " + text.string()));
  EXPECT_THAT(message, HasSubstr("invalid ELF header"));
  EXPECT_THAT(message, HasSubstr("is it a shared library built for this platform?"));
}

TEST_F(PluginFiles, DirectoryIsRefused) {
  sn::Registry registry;
  EXPECT_THAT(load_error(dir_, registry), HasSubstr("is a directory"));
}

}  // namespace
