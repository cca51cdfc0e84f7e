#!/usr/bin/env python3
"""Preemption and run ownership of the example trainers, end to end on the CPU (CTest:
examples.preemption).

  - stoker_gpt and stoker_classifier stopped by SIGTERM, SIGINT and SIGUSR1 at random moments and
    restarted with the same command until done: each stop exits 128 + signal after a message
    naming the step and the checkpoint, and the final weights equal those of an uninterrupted
    run, bit for bit; the metrics file keeps whole lines, in step order, with every line of the
    uninterrupted run's steps;
  - a second signal ends the run at once (killed by it, no checkpoint of its own);
  - two runs on the same --checkpoint-dir or --metrics: the second is refused naming the first
    (its pid); after kill -9 of the first, the next run takes the lock over, saying whose it was;
  - a 2-rank `stoker launch` job stopped by SIGTERM: every rank stops at the same step (one
    checkpoint), the launcher exits 143, and the restarted job ends with the uninterrupted job's
    weights.

usage: preemption_test.py STOKER_GPT STOKER_CLASSIFIER STOKER SCRATCH_DIR [SEED]
"""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import long_run_test as lr  # noqa: E402  (helpers: tensor_difference, metrics_lines, LOG_LINE)

check = lr.check
SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1]
STOP_LINE = re.compile(r"stopped by (SIG\w+) after step (\d+); checkpoint written to (\S+): run "
                       r"the same command to continue from it")


def default_signals():
    # A shell may start background jobs with SIGINT ignored; the trainers leave an ignored
    # signal alone, so give the child the default action.
    for s in SIGNALS:
        signal.signal(s, signal.SIG_DFL)


def start(cmd):
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=default_signals)


def signal_after_step(cmd, step, delay_s, sigs):
    """Starts cmd, sends `sigs` (one after the other, at once) delay_s after its first log line
    of a step >= `step`; returns (returncode, output, signalled)."""
    p = start(cmd)
    out = []
    signalled = False
    for line in p.stdout:
        out.append(line)
        m = lr.LOG_LINE.match(line)
        if m and int(m.group(1)) >= step and not signalled:
            time.sleep(delay_s)
            for s in sigs:
                p.send_signal(s)
            signalled = True
    p.wait()
    return p.returncode, "".join(out), signalled


