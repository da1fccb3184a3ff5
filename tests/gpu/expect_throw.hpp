// expect_throw_mentioning: checks that a call throws `Exception` and that its message names what
// it should (a stage, a file, a tensor, an option), for the gpu tests' error-message checks.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace stoke::gpu::test {

template <class Exception, class F>
void expect_throw_mentioning(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << fragment << "'";
  } catch (const Exception& error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos)
        << "message '" << error.what() << "' does not mention '" << fragment << "'";
  }
}

}  // namespace stoke::gpu::test
