"""Show the demo in a terminal with ``rich``: the clock, the questions, why memories ranked.

Each step is printed as it happens. A question shows the game moment, whom the player
asked, the recalled memories with their game moment and why they ranked (lexical rank,
vector rank and cosine similarity, age in game time), the verdict, what lexical recall
alone would have answered, and the search stages with their timings.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.table import Table
from rich.text import Text

from game_memory.demo.clock import TICKS_PER_DAY, describe_age, format_tick
from game_memory.demo.outcome import (
    ConsolidateStep,
    EventStep,
    ForgetStep,
    ModelChangeStep,
    PhaseStep,
    QuestionStep,
    RebuildStep,
    RecalledMemory,
    StageTiming,
    Step,
)
from game_memory.demo.report import ModelReport, summarize
from game_memory.demo.scenario import Scenario

__all__ = ["RebuildBar", "StepPrinter", "print_header", "print_summary"]

_OK = "[bold green]✓[/bold green]"
_WRONG = "[bold red]✗[/bold red]"
_STAGE_NAMES = {
    "storage_migration": "migration",
    "authoritative_snapshot": "snapshot",
    "lexical_search": "lexical",
    "vector_index_read": "index read",
    "embedding": "embedding",
    "vector_scoring": "vector scoring",
    "rerank": "rerank",
}


def print_header(
    console: Console, scenario: Scenario, model: ModelReport, data_dir: str | None
) -> None:
    """Print what is about to be played, on which model, and where the save is."""
    memories = scenario.memories
    villagers = escape(", ".join(f"{npc.name} ({npc.role})" for npc in scenario.npcs))
    if model.mode == "hybrid":
        recall = (
            f"hybrid recall (lexical + vectors), model [cyan]{escape(str(model.identity))}[/cyan]"
        )
    else:
        recall = "[yellow]lexical recall only[/yellow] (no embedding model)"
    lines = [
        f"[bold]{escape(scenario.name)}[/bold]",
        f"{len(scenario.npcs)} villagers, {len(scenario.events)} events, "
        f"{len(scenario.actions)} acts of the game (forget, consolidate), {memories} memories, "
        f"{len(scenario.questions)} questions; one game minute per tick",
        f"villagers: {villagers}",
        f"recall: {recall}",
        "save: "
        + (escape(data_dir) if data_dir is not None else "a temporary folder (deleted at exit)"),
    ]
    if model.notice:
        lines.append(f"[yellow]notice:[/yellow] {escape(model.notice)}")
    console.print(Panel("\n".join(lines), title="game-memory demo", expand=False))


class StepPrinter:
    """Print steps as they come; keeps the day the clock is on for the day headings."""

    def __init__(self, console: Console, scenario: Scenario) -> None:
        self._console = console
        self._scenario = scenario
        self._day: int | None = None

    def __call__(self, step: Step) -> None:
        """Print one step."""
        if isinstance(step, EventStep):
            self._event(step)
        elif isinstance(step, QuestionStep):
            self._question(step)
        elif isinstance(step, PhaseStep):
            self._day = None
            self._console.rule(f"[bold magenta]{format_tick(step.tick)}[/bold magenta]")
            self._console.print(Text(step.title, style="magenta"))
        elif isinstance(step, ModelChangeStep):
            self._model_change(step)
        elif isinstance(step, ForgetStep | ConsolidateStep):
            self._action(step)
        else:
            self._rebuild(step)

    def _action(self, step: ForgetStep | ConsolidateStep) -> None:
        action = step.action
        self._clock(action.tick)
        name = self._scenario.npc(action.npc).name
        line = Text()
        line.append(format_tick(action.tick).split(", ")[1] + "  ", style="dim")
        if isinstance(step, ForgetStep):
            line.append(f"The game makes {name} forget ", style="bold yellow")
            line.append(action.memory_ids[0], style="yellow")
            line.append(": from now on it is not recalled; an earlier save still has it.")
        else:
            line.append(f"The game sums up what {name} makes of it: ", style="bold yellow")
            line.append(f"“{action.text}”", style="italic")
            line.append(f"  (in place of {', '.join(action.memory_ids)})", style="dim")
        self._console.print(line)
        if action.note:
            self._console.print(Text(f"  {action.note}", style="dim"))

    def _clock(self, tick: int) -> None:
        day = tick // TICKS_PER_DAY + 1
        if day != self._day:
            self._day = day
            self._console.rule(f"[bold]Day {day}[/bold]")

    def _event(self, step: EventStep) -> None:
        event = step.event
        self._clock(event.tick)
        names = ", ".join(self._scenario.npc(witness).name for witness in event.witnesses)
        line = Text()
        line.append(format_tick(event.tick).split(", ")[1] + "  ", style="dim")
        line.append(event.text)
        line.append(f"  seen by {names}", style="dim")
        if event.expires_at is not None:
            line.append(f"  (a rumour until {format_tick(event.expires_at)})", style="dim italic")
        self._console.print(line)

    def _question(self, step: QuestionStep) -> None:
        question = step.question
        if question.phase == "play":
            self._clock(question.tick)
        npc = self._scenario.npc(question.npc)
        stage = {
            "after_model_change": " (new model, before the rebuild)",
            "after_rebuild": " (after the rebuild)",
        }.get(step.stage, "")
        self._console.print()
        self._console.print(
            f"[bold]{format_tick(question.tick)}[/bold]{stage} · the player asks "
            f"[bold cyan]{escape(npc.name)}[/bold cyan]: [italic]“{escape(question.text)}”[/italic]"
        )
        if question.note:
            self._console.print(Text(f"  {question.note}", style="dim"))
        self._console.print(_memories_table(step.memories, question.expected))
        verdict = _OK if step.correct else _WRONG
        if question.expected:
            wanted = escape(" or ".join(question.expected))
            detail = f"expected {wanted} in the top {self._scenario.top_k}"
        else:
            detail = "nothing from the future of this save"
        parts = [f"  {verdict} {detail}"]
        if step.fallback:
            parts.append("[yellow]semantic recall unavailable: lexical fallback[/yellow]")
        if step.lexical_ids is not None:
            lexical = _OK if step.lexical_correct else _WRONG
            recalled = escape(", ".join(step.lexical_ids[:3])) if step.lexical_ids else "nothing"
            parts.append(f"lexical alone {lexical} ({recalled})")
        self._console.print(" · ".join(parts))
        if step.future_ids or step.expired_ids:
            recalled_ids = ", ".join(step.future_ids + step.expired_ids)
            self._console.print(
                Text(f"  recalled from the future or expired: {recalled_ids}", style="bold red")
            )
        self._console.print(Text(f"  stages: {_stages(step.stages)}", style="dim"))

    def _model_change(self, step: ModelChangeStep) -> None:
        status = step.status
        self._console.print(f"  previous model: [cyan]{escape(str(step.previous_identity))}[/cyan]")
        self._console.print(f"  new model:      [cyan]{escape(str(step.identity))}[/cyan]")
        state = status.state.upper()
        self._console.print(
            f"  status: [bold yellow]{state}[/bold yellow] ({status.stale_entries} vectors of "
            f"the old model, {status.ready_entries} ready): recall falls back to lexical"
        )

    def _rebuild(self, step: RebuildStep) -> None:
        status = step.status
        last = step.progress[-1] if step.progress else (0, 0)
        self._console.print(
            f"  rebuilt ({escape(step.reason)}): {last[0]}/{last[1]} memories re-embedded; status "
            f"[bold green]{status.state.upper()}[/bold green] "
            f"({status.ready_entries} of {status.total_entries} ready)"
        )


def _memories_table(memories: Sequence[RecalledMemory], expected: Sequence[str]) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, padding=(0, 1))
    table.add_column("#", justify="right", style="dim")
    table.add_column("memory")
    table.add_column("when", style="dim", no_wrap=True)
    table.add_column("found by", no_wrap=True)
    if not memories:
        table.add_row("", "[dim](nothing recalled)[/dim]", "", "")
    for rank, memory in enumerate(memories, start=1):
        text = Text(memory.text)
        if memory.memory_id in expected:
            text.stylize("bold")
        if memory.belief_key is not None:
            text.append(f"\nbelief {memory.belief_key}, as of {format_tick(memory.tick)}", "cyan")
        when = f"{format_tick(memory.tick)}\n{describe_age(memory.age_ticks)}"
        table.add_row(str(rank), text, when, _why(memory))
    return table


def _why(memory: RecalledMemory) -> str:
    parts: list[str] = []
    if memory.lexical_rank is not None:
        parts.append(f"lexical #{memory.lexical_rank}")
    if memory.vector_rank is not None:
        score = "" if memory.vector_score is None else f" (cos {memory.vector_score:.2f})"
        parts.append(f"vector #{memory.vector_rank}{score}")
    return " + ".join(parts) + f"\n[dim]importance {memory.importance:.1f}[/dim]"


def _stages(stages: Sequence[StageTiming]) -> str:
    parts = []
    for stage in stages:
        name = _STAGE_NAMES.get(stage.stage, stage.stage)
        extra = ""
        if stage.stage in ("lexical_search", "vector_scoring", "rerank"):
            extra = f" ({stage.scanned_count}→{stage.candidate_count})"
        if stage.reused:
            extra += " reused"
        parts.append(f"{name} {stage.duration_ms:.2f} ms{extra}")
    return " · ".join(parts)


def print_summary(console: Console, scenario: Scenario, steps: Sequence[Step]) -> None:
    """Print every question's verdict, with and without semantic recall, and the totals."""
    table = Table(title="answers", title_justify="left")
    for column in ("question", "asked", "NPC", "answer", "lexical alone"):
        table.add_column(column)
    for step in steps:
        if not isinstance(step, QuestionStep):
            continue
        question = step.question
        label = question.id if step.stage in ("play", "rewind") else f"{question.id} ({step.stage})"
        lexical = "-" if step.lexical_correct is None else (_OK if step.lexical_correct else _WRONG)
        answer = _OK if step.correct else _WRONG
        if step.fallback:
            answer += " [yellow]fallback[/yellow]"
        name = scenario.npc(question.npc).name
        table.add_row(Text(label), format_tick(question.tick), Text(name), answer, lexical)
    console.print()
    console.print(table)
    summary = summarize(steps)
    by_stage: dict[str, list[bool]] = {}
    for step in steps:
        if isinstance(step, QuestionStep):
            by_stage.setdefault(step.stage, []).append(step.correct)
    labels = {
        "play": "as the days go by",
        "rewind": "after loading the earlier save",
        "after_model_change": "with the new model before the rebuild (lexical fallback)",
        "after_rebuild": "after the rebuild",
    }
    counts = "; ".join(
        f"{sum(verdicts)}/{len(verdicts)} {labels.get(stage, stage)}"
        for stage, verdicts in by_stage.items()
    )
    console.print(f"Correct answers: {counts}.")
    console.print(
        f"Memories recalled from the future of their save: {summary['future_recalled']}; "
        f"expired rumours recalled: {summary['expired_recalled']}."
    )
    if summary["semantic_wins"]:
        console.print(
            "Lexical recall alone gets these wrong, semantic recall gets them right: "
            + escape(", ".join(summary["semantic_wins"]))
        )


class RebuildBar:
    """A ``rich`` progress bar fed with ``(done, total)`` by a rebuild; closed at the end."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        """Show ``done`` of ``total`` memories re-embedded."""
        if self._progress is None:
            self._progress = Progress(
                TextColumn("  re-embedding memories"),
                BarColumn(),
                MofNCompleteColumn(),
                console=self._console,
            )
            self._progress.start()
            self._task = self._progress.add_task("rebuild", total=total)
        assert self._task is not None
        self._progress.update(self._task, completed=done, total=total)
        if done >= total:
            self.close()

    def close(self) -> None:
        """Stop the bar (idempotent)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._task = None
