// The transform registry: spec parsing, typed parameters, and the errors that list what exists.
#include "stoke/nodes/registry.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <memory>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace sn = stoke::nodes;
using ::testing::HasSubstr;

// The message of the E that `f` throws; a test failure when it throws nothing or something else.
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception of the expected type";
  return {};
}

// A transform that keeps the values its factory read, so tests can see what the spec produced.
class Probe final : public sn::Transform {
 public:
  struct Values {
    int i = 0;
    double d = 0;
    bool b = false;
    std::pair<double, double> r;
    cv::Size s;
    std::vector<double> l;
    std::string str;
  };
  explicit Probe(Values v) : values(std::move(v)) {}
  std::string_view name() const noexcept override { return "probe"; }
  Values values;

 protected:
  void apply_impl(sn::Image& image, sn::ItemRng&) const override { image.pixels += cv::Scalar::all(values.i); }
};

sn::TransformEntry probe_entry() {
  return {"probe",
          "reads one parameter of every type",
          {{"i", "int", "7", "an int"},
           {"d", "double", "0.5", "a double"},
           {"b", "bool", "false", "a bool"},
           {"r", "range", "0.08:1", "a range"},
           {"s", "size", "224", "a size"},
           {"l", "list", "0.485,0.456,0.406", "a list"},
           {"str", "string", "bilinear", "a string"}},
          [](const sn::Params& p) -> sn::TransformPtr {
            return std::make_shared<Probe>(Probe::Values{
                p.get_int("i", 7), p.get_double("d", 0.5), p.get_bool("b", false), p.get_range("r", {0.08, 1}),
                p.get_size("s", {224, 224}), p.get_list("l", {0.485, 0.456, 0.406}), p.get_string("str", "bilinear")});
          }};
}

// A transform with no parameters: named after the entry it was made from.
class Named final : public sn::Transform {
 public:
  explicit Named(std::string n) : name_(std::move(n)) {}
  std::string_view name() const noexcept override { return name_; }

 protected:
  void apply_impl(sn::Image&, sn::ItemRng&) const override {}

 private:
  std::string name_;
};

sn::TransformEntry named_entry(const std::string& name, std::vector<sn::ParamDoc> params = {}) {
  return {name, "does nothing", std::move(params),
          [name](const sn::Params&) -> sn::TransformPtr { return std::make_shared<Named>(name); }};
}

// A registry with probe and a few parameterless transforms whose names invite typos.
sn::Registry& test_registry() {
  static sn::Registry* registry = [] {
    auto* r = new sn::Registry;
    r->add(probe_entry());
    for (const char* name : {"random_resized_crop", "center_crop", "hflip", "color_jitter"}) r->add(named_entry(name));
    return r;
  }();
  return *registry;
}

const Probe::Values& probe_values(const sn::TransformPtr& t) {
  const auto* probe = dynamic_cast<const Probe*>(t.get());
  if (!probe) throw std::runtime_error("not a Probe");
  return probe->values;
}

sn::Params one(std::string key, std::string value) { return sn::Params("t", {{std::move(key), std::move(value)}}); }

// ---- Params getters -------------------------------------------------------------------------

TEST(Params, GettersReturnTheFallbackWhenTheKeyIsAbsent) {
  const sn::Params p("t", {});
  EXPECT_EQ(p.get_int("k", 3), 3);
  EXPECT_EQ(p.get_double("k", 2.5), 2.5);
  EXPECT_EQ(p.get_range("k", {1, 2}), std::make_pair(1.0, 2.0));
  EXPECT_EQ(p.get_size("k", {4, 5}), cv::Size(4, 5));
  EXPECT_TRUE(p.get_bool("k", true));
  EXPECT_EQ(p.get_list("k", {1, 2}), (std::vector<double>{1, 2}));
  EXPECT_EQ(p.get_string("k", "x"), "x");
}

