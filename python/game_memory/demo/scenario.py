"""The village of Millbrook over four in-game days: the demo's data, and nothing else.

Five NPCs live on one timeline (``main``; ticks are in-game minutes). Each event is seen
by some of them only, and becomes one memory in each witness's own partition (the
memory id is the event id; an owner's memories are its own). The player then asks
questions to different NPCs at different moments:

* ``play`` questions are asked as the clock moves forward; several are paraphrases that
  share no content word with the memory that answers them, so only semantic recall finds
  it ("Who took the money?" against "A hooded thief grabbed the coin purse ...");
* a belief changes: the ford the villagers cross is passable on Day 1 and flooded after
  the rain of Day 3 (two versions of the belief ``ford.willow``); asked before, the NPC
  answers with the old version, asked after, only with the new one, and after loading an
  earlier save, with the old one again;
* an NPC forgets on game time: Tess believes the gossip that the stranger is a spy until he
  comes back on Day 3 and the game has her forget it (``forget``); asked after, she does not
  recall it, and on a save loaded from before, she does again;
* a consolidation: on Day 3 evening the game replaces what Mira saw of the stranger with
  what she makes of it ("what Mira makes of the fire", a reflection whose ``consolidates``
  names the sources); asked after, the summary answers, on an earlier save, the sources;
* a traveller's memory is in Japanese and the question about it in Chinese: lexical recall
  matches the shared characters, and ``--model multilingual`` reads both languages;
* ``rewind`` questions are asked after the player loads an earlier save: the clock goes
  back on the same timeline and nothing that has not happened yet may be recalled;
* ``model_change`` questions are asked after the embedding model changed, once before the
  rebuild (lexical fallback) and once after (semantic recall restored).

Both front ends read this module: the terminal demo directly, the Godot demo project as
the JSON of :func:`scenario_json` (``demo_project/scenario.json``, checked to match).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

from game_memory.demo.clock import tick_of

__all__ = [
    "SCENARIO",
    "DemoAction",
    "DemoEvent",
    "DemoQuestion",
    "Npc",
    "Phase",
    "Scenario",
    "scenario_json",
]

Phase = Literal["play", "rewind", "model_change"]


@dataclass(frozen=True)
class Npc:
    """A villager with a memory partition of its own (``id`` is the memory owner id)."""

    id: str
    name: str
    role: str


@dataclass(frozen=True)
class DemoEvent:
    """Something that happens in the village at ``tick``, remembered by its witnesses.

    Attributes:
        id: The memory id of every witness's memory of it.
        tick: When it happened (in-game minutes since Day 1, 00:00).
        text: What the witnesses remember (the memory's searchable text).
        witnesses: The NPC ids that saw it; nobody else remembers it.
        kind: event, fact, relationship, goal, reflection or procedure.
        scope: ``village`` (seen in public), ``gossip`` or ``personal``.
        importance: 0..1, how much it matters to the witnesses.
        tags: Labels the game attaches (embedded with the text, not searched lexically).
        expires_at: The tick from which it no longer matters (a rumour), or ``None``.
        belief_key: Events sharing a key are versions of one belief: a question asked
            after the newer one is answered by it alone, an earlier one by the older.
    """

    id: str
    tick: int
    text: str
    witnesses: tuple[str, ...]
    kind: str = "event"
    scope: str = "village"
    importance: float = 0.5
    tags: tuple[str, ...] = ()
    expires_at: int | None = None
    belief_key: str | None = None


@dataclass(frozen=True)
class DemoQuestion:
    """A question the player asks one NPC at one moment, with the answer it should get.

    Attributes:
        id: Names the question in the output (and in the Godot demo's lines).
        phase: ``play``, ``rewind`` (after loading an earlier save) or ``model_change``.
        npc: Whom the player asks (recall is limited to that NPC's memories).
        tick: The game moment of the question (``at_or_before``).
        text: The question.
        expected: Memory ids that answer it: the answer is correct when one of them is
            among the first :attr:`Scenario.top_k` recalled. Empty: any answer is
            correct as long as nothing from the future or expired is recalled.
        paraphrase: It shares no content word with its expected memories.
        note: Why the question is in the scenario, for the reader.
    """

    id: str
    phase: Phase
    npc: str
    tick: int
    text: str
    expected: tuple[str, ...] = ()
    paraphrase: bool = False
    note: str = ""


@dataclass(frozen=True)
class DemoAction:
    """Something the game does to one NPC's memories at ``tick``: forget, or consolidate.

    Attributes:
        id: Names the action in the output; a consolidation's summary has it as memory id.
        kind: ``forget`` (``memory_ids`` holds the one memory forgotten) or ``consolidate``
            (``memory_ids`` are the sources, ``text`` the summary the game wrote).
        tick: The game moment: from then on the memory (or the sources) is retracted, and
            a consolidation's summary happens then.
        npc: Whose memories.
        memory_ids: What is forgotten or consolidated.
        text: A consolidation's summary (empty for a forget).
        importance: The summary's importance.
        tags: The summary's tags.
        note: Why the action is in the scenario, for the reader.
    """

    id: str
    kind: Literal["forget", "consolidate"]
    tick: int
    npc: str
    memory_ids: tuple[str, ...]
    text: str = ""
    importance: float = 0.5
    tags: tuple[str, ...] = ()
    note: str = ""


_Item = TypeVar("_Item", Npc, DemoEvent)


@dataclass(frozen=True)
class Scenario:
    """The whole demo: villagers, events, questions and the recall settings.

    Attributes:
        name: The title shown by both front ends.
        session_id: The save session every memory and question uses.
        timeline_id: The one timeline of the story.
        end_tick: Where the clock stops before the player loads an earlier save.
        recall_limit: How many memories each question recalls.
        top_k: How far down the expected answer may appear and still count as correct.
        changed_model_maximum_tokens: The tokens the changed model reads per text: a
            different embedding identity for the model-change step.
    """

    name: str
    session_id: str
    timeline_id: str
    end_tick: int
    recall_limit: int
    top_k: int
    changed_model_maximum_tokens: int
    npcs: tuple[Npc, ...]
    events: tuple[DemoEvent, ...]
    questions: tuple[DemoQuestion, ...] = field(default=())
    actions: tuple[DemoAction, ...] = field(default=())

    def npc(self, npc_id: str) -> Npc:
        """Return the villager with ``npc_id``.

        Raises:
            KeyError: No such villager.
        """
        return _find(self.npcs, npc_id, "villager")

    def event(self, event_id: str) -> DemoEvent:
        """Return the event with ``event_id``.

        Raises:
            KeyError: No such event.
        """
        return _find(self.events, event_id, "event")

    @property
    def summaries(self) -> int:
        """How many summaries the consolidations store."""
        return sum(1 for action in self.actions if action.kind == "consolidate")

    @property
    def memories(self) -> int:
        """How many memories the save holds at the end: one per witness of each event, and
        each consolidation's summary."""
        return sum(len(event.witnesses) for event in self.events) + self.summaries

    def retracted(self, npc_id: str, memory_id: str, tick: int) -> bool:
        """Whether an action made ``npc_id`` forget ``memory_id`` (or consolidate it) as of
        ``tick``: it must not be recalled then."""
        return any(
            action.npc == npc_id and memory_id in action.memory_ids and action.tick <= tick
            for action in self.actions
        )

    def questions_of(self, phase: Phase) -> tuple[DemoQuestion, ...]:
        """The questions of one phase, in the order they are asked."""
        return tuple(question for question in self.questions if question.phase == phase)

    def to_json_data(self) -> dict[str, Any]:
        """The scenario as JSON-ready data (lists for tuples, ``null`` for ``None``)."""
        data = asdict(self)
        data["format"] = "game-memory-demo-scenario"
        data["format_version"] = 1
        return data


def _find(items: tuple[_Item, ...], item_id: str, what: str) -> _Item:
    for item in items:
        if item.id == item_id:
            return item
    raise KeyError(f"no {what} {item_id!r} in the scenario")


def _t(day: int, hour: int, minute: int = 0) -> int:
    return tick_of(day, hour, minute)


_ALL = ("tess", "mira", "bram", "jory", "elda")

_NPCS = (
    Npc("tess", "Tess", "the miller's daughter, who fetches water at dawn"),
    Npc("mira", "Mira", "keeper of the Crooked Lantern inn"),
    Npc("bram", "Bram", "the blacksmith"),
    Npc("jory", "Jory", "the night watchman"),
    Npc("elda", "Elda", "the herbalist"),
)

_EVENTS = (
    # Day 1: market day, a theft at the well, a stranger at the inn, a quarrel.
    DemoEvent(
        "market-bells",
        _t(1, 6, 0),
        "Chapel bells rang to open the spring market.",
        _ALL,
        importance=0.2,
        tags=("market",),
    ),
    DemoEvent(
        "theft-at-well",
        _t(1, 6, 10),
        "A hooded thief grabbed the coin purse off the miller's cart at the well and "
        "ran into the woods.",
        ("tess", "jory"),
        importance=0.9,
        tags=("theft", "well"),
    ),
    DemoEvent(
        "spilled-bucket",
        _t(1, 6, 20),
        "Tess slipped on wet stones and spilled her bucket.",
        ("tess",),
        scope="personal",
        importance=0.1,
    ),
    DemoEvent(
        "forge-lit",
        _t(1, 6, 30),
        "Bram lit the forge and began a batch of horseshoes.",
        ("bram",),
        scope="personal",
        importance=0.2,
        tags=("work",),
    ),
    DemoEvent(
        "miller-shouting",
        _t(1, 6, 40),
        "The miller shouted in the square that his purse was gone.",
        ("tess", "mira", "bram"),
        importance=0.6,
        tags=("theft",),
    ),
    DemoEvent(
        "ford-passable",
        _t(1, 7, 30),
        "The ford over the Willow river is knee-deep; carts cross it without trouble.",
        ("elda", "tess"),
        kind="fact",
        importance=0.4,
        tags=("ford",),
        belief_key="ford.willow",
    ),
    DemoEvent(
        "willow-bark",
        _t(1, 8, 0),
        "Elda gathered willow bark and yarrow by the river.",
        ("elda",),
        scope="personal",
        importance=0.2,
        tags=("herbs",),
    ),
    DemoEvent(
        "stranger-arrives",
        _t(1, 12, 0),
        "A tall stranger in a grey cloak rented the corner room and paid in foreign silver.",
        ("mira",),
        importance=0.7,
        tags=("stranger", "inn"),
    ),
    DemoEvent(
        "stranger-asks-pass",
        _t(1, 12, 30),
        "The stranger asked about the old mountain pass and whether the watch patrols it.",
        ("mira",),
        importance=0.5,
        tags=("stranger",),
    ),
    DemoEvent(
        "hinge-quarrel",
        _t(1, 14, 0),
        "Bram and Mira argued over the unpaid bill for the inn's hinges; she called him "
        "a swindler.",
        ("bram", "mira"),
        kind="relationship",
        scope="personal",
        importance=0.6,
        tags=("bram", "mira"),
    ),
    DemoEvent(
        "gate-promise",
        _t(1, 14, 20),
        "Bram promised to mend the inn's broken gate before the week is out.",
        ("bram", "mira"),
        kind="goal",
        scope="personal",
        importance=0.6,
        tags=("promise",),
    ),
    DemoEvent(
        "stable-boy-rumour",
        _t(1, 16, 0),
        "The baker whispered that the new stable boy stole the purse.",
        ("tess", "mira"),
        kind="fact",
        scope="gossip",
        importance=0.5,
        tags=("rumour", "theft"),
        expires_at=_t(2, 12, 0),
    ),
    DemoEvent(
        "east-gate-unlatched",
        _t(1, 18, 0),
        "On the evening patrol Jory found the east gate unlatched.",
        ("jory",),
        importance=0.5,
        tags=("patrol",),
    ),
    DemoEvent(
        "stranger-watches-door",
        _t(1, 20, 0),
        "The stranger sat by the door all evening, watching everyone who came in.",
        ("mira",),
        importance=0.5,
        tags=("stranger",),
    ),
    DemoEvent(
        "mira-distrusts-stranger",
        _t(1, 21, 0),
        "Mira decided she does not trust the grey-cloaked stranger.",
        ("mira",),
        kind="relationship",
        scope="personal",
        importance=0.6,
        tags=("stranger",),
    ),
    DemoEvent(
        "minstrels",
        _t(1, 21, 30),
        "Travelling minstrels sang in the common room until midnight.",
        ("mira", "bram"),
        importance=0.2,
        tags=("inn",),
    ),
    # Day 2: the smithy burns; the purse is found; the rumour is disproved.
    DemoEvent(
        "smithy-fire",
        _t(2, 2, 50),
        "Flames tore through the smithy roof in the dead of night.",
        ("bram", "jory", "elda"),
        importance=1.0,
        tags=("fire", "smithy"),
    ),
    DemoEvent(
        "bucket-line",
        _t(2, 3, 5),
        "Villagers passed pails hand to hand from the well to douse the smithy.",
        ("jory", "tess", "elda"),
        importance=0.7,
        tags=("fire",),
    ),
    DemoEvent(
        "bram-burned",
        _t(2, 3, 20),
        "Bram scorched his left hand dragging his tools out of the blaze.",
        ("bram", "elda"),
        importance=0.8,
        tags=("injury",),
    ),
    DemoEvent(
        "broken-lamp",
        _t(2, 4, 0),
        "Behind the smithy Jory found a smashed oil lamp that was not Bram's.",
        ("jory",),
        importance=0.8,
        tags=("fire", "clue"),
    ),
    DemoEvent(
        "honey-salve",
        _t(2, 5, 0),
        "Elda dressed Bram's blistered hand with honey salve and clean linen.",
        ("elda", "bram"),
        importance=0.6,
        tags=("injury",),
    ),
    DemoEvent(
        "stranger-slips-out",
        _t(2, 5, 30),
        "The stranger slipped out of the inn before dawn, leaving his supper untouched.",
        ("mira",),
        importance=0.6,
        tags=("stranger",),
    ),
    DemoEvent(
        "smoky-bread",
        _t(2, 7, 0),
        "Bread at the mill tasted of smoke all morning.",
        ("tess",),
        scope="personal",
        importance=0.1,
    ),
    DemoEvent(
        "purse-in-oak",
        _t(2, 10, 0),
        "Tess found the miller's purse, empty, inside the hollow oak at the edge of the woods.",
        ("tess", "jory"),
        importance=0.7,
        tags=("theft", "clue"),
    ),
    DemoEvent(
        "stable-boy-cleared",
        _t(2, 12, 0),
        "The priest swore the stable boy was at morning prayers when the purse "
        "vanished, so he is innocent.",
        ("jory", "tess", "mira"),
        kind="fact",
        importance=0.7,
        tags=("theft",),
    ),
    DemoEvent(
        "council-vote",
        _t(2, 15, 0),
        "The village council voted to double the night watch after the fire.",
        ("mira", "jory", "bram"),
        importance=0.6,
        tags=("council",),
    ),
    DemoEvent(
        "salve-runs-low",
        _t(2, 16, 0),
        "Elda ran low on burn salve and sent for more honey from the beekeeper.",
        ("elda",),
        scope="personal",
        importance=0.3,
    ),
    DemoEvent(
        "soup-for-bram",
        _t(2, 19, 0),
        "Mira brought Bram a pot of soup while his hand healed, and they laughed about "
        "the hinge bill; they are friends again.",
        ("mira", "bram"),
        kind="relationship",
        scope="personal",
        importance=0.7,
        tags=("bram", "mira"),
    ),
    DemoEvent(
        "dance-rumour",
        _t(2, 20, 0),
        "Word is the harvest dance will move to the mill barn because the square smells of smoke.",
        ("tess", "elda"),
        scope="gossip",
        importance=0.3,
        tags=("rumour", "festival"),
        expires_at=_t(4, 0, 0),
    ),
    DemoEvent(
        "spy-rumour",
        _t(2, 21, 0),
        "Gossip at the well says the grey-cloaked stranger is a spy sent by the baron.",
        ("tess",),
        kind="fact",
        scope="gossip",
        importance=0.5,
        tags=("rumour", "stranger"),
    ),
    # Day 3: the stranger returns; a promise is kept; a courtship begins.
    DemoEvent(
        "silk-merchant",
        _t(2, 17, 0),
        "東から来た商人が宿に泊まり、絹と茶を売った。",
        ("mira",),
        importance=0.4,
        tags=("merchant", "inn"),
    ),
    DemoEvent(
        "stranger-returns",
        _t(3, 9, 0),
        "The grey-cloaked stranger came back and bought two flasks of lamp oil.",
        ("mira", "tess"),
        importance=0.8,
        tags=("stranger",),
    ),
    DemoEvent(
        "boot-prints",
        _t(3, 10, 0),
        "Jory followed boot prints from the hollow oak toward the mountain pass.",
        ("jory",),
        importance=0.6,
        tags=("clue",),
    ),
    DemoEvent(
        "gate-mended",
        _t(3, 11, 0),
        "Bram fixed the inn gate with his good hand, as he had sworn to.",
        ("bram", "mira"),
        kind="goal",
        scope="personal",
        importance=0.6,
        tags=("promise",),
    ),
    DemoEvent(
        "hand-healing",
        _t(3, 13, 0),
        "Elda says Bram's hand is healing cleanly and he can work again in a week.",
        ("elda", "bram"),
        kind="fact",
        scope="personal",
        importance=0.5,
        tags=("injury",),
    ),
    DemoEvent(
        "tess-courting",
        _t(3, 14, 0),
        "Tess and the stable boy are courting now that his name is cleared.",
        ("tess", "mira"),
        kind="relationship",
        scope="gossip",
        importance=0.4,
        tags=("tess",),
    ),
    DemoEvent(
        "iron-prices",
        _t(3, 14, 30),
        "An iron trader raised his prices because of the mountain rain.",
        ("bram",),
        scope="personal",
        importance=0.2,
        tags=("trade",),
    ),
    DemoEvent(
        "stranger-asks-watch",
        _t(3, 16, 0),
        "The stranger kept asking Jory when the guards change shifts and which nights the "
        "gate is left unwatched.",
        ("jory",),
        importance=0.7,
        tags=("stranger",),
    ),
    DemoEvent(
        "heavy-rain",
        _t(3, 18, 0),
        "A heavy rain soaked the village through the evening.",
        _ALL,
        importance=0.1,
        tags=("weather",),
    ),
    DemoEvent(
        "ford-flooded",
        _t(3, 19, 0),
        "After the heavy rain the ford over the Willow river is flooded; no cart can cross.",
        ("elda", "tess"),
        kind="fact",
        importance=0.6,
        tags=("ford",),
        belief_key="ford.willow",
    ),
    # Day 4: the stranger is caught and confesses; the harvest dance.
    DemoEvent(
        "caught-at-granary",
        _t(4, 2, 0),
        "Jory and Bram caught the stranger creeping toward the granary with a flask of lamp oil.",
        ("jory", "bram"),
        importance=0.9,
        tags=("stranger", "fire"),
    ),
    DemoEvent(
        "coins-in-cloak",
        _t(4, 2, 20),
        "The miller's coins were sewn into the lining of the stranger's cloak.",
        ("jory",),
        importance=0.9,
        tags=("theft", "clue"),
    ),
    DemoEvent(
        "confession",
        _t(4, 3, 0),
        "The stranger confessed he set the smithy alight to draw the watch away from his thefts.",
        ("jory", "mira"),
        importance=0.9,
        tags=("fire", "stranger"),
    ),
    DemoEvent(
        "cellar-jail",
        _t(4, 3, 30),
        "The stranger was locked in the cellar jail to wait for the magistrate.",
        ("jory",),
        importance=0.6,
        tags=("stranger",),
    ),
    DemoEvent(
        "miller-reward",
        _t(4, 10, 0),
        "The miller paid Jory five silver for catching the thief.",
        ("tess", "jory", "mira"),
        importance=0.5,
        tags=("reward",),
    ),
    DemoEvent(
        "supper-promise",
        _t(4, 12, 0),
        "Mira promised Jory a free supper every week for a month.",
        ("mira", "jory"),
        kind="goal",
        scope="personal",
        importance=0.4,
        tags=("promise",),
    ),
    DemoEvent(
        "harvest-dance",
        _t(4, 20, 0),
        "The harvest dance was held in the mill barn, and Bram danced with Mira.",
        _ALL,
        importance=0.5,
        tags=("festival",),
    ),
    DemoEvent(
        "elda-new-garden",
        _t(4, 21, 0),
        "Elda planted a new bed of marigolds for burn salves.",
        ("elda",),
        scope="personal",
        importance=0.3,
        tags=("herbs",),
    ),
)

_QUESTIONS = (
    DemoQuestion(
        "thief",
        "play",
        "tess",
        _t(1, 7, 0),
        "Who took our money?",
        ("theft-at-well",),
        paraphrase=True,
        note="no word in common with the memory: lexical recall finds nothing",
    ),
    DemoQuestion(
        "mira-day-one",
        "play",
        "bram",
        _t(1, 15, 0),
        "How do you feel about Mira?",
        ("hinge-quarrel",),
        note="the relationship as of Day 1 (it changes on Day 2)",
    ),
    DemoQuestion(
        "newcomer",
        "play",
        "mira",
        _t(1, 22, 0),
        "Any unfamiliar faces around lately?",
        (
            "stranger-arrives",
            "stranger-asks-pass",
            "stranger-watches-door",
            "mira-distrusts-stranger",
        ),
        paraphrase=True,
    ),
    DemoQuestion(
        "blame",
        "play",
        "tess",
        _t(2, 8, 0),
        "Who do folks blame for that robbery?",
        ("stable-boy-rumour",),
        note="a rumour, remembered until it expires at Day 2, 12:00",
    ),
    DemoQuestion(
        "overnight",
        "play",
        "jory",
        _t(2, 8, 0),
        "Was there any trouble for our blacksmith overnight?",
        ("smithy-fire", "bucket-line"),
        paraphrase=True,
    ),
    DemoQuestion(
        "injury",
        "play",
        "bram",
        _t(2, 9, 0),
        "How did you get hurt?",
        ("bram-burned", "honey-salve"),
        paraphrase=True,
    ),
    DemoQuestion(
        "blame-later",
        "play",
        "tess",
        _t(2, 14, 0),
        "Who do folks blame for that robbery?",
        ("stable-boy-cleared",),
        note="the same question after the rumour expired: it is no longer recalled",
    ),
    DemoQuestion(
        "mira-day-two",
        "play",
        "bram",
        _t(2, 21, 0),
        "How do you feel about Mira?",
        ("soup-for-bram",),
        note="the relationship has changed",
    ),
    DemoQuestion(
        "promise",
        "play",
        "mira",
        _t(3, 12, 0),
        "Did Bram keep his word?",
        ("gate-mended", "gate-promise"),
    ),
    DemoQuestion(
        "ford-before",
        "play",
        "elda",
        _t(2, 9, 0),
        "Can I take my cart across the river?",
        ("ford-passable",),
        note="the belief ford.willow as of Day 2: the ford is passable",
    ),
    DemoQuestion(
        "eastern-merchant",
        "play",
        "mira",
        _t(3, 12, 30),
        "有商人在客栈卖过丝绸吗？",
        ("silk-merchant",),
        note="a question in Chinese about a memory Mira keeps in Japanese (the traveller's "
        "own words); --model multilingual reads both languages",
    ),
    DemoQuestion(
        "spy-heard",
        "play",
        "tess",
        _t(3, 8, 0),
        "What do people say the stranger really is?",
        ("spy-rumour",),
        note="the rumour, before Tess forgets it",
    ),
    DemoQuestion(
        "spy-forgotten",
        "play",
        "tess",
        _t(3, 12, 0),
        "What do people say the stranger really is?",
        ("stranger-returns",),
        note="after the game made Tess forget the rumour at Day 3, 09:00: it is not recalled, "
        "although it stays in the save",
    ),
    DemoQuestion(
        "mira-on-the-fire",
        "play",
        "mira",
        _t(3, 21, 0),
        "What do you make of the stranger and the fire?",
        ("mira-fire-thoughts",),
        note="what Mira makes of the fire: the summary the game wrote at Day 3, 20:00 answers "
        "in place of the memories it consolidates",
    ),
    DemoQuestion(
        "prying",
        "play",
        "jory",
        _t(3, 17, 0),
        "Has anyone been nosy about our guard duty?",
        ("stranger-asks-watch",),
        paraphrase=True,
    ),
    DemoQuestion(
        "arson",
        "play",
        "mira",
        _t(4, 12, 0),
        "Why did our forge burn?",
        ("confession",),
        paraphrase=True,
    ),
    DemoQuestion(
        "culprit",
        "play",
        "jory",
        _t(4, 12, 0),
        "Who took our money?",
        ("theft-at-well", "coins-in-cloak", "confession"),
        paraphrase=True,
        note="asked again on the rewound save below",
    ),
    DemoQuestion(
        "ford-after",
        "play",
        "elda",
        _t(4, 9, 0),
        "Can I take my cart across the river?",
        ("ford-flooded",),
        note="the same question after the flood: only the newer version of the belief "
        "answers; the older one stays in the save",
    ),
    DemoQuestion(
        "reward",
        "play",
        "tess",
        _t(4, 12, 0),
        "Did anybody get paid for catching him?",
        ("miller-reward",),
    ),
    DemoQuestion(
        "rewind-overnight",
        "rewind",
        "jory",
        _t(1, 7, 0),
        "Was there any trouble for our blacksmith overnight?",
        note="the save from Day 1, 07:00: the fire has not happened yet",
    ),
    DemoQuestion(
        "rewind-culprit",
        "rewind",
        "jory",
        _t(1, 7, 0),
        "Who took our money?",
        ("theft-at-well",),
        note="the theft is remembered; the coins in the cloak are not, yet",
    ),
    DemoQuestion(
        "rewind-ford",
        "rewind",
        "elda",
        _t(1, 15, 0),
        "Can I take my cart across the river?",
        ("ford-passable",),
        note="the save from Day 1: the ford is passable again, the flood has not happened",
    ),
    DemoQuestion(
        "rewind-spy",
        "rewind",
        "tess",
        _t(2, 22, 0),
        "What do people say the stranger really is?",
        ("spy-rumour",),
        note="the save from Day 2, 22:00, before Tess forgot it: she recalls the rumour again",
    ),
    DemoQuestion(
        "rewind-mira-fire",
        "rewind",
        "mira",
        _t(2, 22, 0),
        "What do you make of the stranger and the fire?",
        ("stranger-slips-out", "stranger-watches-door", "mira-distrusts-stranger"),
        note="the save from before the consolidation: Mira recalls what she saw herself",
    ),
    DemoQuestion(
        "rewind-mira",
        "rewind",
        "bram",
        _t(1, 15, 0),
        "How do you feel about Mira?",
        ("hinge-quarrel",),
        note="the quarrel, and not yet the reconciliation",
    ),
    DemoQuestion(
        "model-injury",
        "model_change",
        "bram",
        _t(4, 22, 0),
        "How did you get hurt?",
        ("bram-burned", "honey-salve", "hand-healing"),
        paraphrase=True,
        note="asked after the model changed (lexical fallback) and after the rebuild",
    ),
    DemoQuestion(
        "model-arson",
        "model_change",
        "mira",
        _t(4, 22, 0),
        "Why did our forge burn?",
        ("confession",),
        paraphrase=True,
    ),
)

_ACTIONS = (
    DemoAction(
        "tess-forgets-spy",
        "forget",
        _t(3, 9, 0),
        "tess",
        ("spy-rumour",),
        note="the stranger came back and haggled over lamp oil like any traveller: Tess stops "
        "believing he is a spy",
    ),
    DemoAction(
        "mira-fire-thoughts",
        "consolidate",
        _t(3, 20, 0),
        "mira",
        ("stranger-watches-door", "stranger-slips-out", "mira-distrusts-stranger"),
        "What Mira makes of the fire: the grey-cloaked stranger she never trusted slipped out "
        "of the inn before dawn the night the smithy burned; she thinks he started it.",
        importance=0.8,
        tags=("stranger", "fire"),
        note="the game (or its dialogue model) writes the summary; the library stores it",
    ),
)

#: The demo's scenario.
SCENARIO = Scenario(
    name="Millbrook: four days of village memories",
    session_id="millbrook",
    timeline_id="main",
    end_tick=_t(4, 22, 0),
    recall_limit=5,
    top_k=3,
    changed_model_maximum_tokens=128,
    npcs=_NPCS,
    events=_EVENTS,
    questions=_QUESTIONS,
    actions=_ACTIONS,
)


def scenario_json(scenario: Scenario = SCENARIO) -> str:
    """Return the scenario as JSON text (sorted keys, two-space indent, final newline).

    The Godot demo project plays exactly this (``demo_project/scenario.json``); the
    tests check the file is this text.
    """
    return json.dumps(scenario.to_json_data(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
