"""What `dhwt export` says it wrote (dhwt.runs.result.Exported): a line with its notes, or the
same as a JSON document."""

from __future__ import annotations

from dhwt.runs.result import Exported


def text(done: Exported, run_dir: str) -> str:
    """One line naming the member, step, tying and files, then a `note:` line per note."""
    lines = [f"exported member {done.member} (seed {done.seed}) of {run_dir} at step {done.step}, "
             f"{'tied' if done.tied else 'untied'}, as GPT2LMHeadModel to {done.out}: "
             f"{', '.join(done.files)}"]
    return "\n".join(lines + [f"note: {note}" for note in done.notes])


def document(done: Exported, run_dir: str) -> dict:
    """The export as JSON-ready data."""
    return {"run": run_dir, "out": str(done.out), "member": done.member, "seed": done.seed,
            "step": done.step, "tied": done.tied, "architecture": "GPT2LMHeadModel",
            "files": list(done.files), "notes": list(done.notes)}
