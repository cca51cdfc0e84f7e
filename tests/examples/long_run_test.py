#!/usr/bin/env python3
"""The example trainers as tools for long runs, end to end on the CPU (CTest: examples.long_run).

For stoker_gpt and stoker_classifier, each with its own small run:
  - kill -9 at random points (and, at least once, while a checkpoint is being written), then the
    same command again, until the run ends: the final weights equal those of an uninterrupted
    run, bit for bit, and so do the losses of its metrics file;
  - retention keeps exactly --keep-last periodic checkpoints plus last.safetensors;
  - every --metrics line parses, and its train lines match the log lines printed (step, loss);
  - the --save output loads in Python's safetensors, under the PyTorch names;
  - an evaluation-heavy run reports evaluation's share of the wall time.

usage: long_run_test.py STOKER_GPT STOKER_CLASSIFIER SCRATCH_DIR [SEED [DEVICE]]
DEVICE (default cpu): cuda runs the same checks on a GPU. There the uninterrupted run is made
twice: when its kernels do not repeat their bits run to run, the restarted run must be within 10x
of that difference (and the difference is printed); otherwise bit for bit, as on the CPU.
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

try:
    from safetensors.numpy import load_file
except ImportError:
    load_file = None


def load_file_plain(path):
    """The safetensors layout read with numpy alone (a GPU host without the package): 8-byte
    header length, JSON header, raw little-endian tensors."""
    import numpy as np
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
              "U8": np.uint8, "I8": np.int8, "BF16": np.uint16}
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + end],
                                  dtype=dtypes[e["dtype"]]).reshape(e["shape"])
    return out

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def temporaries(ck):
    try:
        return [n for n in os.listdir(ck) if ".tmp." in n]
    except FileNotFoundError:
        return []


def start(cmd, log):
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def kill_during_write(cmd, ck, log, deadline_s):
    """Starts cmd and kills it -9 as soon as a checkpoint temporary shows up in ck. True when the
    kill landed while the temporary was there (the write in flight)."""
    p = start(cmd, log)
    end = time.monotonic() + deadline_s
    while p.poll() is None and time.monotonic() < end:
        if temporaries(ck):
            p.send_signal(signal.SIGKILL)
            p.wait()
            return True
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
    p.wait()
    return False


def kill_at_step(cmd, step, delay_s, log):
    """Starts cmd and kills it -9 delay_s after its first log line of a step >= `step` (so the
    kill lands inside the run, whatever the machine's speed); False when it ended first."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        log.write(line)
        m = LOG_LINE.match(line)
        if m and int(m.group(1)) >= step:
            time.sleep(delay_s)
            p.send_signal(signal.SIGKILL)
            p.stdout.close()
            p.wait()
            return True
    p.wait()
    return False


def newest_periodic_step(ck):
    try:
        steps = [int(m.group(1)) for m in
                 (re.fullmatch(r"step_(\d+)\.safetensors", n) for n in os.listdir(ck)) if m]
    except FileNotFoundError:
        return 0
    return max(steps, default=0)


def tensor_difference(a_path, b_path):
    """(None, why) when the files hold other tensors; else (the largest absolute difference over
    every element, the tensor where it is). 0.0 means bit-for-bit equal."""
    a, b = load_file(a_path), load_file(b_path)
    if sorted(a) != sorted(b):
        return None, "other tensor names: %s vs %s" % (sorted(a)[:4], sorted(b)[:4])
    worst, where = 0.0, ""
    for name in a:
        if a[name].dtype != b[name].dtype or a[name].shape != b[name].shape:
            return None, "tensor %s: %s%s vs %s%s" % (name, a[name].dtype, a[name].shape,
                                                     b[name].dtype, b[name].shape)
        if a[name].tobytes() != b[name].tobytes():
            diff = float(abs(a[name].astype("float64") - b[name].astype("float64")).max())
            if diff > worst or not where:
                worst, where = max(diff, 1e-300), name
    return worst, where


def timed_run(cmd):
    """Runs cmd; returns (the completed process, seconds until its first log line, seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first, out = None, []
    for line in p.stdout:
        if first is None and line.startswith("step "):
            first = time.monotonic() - t0
        out.append(line)
    err = p.stderr.read()
    p.wait()
    total = time.monotonic() - t0
    return subprocess.CompletedProcess(cmd, p.returncode, "".join(out), err), \
        first if first is not None else 0.0, total


def metrics_lines(path):
    lines = []
    with open(path) as f:
        for i, line in enumerate(f):
            try:
                lines.append(json.loads(line))
            except ValueError:
                check(False, "%s line %d is not JSON: %r" % (path, i + 1, line[:80]))
    return lines


LOG_LINE = re.compile(r"^step +(\d+) \| epoch (\d+) \| loss ([0-9.naninf-]+) \| lr ([0-9.e+-]+)")


def check_metrics_match_log(name, metrics, log_text):
    logged = [(int(m.group(1)), float(m.group(3)), float(m.group(4)))
              for m in map(LOG_LINE.match, log_text.splitlines()) if m]
    train = [m for m in metrics if m.get("kind") == "train"]
    check(len(logged) > 0, name + ": no log lines found")
    check(len(train) == len(logged),
          "%s: %d train lines in --metrics, %d log lines" % (name, len(train), len(logged)))
    for (step, loss, lr), m in zip(logged, train):
        check(m["step"] == step and abs(m["loss"] - loss) <= 5e-7 and
              abs(m["lr"] - lr) <= 1e-3 * abs(lr) + 1e-12,
              "%s: metrics line %s does not match the log line (step %d, loss %g, lr %g)"
              % (name, {k: m.get(k) for k in ("step", "loss", "lr")}, step, loss, lr))
    for field in ("epoch", "loss", "lr", "grad_norm", "ms_per_step", "samples_per_s",
                  "data_wait_share", "peak_memory_mib", "loss_scale", "eval_share", "eta_s"):
        check(all(field in m for m in train), "%s: a train line has no %s" % (name, field))
    starts = [m for m in metrics if m.get("kind") == "start"]
    check(len(starts) >= 1 and "parameters" in starts[0] and "total_steps" in starts[0],
          name + ": no start line with parameters and total_steps")
    evals = [m for m in metrics if m.get("kind") == "eval"]
    check(len(evals) >= 1 and all("val_loss" in m and "eval_share" in m for m in evals),
          name + ": no eval lines with val_loss and eval_share")


def long_run(name, cmd, scratch, keep_last, rng, expect_names, device, total_steps):
    log_every = int(cmd[cmd.index("--log-interval") + 1])
    """The kill/restart check for one program; cmd takes --checkpoint-dir/--save/--metrics."""
    root = os.path.join(scratch, name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)

    def command(tag):
        return cmd + ["--checkpoint-dir", os.path.join(root, tag + "-ck"),
                      "--save", os.path.join(root, tag + ".safetensors"),
                      "--metrics", os.path.join(root, tag + ".jsonl"),
                      "--keep-last", str(keep_last)]

    # The uninterrupted run; on a GPU twice, to see whether its kernels repeat their bits.
    ref, first_s, ref_s = timed_run(command("ref"))
    if not check(ref.returncode == 0, "%s: the uninterrupted run failed: %s"
                 % (name, ref.stderr[-2000:])):
        return
    tolerance = 0.0
    if device != "cpu":
        again = run(command("again"))
        check(again.returncode == 0, "%s: the second uninterrupted run failed" % name)
        run_to_run, where = tensor_difference(os.path.join(root, "ref.safetensors"),
                                              os.path.join(root, "again.safetensors"))
        print("%s on %s: two uninterrupted runs differ by %s%s" %
              (name, device, run_to_run, " (" + where + ")" if run_to_run else " (bit for bit)"))
        if run_to_run:  # the resumed run can be no closer than two plain runs are
            tolerance = 10 * run_to_run
    ref_metrics = metrics_lines(os.path.join(root, "ref.jsonl"))
    check_metrics_match_log(name, ref_metrics, ref.stdout)

    # Killed and restarted with the same command.
    killed = command("killed")
    ck = os.path.join(root, "killed-ck")
    kills = during_write = 0
    with open(os.path.join(root, "killed.log"), "w") as log:
        for attempt in range(12):
            if during_write < 2 and attempt % 2 == 1:
                landed = kill_during_write(killed, ck, log, ref_s * 1.5)
                during_write += landed
                kills += landed
            else:
                # After a random log line ahead of the newest checkpoint, and at least two log
                # lines before the end (the kill lands inside the run, not after its last step).
                last = total_steps - 2 * log_every
                ahead = min(newest_periodic_step(ck) + 1, last)
                if kill_at_step(killed, rng.randint(ahead, last), rng.uniform(0, 0.05), log):
                    kills += 1
            if kills >= 5 and during_write >= 1:
                break
        final = run(killed)
    log_text = open(os.path.join(root, "killed.log")).read()
    print("%s: uninterrupted %.1f s; %d kills (%d during a checkpoint write), then completed"
          % (name, ref_s, kills, during_write))
    check(kills >= 3, "%s: only %d kills landed before the run ended" % (name, kills))
    check(during_write >= 1, "%s: no kill landed during a checkpoint write" % name)
    if not check(final.returncode == 0, "%s: the last restart failed: %s"
                 % (name, final.stderr[-2000:])):
        return
    check("resuming from" in final.stdout or "resuming from" in log_text,
          "%s: no restart said it resumed" % name)
    diff, where = tensor_difference(os.path.join(root, "ref.safetensors"),
                                    os.path.join(root, "killed.safetensors"))
    check(diff is not None and diff <= tolerance,
          "%s: the killed-and-restarted run's weights differ from the uninterrupted run's: by %s "
          "in %s (allowed: %s)" % (name, diff, where, tolerance or "none, bit for bit"))
    if tolerance:
        print("%s: killed and restarted vs uninterrupted: %s (within 10x the run-to-run %s)"
              % (name, diff, tolerance / 10))

    # Its metrics file: whole lines, one per step, the same losses as the uninterrupted run's.
    killed_metrics = metrics_lines(os.path.join(root, "killed.jsonl"))

    def same_values(got, want):  # bit for bit, or (GPU) within the run-to-run tolerance
        return [s for s, _ in got] == [s for s, _ in want] and all(
            g == w or (tolerance and abs(g - w) <= 1e-3 * abs(w)) for (_, g), (_, w) in
            zip(got, want))
    ref_train = [(m["step"], m["loss"]) for m in ref_metrics if m["kind"] == "train"]
    got_train = [(m["step"], m["loss"]) for m in killed_metrics if m["kind"] == "train"]
    check(same_values(got_train, ref_train),
          "%s: the restarted run's metrics train lines differ from the uninterrupted run's:"
          " %s vs %s" % (name, got_train[:6], ref_train[:6]))
    ref_eval = [(m["step"], m["val_loss"]) for m in ref_metrics if m["kind"] == "eval"]
    got_eval = [(m["step"], m["val_loss"]) for m in killed_metrics if m["kind"] == "eval"]
    check(same_values(got_eval, ref_eval),
          "%s: evaluations differ: %s vs %s" % (name, got_eval, ref_eval))

    # Retention: exactly keep_last periodic checkpoints and the final one, no temporaries.
    for tag in ("ref", "killed"):
        files = sorted(os.listdir(os.path.join(root, tag + "-ck")))
        periodic = [f for f in files if re.fullmatch(r"step_\d+\.safetensors", f)]
        check(len(periodic) == keep_last and "last.safetensors" in files and
              len(files) == keep_last + 1,
              "%s: %s-ck holds %s, not %d periodic checkpoints + last.safetensors"
              % (name, tag, files, keep_last))

    # The weights file: Python's safetensors reads it, under the PyTorch names.
    weights = load_file(os.path.join(root, "ref.safetensors"))
    for n in expect_names:
        check(n in weights, "%s: --save has no tensor %s (has %s...)"
              % (name, n, sorted(weights)[:6]))


def main():
    gpt, classifier, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else int(time.time())
    device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
    print("long_run_test: seed", seed, "device", device)
    global load_file
    if load_file is None:
        if device == "cpu":  # CI: scripts/setup.sh installs it; the interop check needs it
            print("long_run_test: Python's safetensors is not installed "
                  "(python3 -m pip install safetensors numpy); run scripts/setup.sh")
            sys.exit(1)
        print("long_run_test: no Python safetensors here; reading the files with numpy")
        load_file = load_file_plain
    rng = random.Random(seed)
    os.makedirs(scratch, exist_ok=True)
    cache = os.path.join(scratch, "cache")
    # The bundled text, from this tree (a binary built elsewhere looks where it was built).
    text = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gpt",
                        "data", "kjv-genesis-exodus.txt")

    gpt_cmd = [gpt, "--device", device, "--cache", cache, "--text", text, "--layers", "2", "--width", "64",
               "--heads", "4", "--context", "64", "--batch", "8", "--steps", "60",
               "--log-interval", "5", "--checkpoint-interval", "10", "--eval-every", "20",
               "--eval-subset", "32", "--sample", "0", "--dropout", "0.1"]
    long_run("gpt", gpt_cmd, scratch, 2, rng,
             ["wte.weight", "wpe.weight", "blocks.0.qkv.weight", "lnf.weight"], device, 60)

    cls_cmd = [classifier, "--device", device, "--cache", cache, "--image-size", "16",
               "--synth-train", "512", "--synth-val", "64", "--batch", "32", "--epochs", "3",
               "--log-interval", "4", "--checkpoint-interval", "8", "--threads", "2"]
    long_run("classifier", cls_cmd, scratch, 3, rng,
             ["conv1.weight", "bn1.running_mean", "fc.weight"], device, 48)

    # Evaluation-heavy: evaluating the whole validation split after every step.
    heavy = run([gpt, "--device", device, "--cache", cache, "--text", text, "--layers", "2", "--width", "64",
                 "--heads", "4", "--context", "64", "--batch", "8", "--steps", "6",
                 "--eval-every", "1", "--eval-subset", "0", "--sample", "0",
                 "--metrics", os.path.join(scratch, "heavy.jsonl")])
    check(heavy.returncode == 0, "heavy evaluation run failed: " + heavy.stderr[-1000:])
    m = re.search(r"evaluation took (\d+) % of the wall time: evaluate less often", heavy.stdout)
    check(m is not None and int(m.group(1)) >= 30,
          "the evaluation-heavy run did not report a large evaluation share:\n" +
          heavy.stdout[-1500:])
    evals = [x for x in metrics_lines(os.path.join(scratch, "heavy.jsonl"))
             if x["kind"] == "eval"]
    check(len(evals) == 6 and evals[-1]["eval_share"] >= 0.3,
          "heavy run: %d eval lines, last share %s" % (len(evals),
                                                        evals[-1]["eval_share"] if evals else None))

    if failures:
        print("long_run_test: %d failures (seed %d)" % (len(failures), seed))
        sys.exit(1)
    shutil.rmtree(scratch, ignore_errors=True)
    print("long_run_test passed")


if __name__ == "__main__":
    main()