TEST(Params, IntAcceptsSignsAndRejectsFractionsAndOverflow) {
  EXPECT_EQ(one("k", "16").get_int("k", 0), 16);
  EXPECT_EQ(one("k", "-2").get_int("k", 0), -2);
  EXPECT_EQ(one("k", "+3").get_int("k", 0), 3);
  for (const char* bad : {"1.5", "abc", "", "12a", "99999999999", "+-1"}) {
    EXPECT_EQ(error_of<std::invalid_argument>([&] { one("k", bad).get_int("k", 0); }),
              std::string("t: parameter k='") + bad + "' is not an integer like 16");
  }
}

TEST(Params, DoubleAcceptsExponentsAndRejectsNonFiniteValues) {
  EXPECT_DOUBLE_EQ(one("k", "0.5").get_double("k", 0), 0.5);
  EXPECT_DOUBLE_EQ(one("k", "1e-3").get_double("k", 0), 1e-3);
  EXPECT_DOUBLE_EQ(one("k", "-2").get_double("k", 0), -2);
  for (const char* bad : {"nan", "inf", "-inf", "x", "", "0.5.1", "1,5"}) {
    EXPECT_THAT(error_of<std::invalid_argument>([&] { one("k", bad).get_double("k", 0); }),
                HasSubstr(std::string("k='") + bad + "' is not a number like 0.5"));
  }
}

TEST(Params, RangeIsLoColonHiOrOneNumber) {
  EXPECT_EQ(one("scale", "0.08:1").get_range("scale", {}), std::make_pair(0.08, 1.0));
  EXPECT_EQ(one("scale", "0.5").get_range("scale", {}), std::make_pair(0.5, 0.5));
  EXPECT_EQ(one("scale", "-1:1").get_range("scale", {}), std::make_pair(-1.0, 1.0));
  EXPECT_EQ(error_of<std::invalid_argument>([] {
              sn::Params("random_resized_crop", {{"scale", "abc"}}).get_range("scale", {});
            }),
            "random_resized_crop: parameter scale='abc' is not a range like 0.08:1");
  for (const char* bad : {":", "1:", ":1", "1:2:3", "a:1", ""}) {
    EXPECT_THAT(error_of<std::invalid_argument>([&] { one("scale", bad).get_range("scale", {}); }),
                HasSubstr("is not a range like 0.08:1"))
        << bad;
  }
  EXPECT_THAT(error_of<std::invalid_argument>([] { one("scale", "1:0.5").get_range("scale", {}); }),
              HasSubstr("scale='1:0.5' is not a range lo:hi with lo <= hi"));
}

TEST(Params, SizeIsNOrWidthXHeight) {
  EXPECT_EQ(one("size", "224").get_size("size", {}), cv::Size(224, 224));
  const cv::Size wide = one("size", "224x192").get_size("size", {});
  EXPECT_EQ(wide.width, 224);
  EXPECT_EQ(wide.height, 192);
  for (const char* bad : {"axb", "224x", "x224", "1x2x3", "", "22.5"}) {
    EXPECT_THAT(error_of<std::invalid_argument>([&] { one("size", bad).get_size("size", {}); }),
                HasSubstr("is not a size like 224 or 224x192 (width x height)"))
        << bad;
  }
  for (const char* bad : {"0", "-4", "10x0"}) {
    EXPECT_THAT(error_of<std::invalid_argument>([&] { one("size", bad).get_size("size", {}); }),
                HasSubstr("is not a positive size"))
        << bad;
  }
}

TEST(Params, BoolTakesTheUsualSpellingsInAnyCase) {
  for (const char* yes : {"true", "1", "yes", "on", "TRUE", "Yes"})
    EXPECT_TRUE(one("b", yes).get_bool("b", false)) << yes;
  for (const char* no : {"false", "0", "no", "off", "False"}) EXPECT_FALSE(one("b", no).get_bool("b", true)) << no;
  EXPECT_EQ(error_of<std::invalid_argument>([] { one("b", "maybe").get_bool("b", false); }),
            "t: parameter b='maybe' is not a boolean (true/false, 1/0, yes/no, on/off)");
}

