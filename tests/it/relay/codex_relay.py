#!/usr/bin/env python3
"""A fault-injecting relay in front of the real `codex app-server`.

The bridge starts this file as its `codex_bin`; it starts the real binary
with the same arguments and copies JSON-RPC lines both ways, except the
client requests a rule names:

  {"method": "turn/steer", "action": "hold", "until": "turn/completed"}
      keeps the request until the server sends a message with method
      `until`; forwards it right after that message reached the bridge.
  {"method": "turn/interrupt", "action": "drop"}
      never forwards it: the server never sees it, the bridge never gets
      an answer (a request lost on the way).
  {"method": "turn/completed", "action": "drop", "from": "server"}
      never forwards that message of the server to the bridge (a
      notification lost on the way back).

Its files sit next to it (the bridge clears the environment of what it
starts): `target` (the real binary), `rules` (a JSON list, read again for
every request, so a test can change them while it runs) and `log` (one
line per rule applied, for the test to wait on).
"""
import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.realpath(__file__))


def here(name):
    return os.path.join(HERE, name)


def method_of(line):
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg.get("method") if isinstance(msg, dict) else None


def rule_for(method, side="client"):
    if method is None:
        return None
    try:
        with open(here("rules")) as f:
            rules = json.load(f)
    except (OSError, ValueError):
        return None
    for rule in rules:
        if rule.get("method") == method and rule.get("from", "client") == side:
            return rule
    return None


def log(text):
    with open(here("log"), "a") as f:
        f.write(text + "\n")


def main():
    with open(here("target")) as f:
        target = f.read().strip()
    args = sys.argv[1:]
    if not args or args[0] != "app-server":
        os.execv(target, [target] + args)
    child = subprocess.Popen(
        [target] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    lock = threading.Lock()
    held = []

    def to_child(line):
        child.stdin.write(line)
        child.stdin.flush()

    def from_child():
        for line in child.stdout:
            method = method_of(line)
            rule = rule_for(method, "server")
            if rule is not None and rule.get("action") == "drop":
                log("drop %s" % method)
                continue
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            if method is None:
                continue
            with lock:
                due = [l for (until, l) in held if until == method]
                held[:] = [(u, l) for (u, l) in held if u != method]
                for l in due:
                    log("release %s after %s" % (method_of(l), method))
                    to_child(l)
        os._exit(child.wait())

    threading.Thread(target=from_child, daemon=True).start()
    for line in sys.stdin.buffer:
        method = method_of(line)
        rule = rule_for(method)
        with lock:
            if rule is None:
                to_child(line)
            elif rule.get("action") == "drop":
                log("drop %s" % method)
            elif rule.get("action") == "hold":
                held.append((rule.get("until"), line))
                log("hold %s" % method)
            else:
                to_child(line)
    child.stdin.close()
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
