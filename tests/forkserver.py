"""A fork server for the tests that run bertctl as many separate processes: the recipes
through `make` (test_pipelines.py, test_search_pipeline.py) and the fault matrix's kills
(faults/test_kill_matrix.py).

Each bertctl process spends about 4 s of CPU importing torch before a second of work: most of
those tests' time. The server imports the heavy libraries and bertctl's stages once and forks a
child per command; the child takes the caller's argv, working directory, environment and
standard streams, and runs as `python ARGS...` would. A child that dies of a signal makes the
client die of the same signal, so a caller sees what it would see of a fresh process.

`python forkserver.py ARGS...` is the client (`-m bertctl ...` or `SCRIPT ...`, as python
takes them): without the server's socket in $BERTCTL_FORKSERVER it execs `python ARGS...`.
`environment(env)` starts a server for the calling process on first use.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

SOCKET_VARIABLE = "BERTCTL_FORKSERVER"
# Imported once by the server: the libraries that cost the time, and bertctl's command tree
# and stages. A server serves one environment (`environment`), so nothing read at import goes
# stale.
PRELOAD = ("numpy", "torch", "torch.nn.functional", "safetensors.torch", "tokenizers",
           "pyarrow", "pyarrow.parquet", "matplotlib", "bertctl.cli")


def _send(conn: socket.socket, payload: bytes, fds: list[int]) -> None:
    """The payload's length with the file descriptors, then the payload."""
    socket.send_fds(conn, [struct.pack("!I", len(payload))], fds)
    conn.sendall(payload)


def _receive(conn: socket.socket, fds: int) -> tuple[bytes, list[int]]:
    header, got, _, _ = socket.recv_fds(conn, 4, fds)
    size = struct.unpack("!I", header)[0]
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("the client went away")
        data += chunk
    return data, list(got)


def _run_command(request: dict, fds: list[int]) -> int:
    """In the forked child: become the caller's `python ARGS...`."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = request["argv"]
    module = argv[1] if argv[0] == "-m" else None
    # `python -m` puts the working directory first, `python SCRIPT` the script's folder; then
    # $PYTHONPATH.
    first = request["cwd"] if module else os.path.dirname(os.path.abspath(argv[0]))
    sys.path[:] = [first,
                   *(p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p),
                   *(p for p in sys.path[1:])]
    sys.argv = [sys.executable, *argv[2:]] if module else list(argv)
    import atexit
    import runpy

    code = 0
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException:   # what an uncaught exception does to a fresh interpreter
        import traceback

        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


def serve(path: str) -> None:
    import importlib
    import pkgutil
    import signal

    for module in PRELOAD:
        importlib.import_module(module)
    import bertctl.stages

    for found in pkgutil.walk_packages(bertctl.stages.__path__, "bertctl.stages."):
        importlib.import_module(found.name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # the waiters are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    while True:
        conn, _ = server.accept()
        try:
            data, fds = _receive(conn, 3)
        except (EOFError, OSError):
            conn.close()
            continue
        if os.fork() == 0:   # the waiter: runs the command in a child and reports its status
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            child = os.fork()
            if child == 0:
                conn.close()
                os._exit(_run_command(json.loads(data), fds))
            for fd in fds:
                os.close(fd)
            _, status = os.waitpid(child, 0)
            code = (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                    else os.WEXITSTATUS(status))
            try:
                conn.sendall(struct.pack("!i", code))
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        conn.close()


_SERVERS: dict[tuple, str] = {}


def environment(env: dict[str, str]) -> dict[str, str]:
    """`env` with the socket of a server started in `env` (one per process and environment:
    a command's environment is applied in its child, but what a preloaded library read at
    import, such as OpenMP's thread count, stays the server's), stopped when the process
    exits."""
    import atexit
    import shutil
    import subprocess
    import tempfile
    import time

    key = (os.getpid(), *sorted(env.items()))
    if key not in _SERVERS:
        folder = tempfile.mkdtemp(prefix="bertctl-fork-")
        path = os.path.join(folder, "bertctl.sock")
        server = subprocess.Popen([sys.executable, __file__, "--serve", path], env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        atexit.register(shutil.rmtree, folder, True)   # runs after the kill (last in, first out)
        atexit.register(server.kill)
        deadline = time.monotonic() + 120
        while not os.path.exists(path):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not start (exit {server.poll()})")
            time.sleep(0.05)
        _SERVERS[key] = path
    return {**env, SOCKET_VARIABLE: _SERVERS[key]}


def command(*args: str) -> list[str]:
    """The client's command line for `python ARGS...`."""
    return [sys.executable, os.path.abspath(__file__), *args]


def client(argv: list[str]) -> int:
    path = os.environ.get(SOCKET_VARIABLE)
    if not path or not os.path.exists(path):
        os.execv(sys.executable, [sys.executable, *argv])
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    _send(conn, json.dumps(request).encode(), fds=[0, 1, 2])
    status = b""
    while len(status) < 4:
        chunk = conn.recv(4 - len(status))
        if not chunk:
            print("forkserver: the command's process went away", file=sys.stderr)
            return 1
        status += chunk
    code = struct.unpack("!i", status)[0]
    if code < 0:   # it died of signal -code: so does this process
        import signal

        if -code not in (signal.SIGKILL, signal.SIGSTOP):   # the two no handler can catch
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        sys.exit(client(sys.argv[1:]))