TEST(Params, ListIsCommaSeparatedNumbersAndMayBeEmpty) {
  EXPECT_EQ(one("mean", "0.485,0.456,0.406").get_list("mean", {}), (std::vector<double>{0.485, 0.456, 0.406}));
  EXPECT_EQ(one("mean", "3").get_list("mean", {1, 2}), (std::vector<double>{3}));
  EXPECT_TRUE(one("mean", "").get_list("mean", {1, 2}).empty());
  for (const char* bad : {"1,,2", "1,", ",1", "1;2", "a"}) {
    EXPECT_THAT(error_of<std::invalid_argument>([&] { one("mean", bad).get_list("mean", {}); }),
                HasSubstr("is not a list of numbers like 0.485,0.456,0.406"))
        << bad;
  }
}

TEST(Params, StringIsTakenVerbatim) {
  EXPECT_EQ(one("mode", "Luma:1,2").get_string("mode", "x"), "Luma:1,2");
  EXPECT_EQ(one("mode", "").get_string("mode", "x"), "");
}

TEST(Params, RemembersWhichKeysWereRead) {
  const sn::Params p("t", {{"a", "1"}, {"b", "2"}, {"c", "3"}});
  EXPECT_TRUE(p.has("b"));
  EXPECT_EQ(p.unread(), (std::vector<std::string>{"a", "b", "c"}));
  p.get_int("b", 0);
  p.get_int("absent", 0);
  EXPECT_EQ(p.unread(), (std::vector<std::string>{"a", "c"}));
}

TEST(Params, ConstructorRejectsEmptyAndRepeatedKeys) {
  EXPECT_THROW(sn::Params("t", {{"", "1"}}), std::invalid_argument);
  EXPECT_THAT(error_of<std::invalid_argument>([] {
                sn::Params("t", {{"a", "1"}, {"a", "2"}});
              }),
              HasSubstr("parameter 'a' is given twice"));
}

TEST(Params, ReadingAnUndeclaredKeyIsALogicError) {
  const sn::Params p("t", {{"a", "1"}}, std::vector<std::string>{"a"});
  EXPECT_EQ(p.get_int("a", 0), 1);
  EXPECT_THAT(error_of<std::logic_error>([&] { p.get_int("typo", 0); }),
              HasSubstr("reads parameter 'typo', which its registry entry does not declare"));
}

// ---- spec parsing -----------------------------------------------------------------------------

TEST(ParamsParse, SplitsNameAndKeyValuePairsOnAnyWhitespace) {
  std::string name;
  const sn::Params p = sn::Params::parse("  random_resized_crop\tsize=224   scale=0.08:1 \n", name);
  EXPECT_EQ(name, "random_resized_crop");
  EXPECT_EQ(p.transform(), "random_resized_crop");
  ASSERT_EQ(p.values().size(), 2u);
  EXPECT_EQ(p.values()[0], std::make_pair(std::string("size"), std::string("224")));
  EXPECT_EQ(p.values()[1], std::make_pair(std::string("scale"), std::string("0.08:1")));
}

TEST(ParamsParse, ValueMayContainEqualsOrBeEmpty) {
  std::string name;
  const sn::Params p = sn::Params::parse("t a==b c=", name);
  EXPECT_EQ(p.get_string("a", ""), "=b");
  EXPECT_EQ(p.get_string("c", "x"), "");
}

