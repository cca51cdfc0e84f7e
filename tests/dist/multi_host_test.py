#!/usr/bin/env python3
"""Several hosts, tested on one machine (CTest: dist.multi_host).

Two network namespaces joined by a veth pair are two "hosts" with their own addresses
(10.213.<pid % 250>.1 and .2). In each, `stoker launch --nnodes 2 --node-rank i
--nproc-per-node 2 --master-addr <host 0's address>` starts 2 CPU ranks of
tests/dist/multi_host_child_test.cpp (MultiHostChild.Train: a small MLP on TensorBatches over
the TCP backend). Checks:
  1. the 4 ranks on 2 hosts finish, their weights are equal, and equal bit for bit to those of
     the same program as 4 ranks of one host (`stoker launch --nproc-per-node 4`, inside host 0's
     namespace): the TCP backend reduces on rank 0 in rank order, whatever host a rank is on;
  2. a longer run of both hosts, then host 1's launcher is killed with SIGKILL (its ranks get
     SIGKILL through their parent-death signal): host 0's ranks and launcher end, non-zero,
     within 2 s of the kill; the failing rank of host 0 and the launcher's report name a rank of
     host 1 and host 1's address.
Only the namespaces' own addresses and loopbacks are used; nothing listens in the machine's own
network namespace. The namespaces and the veth are removed at the end, also on failure, and
leftovers of an earlier run that was killed are removed first.

Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and `ip` (iproute2); without them it prints the
reason and exits 77, which CTest reports as skipped.

usage: multi_host_test.py STOKER_CLI STOKER_DIST_TESTS SCRATCH_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

SKIP = 77
PREFIX = "stoker_mh_"
KILL_LIMIT_S = 2.0

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def skip(why):
    print("SKIP: dist.multi_host: " + why, flush=True)
    sys.exit(SKIP)


def ip(*args):
    return subprocess.run(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def pid_alive(pid):
    """True while pid runs (a zombie does not: nobody may reap it in a container)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def remove_leftovers():
    """Namespaces of earlier runs whose process is gone (a run killed by CTest's timeout)."""
    r = ip("netns", "list")
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(PREFIX + r"(\d+)_[ab]", name)
        if m and not pid_alive(int(m.group(1))):
            ip("netns", "del", name)


