#include "stoker/dist/grad_sync.h"

#include "stoker/core/error.h"

namespace stoker::dist {

namespace {
int64_t round_up(int64_t n, int64_t unit) { return (n + unit - 1) / unit * unit; }
}  // namespace

std::vector<BucketInfo> plan_buckets(std::span<const BucketPlanEntry> params,
                                     const BucketPlanOptions& options) {
  STOKER_CHECK(options.bucket_bytes > 0 && options.first_bucket_bytes > 0,
               "plan_buckets: bucket_bytes (", options.bucket_bytes, ") and first_bucket_bytes (",
               options.first_bucket_bytes, ") must be positive");
  STOKER_CHECK(options.bucket_multiple > 0 && options.bucket_multiple % kBucketAlignElements == 0,
               "plan_buckets: bucket_multiple ", options.bucket_multiple,
               " must be a positive multiple of ", kBucketAlignElements, " elements");
  STOKER_CHECK(!params.empty(), "plan_buckets: no parameters to place");
  std::vector<BucketInfo> buckets;
  int64_t target = options.first_bucket_bytes;
  for (const BucketPlanEntry& p : params) {
    if (buckets.empty() || buckets.back().bytes >= target) {
      if (!buckets.empty()) target = options.bucket_bytes;
      buckets.emplace_back();
    }
    BucketInfo& b = buckets.back();
    b.parameters.push_back(p.name);
    b.offsets.push_back(b.elements);
    b.shapes.push_back(p.shape);
    b.elements += round_up(p.shape.numel(), kBucketAlignElements);
    b.bytes = b.elements * static_cast<int64_t>(sizeof(float));
  }
  for (BucketInfo& b : buckets) {
    b.elements = round_up(b.elements, options.bucket_multiple);
    b.bytes = b.elements * static_cast<int64_t>(sizeof(float));
  }
  return buckets;
}

}  // namespace stoker::dist
