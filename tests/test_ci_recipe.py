"""examples/ci/: the scheduled workflow is valid YAML and every `reprobundle` command it runs names a real command
with options that command has (a recipe that breaks when pasted is worse than none)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer
import yaml

from reprobundle.cli import app

RECIPE = Path(__file__).parent.parent / "examples" / "ci" / "reprobundle-history.yml"


def _commands(workflow: dict) -> list[list[str]]:
    found = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            script = re.sub(r"\\\n\s*", " ", step.get("run", ""))
            for line in script.splitlines():
                line = line.strip()
                if line.startswith("reprobundle "):
                    found.append(shlex.split(line.split("||")[0].split(">")[0]))
    return found


def test_every_reprobundle_command_of_the_recipe_exists():
    workflow = yaml.safe_load(RECIPE.read_text())
    assert workflow[True]["schedule"][0]["cron"]  # YAML 1.1 reads the key `on` as True
    commands = _commands(workflow)
    assert [c[1] for c in commands] == ["sweep", "history"]
    group = typer.main.get_command(app)
    for argv in commands:
        command = group.commands[argv[1]]  # type: ignore[attr-defined]
        known = {opt for param in command.params for opt in param.opts}
        used = {word for word in argv[2:] if word.startswith("--")}
        assert used <= known, (argv[1], used - known)
