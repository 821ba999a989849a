"""A data-parallel script whose rank 1 kills itself after a few steps (the Ray Train executor's
failed-rank test): the job must end as one failed trial naming rank 1."""

import os
import signal

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100_000):
    x = torch.randn(16, 8)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 1 and step == 5:
        print("rank 1 dies now", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
print("never reached", flush=True)
