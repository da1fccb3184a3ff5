// While alive, OpenCV uses `threads` threads per call (cv::setNumThreads); the previous setting
// is restored after. The harnesses run images in parallel: OpenCV splitting one image's resize on
// top of that only adds overhead, and would let a one-thread baseline use every core.
#pragma once

#include <opencv2/core/utility.hpp>

namespace stoke::bench {

class OpenCvThreads {
 public:
  explicit OpenCvThreads(int threads) : previous_(cv::getNumThreads()) { cv::setNumThreads(threads); }
  ~OpenCvThreads() { cv::setNumThreads(previous_); }
  OpenCvThreads(const OpenCvThreads&) = delete;
  OpenCvThreads& operator=(const OpenCvThreads&) = delete;

 private:
  int previous_;
};

}  // namespace stoke::bench
