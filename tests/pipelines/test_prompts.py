import json
from pathlib import Path

import pytest

from orthrus_rag.rag import Passage
from orthrus_rag.pipelines import IRCoT
from orthrus_rag.pipelines.prompts import PROMPT_DIR, Demo, PromptTemplate, format_passages, load_demos, load_prompt

TWOWIKI = Path(__file__).resolve().parents[3] / "shared" / "data" / "2wiki" / "questions.jsonl"
PROMPTS = ["qa_direct", "qa_with_passages", "cot_with_passages", "ircot"]
DEMO_FILES = ["demos.jsonl", "bridge_demos.jsonl"]


def long_passages(n):
    return [Passage(str(i), f"Some Title {i}", " ".join(f"word{j}" for j in range(120))) for i in range(n)]


@pytest.mark.parametrize("name", PROMPTS)
def test_every_prompt_renders_with_demos(name):
    text = load_prompt(name).render("Who?", long_passages(2), load_demos(limit=2))
    assert "Who?" in text and "Velmora Glassworks" in text and "{" not in text and "\n\n\n" not in text


def test_ircot_prompt_with_fifteen_passages_fits_the_budget(tokenizer):
    sentence = "The film was directed by Ann Marlow, who was born in 1921 in a small town near the river. "
    text = sentence * 8  # 144 words: cut to the pipeline's limit
    ircot = IRCoT(None, None)
    shown = [Passage(str(i), f"Film Title {i}", text) for i in range(ircot.max_passages)]
    demos = load_demos(ircot.demos, limit=ircot.num_demos)
    prompt = load_prompt(ircot.prompt).render("Who?", shown, demos, ircot.passage_words)
    assert len(tokenizer(prompt)["input_ids"]) < 4096  # ~3,400 on dense text: half of SmolLM2's 8,192 context


def test_passages_are_cut_to_a_word_limit():
    text = format_passages(long_passages(1), max_words=5)
    assert text == "[1] Some Title 0: word0 word1 word2 word3 word4 ..."


def test_an_untitled_passage_is_shown_without_a_title():
    shown = format_passages([Passage("1", "", "Oslo is a city."), Passage("2", "Bergen", "Bergen lies west.")])
    assert shown == "[1] Oslo is a city.\n[2] Bergen: Bergen lies west."


@pytest.mark.parametrize("name", DEMO_FILES)
def test_demos_are_well_formed(name):
    demos = load_demos(name)
    assert len(demos) >= 3
    for demo in demos:
        assert demo.question.endswith("?") and demo.answer and len(demo.passages) >= 2 and demo.reasoning


def test_steps_are_numbered_and_end_with_the_answer():
    demo = Demo("Who?", "Ann", reasoning=["A is B.", "B is Ann."])
    text = PromptTemplate("t", "{demos}", "{steps}").render_demo(demo)
    assert text == "1. A is B.\n2. B is Ann.\n3. So the answer is: Ann."


@pytest.mark.skipif(not TWOWIKI.exists(), reason="shared 2Wiki data not present")
@pytest.mark.parametrize("name", DEMO_FILES)
def test_demos_are_not_benchmark_questions(name):
    benchmark = {json.loads(line)["question"].lower() for line in TWOWIKI.open()}
    titles = {t.lower() for line in TWOWIKI.open() for t in json.loads(line)["gold_titles"]}
    for demo in load_demos(name):
        assert demo.question.lower() not in benchmark
        assert not {p.title.lower() for p in demo.passages} & titles


@pytest.mark.skipif(not TWOWIKI.exists(), reason="shared 2Wiki data not present")
def test_worked_examples_written_into_a_prompt_are_not_benchmark_questions():
    benchmark = {json.loads(line)["question"].lower() for line in TWOWIKI.open()}
    asked = [line.removeprefix("Question: ") for line in load_prompt("self_ask").text.splitlines()
             if line.startswith("Question: ") and "{" not in line]
    assert len(asked) == 4 and not {q.lower() for q in asked} & benchmark


@pytest.mark.parametrize("name, reply", [("qa_with_passages", "Austria"), ("cot_with_passages", "Velmora Glassworks"),
                                         ("ircot", "1. Velmora Glassworks")])
def test_demos_as_chat_turns(name, reply):
    demos = load_demos(limit=2)
    template = load_prompt(name)
    messages = template.messages("Who?", long_passages(1), demos, demo_turns=True)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert demos[0].question in messages[0]["content"] and demos[1].question not in messages[0]["content"]
    assert "Velmora Glassworks" not in messages[4]["content"] and "Who?" in messages[4]["content"]
    assert messages[1]["content"].startswith(reply)
    inline = template.messages("Who?", long_passages(1), demos)
    assert inline == [{"role": "user", "content": template.render("Who?", long_passages(1), demos)}]


