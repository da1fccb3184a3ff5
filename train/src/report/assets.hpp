// The report page's fixed parts, embedded at build time from the files beside this header
// (train/cmake/embed_text.cmake generates their definitions).
#pragma once

#include <string_view>

namespace stoke::train::assets {

extern const std::string_view report_css;       ///< report.css: the page's style
extern const std::string_view report_error_js;  ///< report_error.js: shows a script error on the page
extern const std::string_view report_js;        ///< report.js: draws the plots from the JSON blob

}  // namespace stoke::train::assets
