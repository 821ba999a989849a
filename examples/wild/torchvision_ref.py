"""Image classification written like the torchvision classification reference scripts.

Conventions this script copies (its own code, no torchvision needed):

* ``get_args_parser()`` returns the argparse parser: ``-b/--batch-size`` is per GPU (the
  total is world size x batch size), ``--epochs``, ``--lr``, ``-j/--workers``,
  ``--output-dir``, ``--lr-scheduler steplr`` with ``--lr-step-size``, ``--print-freq``;
* a gated ``init_distributed_mode(args)``: distributed only when ``RANK`` and
  ``WORLD_SIZE`` are in the environment (torchrun) or under SLURM, else it prints
  ``Not using distributed mode``; then only rank 0 prints; a ``DistributedSampler``;
* ``train_one_epoch`` and ``evaluate`` log through a ``MetricLogger`` of ``SmoothedValue``s
  (``Epoch: [0]  [ 10/157]  eta: ...  loss: ... (...)``), and ``evaluate`` ends with
  ``Test:  Acc@1 ... Acc@5 ... Loss ...``; ``Training time`` at the end;
* checkpoints (``model_<epoch>.pth``, ``checkpoint.pth``) only when ``--output-dir`` is given.

The images are seeded synthetic 3x32x32 pictures: each of 10 classes is a colored oriented
grating at its own frequency, with random phase, contrast, a distractor blob and noise.
The learning rate is constant over the short run (the step LR schedule steps every 30
epochs), so at the same epochs a larger batch takes fewer steps.

    python torchvision_ref.py --batch-size 32 --epochs 3 --lr 0.01 -j 2
    torchrun --nproc_per_node=2 torchvision_ref.py --batch-size 32
"""

import datetime
import math
import os
import time
from collections import defaultdict, deque

import torch
import torch.distributed as dist
import torch.utils.data
from torch import nn

# ---------------------------------------------------------------------------- utils


class SmoothedValue:
    """Tracks a series of values: a window for the median/average, and the global mean."""

    def __init__(self, window_size=20, fmt="{median:.4f} ({global_avg:.4f})"):
        self.deque = deque(maxlen=window_size)
        self.total = 0.0
        self.count = 0
        self.fmt = fmt

    def update(self, value, n=1):
        self.deque.append(value)
        self.count += n
        self.total += value * n

    def synchronize_between_processes(self):
        if not is_dist_avail_and_initialized():
            return
        t = torch.tensor([self.count, self.total], dtype=torch.float64)
        dist.barrier()
        dist.all_reduce(t)
        self.count, self.total = int(t[0]), float(t[1])

    @property
    def median(self):
        return float(torch.tensor(list(self.deque)).median())

    @property
    def avg(self):
        return float(torch.tensor(list(self.deque)).mean())

    @property
    def global_avg(self):
        return self.total / max(self.count, 1)

    @property
    def value(self):
        return self.deque[-1]

    def __str__(self):
        return self.fmt.format(median=self.median, avg=self.avg, global_avg=self.global_avg,
                               value=self.value)


class MetricLogger:
    def __init__(self, delimiter="  "):
        self.meters = defaultdict(SmoothedValue)
        self.delimiter = delimiter

    def update(self, **kwargs):
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                v = v.item()
            self.meters[k].update(v)

    def add_meter(self, name, meter):
        self.meters[name] = meter

    def __getattr__(self, attr):
        if attr in self.__dict__.get("meters", {}):
            return self.meters[attr]
        raise AttributeError(f"'MetricLogger' object has no attribute '{attr}'")

    def __str__(self):
        return self.delimiter.join(f"{name}: {meter}" for name, meter in self.meters.items())

    def synchronize_between_processes(self):
        for meter in self.meters.values():
            meter.synchronize_between_processes()

    def log_every(self, iterable, print_freq, header=""):
        start = end = time.time()
        iter_time = SmoothedValue(fmt="{avg:.4f}")
        width = len(str(len(iterable)))
        for i, obj in enumerate(iterable):
            yield obj
            iter_time.update(time.time() - end)
            if i % print_freq == 0 or i == len(iterable) - 1:
                eta = datetime.timedelta(seconds=int(iter_time.global_avg * (len(iterable) - i)))
                print(self.delimiter.join([
                    header, f"[{i:>{width}}/{len(iterable)}]", f"eta: {eta}", str(self),
                    f"time: {iter_time}"]))
            end = time.time()
        total = datetime.timedelta(seconds=int(time.time() - start))
        print(f"{header} Total time: {total}")


def accuracy(output, target, topk=(1,)):
    """The top-k accuracies (in percent) of a batch."""
    with torch.inference_mode():
        maxk = max(topk)
        _, pred = output.topk(maxk, 1, True, True)
        correct = pred.t().eq(target[None])
        return [correct[:k].flatten().sum(dtype=torch.float32) * (100.0 / target.size(0))
                for k in topk]


def is_dist_avail_and_initialized():
    return dist.is_available() and dist.is_initialized()


def is_main_process():
    return not is_dist_avail_and_initialized() or dist.get_rank() == 0


