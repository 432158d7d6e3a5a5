"""Running a command under a profiler (nsys, or torch.profiler inside it): its output copied to
gemmscope's stderr as it comes, the profiler's own text held back unless asked for, the
command's last stderr lines kept for when it fails."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# How many of the program's last stderr lines a failed run is reported with.
STDERR_TAIL_LINES = 8
# The signals that end gemmscope, passed on to what it started: Ctrl-C, a kill, a closed terminal.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long a signalled process group is given to end (nsys writes its report first: seconds) before
# it is killed.
GROUP_GRACE_S = 60.0


@dataclass
class Capture:
    """How a profiled command ended: its own exit status, its last stderr lines, and what the
    profiler printed (held back unless echoed)."""

    returncode: int
    stderr_tail: list[str] = field(default_factory=list)
    profiler_text: list[str] = field(default_factory=list)


class _Relay:
    """Copies one of the command's output streams to gemmscope's stderr as it comes, a piece (up
    to a newline or carriage return, so the program's own progress bars still redraw) at a time,
    holding back the profiler's own text (`echo_profiler`: copied too) and keeping the program's
    last lines."""

    def __init__(self, stream, own_text: re.Pattern, echo_profiler: bool, keep_tail: bool,
                 profiler_text: list[str]):
        self.stream, self.own_text, self.echo_profiler = stream, own_text, echo_profiler
        self.keep_tail, self.profiler_text = keep_tail, profiler_text
        self.tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self.line, self.redrawn = "", False  # the program's line being written, for the tail
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        pending, after_profiler = b"", False
        while chunk := os.read(self.stream.fileno(), 65536):
            pieces = re.split(rb"(?<=[\r\n])", pending + chunk)
            pending = pieces.pop()  # not ended yet
            for piece in pieces:
                after_profiler = self._piece(piece.decode(errors="replace"), after_profiler)
        if pending:
            self._piece(pending.decode(errors="replace"), after_profiler)
        if self.line.strip():
            self.tail.append(self.line.rstrip())

    def _piece(self, piece: str, after_profiler: bool) -> bool:
        text = piece.rstrip("\r\n")
        own = self.own_text.fullmatch(text) is not None or (after_profiler and not text.strip())
        if own and text.strip():
            self.profiler_text.append(text)
        if not own or self.echo_profiler:
            sys.stderr.write(piece)
            sys.stderr.flush()
        if not own and self.keep_tail:
            # after a carriage return the line is redrawn: the tail keeps its last drawing
            self.line = text if self.redrawn else self.line + text
            self.redrawn = piece.endswith("\r")
            if piece.endswith("\n"):
                if self.line.strip():
                    self.tail.append(self.line.rstrip())
                self.line = ""
        return own


def run(argv: list[str], env: dict[str, str] | None, own_text: re.Pattern, echo_profiler: bool,
        ended: Callable[[], bool] = lambda: True, once_returned: Callable[[], None] = lambda: None) -> Capture:
    """Run `argv`, its output to stderr (so that stdout holds only gemmscope's report, e.g. clean
    JSON) but the lines `own_text` matches, the profiler's, unless `echo_profiler`. Returns how
    `argv` ended and what was seen. `ended`: whether the profiled program has ended
    once `argv` has (nsys may return at a window's end while the program runs on, holding the
    streams); the streams are then read to their end for a moment more. `once_returned` is
    called as soon as `argv` returns, while the program may run on (its output still relayed)."""
    # A session of its own: a signal sent to gemmscope alone (a scheduler's, a container's) would
    # otherwise leave the profiler and the program running, orphaned; forwarded() passes it on.
    running = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    profiler_text: list[str] = []
    relays = [_Relay(running.stdout, own_text, echo_profiler, False, profiler_text),
              _Relay(running.stderr, own_text, echo_profiler, True, profiler_text)]
    with forwarded(running):
        status = running.wait()
        once_returned()
        while any(r.thread.is_alive() for r in relays) and not ended():
            time.sleep(0.1)
    for relay in relays:
        relay.thread.join(timeout=2)
    return Capture(status, list(relays[1].tail), profiler_text)


@contextmanager
def forwarded(running: subprocess.Popen) -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP sent to gemmscope go to `running`'s process group
    (started in a session of its own) and end gemmscope as they would have (KeyboardInterrupt,
    exit 128 + the signal), but only once that group has ended (end_group). In a thread other than
    the main one (where Python runs no signal handler), as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping: list[int] = []

    def forward(signum: int, _frame) -> None:
        _signal_group(running.pid, signum)
        if not stopping:  # a second signal while the group ends is passed on, and waited for as the first
            stopping.append(signum)
            raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        yield
    except BaseException:
        end_group(running)
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def end_group(running: subprocess.Popen, grace_s: float = GROUP_GRACE_S) -> None:
    """Wait for `running` and every process of its group to end, killing what is left after `grace_s`."""
    deadline, killed = time.monotonic() + grace_s, False
    while True:
        running.poll()  # reaps it: a zombie would still count as the group's
        try:
            os.killpg(running.pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:  # the group's id taken by another user's processes: ours have ended
            return
        if time.monotonic() > deadline:
            if killed:  # what SIGKILL does not end (a process stuck in the kernel) cannot be waited for
                return
            _signal_group(running.pid, signal.SIGKILL)
            killed, deadline = True, time.monotonic() + 5
        time.sleep(0.05)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):  # ended already
        pass
