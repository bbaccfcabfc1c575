"""What MLflow tracking costs a training step: the same run with no tracking, tracking to a live
`mlflow server` on this machine, to a server that holds every request (a proxy that answers none
until the run's end, tests/reference/held_proxy.py) and to an address where nothing listens.
Each run's step times come from its metrics.jsonl; the table gives the median over the steps
after the first five, and its ratio to the untracked run's, measured in the same invocation.

Two models: the quickstart's GPT-2 (configs/quickstart.toml, about half a second a step on two
cores) and a one-layer model of it whose steps take milliseconds, where a per-step cost would
show. Needs build/dtrain, runs/kjv (scripts/quickstart.sh) and the MLflow server's environment
(/opt/dtrain-mlflow, scripts/setup.sh --tests).

  /usr/bin/python3 bench/mlflow_overhead.py [--repeats 3]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLFLOW = "/opt/dtrain-mlflow/bin"
MODELS = {
    "quickstart (4.3M parameters)": ["train.steps=40", "optim.warmup_steps=4"],
    "one layer, d_model 64": ["train.steps=400", "optim.warmup_steps=4", "model.n_layer=1", "model.d_model=64",
                              "model.n_head=2", "data.seq_len=64", "train.micro_batch_size=4",
                              "train.global_batch_size=4"],
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    sys.exit(f"mlflow_overhead.py: {what} did not start")


def answers(url):
    try:
        return urllib.request.urlopen(url, timeout=2).status == 200
    except OSError:
        return False


def accepts(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def median_step_ms(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps = [json.loads(line) for line in f]
    times = [s["step_ms"] for s in steps if "step_ms" in s and s["step"] > 5]
    return statistics.median(times)


def train(work, name, overrides, uri):
    run_dir = os.path.join(work, name)
    command = [os.path.join(ROOT, "build/dtrain"), "train", os.path.join(ROOT, "configs/quickstart.toml"),
               f"log.run_dir={run_dir}", "eval.every=0", "eval.batches=1", "checkpoint.every=0",
               "log.progress=plain", "log.every=1000", "sample.max_tokens=1", *overrides]
    if uri:
        command += [f"mlflow.uri={uri}", "mlflow.end_wait_s=5"]
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    return median_step_ms(run_dir)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3, help="runs of each kind, interleaved")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        port, proxy_port, nothing = free_port(), free_port(), free_port()
        server = subprocess.Popen([f"{MLFLOW}/mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                                   "--workers", "1", "--backend-store-uri", f"{work}/store",
                                   "--default-artifact-root", f"{work}/artifacts"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        proxy = subprocess.Popen([f"{MLFLOW}/python", os.path.join(ROOT, "tests/reference/held_proxy.py"),
                                  str(proxy_port), f"http://127.0.0.1:{port}", f"{work}/never"])
        try:
            wait_for(lambda: answers(f"http://127.0.0.1:{port}/health"), 120, "the MLflow server")
            wait_for(lambda: accepts(proxy_port), 60, "the holding proxy")
            kinds = {"no tracking": None, "live server": f"http://127.0.0.1:{port}",
                     "server holding every request": f"http://127.0.0.1:{proxy_port}",
                     "nothing listening": f"http://127.0.0.1:{nothing}"}
            print(f"| model | tracking | median step (ms), {args.repeats} runs | vs no tracking |")
            print("| --- | --- | --- | --- |")
            for model, overrides in MODELS.items():
                medians = {kind: [] for kind in kinds}
                for r in range(args.repeats):
                    for i, (kind, uri) in enumerate(kinds.items()):
                        medians[kind].append(train(work, f"{len(medians[kind])}-{i}-{r}-{model[:3]}", overrides, uri))
                base = statistics.median(medians["no tracking"])
                for kind in kinds:
                    m = statistics.median(medians[kind])
                    print(f"| {model} | {kind} | {m:.2f} | {m / base:.3f} |", flush=True)
        finally:
            proxy.kill()
            os.killpg(server.pid, 9)


if __name__ == "__main__":
    main()
