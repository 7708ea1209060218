"""A run's plug-ins kept with it: every component its config names as `file.py:NAME` (or
`package.module:NAME`) has its source copied into the run's `plugins/` folder, with its SHA-256 in
`plugins/plugins.json`, so that the folder alone says what was run. A resume whose plug-in file has
changed since (the fix of a failed job) adds the new version beside the old, with the jobs that
finished before it."""

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

from ..config import SweepConfig
from ..registry import parse_call, plugin_file
from ..results.storage import RunFolder
from ..training.protocol import NAMED

PLUGINS = "plugins"  # in the run folder: the copies and plugins.json
RECORD = "plugins.json"


def plugin_sources(config: SweepConfig) -> dict[str, Path]:
    """Each plug-in name of `config` (as the config writes it) → the source file it loads."""
    sources = {}
    for field in NAMED:
        value = getattr(config, field)
        for spec in (value,) if isinstance(value, str) else value:
            name = parse_call(field, spec)[0]
            if ":" not in name:
                continue
            source = name.rpartition(":")[0]
            if source.endswith(".py"):
                sources[spec] = plugin_file(source)
            else:
                found = importlib.util.find_spec(source)
                if found is not None and found.origin and found.origin.endswith(".py"):
                    sources[spec] = Path(found.origin)
    return sources


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_plugins(folder: RunFolder, config: SweepConfig) -> list[str]:
    """Copy the source of every plug-in `config` names into `folder`/plugins/ with its hash. Where
    the run recorded it before (a resume) and the file has changed since (a fix after a failed
    job), the new version is recorded beside the old with the jobs that finished before it, so
    the folder still says which code trained which student. Returns a line per changed plug-in."""
    sources = plugin_sources(config)
    if not sources or folder.finished():  # a finished run trains nothing more here
        return []
    record_path = folder.path / PLUGINS / RECORD
    recorded = json.loads(record_path.read_text()) if record_path.is_file() else {}
    finished_jobs = [name for name in folder.job_names() if folder.job(name).done()]
    (folder.path / PLUGINS).mkdir(exist_ok=True)
    changed = []
    for spec, source in sources.items():
        versions = recorded.setdefault(spec, [])
        digest = sha256(source)
        if versions and versions[-1]["sha256"] == digest:
            continue
        copy = Path(PLUGINS) / f"{source.stem}-{digest[:12]}.py"
        shutil.copyfile(source, folder.path / copy)
        versions.append(
            {"source": str(source), "sha256": digest, "copy": str(copy), "jobs_finished_before": finished_jobs}
        )
        if len(versions) > 1:
            changed.append(
                f"{source} has changed since {folder.path} began (plug-in {spec}): the new version is "
                f"kept in {folder.path / copy} beside the old, which trained the {len(finished_jobs)} "
                f"job(s) finished before"
            )
    folder.write(str(Path(PLUGINS) / RECORD), json.dumps(recorded, indent=2))
    return changed
