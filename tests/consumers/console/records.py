"""Records for report tests: the sample records with segments of real tokenizer ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import Logprobs, LossMask, Scored, Segment, TokenIds, Trajectory
from tests.schemas.samples import SCORED, TRAJECTORY


def conversation(
    tokenizer: ChatTokenizer,
    user: str,
    turns: list[tuple[str, str]],
    call_ids: list[str] | None = None,
) -> Segment:
    """One segment of a tool-using conversation: the prompt, then per turn a completion
    (loss mask 1, logprob -0.5 - k) and a tool result (mask 0)."""
    prompt = tokenizer.render([{"role": "user", "content": user}])
    ids = tokenizer.encode(prompt)
    mask = [0] * len(ids)
    logprobs = [0.0] * len(ids)
    for k, (answer, tool_result) in enumerate(turns):
        completion = [*tokenizer.encode(answer), tokenizer.eos_id]
        ids += completion
        mask += [1] * len(completion)
        logprobs += [-0.5 - k] * len(completion)
        if tool_result:
            glue = tokenizer.encode(
                f"\n<|im_start|>user\n<tool_response>\n{tool_result}\n</tool_response><|im_end|>"
                "\n<|im_start|>assistant\n"
            )
            ids += glue
            mask += [0] * len(glue)
            logprobs += [0.0] * len(glue)
    return Segment(
        input_ids=TokenIds.from_list(ids),
        loss_mask=LossMask.from_list(mask),
        logprobs=Logprobs.from_list(logprobs),
        call_ids=call_ids if call_ids is not None else [f"call-{k}" for k in range(len(turns))],
    )


def prompt_only(tokenizer: ChatTokenizer, text: str) -> Segment:
    """A segment of mask-0 tokens only."""
    ids = tokenizer.encode(tokenizer.render([{"role": "user", "content": text}]))
    return Segment(
        input_ids=TokenIds.from_list(ids),
        loss_mask=LossMask.from_list([0] * len(ids)),
        logprobs=Logprobs.from_list([0.0] * len(ids)),
        call_ids=["call-0"],
    )


def trajectory(
    trajectory_id: str, group: str, sample: int, segments: list[Segment], task: str = "task-1"
) -> Trajectory:
    return TRAJECTORY.model_copy(
        update={
            "trajectory_id": trajectory_id,
            "session_id": f"sess-{trajectory_id}",
            "group_id": group,
            "task_id": task,
            "sample_index": sample,
            "segments": segments,
        }
    )


def scored(
    trajectory_id: str,
    group: str,
    sample: int,
    segments: list[Segment],
    reward: float | None,
    error: str | None = None,
) -> Scored:
    return SCORED.model_copy(
        update={
            "trajectory": trajectory(trajectory_id, group, sample, segments),
            "reward": reward,
            "error": error,
        }
    )


@dataclass
class Element:
    """An element of the parsed page: tag, attributes, text inside (children's included)."""

    tag: str
    attrs: dict[str, str]
    text: str = ""
    children: list[Element] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[Element]:
        """Descendants (depth first, in document order) with this tag and class."""
        out = []
        for child in self.children:
            if (tag is None or child.tag == tag) and (cls is None or cls in child.classes):
                out.append(child)
            out.extend(child.find_all(tag, cls))
        return out


_VOID = {"meta", "br", "img", "link", "input", "hr"}


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("root", {})
        self.stack = [self.root]
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in _VOID:
            self.stack.append(element)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        for element in self.stack:
            element.text += data


def parse(page: str) -> tuple[Element, list[str]]:
    """The page's element tree and every start tag in order; asserts tags are balanced."""
    parser = _Parser()
    parser.feed(page)
    parser.close()
    assert parser.stack == [parser.root], "unclosed elements"
    return parser.root, parser.tags


def unglyph(text: str) -> str:
    """Token text as the tokenizer decodes it (the page shows a newline as a glyph first)."""
    return text.replace("\u21b5\n", "\n")