def stop_loop(name, cmd, root, rng, total_steps):
    log_every = int(cmd[cmd.index("--log-interval") + 1])
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)

    def command(tag):
        return cmd + ["--checkpoint-dir", os.path.join(root, tag + "-ck"),
                      "--save", os.path.join(root, tag + ".safetensors"),
                      "--metrics", os.path.join(root, tag + ".jsonl"), "--keep-last", "2"]

    ref = lr.run(command("ref"))
    if not check(ref.returncode == 0, "%s: the uninterrupted run failed: %s"
                 % (name, ref.stderr[-2000:])):
        return
    stopped = command("stopped")
    stops, last_step, outputs = 0, 0, []
    for attempt in range(10):
        sig = SIGNALS[attempt % len(SIGNALS)]
        # A random step in the first third of what is left, so that several stops land.
        limit = total_steps - 2 * log_every
        first = min(last_step + 1, limit)
        target = rng.randint(first, first + max(0, limit - first) // 3)
        code, out, signalled = signal_after_step(stopped, target, rng.uniform(0, 0.05), [sig])
        outputs.append(out)
        if code == 0:
            break
        m = STOP_LINE.search(out)
        if not check(code == 128 + sig and m is not None,
                     "%s: %s: exit %s (expected %d) and no stop message:\n%s"
                     % (name, sig.name, code, 128 + sig, out[-1500:])):
            return
        step = int(m.group(2))
        check(m.group(1) == sig.name, "%s: the message names %s, not %s" % (name, m.group(1),
                                                                          sig.name))
        check(step >= target and os.path.isfile(m.group(3)) and
              m.group(3).endswith("step_%d.safetensors" % step),
              "%s: stopped at step %d (signal after %d), checkpoint %s" % (name, step, target,
                                                                            m.group(3)))
        last_step = step
        stops += 1
        if stops >= 4:
            break
    final = lr.run(stopped)
    print("%s: %d stops (%s), then completed" % (name, stops, ", ".join(
        "step %s" % m.group(2) for m in (STOP_LINE.search(o) for o in outputs) if m)))
    check(stops >= 3, "%s: only %d stops landed before the run ended" % (name, stops))
    if not check(final.returncode == 0, "%s: the last restart failed: %s"
                 % (name, final.stderr[-2000:])):
        return
    check(any("resuming from" in o for o in outputs[1:] + [final.stdout]),
          "%s: no restart said it resumed" % name)
    diff, where = lr.tensor_difference(os.path.join(root, "ref.safetensors"),
                                       os.path.join(root, "stopped.safetensors"))
    check(diff == 0.0, "%s: the stopped-and-restarted run's weights differ from the "
          "uninterrupted run's: by %s in %s" % (name, diff, where))
    # The metrics file: whole lines, steps in order, every step the uninterrupted run logged (a
    # stop adds the line of its own step), and the same evaluations.
    ref_m = lr.metrics_lines(os.path.join(root, "ref.jsonl"))
    got_m = lr.metrics_lines(os.path.join(root, "stopped.jsonl"))
    ref_steps = [m["step"] for m in ref_m if m["kind"] == "train"]
    got_steps = [m["step"] for m in got_m if m["kind"] == "train"]
    check(got_steps == sorted(set(got_steps)) and set(ref_steps) <= set(got_steps),
          "%s: train lines of steps %s, the uninterrupted run's %s" % (name, got_steps, ref_steps))
    ref_eval = [(m["step"], m["val_loss"]) for m in ref_m if m["kind"] == "eval"]
    got_eval = [(m["step"], m["val_loss"]) for m in got_m if m["kind"] == "eval"]
    check(got_eval == ref_eval, "%s: evaluations differ: %s vs %s" % (name, got_eval, ref_eval))
    # A second signal: the run ends at once, killed by it. (Another signal than the first: two
    # SIGTERMs sent together may reach the process as one, the kernel keeping one pending; and
    # of two pending signals the kernel delivers the lower-numbered first, so the second one
    # handled, the one that kills, may be either.)
    code, out, signalled = signal_after_step(command("twice"), 1, 0,
                                             [signal.SIGTERM, signal.SIGINT])
    check(signalled and code in (-signal.SIGTERM, -signal.SIGINT) and
          STOP_LINE.search(out) is None,
          "%s: SIGTERM and SIGINT: exit %s (expected death by one of them, no stop):\n%s"
          % (name, code, out[-800:]))


def with_value(cmd, flag, value):
    """cmd with `flag`'s value replaced (each flag may be given once)."""
    out = list(cmd)
    out[out.index(flag) + 1] = value
    return out


def wait_for_log_line(p, lines):
    for line in p.stdout:
        lines.append(line)
        if lr.LOG_LINE.match(line):
            return True
    return False


def ownership(gpt_cmd, root):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    ck, metrics = os.path.join(root, "ck"), os.path.join(root, "m.jsonl")
    # Runs until killed, writing no checkpoint.
    long_cmd = with_value(with_value(gpt_cmd, "--steps", "100000"), "--checkpoint-interval",
                          "100000")
    first = start(long_cmd + ["--checkpoint-dir", ck, "--metrics", metrics])
    lines = []
    if not check(wait_for_log_line(first, lines), "ownership: the first run did not start:\n"
                 + "".join(lines)[-1500:]):
        return
    for flags, flag, owned in ((["--checkpoint-dir", ck], "--checkpoint-dir", ck),
                               (["--checkpoint-dir", os.path.join(root, "other-ck"),
                                 "--metrics", metrics], "--metrics", metrics)):
        second = lr.run(gpt_cmd + flags)
        want = "stoker_gpt: error: %s %s is in use by another run: process %d on host " % (
            flag, owned, first.pid)
        check(second.returncode == 1 and want in second.stderr and
              "hint: wait for that run to end, or stop it (kill %d)" % first.pid in second.stderr,
              "ownership: a second run on the same %s: exit %d, stderr:\n%s\nexpected: %s"
              % (flag, second.returncode, second.stderr[-1500:], want))
        check("step " not in second.stdout, "ownership: the refused run trained:\n"
              + second.stdout[-800:])
    first.send_signal(signal.SIGKILL)
    first.stdout.close()
    first.wait()
    check(os.path.exists(os.path.join(ck, ".stoker-lock")),
          "ownership: kill -9 left no lock file (nothing to take over)")
    third = lr.run(with_value(gpt_cmd, "--steps", "3") + ["--checkpoint-dir", ck, "--metrics",
                                                            metrics])
    for owned in (os.path.join(ck, ".stoker-lock"), metrics + ".lock"):
        want = "took over the lock %s of process %d on host " % (owned, first.pid)
        check(third.returncode == 0 and want in third.stderr,
              "ownership: the run after kill -9: exit %d, no line '%s':\n%s"
              % (third.returncode, want, third.stderr[-1500:]))
    check(not os.path.exists(os.path.join(ck, ".stoker-lock")) and
          not os.path.exists(metrics + ".lock"), "ownership: the lock files stay after the run")


def launch_job(stoker, gpt_cmd, root, rng):
    """2 CPU ranks under stoker launch, stopped by SIGTERM to the launcher."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)

    def command(tag):
        return [stoker, "launch", "--nproc-per-node", "2", "--master-port", "0", "--kill-grace",
                "30"] + gpt_cmd + ["--checkpoint-dir", os.path.join(root, tag + "-ck"),
                                   "--save", os.path.join(root, tag + ".safetensors")]

    ref = lr.run(command("ref"))
    if not check(ref.returncode == 0, "launch: the uninterrupted job failed: %s"
                 % ref.stderr[-2000:]):
        return
    ck = os.path.join(root, "stopped-ck")
    code, out, signalled = signal_after_step(command("stopped"), rng.randint(10, 35),
                                             rng.uniform(0, 0.05), [signal.SIGTERM])
    m = STOP_LINE.search(out)
    if not check(code == 143 and m is not None,
                 "launch: exit %s (expected 143) and no stop message:\n%s" % (code, out[-2000:])):
        return
    files = sorted(f for f in os.listdir(ck) if f.endswith(".safetensors"))
    steps = [int(x) for x in re.findall(r"step_(\d+)\.safetensors", " ".join(files))]
    step = int(m.group(2))
    check(max(steps, default=-1) == step and step % 5 == 0 and "last.safetensors" not in files,
          "launch: after the stop at step %d the folder holds %s (the newest: that step, a log "
          "line's)" % (step, files))
    check(out.count("stopped by SIGTERM") == 1, "launch: the stop message is not rank 0's alone")
    final = lr.run(command("stopped"))
    if not check(final.returncode == 0, "launch: the restarted job failed: %s"
                 % final.stderr[-2000:]):
        return
    diff, where = lr.tensor_difference(os.path.join(root, "ref.safetensors"),
                                       os.path.join(root, "stopped.safetensors"))
    check(diff == 0.0, "launch: the stopped-and-restarted job's weights differ from the "
          "uninterrupted job's: by %s in %s" % (diff, where))
    print("launch: 2 ranks stopped together at step %d, restarted, completed" % step)


def main():
    gpt, classifier, stoker, scratch = sys.argv[1:5]
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else int(time.time())
    print("preemption_test: seed", seed)
    if lr.load_file is None:
        lr.load_file = lr.load_file_plain
    rng = random.Random(seed)
    os.makedirs(scratch, exist_ok=True)
    cache = os.path.join(scratch, "cache")
    text = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gpt",
                        "data", "kjv-genesis-exodus.txt")
    gpt_cmd = [gpt, "--device", "cpu", "--cache", cache, "--text", text, "--layers", "2",
               "--width", "64", "--heads", "4", "--context", "64", "--batch", "8", "--steps", "60",
               "--log-interval", "5", "--checkpoint-interval", "10", "--eval-every", "20",
               "--eval-subset", "32", "--sample", "0", "--dropout", "0.1"]
    stop_loop("gpt", gpt_cmd, os.path.join(scratch, "gpt"), rng, 60)
    cls_cmd = [classifier, "--device", "cpu", "--cache", cache, "--image-size", "16",
               "--synth-train", "512", "--synth-val", "64", "--batch", "32", "--epochs", "3",
               "--log-interval", "4", "--checkpoint-interval", "8", "--threads", "2"]
    stop_loop("classifier", cls_cmd, os.path.join(scratch, "classifier"), rng, 48)
    ownership(gpt_cmd, os.path.join(scratch, "ownership"))
    launch_job(stoker, [a for a in gpt_cmd if a != "--eval-every" and a != "20"],
               os.path.join(scratch, "launch"), rng)
    if lr.failures:
        print("preemption_test: %d failures (seed %d)" % (len(lr.failures), seed))
        sys.exit(1)
    shutil.rmtree(scratch, ignore_errors=True)
    print("preemption_test passed")


if __name__ == "__main__":
    main()