def save_on_master(*args, **kwargs):
    if is_main_process():
        torch.save(*args, **kwargs)


def setup_for_distributed(is_master):
    """Silence print() on every rank but the first (``print(..., force=True)`` still prints)."""
    import builtins

    builtin_print = builtins.print

    def print(*args, **kwargs):
        force = kwargs.pop("force", False)
        if is_master or force:
            builtin_print(*args, **kwargs)

    builtins.print = print


def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    elif "SLURM_PROCID" in os.environ:
        args.rank = int(os.environ["SLURM_PROCID"])
        args.gpu = args.rank % max(torch.cuda.device_count(), 1)
    else:
        print("Not using distributed mode")
        args.distributed = False
        return

    args.distributed = True
    if torch.cuda.is_available():
        torch.cuda.set_device(args.gpu)
        args.dist_backend = "nccl"
    else:
        args.dist_backend = "gloo"
    print(f"| distributed init (rank {args.rank}): {args.dist_url}", flush=True)
    dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank)
    dist.barrier()
    setup_for_distributed(args.rank == 0)


# ---------------------------------------------------------------------------- data and model


class SyntheticGratings(torch.utils.data.Dataset):
    def __init__(self, n, seed, size=32, num_classes=10):
        g = torch.Generator().manual_seed(seed)
        proto = torch.Generator().manual_seed(2024)  # the classes are shared by every split
        angle = torch.rand(num_classes, generator=proto) * math.pi
        freq = 1.5 + 4.0 * torch.rand(num_classes, generator=proto)
        color = torch.rand(num_classes, 3, generator=proto) * 1.6 - 0.8
        self.targets = torch.randint(num_classes, (n,), generator=g)
        yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size),
                                indexing="ij")
        a = angle[self.targets] + 0.25 * torch.randn(n, generator=g)
        proj = xx * torch.cos(a)[:, None, None] + yy * torch.sin(a)[:, None, None]
        phase = 2 * math.pi * torch.rand(n, 1, 1, generator=g)
        wave = torch.sin(math.pi * freq[self.targets][:, None, None] * proj + phase)
        contrast = 0.4 + 0.8 * torch.rand(n, 1, 1, 1, generator=g)
        img = contrast * wave[:, None] * color[self.targets][:, :, None, None]
        # a distractor blob of a random color somewhere
        cx, cy = torch.rand(2, n, 1, 1, generator=g) * 1.6 - 0.8
        blob = torch.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 0.05)
        img = img + blob[:, None] * torch.randn(n, 3, 1, 1, generator=g)
        self.images = img + 0.9 * torch.randn(n, 3, size, size, generator=g)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.images[i], self.targets[i]


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


def small_cnn(num_classes=10, width=16):
    return nn.Sequential(
        conv_bn(3, width), nn.MaxPool2d(2),
        conv_bn(width, 2 * width), nn.MaxPool2d(2),
        conv_bn(2 * width, 4 * width), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(4 * width, num_classes))


# ---------------------------------------------------------------------------- train / eval


def train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args):
    model.train()
    metric_logger = MetricLogger(delimiter="  ")
    metric_logger.add_meter("lr", SmoothedValue(window_size=1, fmt="{value}"))
    metric_logger.add_meter("img/s", SmoothedValue(window_size=10, fmt="{value:.1f}"))

    header = f"Epoch: [{epoch}]"
    for image, target in metric_logger.log_every(data_loader, args.print_freq, header):
        start_time = time.time()
        image, target = image.to(device), target.to(device)
        output = model(image)
        loss = criterion(output, target)

        optimizer.zero_grad()
        loss.backward()
        if args.clip_grad_norm:
            nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
        optimizer.step()

        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        batch_size = image.shape[0]
        metric_logger.update(loss=loss.item(), lr=optimizer.param_groups[0]["lr"])
        metric_logger.meters["acc1"].update(acc1.item(), n=batch_size)
        metric_logger.meters["acc5"].update(acc5.item(), n=batch_size)
        metric_logger.meters["img/s"].update(batch_size / (time.time() - start_time))


def evaluate(model, criterion, data_loader, device, print_freq=100, log_suffix=""):
    model.eval()
    metric_logger = MetricLogger(delimiter="  ")
    header = f"Test: {log_suffix}"
    with torch.inference_mode():
        for image, target in metric_logger.log_every(data_loader, print_freq, header):
            image, target = image.to(device), target.to(device)
            output = model(image)
            loss = criterion(output, target)
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            batch_size = image.shape[0]
            metric_logger.meters["loss"].update(loss.item(), n=batch_size)
            metric_logger.meters["acc1"].update(acc1.item(), n=batch_size)
            metric_logger.meters["acc5"].update(acc5.item(), n=batch_size)
    metric_logger.synchronize_between_processes()
    print(f"{header} Acc@1 {metric_logger.acc1.global_avg:.3f} "
          f"Acc@5 {metric_logger.acc5.global_avg:.3f} Loss {metric_logger.loss.global_avg:.4f}")
    return metric_logger.acc1.global_avg