def test_a_demo_template_must_end_with_its_reply():
    with pytest.raises(ValueError, match="must end with"):
        PromptTemplate("t", "{question}", "{answer} {question}").render_reply(Demo("q", "a"))


def test_unknown_prompt_and_unknown_field_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="known"):
        load_prompt("no_such_prompt")
    bad = tmp_path / "bad.txt"
    bad.write_text("Question: {question} {colour}")
    with pytest.raises(ValueError, match="colour"):
        load_prompt(str(bad))


def test_a_prompt_file_by_path_with_its_demo_template(tmp_path):
    (tmp_path / "mine.txt").write_text("{demos}\nQ: {question}\nA:")
    (tmp_path / "mine.demo.txt").write_text("Q: {question}\nA: {answer}")
    template = load_prompt(str(tmp_path / "mine.txt"))
    assert template.render("Why?", demos=[Demo("How?", "So.")]) == "Q: How?\nA: So.\nQ: Why?\nA:"


@pytest.mark.parametrize("demo_turns", [False, True])
def test_demos_need_a_demo_template(demo_turns):
    with pytest.raises(ValueError, match="has no demo template"):
        PromptTemplate("plain", "{question}").messages("q", demos=[Demo("q", "a")], demo_turns=demo_turns)


def test_prompt_files_are_shipped_next_to_the_loader():
    assert {p.stem for p in PROMPT_DIR.glob("*.txt")} >= {*PROMPTS, "qa_direct.demo"}


def test_a_passage_template_shows_each_passage_its_way(tmp_path):
    (tmp_path / "titled.txt").write_text("{demos}\n\nPassages:\n{passages}\n\nQ: {question}")
    (tmp_path / "titled.demo.txt").write_text("Passages:\n{passages}\n\nQ: {question}\nA: {answer}")
    (tmp_path / "titled.passage.txt").write_text("## {title}\n{text}\n")
    template = load_prompt(str(tmp_path / "titled.txt"))
    passages = [Passage("1", "Oslo", "Oslo is a city."), Passage("2", "Bergen", "Bergen lies west.")]
    shown = "## Oslo\nOslo is a city.\n\n## Bergen\nBergen lies west."
    assert template.render("Why?", passages) == f"Passages:\n{shown}\n\nQ: Why?"
    messages = template.messages("Why?", passages, load_demos(limit=1), passage_words=3, demo_turns=True)
    assert messages[0]["content"].startswith("Passages:\n## Velmora Glassworks\nVelmora Glassworks is ...\n\n## ")
    one_line = format_passages(passages, template="{number}. {title} - {text}")
    assert one_line == "1. Oslo - Oslo is a city.\n2. Bergen - Bergen lies west."
    (tmp_path / "titled.passage.txt").write_text("{title} {question}")
    with pytest.raises(ValueError, match="question"):
        load_prompt(str(tmp_path / "titled.txt"))
    with pytest.raises(FileNotFoundError) as error:
        load_prompt("no_such_prompt")
    assert "qa_passages_q05_titled.txt" in str(error.value) and ".passage.txt" not in str(error.value)


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".txt") for p in PROMPT_DIR.glob("*_q05*.txt")
                                         if not p.name.endswith((".demo.txt", ".passage.txt"))))
def test_qwen_prompts_render_as_chat_turns(name):
    template = load_prompt(name)
    messages = template.messages("Who?", long_passages(2), load_demos(limit=2), demo_turns=True)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[-1]["content"].startswith("Passages" if "{passages}" in template.text else "Question: Who?")
    assert "Who?" in messages[-1]["content"] and "{" not in messages[-1]["content"]
    assert messages[1]["content"].endswith("Austria" if "cot" not in name else "So the answer is: Austria.")


def test_a_bare_name_is_the_shipped_file_and_a_path_the_users(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local = json.dumps({"question": "Local?", "answer": "Here", "passages": []}) + "\n"
    for name in ("demos.jsonl", "mine.jsonl"):
        (tmp_path / name).write_text(local)
    (tmp_path / "qa_direct.txt").write_text("Local: {question}")
    assert load_demos("demos.jsonl")[0].question != "Local?" and load_prompt("qa_direct").text != "Local: {question}"
    assert load_demos("./demos.jsonl")[0].question == "Local?"
    assert load_demos(str(tmp_path / "demos.jsonl"))[0].question == "Local?"
    assert load_demos("mine.jsonl")[0].question == "Local?"  # not shipped: found where the command runs
    assert load_prompt("./qa_direct.txt").text == "Local: {question}"
