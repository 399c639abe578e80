"""Task requests for the draft head's training data: multi-part prompts in the shapes
the chat templates of `templates` leave out.

A head's acceptance falls most on mt_bench (`gap.py` measures where it goes), whose
answers use words the other sources' answers rarely contain (7.6 % of their tokens lie
outside a draft vocab built from self-instruct, documentation and template answers).
The requests here ask for what those templates never do:

- extraction and reformatting of a given passage (JSON, markdown tables, lists);
- writing under constraints (length, tone, audience, form, required words);
- reasoning puzzles over names, orderings, days and family relations;
- code in several languages, and SQL;
- STEM and humanities concepts explained with examples;
- roleplay in a concrete situation.

Every passage is made up here from the lists below, so no text comes from a
benchmark; the prompts stage still runs each request through `BenchmarkFilter`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .templates import ROLES, TOPICS

PEOPLE = (
    "Alice", "Bashir", "Carmen", "Dmitri", "Elena", "Farid", "Grace", "Hiroshi", "Ines", "Jonas", "Kwame",
    "Leila", "Marco", "Nadia", "Oscar", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Ursula", "Victor",
    "Wen", "Yusuf", "Zoe",
)
COMPANIES = (
    "Northwind Labs", "Bluepeak Foods", "Orbitline Motors", "Greenleaf Energy", "Silverline Bank",
    "Redstone Games", "Brightwave Media", "Ironbridge Logistics", "Clearwater Health", "Maplewood Furniture",
)
CITIES = (
    "Lisbon", "Nairobi", "Osaka", "Toronto", "Krakow", "Lima", "Melbourne", "Hanoi", "Dublin", "Cape Town",
    "Seoul", "Montreal", "Istanbul", "Oslo", "Buenos Aires",
)
PRODUCTS = (
    "wireless headphones", "electric kettle", "running shoes", "standing desk", "e-reader", "robot vacuum",
    "coffee grinder", "smartwatch", "camping tent", "office chair", "graphics tablet", "air purifier",
)
MONTHS = ("January", "March", "April", "June", "August", "September", "October", "December")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
OPINIONS = (
    ("works exactly as advertised", "is worth every penny"),
    ("stopped working after two weeks", "was a waste of money"),
    ("is decent but a bit overpriced", "does the job"),
    ("is comfortable and easy to set up", "I would buy it again"),
    ("arrived damaged and support never replied", "I returned it"),
)


def _passage_company(rng: random.Random) -> str:
    company, city, person = rng.choice(COMPANIES), rng.choice(CITIES), rng.choice(PEOPLE)
    revenue, growth, staff = rng.randint(12, 900), rng.randint(2, 40), rng.randint(40, 5000)
    year = rng.randint(2015, 2024)
    return (f"{company}, based in {city}, reported revenue of ${revenue} million in {year}, up {growth}% on the "
            f"year before. Chief executive {person} said the company now employs {staff} people and plans to "
            f"open an office in {rng.choice(CITIES)} next {rng.choice(MONTHS)}.")


def _passage_reviews(rng: random.Random) -> str:
    lines = []
    for person, product in zip(rng.sample(PEOPLE, 3), rng.sample(PRODUCTS, 3)):
        good, verdict = rng.choice(OPINIONS)
        lines.append(f"{person}: The {product} {good}; {verdict}.")
    return "\n".join(lines)


def _passage_schedule(rng: random.Random) -> str:
    people = rng.sample(PEOPLE, 4)
    return " ".join(f"{p} meets a client in {rng.choice(CITIES)} on {rng.choice(DAYS)} at {rng.randint(8, 17)}:00."
                    for p in people)


PASSAGES = (_passage_company, _passage_reviews, _passage_schedule)
EXTRACTION_TASKS = (
    "Extract every person, company and city in the text below and return them as JSON with the keys "
    '"people", "companies" and "cities".',
    "Turn the facts in the text below into a markdown table with one row per fact.",
    "Summarize the text below in two sentences, then list every number it mentions and what it measures.",
    "Read the text below and answer: who is mentioned, where, and when? Use a bulleted list.",
    "Rate the sentiment of each line of the text below on a scale from 1 (very negative) to 5 (very "
    "positive), and return the ratings as a JSON list.",
    "Rewrite the text below as a short, formal report with a title.",
    "Write three questions that can be answered from the text below, each followed by its answer.",
)


def extraction(rng: random.Random) -> str:
    return f"{rng.choice(EXTRACTION_TASKS)}\n\n{rng.choice(PASSAGES)(rng)}"


WRITING_TASKS = (
    "Write a diary entry about a weekend in {city}.", "Draft a cover letter for a job at {company}.",
    "Write a product announcement for a new {product}.", "Compose a thank-you note to {person}.",
    "Write a short essay about {topic}.", "Write a speech for the opening of a library in {city}.",
    "Write a limerick about {topic}.", "Write a restaurant review of an imaginary cafe in {city}.",
    "Write a short mystery story set in {city}.", "Write a motivational message for a team working on {topic}.",
    "Write the opening paragraph of a novel about {person}, who lives in {city}.",
    "Write an advertisement for a {product}.",
)
CONSTRAINTS = (
    "Keep it under 150 words.", "Use exactly three paragraphs.", "Write it for teenagers.",
    "Use a humorous tone.", "Make it sound very formal.", "End with a question to the reader.",
    "Include the words \"{word1}\" and \"{word2}\".", "Start every sentence with the letter {letter}.",
    "Format it as a numbered list.", "Then rewrite it in one sentence.", "Add a catchy title.",
    "Write it as a poem that rhymes.",
)
WORDS = ("lantern", "harbor", "velvet", "echo", "compass", "orchard", "thunder", "marble", "puzzle", "horizon")


def writing(rng: random.Random) -> str:
    task = rng.choice(WRITING_TASKS).format(city=rng.choice(CITIES), company=rng.choice(COMPANIES),
                                           product=rng.choice(PRODUCTS), person=rng.choice(PEOPLE),
                                           topic=rng.choice(TOPICS))
    word1, word2 = rng.sample(WORDS, 2)
    constraints = [c.format(word1=word1, word2=word2, letter=rng.choice("ABCDEFGHILMNOPRSTW"))
                   for c in rng.sample(CONSTRAINTS, rng.randint(1, 2))]
    return " ".join([task, *constraints])


def reasoning(rng: random.Random) -> str:
    a, b, c, d = rng.sample(PEOPLE, 4)
    n, m = rng.randint(3, 40), rng.randint(2, 20)
    puzzles = (
        f"{a} is taller than {b}, and {b} is taller than {c}. Is {c} taller than {a}? Explain your reasoning.",
        f"In a race, {a} finished before {b} but after {c}, and {d} finished last. In which place did each "
        "runner finish?",
        f"If today is {rng.choice(DAYS)}, what day of the week will it be in {n} days? Show how you worked it out.",
        f"{a} is {b}'s parent, and {c} is {a}'s father. How is {c} related to {b}?",
        f"A farmer has {n} chickens and {m} cows. How many legs do the animals have in total?",
        f"{a} has {n} marbles and gives {b} a third of them, rounded down. {b} already had {m}. Who has more "
        "marbles now, and by how many?",
        f"{a}, {b} and {c} each own one pet: a cat, a dog or a parrot. {a} does not own the dog, and {b} owns "
        "the parrot. Who owns which pet?",
        f"A clock shows {rng.randint(1, 12)}:{rng.choice(('00', '15', '30', '45'))}. What is the angle between "
        "the hour hand and the minute hand?",
        f"Which of these does not belong with the others, and why: {', '.join(rng.sample(WORDS, 3))}, "
        f"{rng.choice(CITIES)}?",
    )
    return rng.choice(puzzles)


LANGUAGES = ("Python", "JavaScript", "C++", "Java", "Go", "Rust", "TypeScript", "C#")
CODE_SPECS = (
    "reverses the order of the words in a sentence", "checks whether a string is a palindrome",
    "returns the n-th Fibonacci number", "merges two sorted arrays into one sorted array",
    "removes duplicates from a list while keeping the original order", "computes the greatest common divisor "
    "of two integers", "checks whether two strings are anagrams", "returns the second largest number in a list",
    "finds the longest word in a sentence", "implements binary search on a sorted array",
    "counts how often each character occurs in a string", "converts a Roman numeral to an integer",
    "rotates a matrix by 90 degrees", "finds the first non-repeating character in a string",
)
SQL_TABLES = (
    ("orders", "id, customer_id, amount, created_at", "the total amount per customer in the last 30 days"),
    ("employees", "id, name, department, salary", "the three highest-paid employees of each department"),
    ("books", "id, title, author, year, rating", "the average rating per author, best first"),
    ("visits", "id, page, user_id, visited_at", "the number of distinct users per page and day"),
)
CODE_NOTES = ("", " Handle empty input.", " Do not use library helpers for the core logic.",
              " Add comments to the code.", " Also write two unit tests.")


def coding(rng: random.Random) -> str:
    if rng.random() < 0.15:
        table, columns, question = rng.choice(SQL_TABLES)
        return f"Write an SQL query that returns {question} from a table `{table}` with the columns {columns}. " \
               "Explain each clause."
    language, spec = rng.choice(LANGUAGES), rng.choice(CODE_SPECS)
    form = rng.choice((
        "Write a {language} function that {spec}. Include an example call.",
        "Implement a program in {language} that {spec}, and explain its time complexity.",
        "How would you write code in {language} that {spec}? Show the code and test it on two inputs.",
    ))
    return form.format(language=language, spec=spec) + rng.choice(CODE_NOTES)


CONCEPTS = (
    "Newton's third law", "the Doppler effect", "osmosis", "entropy", "natural selection", "compound interest",
    "the Pythagorean theorem", "opportunity cost", "the greenhouse effect", "plate tectonics",
    "the law of large numbers", "Ohm's law", "acids and bases", "the placebo effect", "gross domestic product",
    "the separation of powers", "utilitarianism", "fiscal policy", "the social contract", "the Socratic method",
    "cognitive dissonance", "comparative advantage", "the scientific revolution", "existentialism",
    "Bayes' theorem", "half-life in radioactive decay", "the central limit theorem", "monetary policy",
    "the balance of power in international relations", "confirmation bias", "kinetic and potential energy",
)
AUDIENCES = ("", " Keep it short.", " Write for a high school student.", " Write for a business audience.",
             " Use a table where it helps.", " Finish with a one-line summary.")


def explanation(rng: random.Random) -> str:
    concept = rng.choice(CONCEPTS)
    form = rng.choice((
        "Explain {c} in simple terms and give an everyday example.",
        "What is {c}? Describe how it is used in practice.",
        "How would you teach {c} to first-year students? Outline a short lesson with one activity.",
        "Discuss the strengths and limits of {c}.",
        "Give two real-world situations where {c} matters, and explain why in each case.",
        "What is a common misunderstanding of {c}, and how would you correct it?",
    ))
    return form.format(c=concept) + rng.choice(AUDIENCES)


SITUATIONS = (
    "A customer complains that their order arrived two weeks late.",
    "A friend asks you for advice the night before an important exam.",
    "A reporter asks about the biggest mistake you ever made.",
    "A child asks you why the sky is blue.",
    "Your neighbour asks you to look after their house while they travel to {city}.",
    "{person} asks you to explain your job in one minute.",
    "A stranger on a train asks what you think about {topic}.",
    "You have to convince a sceptical audience that {topic} matters.",
)


def roleplay(rng: random.Random) -> str:
    situation = rng.choice(SITUATIONS).format(city=rng.choice(CITIES), person=rng.choice(PEOPLE),
                                             topic=rng.choice(TOPICS))
    return f"Imagine you are {rng.choice(ROLES)}. {situation} How do you respond? Stay in character."


KINDS: tuple[Callable[[random.Random], str], ...] = (extraction, writing, reasoning, coding, explanation, roleplay)


def task_prompts(count: int, seed: int) -> list[str]:
    """``count`` task requests, cycling through `KINDS` so every kind gets a sixth,
    with their fillers drawn with ``seed``."""
    rng = random.Random(seed)
    return [KINDS[i % len(KINDS)](rng) for i in range(count)]
