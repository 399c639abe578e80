"""Task requests for the draft head's training data: multi-part prompts in the shapes
the chat templates of `templates` leave out.

A head's acceptance falls most on mt_bench (`gap.py` measures where it goes), whose
answers use words the other sources' answers rarely contain (7.6 % of their tokens lie
outside a draft vocab built from self-instruct, documentation and template answers).
The requests here ask for what those templates never do:

- extraction and reformatting of a given passage (news, reviews, biographies, emails,
  CSV tables) into JSON, YAML, markdown tables, lists;
- writing under constraints (length, tone, audience, form, required words);
- reasoning puzzles over names, orderings, days and family relations;
- code in several languages, and SQL; Python functions to complete from a signature,
  a docstring and doctests (`functions`), humaneval's shape;
- STEM concepts and small physics and chemistry problems; humanities, history and
  economics topics discussed, compared and argued;
- roleplay in a concrete situation.

Every passage is made up here from the lists below, so no text comes from a
benchmark; the prompts stage still runs each request through `BenchmarkFilter`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .functions import function_completion
from .templates import BROAD_TOPICS, ROLES, SCIENCE_TOPICS, SOCIETY_TOPICS

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


FIELDS = ("marine biology", "astronomy", "materials science", "neuroscience", "climate science", "genetics",
          "particle physics", "archaeology", "epidemiology", "robotics")
FINDINGS = (
    "a coral species that survives water two degrees warmer than expected",
    "a faint galaxy whose light left it thirteen billion years ago",
    "a ceramic that conducts heat in one direction only",
    "a group of neurons that fires just before a decision is made",
    "a glacier that lost a tenth of its mass in five years",
    "a gene variant linked to faster wound healing",
    "a pottery workshop buried under a medieval market",
    "a soft robot that crawls by changing the stiffness of its skin",
)
BOOKS = ("The Salt Road", "Glass Harbor", "A Winter in Quito", "The Last Cartographer", "Paper Moons",
         "Echoes of the Delta", "The Clockmaker's Daughter", "Northern Lights, Southern Sky")
GENRES = ("novel", "film", "documentary", "album", "play")


def _passage_science_news(rng: random.Random) -> str:
    a, b = rng.sample(PEOPLE, 2)
    return (f"Researchers in {rng.choice(CITIES)} have reported {rng.choice(FINDINGS)}. The team, led by "
            f"{rng.choice(FIELDS)} professor {a}, spent {rng.randint(2, 9)} years collecting data from "
            f"{rng.randint(12, 480)} sites. \"We did not expect the effect to be this strong,\" {a} said. "
            f"{b}, who was not involved in the study, called the result promising but warned that it has not "
            f"yet been repeated by another group. The findings were published in {rng.choice(MONTHS)} "
            f"{rng.randint(2019, 2025)}.")


def _passage_review(rng: random.Random) -> str:
    genre, title, person = rng.choice(GENRES), rng.choice(BOOKS), rng.choice(PEOPLE)
    score = rng.randint(1, 10)
    return (f"Review: \"{title}\" ({genre}, {rng.randint(1995, 2025)}). {person}'s {genre} follows a family "
            f"that moves from {rng.choice(CITIES)} to {rng.choice(CITIES)} and slowly falls apart. The first half "
            f"{rng.choice(('drags', 'is gripping', 'is beautifully paced', 'feels rushed'))}, while the ending "
            f"{rng.choice(('is unforgettable', 'falls flat', 'surprised me', 'is predictable'))}. "
            f"The supporting characters are {rng.choice(('vivid', 'thin', 'charming', 'forgettable'))}. "
            f"Score: {score}/10.")


def _passage_biography(rng: random.Random) -> str:
    person, born = rng.choice(PEOPLE), rng.randint(1850, 1990)
    return (f"{person} {rng.choice(('Okafor', 'Lindqvist', 'Moreau', 'Tanaka', 'Haddad', 'Kowalski'))} was born "
            f"in {rng.choice(CITIES)} in {born}. After studying {rng.choice(FIELDS)} at university, "
            f"{person} worked for {rng.randint(3, 15)} years at {rng.choice(COMPANIES)} before founding a "
            f"research institute in {rng.choice(CITIES)} in {born + rng.randint(30, 45)}. {person} wrote "
            f"{rng.randint(2, 12)} books and received an award for public science writing in "
            f"{born + rng.randint(46, 60)}.")


def _passage_table(rng: random.Random) -> str:
    rows = ["month,region,units_sold,revenue_usd"]
    for month in rng.sample(MONTHS, 4):
        units = rng.randint(40, 900)
        rows.append(f"{month},{rng.choice(CITIES)},{units},{units * rng.randint(12, 80)}")
    return "\n".join(rows)


def _passage_email(rng: random.Random) -> str:
    sender, receiver = rng.sample(PEOPLE, 2)
    return (f"From: {sender}\nTo: {receiver}\nSubject: {rng.choice(PRODUCTS).title()} order\n\n"
            f"Hi {receiver}, the {rng.randint(20, 500)} units for {rng.choice(COMPANIES)} will ship on "
            f"{rng.choice(DAYS)} instead of {rng.choice(DAYS)}, because the supplier in {rng.choice(CITIES)} is "
            f"late. The customer asked for a {rng.randint(5, 20)}% discount. Can you call them before "
            f"{rng.randint(9, 17)}:00? Thanks, {sender}")


PASSAGES = (_passage_company, _passage_reviews, _passage_schedule, _passage_science_news, _passage_review,
            _passage_biography, _passage_table, _passage_email)
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
    "Identify the main claim of the text below and the evidence given for it.",
    "Return the dates, amounts and places in the text below as YAML.",
    "Classify the text below as news, review, biography, data or correspondence, and justify your answer in "
    "one sentence.",
    "List the key facts of the text below in order of importance, one line each, in the form 'fact: detail'.",
    "Answer in JSON with the fields \"topic\", \"people\", \"tone\" and \"summary\" for the text below.",
    "Translate the main points of the text below into plain language for a ten-year-old.",
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
                                           topic=rng.choice(BROAD_TOPICS))
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


AUDIENCES = ("", " Keep it short.", " Write for a high school student.", " Write for a business audience.",
             " Use a table where it helps.", " Finish with a one-line summary.")


STEM_CONCEPTS = (
    "Newton's third law", "the Doppler effect", "osmosis", "entropy", "natural selection", "plate tectonics",
    "the Pythagorean theorem", "the greenhouse effect", "the law of large numbers", "Ohm's law",
    "acids and bases", "Bayes' theorem", "half-life in radioactive decay", "the central limit theorem",
    "kinetic and potential energy", "photosynthesis", "the structure of DNA", "vaccines and the immune system",
    "how a satellite stays in orbit", "the speed of light as a limit", "chemical equilibrium", "catalysts",
    "how batteries store energy", "the water cycle", "antibiotic resistance", "black holes", "semiconductors",
    "public-key cryptography", "machine learning overfitting", "the periodic table", "buoyancy",
    "exothermic and endothermic reactions", "the human nervous system", "protein folding", "tidal forces",
    "the carbon cycle", "enzymes", "compound interest as exponential growth", "hash tables", "nuclear fusion",
)
STEM_SUBJECTS = STEM_CONCEPTS + SCIENCE_TOPICS
STEM_FORMS = (
    "Explain {c} in simple terms and give an everyday example.",
    "What is {c}? Describe how it is used in practice.",
    "How would you teach {c} to first-year students? Outline a short lesson with one activity.",
    "What is a common misunderstanding of {c}, and how would you correct it?",
    "Describe an experiment that demonstrates {c}, step by step, and what result to expect.",
    "Explain {c} with the equations involved, and define every symbol you use.",
    "Give two real-world situations where {c} matters, and explain why in each case.",
)


def _stem_problem(rng: random.Random) -> str:
    m, a, v, r, h = rng.randint(2, 90), rng.randint(2, 12), rng.randint(3, 24), rng.randint(2, 60), rng.randint(5, 80)
    return rng.choice((
        f"A cart of mass {m} kg accelerates at {a} m/s^2. What net force acts on it? Show the formula.",
        f"A {v} V battery is connected to a {r} ohm resistor. What current flows, and what power is dissipated?",
        f"A ball is dropped from a height of {h} m. Ignoring air resistance, how long does it fall and how fast "
        "is it moving when it lands?",
        f"A sample of {m} g of a substance with a half-life of {a} days decays for {a * 3} days. How much is left?",
        f"How many moles are there in {m} g of water? Explain each step of the calculation.",
        f"A car travels {h} km in {a} hours and then {m} km in {v} hours. What is its average speed?",
    ))


def stem(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return _stem_problem(rng)
    return rng.choice(STEM_FORMS).format(c=rng.choice(STEM_SUBJECTS)) + rng.choice(AUDIENCES)


HUMANITIES_TOPICS = (
    "compound interest", "opportunity cost", "gross domestic product", "the separation of powers",
    "utilitarianism", "fiscal policy", "the social contract", "the Socratic method", "cognitive dissonance",
    "comparative advantage", "the scientific revolution", "existentialism", "monetary policy",
    "the balance of power in international relations", "confirmation bias", "the Renaissance",
    "the Industrial Revolution", "the printing press", "the rise of the Roman Republic", "the Silk Road",
    "stoicism", "Impressionism in painting", "inflation", "supply and demand", "the tragedy of the commons",
    "freedom of the press", "the role of myths in ancient cultures", "minimalism in architecture",
    "universal basic income", "the ethics of artificial intelligence", "colonialism and its legacy",
    "the history of the Olympic Games", "the influence of jazz on modern music", "game theory",
    "the placebo effect", "the welfare state", "civil disobedience", "the Enlightenment",
)
HUMANITIES_SUBJECTS = HUMANITIES_TOPICS + SOCIETY_TOPICS
HUMANITIES_FORMS = (
    "Explain {c} and why it matters today.",
    "Discuss the strengths and limits of {c}.",
    "What are the main arguments for and against {c}? Give one example of each.",
    "Describe how {c} changed over time, in three stages.",
    "Compare {c} with {d}: what do they share, and where do they differ?",
    "How would {role} explain {c} to a general audience?",
    "Write a short essay on {c}, with an introduction, two arguments and a conclusion.",
)


def humanities(rng: random.Random) -> str:
    concept, other = rng.sample(HUMANITIES_SUBJECTS, 2)
    form = rng.choice(HUMANITIES_FORMS)
    return form.format(c=concept, d=other, role=rng.choice(ROLES)) + rng.choice(AUDIENCES)


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
                                             topic=rng.choice(BROAD_TOPICS))
    return f"Imagine you are {rng.choice(ROLES)}. {situation} How do you respond? Stay in character."


# The order task requests cycle through: the kinds the shipped head loses most on
# (gap.py: extraction, stem, humanities, writing, and humaneval's function completion)
# come twice in every thirteen.
MIX: tuple[Callable[[random.Random], str], ...] = (
    extraction, stem, writing, function_completion, humanities, reasoning,
    extraction, stem, writing, function_completion, humanities, coding, roleplay)
KINDS = tuple(dict.fromkeys(MIX))  # each kind once, in its first place in the mix


def task_prompts(count: int, seed: int) -> list[str]:
    """``count`` task requests, cycling through `MIX`, with their fillers drawn with
    ``seed``."""
    rng = random.Random(seed)
    return [MIX[i % len(MIX)](rng) for i in range(count)]