TEST(ParamsParse, MalformedSpecsAreRejectedQuotingTheSpec) {
  std::string name;
  EXPECT_THAT(error_of<std::invalid_argument>([&] { sn::Params::parse("   ", name); }),
              HasSubstr("empty transform spec"));
  EXPECT_THAT(error_of<std::invalid_argument>([&] { sn::Params::parse("size=224", name); }),
              HasSubstr("'size=224' does not start with a transform name"));
  EXPECT_THAT(error_of<std::invalid_argument>([&] { sn::Params::parse("resize size 224", name); }),
              HasSubstr("transform spec 'resize size 224': 'size' is not key=value"));
  EXPECT_THAT(error_of<std::invalid_argument>([&] { sn::Params::parse("resize =224", name); }),
              HasSubstr("transform spec 'resize =224': '=224' has an empty key"));
  EXPECT_THAT(error_of<std::invalid_argument>([&] { sn::Params::parse("resize size = 224", name); }),
              HasSubstr("with no spaces around '='"));
  EXPECT_THAT(error_of<std::invalid_argument>([&] { sn::Params::parse("resize size=1 size=2", name); }),
              HasSubstr("transform spec 'resize size=1 size=2' gives 'size' twice"));
}

// ---- Registry::make -------------------------------------------------------------------------

