"""Each peer in its own environment under ``.bench/peers/<name>/``, installed from the pins committed beside this file.

Python peers: a virtualenv made from the interpreter running the benchmark, ``pip install -r
bench/peers/<name>-requirements.txt`` (exact pins). The Node peer: ``bench/peers/sqs-consumer/package.json`` and
``package-lock.json`` copied into ``.bench/peers/sqs-consumer`` and installed with ``npm ci``, run by the project's
pinned Node 22 (``node_modules/.bin/node``: sqs-consumer 15 needs Node 22). Each environment keeps a stamp file
holding what it was installed from; while the stamp matches, nothing is installed again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HOME = ROOT / ".bench" / "peers"
PYTHON_PEERS = ("celery", "dramatiq", "sqs-workers")
NODE_PEER = "sqs-consumer"
NODE_BIN = ROOT / "node_modules" / ".bin"
NODE = NODE_BIN / "node"
STAMP = ".installed"


class PeerInstallError(RuntimeError):
    """A peer's environment could not be installed; the message says which and the tool's last output."""


def requirements(name: str) -> Path:
    return HERE / f"{name}-requirements.txt"


def _stamped(directory: Path, wanted: str) -> bool:
    stamp = directory / STAMP
    return stamp.exists() and stamp.read_text() == wanted


def python_env(name: str) -> Path:
    """The ``bin`` folder of peer ``name``'s virtualenv, installed first if its stamp does not match its pins."""
    if name not in PYTHON_PEERS:
        raise PeerInstallError(f"no Python peer named {name!r}: {', '.join(PYTHON_PEERS)}")
    directory = HOME / name
    wanted = f"{sys.version}\n{requirements(name).read_text()}"
    if _stamped(directory, wanted):
        return directory / "bin"
    print(f"installing {name} into {directory.relative_to(ROOT)} (once)", flush=True)
    shutil.rmtree(directory, ignore_errors=True)
    directory.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", str(directory)], name)
    pip = [str(directory / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, "-r", str(requirements(name))], name)
    (directory / STAMP).write_text(wanted)
    return directory / "bin"


def node_env() -> Path:
    """The folder holding the Node peer (its ``node_modules`` and ``peer.mjs``), ``npm ci`` first if needed."""
    source = HERE / NODE_PEER
    directory = HOME / NODE_PEER
    wanted = (source / "package-lock.json").read_text()
    if not NODE.exists():
        raise PeerInstallError(f"{NODE.relative_to(ROOT)} is missing: run `make` (npm install) to bring Node 22")
    if not _stamped(directory, wanted):
        print(f"installing {NODE_PEER} into {directory.relative_to(ROOT)} (once)", flush=True)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(source / name, directory / name)
        # Node 22 first on PATH: npm's own scripts and the engines check then see the Node that runs the peer.
        env = {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], NODE_PEER, cwd=directory, env=env)
        (directory / STAMP).write_text(wanted)
    shutil.copyfile(source / "peer.mjs", directory / "peer.mjs")  # the app itself: copied every run, never stale
    return directory


def install_all() -> dict[str, Path]:
    """Every peer's environment: name -> its ``bin`` folder (Python) or its folder (Node)."""
    envs = {name: python_env(name) for name in PYTHON_PEERS}
    envs[NODE_PEER] = node_env()
    return envs


def _run(argv: list[str], name: str, *, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        output = (result.stderr or result.stdout)[-2000:]
        raise PeerInstallError(f"installing {name} failed ({' '.join(argv[:4])}...): {output}")
