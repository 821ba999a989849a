"""A job whose memory grows through the whole run (issue 62): 8 MB every 0.05 s up to about
GROW_MB (default 400) MB, printing a steady rate. A probe stopped after a second sees a
fraction of the peak the whole job reaches."""

import os
import time

target_mb = int(os.environ.get("GROW_MB", "400"))
hold = []
while len(hold) * 8 < target_mb:
    hold.append(b"\x01" * (8 << 20))  # filled, so resident at once (not just reserved)
    time.sleep(0.05)
    print("100 samples/s", flush=True)
time.sleep(0.3)
