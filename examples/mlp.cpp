// Trains a small MLP classifier with the Trainer on a synthetic dataset (Gaussian blobs, one
// class per blob), on the GPU if there is one, and reports held-out accuracy. Exit status 0
// when it reaches 90 %, 1 below that or on an error, CLI11's codes for bad arguments.
//   stoker_mlp [--epochs N] [--device auto|cpu|cuda[:N]]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "common/program.h"
#include "stoker/stoker.h"

using namespace stoker;

// n points in `dim` dimensions; class c is a Gaussian blob centred 4 units along axis c.
static std::pair<Tensor, Tensor> blobs(int64_t n, int64_t dim, int64_t classes, uint64_t seed) {
  Tensor x = Tensor::empty({n, dim}, DType::f32);
  ops::random_normal(x, 0.0f, 1.0f, seed, 0);
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    y[i] = i % classes;
    x.data<float>()[i * dim + y[i]] += 4.0f;
  }
  return {x, Tensor::from_vector(y, {n})};
}

int main(int argc, char** argv) {
  int64_t epochs = 5;
  std::string device_name = "auto";
  CLI::App app{"stoker_mlp: a small MLP trained with the Trainer on Gaussian blobs"};
  app.add_option("--epochs", epochs, "training epochs")
      ->check(program::at_least(1))
      ->capture_default_str();
  app.add_option("--device", device_name, "auto, cpu or cuda[:N]")->capture_default_str();
  return program::run("stoker_mlp", app, argc, argv, [&] {
    const Device device = program::device(device_name);
    const int64_t dim = 64, classes = 10;
    auto [x, y] = blobs(20000, dim, classes, 1);
    auto [xt, yt] = blobs(5000, dim, classes, 2);

    nn::manual_seed(0);
    nn::Sequential model(nn::make<nn::Linear>(dim, 256), nn::make<nn::GELU>(),
                         nn::make<nn::Dropout>(0.1f), nn::make<nn::Linear>(256, 256),
                         nn::make<nn::ReLU>(), nn::make<nn::Linear>(256, classes));
    model.to(device);
    optim::AdamW opt(model.named_parameters(), {.lr = 1e-3f, .weight_decay = 0.01f});
    nn::CrossEntropyLoss loss({.label_smoothing = 0.05f});
    const int64_t steps = epochs * (20000 / 128 + 1);
    // STOKER_DIAG* (train/environment.h): how `stoker doctor -- PROGRAM` steers the run.
    train::Trainer trainer(
        model, loss, opt,
        train::apply_environment({.clip_grad_norm = 1.0f,
                                  .schedule = optim::cosine_with_warmup(1e-3f, 50, steps),
                                  .log_interval = 50}));
    data::TensorBatches train_data(x, y, {.batch_size = 128, .seed = 3, .device = device});
    data::TensorBatches test_data(xt, yt, {.batch_size = 1000, .shuffle = false, .device = device});

    std::printf("%s on %s, %lld parameters\n", model.describe().c_str(), device.str().c_str(),
                static_cast<long long>(model.parameter_count()));
    const auto fit = trainer.fit(train_data, epochs);
    const auto eval = trainer.evaluate(test_data);
    std::printf("trained %lld steps in %.2f s; held-out loss %.4f, accuracy %.2f%%\n",
                static_cast<long long>(fit.steps), fit.seconds, eval.loss, eval.accuracy * 100);
    return eval.accuracy > 0.9 ? 0 : 1;
  });
}
