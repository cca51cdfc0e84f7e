// stoker_parity: trains a model for N steps and writes everything PyTorch needs to replay the
// same run — initial weights, every batch, and stoker's per-step losses — so torch_parity.py
// can train the equivalent torch model from the same start on the same data and compare.
//
//   stoker_parity --model mlp|cnn|resnet18 --optim sgd|adamw --steps 50 --device cuda --out DIR
//
// Writes DIR/<model>_<optim>_init.safetensors (weights, PyTorch names), DIR/..._batches
// .safetensors (x<i>, y<i>) and DIR/..._stoker.json ({"losses": [...]}, one per step).
#include <fmt/format.h>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "parity_models.h"
#include "stoker/stoker.h"

using namespace stoker;

int main(int argc, char** argv) {
  std::string model_name = "mlp", optim_name = "sgd", out = ".";
  int64_t steps = 50;
  Device device = core::best_device();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model_name = v;
    else if (k == "--optim")
      optim_name = v;
    else if (k == "--steps")
      steps = std::stoll(v);
    else if (k == "--device")
      device = core::parse_device(v);
    else if (k == "--out")
      out = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    auto model = parity::make_model(model_name);
    model->to(device);
    const std::string stem = out + "/" + model_name + "_" + optim_name;
    train::save_weights(*model, stem + "_init.safetensors");

    // ResNet-18 on 16 random images: a tenth of the learning rates, or the first steps diverge
    // (torch_parity.py uses the same factor).
    const float lr_scale = model_name == "resnet18" ? 0.1f : 1.0f;
    std::unique_ptr<optim::Optimizer> opt;
    if (optim_name == "sgd")
      opt = std::make_unique<optim::SGD>(
          model->named_parameters(),
          optim::SgdOptions{.lr = 0.05f * lr_scale, .momentum = 0.9f, .weight_decay = 1e-4f});
    else
      opt = std::make_unique<optim::AdamW>(
          model->named_parameters(),
          optim::AdamWOptions{.lr = 1e-3f * lr_scale, .weight_decay = 0.01f});
    nn::CrossEntropyLoss loss;
    std::vector<train::NamedTensor> batches;
    std::string losses = "[";
    for (int64_t s = 0; s < steps; ++s) {
      auto [x, y] = parity::make_batch(model_name, s);
      batches.push_back({"x" + std::to_string(s), x});
      batches.push_back({"y" + std::to_string(s), y});
      const Tensor yp = model->forward(x.to(device));
      const Tensor l = loss.forward(yp, y.to(device));
      model->backward(loss.backward());
      opt->step();
      opt->zero_grad();
      losses += (s ? ", " : "") + fmt::format("{:g}", l.item());
    }
    train::save_safetensors(stem + "_batches.safetensors", batches);
    std::ofstream(stem + "_stoker.json") << "{\"losses\": " << losses << "]}\n";
    std::printf("%s/%s on %s: %lld steps, first loss %s\n", model_name.c_str(), optim_name.c_str(),
                device.str().c_str(), static_cast<long long>(steps),
                losses.substr(1, losses.find(',') - 1).c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "stoker_parity: %s\n", e.what());
    return 2;
  }
}
