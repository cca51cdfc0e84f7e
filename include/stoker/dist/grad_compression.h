// Gradient compression: what travels on the wire when a bucketed gradient synchronization
// (dist/bucketed_grad_sync.h) averages a bucket. A strategy: the synchronization encodes the f32
// bucket into the wire buffer, reduces the wire buffer, and decodes the result back, whatever
// the strategy is.
//
//   none  the f32 bucket itself is the wire buffer: nothing is copied (the default)
//   bf16  each bucket is cast (RNE) to bf16, averaged in bf16 and cast back: half the bytes on
//         the wire, gradients rounded to 8 significant bits
//   fp16  the same in f16: 11 significant bits, but gradients above 65504 become Inf — under
//         fp16 loss scaling that counts as an overflow (the step is skipped, the scale halved)
//
// The strategies are stateless and shared (compression::none() returns the same object every
// time); a custom one implements the interface. Thread-safe (const).
#pragma once

#include <memory>
#include <string>

#include "stoker/core/tensor.h"

namespace stoker::dist {

class GradCompression {
 public:
  virtual ~GradCompression() = default;

  // "none", "bf16", "fp16": what parse_compression() reads and logs print.
  virtual std::string name() const = 0;
  // The dtype that travels (f32 for none).
  virtual DType wire_dtype() const = 0;
  // The buffer that travels for the f32 bucket `grads`: `grads` itself, or a new buffer of
  // wire_dtype() with as many elements, made once per bucket.
  virtual Tensor make_wire(const Tensor& grads) const = 0;
  // wire = grads (f32 -> wire dtype), on the current stream; a no-op when wire is grads.
  virtual void encode(const Tensor& grads, const Tensor& wire) const = 0;
  // grads = wire (wire dtype -> f32), on the current stream; a no-op when wire is grads. Both may
  // be matching slices of the buffers make_wire() paired (ZeRO-1 decodes its slice only).
  virtual void decode(const Tensor& wire, const Tensor& grads) const = 0;
};

namespace compression {
std::shared_ptr<const GradCompression> none();
std::shared_ptr<const GradCompression> bf16();
std::shared_ptr<const GradCompression> fp16();
}  // namespace compression

// "none", "bf16" or "fp16" (command-line flags); anything else throws naming the value and the
// choices.
std::shared_ptr<const GradCompression> parse_compression(const std::string& name);

}  // namespace stoker::dist