TEST(Registry, MakeParsesEveryParameterType) {
  const sn::TransformPtr made = test_registry().make("probe i=-3 d=2.5 b=yes r=0.2:0.9 s=64x32 l=1,2,3 str=nearest");
  const auto& v = probe_values(made);
  EXPECT_EQ(v.i, -3);
  EXPECT_EQ(v.d, 2.5);
  EXPECT_TRUE(v.b);
  EXPECT_EQ(v.r, std::make_pair(0.2, 0.9));
  EXPECT_EQ(v.s, cv::Size(64, 32));
  EXPECT_EQ(v.l, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(v.str, "nearest");
}

TEST(Registry, MakeUsesDefaultsForOmittedParameters) {
  const sn::TransformPtr made = test_registry().make("probe");
  const auto& v = probe_values(made);
  EXPECT_EQ(v.i, 7);
  EXPECT_EQ(v.s, cv::Size(224, 224));
  EXPECT_EQ(v.str, "bilinear");
}

TEST(Registry, MadeTransformRuns) {
  const sn::TransformPtr t = test_registry().make("probe i=5");
  sn::Image image;
  image.pixels = cv::Mat(2, 2, CV_8UC3, cv::Scalar(10, 20, 30));
  sn::ItemRng rng(1, 0, 0);
  (*t)(image, rng);
  EXPECT_EQ(image.pixels.at<cv::Vec3b>(1, 1), cv::Vec3b(15, 25, 35));
}

TEST(Registry, BadParameterValueNamesTransformKeyAndValue) {
  EXPECT_EQ(error_of<std::invalid_argument>([] { test_registry().make("probe r=abc"); }),
            "probe: parameter r='abc' is not a range like 0.08:1");
}

TEST(Registry, UnknownNameListsKnownNamesAndSuggestsCloseOnes) {
  const std::string message = error_of<std::invalid_argument>([] { test_registry().make("random_crop size=224"); });
  EXPECT_THAT(message, HasSubstr("unknown transform 'random_crop'; known: center_crop, color_jitter, hflip, probe, "
                                 "random_resized_crop"));
  EXPECT_THAT(message, HasSubstr("did you mean 'random_resized_crop'?"));
  EXPECT_THAT(error_of<std::invalid_argument>([] { test_registry().make("vflip"); }),
              HasSubstr("did you mean 'hflip'?"));
  EXPECT_THAT(error_of<std::invalid_argument>([] { test_registry().make("center_crp"); }),
              HasSubstr("did you mean 'center_crop'?"));
  EXPECT_THAT(error_of<std::invalid_argument>([] { test_registry().make("blur"); }),
              ::testing::Not(HasSubstr("did you mean")));
}

TEST(Registry, UnknownParameterListsDeclaredOnesWithTypesAndDefaults) {
  EXPECT_EQ(error_of<std::invalid_argument>([] { test_registry().make("probe i=1 scale=0.5:1"); }),
            "probe: unknown parameter 'scale'; probe takes: i (int, default 7), d (double, default 0.5), b (bool, "
            "default false), r (range, default 0.08:1), s (size, default 224), l (list, default 0.485,0.456,0.406), "
            "str (string, default bilinear)");
  EXPECT_EQ(error_of<std::invalid_argument>([] { test_registry().make("hflip p=0.5"); }),
            "hflip: unknown parameter 'p'; hflip takes no parameters");
}

TEST(Registry, MissingRequiredParameterIsAnError) {
  sn::Registry registry;
  registry.add(
      {"crop", "crops", {{"size", "size", "", "output size", true}}, [](const sn::Params& p) -> sn::TransformPtr {
         return std::make_shared<Named>("crop " + std::to_string(p.get_size("size", {}).width));
       }});
  EXPECT_EQ(registry.make("crop size=8")->name(), "crop 8");
  EXPECT_EQ(error_of<std::invalid_argument>([&] { registry.make(" crop "); }),
            "crop: missing required parameter 'size' in 'crop'; crop takes: size (size, required)");
}

TEST(Registry, FactoryThatIgnoresADeclaredParameterIsCaught) {
  sn::Registry registry;
  registry.add({"lazy", "forgets to read k", {{"k", "int", "1", "ignored"}}, [](const sn::Params&) -> sn::TransformPtr {
                  return std::make_shared<Named>("lazy");
                }});
  EXPECT_NE(registry.make("lazy"), nullptr);
  EXPECT_THAT(error_of<std::logic_error>([&] { registry.make("lazy k=2"); }),
              HasSubstr("lazy: parameter 'k' was given but the factory never read it"));
}

TEST(Registry, FactoryThatReadsAnUndeclaredParameterIsCaught) {
  sn::Registry registry;
  registry.add({"sloppy", "reads k without declaring it", {}, [](const sn::Params& p) -> sn::TransformPtr {
                  return std::make_shared<Named>(p.get_string("k", ""));
                }});
  EXPECT_THAT(error_of<std::logic_error>([&] { registry.make("sloppy"); }),
              HasSubstr("sloppy: the factory reads parameter 'k', which its registry entry does not declare"));
}

TEST(Registry, FactoryReturningNullIsCaught) {
  sn::Registry registry;
  registry.add({"null", "returns nothing", {}, [](const sn::Params&) -> sn::TransformPtr { return nullptr; }});
  EXPECT_THROW(registry.make("null"), std::logic_error);
}

TEST(Registry, MakeListSplitsOnSemicolonsAndSkipsEmptySegments) {
  const auto list = test_registry().make_list("probe i=1; hflip ;; center_crop;");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(probe_values(list[0]).i, 1);
  EXPECT_EQ(list[1]->name(), "hflip");
  EXPECT_EQ(list[2]->name(), "center_crop");
  EXPECT_TRUE(test_registry().make_list(std::string_view("  ")).empty());
  EXPECT_THAT(error_of<std::invalid_argument>([] { test_registry().make_list("hflip; nope"); }),
              HasSubstr("unknown transform 'nope'"));
}

TEST(Registry, MakeListTakesOneSpecPerString) {
  const std::array<std::string, 2> specs{"hflip", "probe s=10x20"};
  const auto list = test_registry().make_list(std::span<const std::string>(specs));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]->name(), "hflip");
  EXPECT_EQ(probe_values(list[1]).s, cv::Size(10, 20));
}

TEST(Registry, DuplicateNameIsRefusedListingRegisteredNames) {
  sn::Registry registry;
  registry.add(named_entry("b"));
  registry.add(named_entry("a"));
  EXPECT_THAT(error_of<std::invalid_argument>([&] { registry.add(named_entry("b")); }),
              HasSubstr("transform 'b' is already registered; registered: a, b"));
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"a", "b"}));
}

