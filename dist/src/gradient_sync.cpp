#include "stoke/dist/gradient_sync.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace stoke::dist {

GradientSync::GradientSync(nn::Layer& model, nn::Backend& backend, std::unique_ptr<BucketTransport> transport,
                           const GradientSyncOptions& options)
    : model_(model), backend_(backend), transport_(std::move(transport)) {
  if (!transport_) throw std::invalid_argument("GradientSync: no transport");
  std::vector<nn::Parameter*> parameters;
  model_.for_each_parameter([&](const std::string&, nn::Parameter& p) { parameters.push_back(&p); });
  // Backward finishes the last layers first: their buckets fill, and start, first.
  std::reverse(parameters.begin(), parameters.end());
  std::size_t bytes = 0;
  for (nn::Parameter* p : parameters) {
    if (buckets_.empty() || bytes >= options.bucket_bytes) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().parameters.push_back(p);
    bytes += p->value.bytes();
    bucket_of_[p] = buckets_.size() - 1;
    slot_of_[p] = slot_of_.size();
  }
  marked_.assign(slot_of_.size(), false);
}

void GradientSync::begin() {
  if (open_) throw std::logic_error("GradientSync::begin: the previous sync was not finished");
  std::fill(marked_.begin(), marked_.end(), false);
  for (Bucket& b : buckets_) b.pending = b.parameters.size();
  next_ = 0;
  open_ = true;
}

void GradientSync::ready(nn::Layer& layer) {
  if (!open_) return;  // a backward outside a sync (an accumulation micro-step): nothing to sum yet
  layer.for_each_parameter([&](const std::string&, nn::Parameter& p) {
    const auto slot = slot_of_.find(&p);
    if (slot == slot_of_.end() || marked_[slot->second]) return;
    marked_[slot->second] = true;
    --buckets_[bucket_of_.at(&p)].pending;
  });
  start_ready_buckets();
}

void GradientSync::start_ready_buckets() {
  while (next_ < buckets_.size() && buckets_[next_].pending == 0) {
    std::vector<nn::Tensor> gradients;
    for (nn::Parameter* p : buckets_[next_].parameters) {
      // A parameter the backward never reached (an unused layer) still takes part, with zeros.
      if (!p->grad.defined()) p->grad = backend_.zeros(p->value.shape(), nn::DType::f32, p->value.layout());
      gradients.push_back(p->grad);
    }
    transport_->start(next_++, gradients);
  }
}

void GradientSync::finish() {
  if (!open_) throw std::logic_error("GradientSync::finish without begin");
  open_ = false;
  for (Bucket& b : buckets_) b.pending = 0;  // what backward did not report starts now, in order
  start_ready_buckets();
  transport_->finish();
}

}  // namespace stoke::dist
