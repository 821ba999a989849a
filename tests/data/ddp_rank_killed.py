"""A DDP job (gloo) whose rank 1 is killed (SIGKILL) after a few steps: the trial must fail in
one line naming the rank, and leave no rank running."""

import os
import signal

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(100000):
    x = torch.randn(32, 16)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 1 and step == 20:
        os.kill(os.getpid(), signal.SIGKILL)
