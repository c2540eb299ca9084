"""A script kept running in another interpreter (an engine's venv), asked one JSON request per line.

`Worker(command, name, env)` starts `command` on the first `ask(request)` (in this process's environment as it is
then, with `env` on top), writes the request as one line of
its standard input and reads one line of JSON from its standard output. The script's standard error goes to a
temporary file whose tail is shown if it dies. `ask` raises `DecoderError` (crashed) when the worker gives no
answer in `timeout` seconds (it is killed), dies, or answers `{"error": TRACEBACK}`. A worker that died is
started again on the next request.

`kept_file(model, kind, write)` is a file (or folder) that `write` makes of a model for such a script, made
once per model object and kind, in a temporary folder removed when this process ends.
"""

import atexit
import itertools
import json
import os
import select
import shutil
import subprocess
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path

from mtdecode.testing.decoders import DecoderError

#: how much of a failing program's or dead worker's standard error an error shows
STDERR_TAIL = 3000


class Worker:
    """One script in another interpreter (see the module docstring)."""

    def __init__(self, command: list[str], name: str, *, env: dict[str, str] | None = None, timeout: float | int = 120):
        self.command, self.name, self.env, self.timeout = command, name, env, timeout
        self.process: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        """The running process (started now if there is none)."""
        if self.process is None or self.process.poll() is not None:
            self.log = tempfile.TemporaryFile()
            self.process = subprocess.Popen(
                self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                env={**os.environ, **(self.env or {})}, text=True,
            )  # fmt: skip
        return self.process

    def ask(self, request: dict) -> dict:
        """Send one request and return the answer (see the module docstring)."""
        process = self.start()
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        if not select.select([process.stdout], [], [], self.timeout)[0]:
            process.kill()
            raise DecoderError(f"{self.name} gave no answer in {self.timeout:g} s", crashed=True)
        line = process.stdout.readline()
        if not line:
            self.log.seek(0)
            tail = self.log.read().decode(errors="replace")[-STDERR_TAIL:]
            raise DecoderError(f"the {self.name} worker died", crashed=True, traceback=tail)
        answer = json.loads(line)
        if "error" in answer:
            raise DecoderError(f"{self.name} raised", crashed=True, traceback=answer["error"])
        return answer

    def close(self) -> None:
        """End the process (it reads the end of its input and exits)."""
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()


_KEPT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> {kind: path}
_FOLDER: list[Path] = []
_NUMBERS = itertools.count()


def kept_file(model, kind: str, write: Callable[[Path], Path]) -> Path:
    """`write(path)`'s file or folder for `model`, at a new path named after `kind` (see the module docstring)."""
    made = _KEPT.setdefault(model, {})
    if kind not in made:
        if not _FOLDER:
            _FOLDER.append(Path(tempfile.mkdtemp(prefix="mtdecode-models-")))
            atexit.register(shutil.rmtree, _FOLDER[0], True)
        made[kind] = write(_FOLDER[0] / f"{next(_NUMBERS)}-{kind}")
    return made[kind]