TEST(Registry, AddValidatesTheEntry) {
  sn::Registry registry;
  EXPECT_THAT(error_of<std::invalid_argument>([&] { registry.add(named_entry("")); }), HasSubstr("must be non-empty"));
  EXPECT_THAT(error_of<std::invalid_argument>([&] { registry.add(named_entry("two words")); }),
              HasSubstr("contain no spaces"));
  EXPECT_THAT(error_of<std::invalid_argument>([&] {
                registry.add({"nofactory", "", {}, {}});
              }),
              HasSubstr("transform 'nofactory' has no factory"));
  EXPECT_THAT(error_of<std::invalid_argument>([&] {
                registry.add(named_entry("t", {{"k", "float", "1", ""}}));
              }),
              HasSubstr("parameter 'k' has type 'float'; use int, double, bool, range, size, list or string"));
  EXPECT_THAT(error_of<std::invalid_argument>([&] {
                registry.add(named_entry("t", {{"k", "int", "1", ""}, {"k", "int", "2", ""}}));
              }),
              HasSubstr("declares parameter 'k' twice"));
  EXPECT_EQ(error_of<std::invalid_argument>([&] {
              registry.add(named_entry("t", {{"scale", "range", "1:0", ""}}));
            }),
            "Registry::add: the default of t: parameter scale='1:0' is not a range lo:hi with lo <= hi");
  EXPECT_TRUE(registry.names().empty());
}

TEST(Registry, FindAndNames) {
  EXPECT_EQ(test_registry().names(),
            (std::vector<std::string>{"center_crop", "color_jitter", "hflip", "probe", "random_resized_crop"}));
  const sn::TransformEntry* entry = test_registry().find("probe");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->params.size(), 7u);
  EXPECT_EQ(test_registry().find("prob"), nullptr);
}

TEST(Registry, HelpListsEveryEntryWithDocAndParameters) {
  sn::Registry registry;
  registry.add(probe_entry());
  registry.add({"crop",
                "crops the centre",
                {{"size", "size", "", "output size", true}},
                [](const sn::Params& p) -> sn::TransformPtr {
                  p.get_size("size", {});
                  return std::make_shared<Named>("crop");
                }});
  const std::string help = registry.help();
  EXPECT_THAT(help, HasSubstr("crop  crops the centre\n    size=<size>  required. output size\n"));
  EXPECT_THAT(help, HasSubstr("probe  reads one parameter of every type\n"));
  EXPECT_THAT(help, HasSubstr("    r=<range>     default 0.08:1. a range\n"));
  EXPECT_THAT(help, HasSubstr("    str=<string>  default bilinear. a string\n"));
  EXPECT_LT(help.find("crop  "), help.find("probe  "));  // sorted
}

TEST(Registry, ConcurrentMakeGivesIndependentCorrectTransforms) {
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &wrong] {
      for (int i = 0; i < 200; ++i) {
        const int value = t * 1000 + i;
        const auto made = test_registry().make("probe i=" + std::to_string(value));
        if (probe_values(made).i != value) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

// ---- the built-in registry ----------------------------------------------------------------

TEST(Registry, BuiltinHasTheBuiltInTransformsAndIsOneInstance) {
  sn::Registry& builtin = sn::Registry::builtin();
  EXPECT_EQ(&builtin, &sn::Registry::builtin());
  for (const char* name :
       {"center_crop", "color_jitter", "normalize", "random_horizontal_flip", "random_resized_crop", "resize"}) {
    EXPECT_NE(builtin.find(name), nullptr) << name;
  }
  const auto chain = builtin.make_list("random_resized_crop size=32; random_horizontal_flip; normalize");
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(chain[0]->name(), "random_resized_crop");
  sn::Image image;
  image.pixels = cv::Mat(48, 64, CV_8UC3, cv::Scalar(128, 128, 128));
  sn::ItemRng rng(3, 0, 0);
  for (const auto& t : chain) (*t)(image, rng);
  EXPECT_EQ(image.layout, sn::PixelLayout::chw_f32);
  EXPECT_EQ(image.width(), 32);
  EXPECT_EQ(image.height(), 32);
}

}  // namespace
