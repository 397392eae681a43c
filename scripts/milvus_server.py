"""Runs a Milvus standalone server (the PyPI package `milvus`) in the foreground, for kindred's
Milvus tests and for trying the Milvus backend on one machine.

    python scripts/milvus_server.py --dir DIR --port PORT

Prints `ready <port>` once the server answers, and stops it (and its helper processes) when
this process gets SIGTERM or SIGINT, or when its parent (the test that started it) dies.
Install with `scripts/milvus.sh` (a virtual environment under target/milvus-venv).
"""

import argparse
import os
import signal
import sys
import threading
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="data directory (created)")
    ap.add_argument("--port", type=int, required=True, help="gRPC port on 127.0.0.1")
    args = ap.parse_args()

    from milvus import default_server

    default_server.set_base_dir(args.dir)
    default_server.listen_port = args.port
    # The server's other ports (metrics, internal) derive from the base dir config; keep
    # several servers apart by giving each its own port and directory.
    stopping = threading.Event()

    def stop(*_):
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    started = time.time()
    default_server.start()
    print(f"ready {args.port} after {time.time() - started:.1f}s", flush=True)
    parent = os.getppid()
    try:
        while not stopping.wait(0.5):
            if os.getppid() != parent:  # the test that started us is gone
                break
    finally:
        default_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