def load_data(args):
    print("Loading data")
    st = time.time()
    dataset = SyntheticGratings(args.train_size, seed=args.seed)
    dataset_test = SyntheticGratings(args.val_size, seed=args.seed + 1)
    print(f"Took {time.time() - st:.1f}s")
    if args.distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(dataset)
        test_sampler = torch.utils.data.distributed.DistributedSampler(dataset_test,
                                                                       shuffle=False)
    else:
        train_sampler = torch.utils.data.RandomSampler(dataset)
        test_sampler = torch.utils.data.SequentialSampler(dataset_test)
    return dataset, dataset_test, train_sampler, test_sampler


def main(args):
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
    init_distributed_mode(args)
    print(args)

    device = torch.device(args.device)
    torch.manual_seed(args.seed)

    dataset, dataset_test, train_sampler, test_sampler = load_data(args)
    data_loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, sampler=train_sampler, num_workers=args.workers,
        pin_memory=device.type == "cuda")
    data_loader_test = torch.utils.data.DataLoader(
        dataset_test, batch_size=256, sampler=test_sampler, num_workers=args.workers,
        pin_memory=device.type == "cuda")

    print("Creating model")
    model = small_cnn(num_classes=10, width=args.width).to(device)
    if args.distributed and args.sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    if args.lr_scheduler != "steplr":
        raise RuntimeError(f"Invalid lr scheduler '{args.lr_scheduler}'. Only steplr is "
                           "supported in this example.")
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.lr_step_size,
                                                   gamma=args.lr_gamma)

    model_without_ddp = model
    if args.distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[args.gpu] if device.type == "cuda" else None)
        model_without_ddp = model.module

    print("Start training")
    start_time = time.time()
    for epoch in range(args.start_epoch, args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args)
        lr_scheduler.step()
        evaluate(model, criterion, data_loader_test, device=device)
        if args.output_dir:
            checkpoint = {"model": model_without_ddp.state_dict(),
                          "optimizer": optimizer.state_dict(),
                          "lr_scheduler": lr_scheduler.state_dict(), "epoch": epoch,
                          "args": args}
            save_on_master(checkpoint, os.path.join(args.output_dir, f"model_{epoch}.pth"))
            save_on_master(checkpoint, os.path.join(args.output_dir, "checkpoint.pth"))

    total_time = time.time() - start_time
    print(f"Training time {datetime.timedelta(seconds=int(total_time))}")
    if args.distributed:
        dist.destroy_process_group()


def get_args_parser(add_help=True):
    import argparse

    parser = argparse.ArgumentParser(description="PyTorch Classification Training",
                                     add_help=add_help)
    parser.add_argument("--data-path", default="synthetic", type=str,
                        help="dataset path (unused: the images are generated)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        type=str, help="device (Use cuda or cpu Default: cuda)")
    parser.add_argument("-b", "--batch-size", default=32, type=int,
                        help="images per gpu, the total batch size is $NGPU x batch_size")
    parser.add_argument("--epochs", default=3, type=int, metavar="N",
                        help="number of total epochs to run")
    parser.add_argument("-j", "--workers", default=2, type=int, metavar="N",
                        help="number of data loading workers (default: 2)")
    parser.add_argument("--lr", default=0.01, type=float, help="initial learning rate")
    parser.add_argument("--momentum", default=0.9, type=float, metavar="M", help="momentum")
    parser.add_argument("--wd", "--weight-decay", default=1e-4, type=float, metavar="W",
                        help="weight decay (default: 1e-4)", dest="weight_decay")
    parser.add_argument("--label-smoothing", default=0.0, type=float,
                        help="label smoothing (default: 0.0)", dest="label_smoothing")
    parser.add_argument("--lr-scheduler", default="steplr", type=str,
                        help="the lr scheduler (default: steplr)")
    parser.add_argument("--lr-step-size", default=30, type=int,
                        help="decrease lr every step-size epochs")
    parser.add_argument("--lr-gamma", default=0.1, type=float,
                        help="decrease lr by a factor of lr-gamma")
    parser.add_argument("--clip-grad-norm", default=None, type=float,
                        help="the maximum gradient norm (default None)")
    parser.add_argument("--print-freq", default=50, type=int, help="print frequency")
    parser.add_argument("--output-dir", default=None, type=str,
                        help="path to save outputs (default: none saved)")
    parser.add_argument("--start-epoch", default=0, type=int, metavar="N", help="start epoch")
    parser.add_argument("--sync-bn", dest="sync_bn", action="store_true",
                        help="Use sync batch norm")
    parser.add_argument("--dist-url", default="env://", type=str,
                        help="url used to set up distributed training")
    parser.add_argument("--world-size", default=1, type=int,
                        help="number of distributed processes")
    parser.add_argument("--width", default=16, type=int, help="channels of the first conv")
    parser.add_argument("--train-size", default=5000, type=int, help="synthetic train images")
    parser.add_argument("--val-size", default=2000, type=int, help="synthetic val images")
    parser.add_argument("--seed", default=0, type=int)
    return parser


if __name__ == "__main__":
    args = get_args_parser().parse_args()
    main(args)
