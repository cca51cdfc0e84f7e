"""Replays stoker_parity's run in PyTorch and compares the per-step losses.

  python3 torch_parity.py DIR MODEL OPTIM [--device cuda]      (MODEL: mlp, cnn or resnet18)

Loads DIR/<model>_<optim>_init.safetensors into the equivalent torch model (same parameter
names), trains on DIR/..._batches.safetensors with the same optimizer settings in fp32 (TF32
off for matmul and cuDNN), and compares with DIR/..._stoker.json. Prints the max relative loss
difference and exits 1 when it exceeds 1e-3.
"""
import json
import sys

import torch
from safetensors.torch import load_file


def make_model(name):
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Linear(64, 128), nn.GELU(approximate="tanh"), nn.Linear(128, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32),
                             nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=10)
    raise SystemExit(f"unknown model {name}")


def main():
    d, model_name, optim_name = sys.argv[1], sys.argv[2], sys.argv[3]
    device = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--device" else "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    stem = f"{d}/{model_name}_{optim_name}"
    model = make_model(model_name).to(device)
    result = model.load_state_dict(load_file(stem + "_init.safetensors"), strict=False)
    # stoker keeps no BatchNorm num_batches_tracked counter (unused with a fixed momentum).
    missing = [k for k in result.missing_keys if not k.endswith("num_batches_tracked")]
    if missing or result.unexpected_keys:
        raise SystemExit(f"weights do not match: missing {missing}, unexpected "
                         f"{result.unexpected_keys}")
    lr_scale = 0.1 if model_name == "resnet18" else 1.0  # as stoker_parity
    if optim_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05 * lr_scale, momentum=0.9,
                              weight_decay=1e-4)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3 * lr_scale, weight_decay=0.01)
    batches = load_file(stem + "_batches.safetensors")
    ours = json.load(open(stem + "_stoker.json"))["losses"]
    loss_fn = torch.nn.CrossEntropyLoss()
    worst = 0.0
    first = None
    for step, theirs in enumerate(ours):
        x, y = batches[f"x{step}"].to(device), batches[f"y{step}"].to(device)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        rel = abs(loss.item() - theirs) / abs(loss.item())
        worst = max(worst, rel)
    print(f"parity {model_name}/{optim_name}: {len(ours)} steps; first loss torch {first:.6f} "
          f"stoker {ours[0]:.6f}; last torch {loss.item():.6f} stoker {ours[-1]:.6f}; "
          f"max relative difference {worst:.2e} ({'OK' if worst < 1e-3 else 'FAIL'})")
    sys.exit(0 if worst < 1e-3 else 1)


if __name__ == "__main__":
    main()
