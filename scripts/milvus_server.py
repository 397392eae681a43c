"""Runs a Milvus standalone server (the PyPI package `milvus`, Milvus 2.3.5) or, with --lite, a
milvus-lite 3 server (the PyPI package `milvus-lite`: a Python server speaking the Milvus 2.6
API, with several vector fields per collection and BM25 full-text search) in the foreground,
for kindred's Milvus tests and for trying the Milvus backend on one machine.

    python scripts/milvus_server.py --dir DIR --port PORT [--lite]

Prints `ready <port>` once the server answers, and stops it (and its helper processes) when
this process gets SIGTERM or SIGINT, or when its parent (the test that started it) dies.
Warnings and errors of the server's Python code, a Python traceback of every thread if the
process crashes in native code, and the reason it stops go to standard error.
Install with `scripts/milvus.sh` (a virtual environment under target/milvus-venv) or
`scripts/milvus.sh lite` (target/milvus-lite-venv).
"""

import argparse
import faulthandler
import logging
import os
import signal
import socket
import sys
import threading
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="data directory (created)")
    ap.add_argument("--port", type=int, required=True, help="gRPC port on 127.0.0.1")
    ap.add_argument("--lite", action="store_true", help="run milvus-lite instead")
    args = ap.parse_args()
    faulthandler.enable()
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.lite:
        return lite(args)

    import milvus
    from milvus import default_server

    # The package checks each port is free by binding it without SO_REUSEADDR, so a restart on
    # the port clients were connected to (its closed connections linger in TIME_WAIT for a
    # minute) silently moved the server to the next free port. The server itself (Go) binds
    # with SO_REUSEADDR; let the check do the same.
    def try_bind_port(self, port):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            return sock
        except OSError:
            sock.close()
            return None

    milvus.MilvusServerConfig.try_bind_port = try_bind_port

    # KINDRED_MILVUS_MMAP_DIR: the query node memory-maps loaded fields from files in that
    # directory instead of holding them in memory (Milvus 2.3's queryNode.mmapDirPath), so a
    # large collection fits a small machine (the scale bench's 1M point).
    mmap_dir = os.environ.get("KINDRED_MILVUS_MMAP_DIR")
    if mmap_dir:
        os.makedirs(mmap_dir, exist_ok=True)
        write_config = milvus.MilvusServerConfig.write_config

        def write_config_with_mmap(self):
            if "mmapDirPath" not in self.template_text:
                self.template_text = self.template_text.replace(
                    "\nqueryNode:\n", f"\nqueryNode:\n  mmapDirPath: {mmap_dir}\n", 1
                )
            write_config(self)

        milvus.MilvusServerConfig.write_config = write_config_with_mmap

    default_server.set_base_dir(args.dir)
    default_server.listen_port = args.port
    # The server's other ports (metrics, internal) derive from the base dir config; keep
    # several servers apart by giving each its own port and directory.
    stopping = stop_on_signals()
    started = time.time()
    default_server.start()
    if default_server.listen_port != args.port:
        print(
            f"error: the server listens on {default_server.listen_port}, not {args.port}",
            flush=True,
        )
        default_server.stop()
        return 1
    print(f"ready {args.port} after {time.time() - started:.1f}s", flush=True)
    try:
        wait_until_stopped(stopping)
    finally:
        default_server.stop()
    return 0


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    return stopping


def wait_until_stopped(stopping: threading.Event) -> None:
    """Returns once `stopping` is set or the parent (the test that started us) is gone."""
    parent = os.getppid()
    while not stopping.wait(0.5):
        if os.getppid() != parent:
            print(f"{time.strftime('%H:%M:%S')} stopping: the parent process is gone", file=sys.stderr, flush=True)
            return
    print(f"{time.strftime('%H:%M:%S')} stopping: asked to (a signal)", file=sys.stderr, flush=True)


def lite(args) -> int:
    """A milvus-lite server on 127.0.0.1:PORT over DIR, until SIGTERM/SIGINT or the parent dies."""
    from milvus_lite.adapter.grpc.server import start_server_in_thread

    stopping = stop_on_signals()
    started = time.time()
    os.makedirs(args.dir, exist_ok=True)
    server, db, port = start_server_in_thread(args.dir, "127.0.0.1", args.port)
    if port != args.port:
        print(f"error: the server listens on {port}, not {args.port}", flush=True)
        server.stop(grace=0)
        db.close()
        return 1
    print(f"ready {port} after {time.time() - started:.1f}s", flush=True)
    try:
        wait_until_stopped(stopping)
    finally:
        server.stop(grace=2).wait()
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