class Hosts:
    """Two namespaces joined by a veth pair."""

    def __init__(self):
        pid = os.getpid()
        self.ns = [f"{PREFIX}{pid}_a", f"{PREFIX}{pid}_b"]
        self.veth = [f"stkmh{pid % 10000000}a", f"stkmh{pid % 10000000}b"]  # <= 15 chars
        self.addr = [f"10.213.{pid % 250}.1", f"10.213.{pid % 250}.2"]
        self.made = []

    def make(self):
        for ns in self.ns:
            r = ip("netns", "add", ns)
            if r.returncode != 0:
                return f"`ip netns add {ns}` failed: {r.stderr.strip()}"
            self.made.append(ns)
        steps = [
            ("link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1]),
            ("link", "set", self.veth[0], "netns", self.ns[0]),
            ("link", "set", self.veth[1], "netns", self.ns[1]),
        ]
        for i in range(2):
            steps += [
                ("-n", self.ns[i], "addr", "add", self.addr[i] + "/24", "dev", self.veth[i]),
                ("-n", self.ns[i], "link", "set", "lo", "up"),
                ("-n", self.ns[i], "link", "set", self.veth[i], "up"),
            ]
        for s in steps:
            r = ip(*s)
            if r.returncode != 0:
                return f"`ip {' '.join(s)}` failed: {r.stderr.strip()}"
        return None

    def remove(self):
        # Deleting a namespace removes the veth end inside it, and with it its peer.
        for ns in self.made:
            ip("netns", "del", ns)
        ip("link", "del", self.veth[0])  # only if it never moved into a namespace
        self.made = []


class Job:
    """`stoker launch` in a namespace, in a session of its own."""

    def __init__(self, ns, launch_args, child_cmd, env, log_path):
        self.cmd = ["ip", "netns", "exec", ns, STOKER, "launch", *launch_args, *child_cmd]
        self.log_path = log_path
        self.log = open(log_path, "w")
        # `ip netns exec` execs `stoker launch` in place: self.proc.pid is the launcher.
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def output(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()


def child_env(out, steps, sleep_ms):
    env = dict(os.environ)
    env.update({"STOKER_TEST_LAUNCH_CHILD": "MultiHost", "STOKER_MH_OUT": out,
                "STOKER_MH_STEPS": str(steps), "STOKER_MH_STEP_SLEEP_MS": str(sleep_ms)})
    return env


def weights(out, world):
    got = []
    for r in range(world):
        try:
            with open(os.path.join(out, f"weights_rank{r}")) as f:
                got.append(f.read())
        except FileNotFoundError:
            got.append(None)
    return got


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def started_pids(out, world):
    pids = {}
    for r in range(world):
        try:
            with open(os.path.join(out, f"started_rank{r}")) as f:
                pids[r] = int(f.read().strip())
        except (FileNotFoundError, ValueError):
            pass
    return pids


def main():
    global STOKER
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    STOKER, dist_tests, scratch = (os.path.abspath(a) for a in sys.argv[1:4])
    child = [dist_tests, "--gtest_filter=MultiHostChild.Train", "--gtest_brief=1"]
    if os.geteuid() != 0:
        skip("not root: making network namespaces needs CAP_SYS_ADMIN and CAP_NET_ADMIN")
    if shutil.which("ip") is None:
        skip("`ip` (iproute2) not found")
    remove_leftovers()
    hosts = Hosts()
    jobs = []
    try:
        why = hosts.make()
        if why:
            skip("cannot make the two hosts' network namespaces here: " + why)
        a, b = hosts.addr
        print(f"hosts: {hosts.ns[0]} at {a}, {hosts.ns[1]} at {b} (veth {hosts.veth[0]} - "
              f"{hosts.veth[1]})", flush=True)
        fresh(scratch)
        port = "29500"  # the namespaces are new: nothing else listens there

        # --- Check 1: 2 hosts x 2 ranks equal 1 host x 4 ranks, bit for bit. ---
        steps = 6
        ref = fresh(os.path.join(scratch, "one_host"))
        t = time.monotonic()
        j = Job(hosts.ns[0], ["--nproc-per-node", "4", "--master-port", port], child,
                child_env(ref, steps, 0), os.path.join(scratch, "one_host.log"))
        jobs.append(j)
        rc = j.wait(60)
        print(f"one host, 4 ranks: exit {rc} after {time.monotonic() - t:.2f} s", flush=True)
        if not check(rc == 0, f"the 4-rank run on one host failed (exit {rc}):\n{j.output()}"):
            return 1
        want = weights(ref, 4)
        check(all(w and w == want[0] for w in want), "the 4 ranks of one host differ")

        two = fresh(os.path.join(scratch, "two_hosts"))
        t = time.monotonic()
        pair = [Job(hosts.ns[i],
                    ["--nnodes", "2", "--node-rank", str(i), "--nproc-per-node", "2",
                     "--master-addr", a, "--master-port", port],
                    child, child_env(two, steps, 0),
                    os.path.join(scratch, f"two_hosts_{i}.log")) for i in (0, 1)]
        jobs += pair
        rcs = [p.wait(60) for p in pair]
        print(f"two hosts, 2 ranks each: exits {rcs} after {time.monotonic() - t:.2f} s",
              flush=True)
        for i, p in enumerate(pair):
            check(rcs[i] == 0, f"host {i} of the 2-host run failed (exit {rcs[i]}):\n{p.output()}")
        got = weights(two, 4)
        for r in range(4):
            check(got[r] is not None, f"rank {r} of the 2-host run wrote no weights")
            check(got[r] == want[r],
                  f"rank {r}: the weights of 2 hosts x 2 ranks differ from 1 host x 4 ranks")
        if got == want:
            n = len(want[0].split())
            print(f"check 1: the {n} weights of every rank equal those of the 1-host run, "
                  "bit for bit", flush=True)

        # --- Check 2: host 1 dies; host 0's ranks end within 2 s, naming it. ---
        run = fresh(os.path.join(scratch, "kill"))
        pair = [Job(hosts.ns[i],
                    ["--nnodes", "2", "--node-rank", str(i), "--nproc-per-node", "2",
                     "--master-addr", a, "--master-port", port],
                    child, child_env(run, 1000000, 10), os.path.join(scratch, f"kill_{i}.log"))
                for i in (0, 1)]
        jobs += pair
        deadline = time.monotonic() + 40
        while len(started_pids(run, 4)) < 4 and time.monotonic() < deadline:
            if any(p.proc.poll() is not None for p in pair):
                break
            time.sleep(0.05)
        pids = started_pids(run, 4)
        if not check(len(pids) == 4 and all(p.proc.poll() is None for p in pair),
                     f"the long 2-host run did not get every rank training (started: "
                     f"{sorted(pids)}):\n{pair[0].output()}\n{pair[1].output()}"):
            return 1
        time.sleep(0.5)  # a few steps into training
        t_kill = time.monotonic()
        pair[1].kill()
        rc0 = pair[0].wait(10)
        t_end = time.monotonic() - t_kill
        host0_ranks_alive = [r for r in (0, 1) if pid_alive(pids[r])]
        host1_ranks_alive = [r for r in (2, 3) if pid_alive(pids[r])]
        out0 = pair[0].output()
        print(f"check 2: host 1 killed; host 0's launcher ended with exit {rc0} "
              f"{t_end:.3f} s later", flush=True)
        print("host 0 printed:\n  " + "\n  ".join(out0.strip().splitlines()), flush=True)
        check(rc0 is not None and t_end <= KILL_LIMIT_S,
              f"host 0's launcher ended {t_end:.2f} s after host 1 was killed "
              f"(limit {KILL_LIMIT_S} s; exit {rc0})")
        check(rc0 not in (None, 0), f"host 0's launcher exited with {rc0}, not non-zero")
        check(not host0_ranks_alive, f"host 0's ranks {host0_ranks_alive} still run")
        check(not host1_ranks_alive, f"host 1's ranks {host1_ranks_alive} survived the kill")
        # The ranks' own error lines, as `stoker launch` forwards them ("[rank N] rank N: ...").
        # The first to fail names host 1's rank; the other may be stopped by the launcher's
        # SIGTERM before it prints.
        named = [l for l in out0.splitlines()
                 if re.match(r"\[rank [01]\] rank [01]: ", l)
                 and re.search(rf"rank [23] at {re.escape(b)}:\d+", l)]
        check(named, f"no rank of host 0 named a rank of host 1 at {b}")
        check(re.search(r"stoker launch: FAILED: rank [01] \(local [01], pid \d+\) exited with "
                        r"status 1", out0) is not None,
              "host 0's launcher did not report its failed rank")
        check(re.search(rf"^  rank [01]: .*rank [23] at {re.escape(b)}:\d+", out0, re.M)
              is not None, "host 0's launcher's report does not name a rank of host 1")
    finally:
        for j in jobs:
            j.kill()
        for j in jobs:
            j.wait(5)
        hosts.remove()
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("dist.multi_host: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
