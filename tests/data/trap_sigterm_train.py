"""A training loop that, like Lightning's signal connector, catches SIGTERM, finishes the step
it is on and exits 0: the exit code cannot tell a stopped run from a whole one."""

import argparse
import signal
import sys
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()

stop = False


def on_term(signum, frame):
    global stop
    print("Received SIGTERM: saving and exiting cleanly", flush=True)
    stop = True


signal.signal(signal.SIGTERM, on_term)
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(args.batch_size, 16), torch.randn(args.batch_size, 1)
for _ in range(args.steps):
    if stop:
        sys.exit(0)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)  # a step of 20 ms: the whole job is 8 s
print("done", flush=True)
