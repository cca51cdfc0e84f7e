#include "parity_models.h"

#if STOKER_PARITY_HAS_CLASSIFIER
#include "resnet.h"  // examples/classifier: torchvision's ResNet-18
#endif

namespace parity {

namespace nn = stoker::nn;

std::unique_ptr<nn::Module> make_model(const std::string& name) {
  nn::manual_seed(42);
  if (name == "mlp") {
    return std::make_unique<nn::Sequential>(nn::make<nn::Linear>(64, 128), nn::make<nn::GELU>(),
                                            nn::make<nn::Linear>(128, 128), nn::make<nn::ReLU>(),
                                            nn::make<nn::Linear>(128, 10));
  }
  if (name == "cnn") {
    // Index-aligned with torch_parity.py's nn.Sequential (Flatten after the global pool).
    return std::make_unique<nn::Sequential>(
        nn::make<nn::Conv2d>(3, 16, 3, 1, 1), nn::make<nn::BatchNorm2d>(16), nn::make<nn::ReLU>(),
        nn::make<nn::MaxPool2d>(2), nn::make<nn::Conv2d>(16, 32, 3, 1, 1),
        nn::make<nn::BatchNorm2d>(32), nn::make<nn::ReLU>(), nn::make<nn::GlobalAvgPool>(),
        nn::make<nn::Flatten>(), nn::make<nn::Linear>(32, 10));
  }
#if STOKER_PARITY_HAS_CLASSIFIER
  if (name == "resnet18") {
    // The classifier example's model (torchvision names), 10 classes, NCHW like the batches.
    return classifier::resnet18({.num_classes = 10});
  }
#endif
  STOKER_THROW("parity: unknown model '", name, "' (expected mlp, cnn or resnet18)");
}

std::pair<Tensor, Tensor> make_batch(const std::string& name, int64_t step) {
  const bool image = name == "cnn" || name == "resnet18";
  const int64_t n = name == "resnet18" ? 16 : name == "cnn" ? 32 : 64;
  const int64_t side = name == "resnet18" ? 64 : 16;
  Tensor x = image ? Tensor::empty({n, 3, side, side}, stoker::DType::f32)
                   : Tensor::empty({n, 64}, stoker::DType::f32);
  stoker::ops::random_normal(x, 0.0f, 1.0f, 1000 + step, 0);
  std::vector<int64_t> y(n);
  const auto r = stoker::core::philox_block(2000 + step, 0, 0);
  for (int64_t i = 0; i < n; ++i) y[i] = (r.v[i % 4] >> (i % 8)) % 10;
  return {x, Tensor::from_vector(y, {n})};
}

}  // namespace parity
