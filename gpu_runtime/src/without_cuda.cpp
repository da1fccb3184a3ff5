// A build without CUDA: the CUDA-only classes exist so that code using them compiles and links
// in both builds, but constructing one throws DeviceError. The host stream works (synchronously).
#include <cstdio>
#include <cstring>
#include <string>

#include "internal.hpp"
#include "stoke/gpu/error.hpp"
#include "stoke/gpu/event.hpp"
#include "stoke/gpu/handles.hpp"
#include "stoke/gpu/memory.hpp"
#include "stoke/gpu/stream.hpp"

namespace stoke::gpu {
namespace {

[[noreturn]] void throw_without_cuda(const std::string& what) {
  throw DeviceError(what +
                    " needs a CUDA device, but this stoke was built without CUDA (reconfigure with -DSTOKE_CUDA=ON); "
                    "use the CPU device");
}

}  // namespace

// ---- error.hpp: no CUDA library can have produced a code, but a call site may still name one

namespace detail {

void throw_cuda_error(int code, const char* call, const char* file, int line) {
  throw CudaError("CUDA", code, "CUDA error " + std::to_string(code), "this stoke was built without CUDA", call, file,
                  line);
}

void throw_cublas_error(int code, const char* call, const char* file, int line) {
  throw CublasError("cuBLAS", code, "cuBLAS status " + std::to_string(code), "this stoke was built without CUDA", call,
                    file, line);
}

void throw_cudnn_error(int code, const char* call, const char* file, int line) {
  throw CudnnError("cuDNN", code, "cuDNN status " + std::to_string(code), "this stoke was built without CUDA", call,
                   file, line);
}

void report_cuda_error(int code, const char* call, const char* file, int line) noexcept {
  char name[32];
  std::snprintf(name, sizeof name, "CUDA error %d", code);
  report_failure(name, "", call, file, line);
}

void report_cublas_error(int code, const char* call, const char* file, int line) noexcept {
  char name[32];
  std::snprintf(name, sizeof name, "cuBLAS status %d", code);
  report_failure(name, "", call, file, line);
}

void report_cudnn_error(int code, const char* call, const char* file, int line) noexcept {
  char name[32];
  std::snprintf(name, sizeof name, "cuDNN status %d", code);
  report_failure(name, "", call, file, line);
}

}  // namespace detail

// ---- StreamView: only the host view can exist, and its work has always run already ------------

void StreamView::synchronize() const {
  if (!is_host()) throw_without_cuda("StreamView::synchronize on " + device_.str());
}

void StreamView::wait(const Event& /*event*/) const {
  if (!is_host()) throw_without_cuda("StreamView::wait on " + device_.str());
}

bool StreamView::ready() const {
  if (!is_host()) throw_without_cuda("StreamView::ready on " + device_.str());
  return true;
}

// ---- the owners: never constructed, so there is nothing to release ---------------------------

Stream::Stream(Device device, StreamPriority /*priority*/) : device_(device) { throw_without_cuda("a Stream"); }
Stream::~Stream() = default;
Stream::Stream(Stream&& other) noexcept = default;
Stream& Stream::operator=(Stream&& other) noexcept = default;
void Stream::reset() noexcept {}

Event::Event(Device device, EventOptions /*options*/) : device_(device) { throw_without_cuda("an Event"); }
Event::~Event() = default;
Event::Event(Event&& other) noexcept = default;
Event& Event::operator=(Event&& other) noexcept = default;
void Event::reset() noexcept {}
void Event::record(StreamView /*stream*/) { throw_without_cuda("Event::record"); }
bool Event::ready() const { throw_without_cuda("Event::ready"); }
void Event::synchronize() const { throw_without_cuda("Event::synchronize"); }
std::chrono::duration<double, std::milli> Event::elapsed(const Event& /*start*/, const Event& /*end*/) {
  throw_without_cuda("Event::elapsed");
}

DeviceBuffer::DeviceBuffer(Device device, std::size_t /*bytes*/) : device_(device) {
  throw_without_cuda("a DeviceBuffer");
}
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept = default;
void DeviceBuffer::reset() noexcept {}

PinnedBuffer::PinnedBuffer(std::size_t bytes) {
  if (bytes != 0) throw_without_cuda("a PinnedBuffer (page-locked memory)");
}
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept = default;
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept = default;
void PinnedBuffer::reset() noexcept {}

template <class Library>
LibraryHandle<Library>::LibraryHandle(StreamView /*stream*/) {
  throw_without_cuda(std::string("a ") + Library::handle_name);
}
template <class Library>
LibraryHandle<Library>::~LibraryHandle() = default;
template <class Library>
LibraryHandle<Library>::LibraryHandle(LibraryHandle&& other) noexcept = default;
template <class Library>
LibraryHandle<Library>& LibraryHandle<Library>::operator=(LibraryHandle&& other) noexcept = default;
template <class Library>
void LibraryHandle<Library>::set_stream(StreamView /*stream*/) {
  throw_without_cuda(std::string(Library::handle_name) + "::set_stream");
}
template <class Library>
void LibraryHandle<Library>::reset() noexcept {}

template class LibraryHandle<CublasLibrary>;
template class LibraryHandle<CudnnLibrary>;

// ---- copies: synchronous on the host stream ---------------------------------------------------

void copy_async(void* dst, const void* src, std::size_t bytes, StreamView stream) {
  if (!stream.is_host()) throw_without_cuda("copy_async on " + stream.device().str());
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void fill_async(void* dst, int value, std::size_t bytes, StreamView stream) {
  if (!stream.is_host()) throw_without_cuda("fill_async on " + stream.device().str());
  if (bytes != 0) std::memset(dst, value, bytes);
}

MemoryInfo memory_info(Device device) { throw_without_cuda("memory_info() for " + device.str()); }

}  // namespace stoke::gpu
