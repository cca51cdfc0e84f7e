"""Replays stoker_parity's run in PyTorch and compares the per-step losses.

  python3 torch_parity.py DIR MODEL OPTIM [--device cuda] [--control]
                                                               (MODEL: mlp, cnn or resnet18)

Loads DIR/<model>_<optim>_init.safetensors into the equivalent torch model (same parameter
names), trains on DIR/..._batches.safetensors with the same optimizer settings in fp32 (TF32
off for matmul and cuDNN), and compares with DIR/..._stoker.json. Prints the max relative loss
difference and exits 1 when it exceeds 1e-3. Prints the per-step losses of both (steps 1-10,
then every 5th).

--control: also trains PyTorch a second time from the same weights and batches with other
cuDNN algorithms (cudnn.benchmark on instead of deterministic algorithms) and prints how far
PyTorch drifts from itself: float summation order alone, amplified by training. A model whose
stoker-vs-PyTorch drift is of that size agrees as well as PyTorch agrees with itself.
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


def train(model_name, optim_name, stem, device, n_steps):
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
    loss_fn = torch.nn.CrossEntropyLoss()
    losses = []
    for step in range(n_steps):
        x, y = batches[f"x{step}"].to(device), batches[f"y{step}"].to(device)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def max_rel(a, b):
    return max(abs(x - y) / abs(x) for x, y in zip(a, b))


def main():
    d, model_name, optim_name = sys.argv[1], sys.argv[2], sys.argv[3]
    args = sys.argv[4:]
    device = args[args.index("--device") + 1] if "--device" in args else "cuda"
    control = "--control" in args
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    stem = f"{d}/{model_name}_{optim_name}"
    ours = json.load(open(stem + "_stoker.json"))["losses"]
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    theirs = train(model_name, optim_name, stem, device, len(ours))
    worst = max_rel(theirs, ours)
    print("step  torch       stoker      rel. diff")
    for step, (t, o) in enumerate(zip(theirs, ours)):
        if step < 10 or (step + 1) % 5 == 0:
            print(f"{step + 1:4d}  {t:.6f}  {o:.6f}  {abs(t - o) / abs(t):.2e}")
    print(f"parity {model_name}/{optim_name}: {len(ours)} steps; first loss torch {theirs[0]:.6f} "
          f"stoker {ours[0]:.6f}; last torch {theirs[-1]:.6f} stoker {ours[-1]:.6f}; "
          f"max relative difference {worst:.2e} ({'OK' if worst < 1e-3 else 'FAIL'})")
    if control:
        torch.backends.cudnn.deterministic = False
        torch.backends.cudnn.benchmark = True
        again = train(model_name, optim_name, stem, device, len(ours))
        first_over = next((i + 1 for i, (a, b) in enumerate(zip(theirs, again))
                           if abs(a - b) / abs(a) > 1e-4), None)
        print(f"control {model_name}/{optim_name}: PyTorch (benchmark algorithms) vs PyTorch "
              f"(deterministic): max relative difference {max_rel(theirs, again):.2e}, last loss "
              f"{again[-1]:.6f}, first step above 1e-4: {first_over}")
    sys.exit(0 if worst < 1e-3 else 1)


if __name__ == "__main__":
    main()
